//! A request in domain terms, the same for both APIs: what the conversions (`convert/`) make of
//! a protobuf request, validated in form; [`plan`](super::plan) resolves the rest.
//!
//! What is wrong with the request as a whole (its domain, its number of descriptors) fails it;
//! what is wrong with one descriptor is carried with that descriptor ([`Malformed`]) and
//! answered for it alone, so that one bad descriptor never decides the fate of the others.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::invalid::InvalidRequest;
use crate::limiter::{Limit, MAX_ITEMS_PER_CHECK};
use crate::rules::{DescriptorEntry, EntryBytes, Unit};

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
    /// At least 1. More than the limit is answered over the limit (it could never fit).
    Units(u64),
    /// Check without consuming: does one more unit fit?
    Peek,
}

/// What is wrong with one descriptor. Either way the descriptor is answered on its own, the
/// others are decided as if it were well formed, and it is counted as `invalid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// Its entries can name no rule and no counter (it has none, or an entry has no key): no
    /// limit applies to it, as to a descriptor no rule matches.
    Entries(InvalidRequest),
    /// Its limit override cannot be used (an unknown unit): it is ignored and the rules
    /// apply, so that a client cannot escape a rule by sending a bad override.
    Override(InvalidRequest),
}

impl Malformed {
    pub fn problem(&self) -> &InvalidRequest {
        match self {
            Self::Entries(e) | Self::Override(e) => e,
        }
    }
}

/// One key/value pair of a request descriptor: its bytes as the request sent them, which name
/// the counter, and a UTF-8 view of them, which the rules are matched against. Only Envoy's
/// requests can carry bytes that are not UTF-8 (Envoy forwards header bytes as they are); the
/// view shows each invalid sequence as U+FFFD and borrows when there is none.
#[derive(Debug, Clone)]
pub(crate) struct RequestEntry<'q> {
    key: &'q [u8],
    value: &'q [u8],
    key_text: Cow<'q, str>,
    value_text: Cow<'q, str>,
}

impl<'q> RequestEntry<'q> {
    pub fn from_str(key: &'q str, value: &'q str) -> Self {
        Self {
            key: key.as_bytes(),
            value: value.as_bytes(),
            key_text: Cow::Borrowed(key),
            value_text: Cow::Borrowed(value),
        }
    }

    pub fn from_bytes(key: &'q [u8], value: &'q [u8]) -> Self {
        Self {
            key,
            value,
            key_text: String::from_utf8_lossy(key),
            value_text: String::from_utf8_lossy(value),
        }
    }

    /// The entry as the rules see it.
    pub fn text(&self) -> DescriptorEntry<'_> {
        DescriptorEntry::new(&self.key_text, &self.value_text)
    }
}

impl EntryBytes for RequestEntry<'_> {
    fn key_bytes(&self) -> &[u8] {
        self.key
    }

    fn value_bytes(&self) -> &[u8] {
        self.value
    }
}

#[derive(Debug, Clone)]
pub(crate) struct DescriptorQuery<'q> {
    pub entries: SmallVec<[RequestEntry<'q>; 4]>,
    pub source: LimitSource<'q>,
    pub cost: Cost,
    pub malformed: Option<Malformed>,
}

impl DescriptorQuery<'_> {
    /// The entries as the rules see them.
    pub fn text(&self) -> SmallVec<[DescriptorEntry<'_>; 4]> {
        self.entries.iter().map(RequestEntry::text).collect()
    }
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

/// A request, validated in form by the API layer; `plan` resolves the rest.
#[derive(Debug, Clone)]
pub(crate) struct Request<'q> {
    pub domain: &'q str,
    pub query: Query<'q>,
    pub dry_run: bool,
}

impl Request<'_> {
    /// What is wrong with descriptor `index`, if it is malformed.
    pub fn malformed(&self, index: usize) -> Option<&Malformed> {
        match &self.query {
            Query::Descriptors(descriptors) => descriptors.get(index)?.malformed.as_ref(),
            Query::Key { .. } => None,
        }
    }
}
