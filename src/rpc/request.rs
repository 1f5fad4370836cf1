//! A request in domain terms, the same for both APIs: what the conversions (`convert/`) make of
//! a protobuf request, validated in form; [`plan`](super::plan) validates the rest.

use smallvec::SmallVec;

use crate::limiter::{Limit, MAX_ITEMS_PER_CHECK};
use crate::rules::{DescriptorEntry, Unit};

/// Most descriptors in one request (one limiter item each).
pub const MAX_DESCRIPTORS: usize = MAX_ITEMS_PER_CHECK;

/// What limits a descriptor, as the request asks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LimitSource<'q> {
    /// The rules of the domain.
    Rules,
    /// A limit given in the request (own API), instead of the rules.
    Inline { limit: Limit, name: &'q str },
    /// Envoy's descriptor `limit`: replaces the rule's limit, and applies even where no rule
    /// matches, as long as the domain has rules (as envoyproxy/ratelimit does).
    Override { requests_per_unit: u32, unit: Unit },
}

/// How much of its limit a descriptor uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cost {
    Units(u64),
    /// Check without consuming: does one more unit fit?
    Peek,
}

/// Which request field a cost came from, for errors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CostField {
    /// A field of the request (`hits`, `hits_addend`).
    Request(&'static str),
    /// A field of the descriptor (`descriptors[i].hits_addend`).
    Descriptor(&'static str),
}

#[derive(Debug, Clone)]
pub(crate) struct DescriptorQuery<'q> {
    pub entries: SmallVec<[DescriptorEntry<'q>; 4]>,
    pub source: LimitSource<'q>,
    pub cost: Cost,
    pub cost_field: CostField,
}

#[derive(Debug, Clone)]
pub(crate) enum Query<'q> {
    Descriptors(Vec<DescriptorQuery<'q>>),
    /// A plain key under a limit given in the request.
    Key {
        key: &'q str,
        limit: Limit,
        name: &'q str,
        cost: u64,
    },
}

/// A request, validated in form by the API layer; `plan` validates the rest.
#[derive(Debug, Clone)]
pub(crate) struct Request<'q> {
    pub domain: &'q str,
    pub query: Query<'q>,
    pub dry_run: bool,
}
