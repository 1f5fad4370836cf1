//! What a check returns, and why a check can be refused outright.

use smallvec::SmallVec;
use thiserror::Error;

use super::key::Limit;

/// Longest key the limiter accepts (the canonical form of domain and descriptors).
pub const MAX_KEY_BYTES: usize = 4096;
/// Most (key, limit) items one check may carry (Envoy requests carry one per descriptor).
pub const MAX_ITEMS_PER_CHECK: usize = 64;

/// One key under one limit, and how many units of it this request uses.
#[derive(Debug, Clone, Copy)]
pub struct CheckItem<'a> {
    pub key: &'a [u8],
    pub limit: Limit,
    /// Units consumed (Envoy's `hits_addend`).
    pub cost: u32,
}

/// A request: admitted only if every item is, and then it consumes every item.
#[derive(Debug, Clone, Copy)]
pub struct CheckRequest<'a> {
    pub items: &'a [CheckItem<'a>],
    /// Decide without consuming or counting anything.
    pub dry_run: bool,
}

/// The verdict of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitStatus {
    /// Whether this limit had room for the request.
    pub allowed: bool,
    pub limit: u32,
    /// Requests this node could still admit now under this limit.
    pub remaining: u64,
    /// Milliseconds until everything counted so far has left the window.
    pub reset_after_ms: u64,
    /// When refused: milliseconds until a request of this cost could fit, if nobody else adds
    /// to the window. 0 when allowed.
    pub retry_after_ms: u64,
}

/// The verdict of a check: allowed only if every limit allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// One status per item, in the request's order.
    pub limits: SmallVec<[LimitStatus; 2]>,
    /// Under the ledger, a refused request's windows without a token: what the caller may do
    /// to get one (wait, or ask the owner); an admitted request's windows it left short, to
    /// ask their owners ahead ([`TokenNeed::ahead`](super::TokenNeed::ahead)). Empty
    /// otherwise.
    pub needs: SmallVec<[super::TokenNeed; 1]>,
}

impl Decision {
    /// The longest wait any limit asks for.
    pub fn retry_after_ms(&self) -> u64 {
        self.limits
            .iter()
            .map(|s| s.retry_after_ms)
            .max()
            .unwrap_or(0)
    }
}

/// A check the limiter refuses to evaluate. Nothing is consumed. `index` names the item.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CheckError {
    #[error("item {index}: key is empty")]
    EmptyKey { index: usize },
    #[error("item {index}: key is {len} bytes; the maximum is {max}")]
    KeyTooLong {
        index: usize,
        len: usize,
        max: usize,
    },
    #[error("no items to check")]
    NoItems,
    #[error("{count} items given; the maximum is {max}")]
    TooManyItems { count: usize, max: usize },
    #[error("item {index}: hits must be at least 1")]
    ZeroCost { index: usize },
    #[error("item {index}: hits {cost} exceed the limit of {limit}, so it could never be allowed")]
    CostExceedsLimit { index: usize, cost: u32, limit: u32 },
    #[error("the key table is full ({max_keys} keys) and every key in it is busy")]
    KeyTableFull { max_keys: usize },
}

pub(crate) fn validate(req: &CheckRequest<'_>) -> Result<(), CheckError> {
    if req.items.is_empty() {
        return Err(CheckError::NoItems);
    }
    if req.items.len() > MAX_ITEMS_PER_CHECK {
        return Err(CheckError::TooManyItems {
            count: req.items.len(),
            max: MAX_ITEMS_PER_CHECK,
        });
    }
    for (index, item) in req.items.iter().enumerate() {
        if item.key.is_empty() {
            return Err(CheckError::EmptyKey { index });
        }
        if item.key.len() > MAX_KEY_BYTES {
            return Err(CheckError::KeyTooLong {
                index,
                len: item.key.len(),
                max: MAX_KEY_BYTES,
            });
        }
        if item.cost == 0 {
            return Err(CheckError::ZeroCost { index });
        }
        // A limit of 0 blocks everything; that is a verdict, not a malformed request.
        if item.limit.max > 0 && item.cost > item.limit.max {
            return Err(CheckError::CostExceedsLimit {
                index,
                cost: item.cost,
                limit: item.limit.max,
            });
        }
    }
    Ok(())
}

/// A request refused whole without being evaluated (a full table under
/// [`TableFullPolicy::Deny`](super::TableFullPolicy::Deny), or a node still warming up): nothing consumed or counted, every
/// item told to retry after `retry_after_ms`.
pub(super) fn refused_whole(req: &CheckRequest<'_>, retry_after_ms: u64) -> Decision {
    let retry_after_ms = retry_after_ms.max(1);
    let limits = req
        .items
        .iter()
        .map(|item| LimitStatus {
            allowed: false,
            limit: item.limit.max,
            remaining: 0,
            reset_after_ms: retry_after_ms,
            retry_after_ms,
        })
        .collect();
    Decision {
        allowed: false,
        limits,
        needs: SmallVec::new(),
    }
}
