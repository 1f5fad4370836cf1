//! What a check returns, and why a check can be refused outright.

use smallvec::SmallVec;
use thiserror::Error;

use super::key::Limit;

/// Longest key the limiter accepts (the canonical form of domain and descriptors).
pub const MAX_KEY_BYTES: usize = 4096;
/// Most limits one check may apply to one key.
pub const MAX_LIMITS_PER_CHECK: usize = 16;

/// One key, its limits, and how much of them this request uses.
#[derive(Debug, Clone, Copy)]
pub struct CheckRequest<'a> {
    pub key: &'a [u8],
    pub limits: &'a [Limit],
    /// How many units this request consumes (Envoy's `hits_addend`).
    pub cost: u32,
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
    /// One status per limit, in the request's order.
    pub limits: SmallVec<[LimitStatus; 2]>,
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

/// A check the limiter refuses to evaluate. Nothing is consumed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CheckError {
    #[error("key is empty")]
    EmptyKey,
    #[error("key is {len} bytes; the maximum is {max}")]
    KeyTooLong { len: usize, max: usize },
    #[error("no limits given")]
    NoLimits,
    #[error("{count} limits given; the maximum is {max}")]
    TooManyLimits { count: usize, max: usize },
    #[error("hits must be at least 1")]
    ZeroCost,
    #[error(
        "hits {cost} exceed limit {limit} (limit #{index}): such a request can never be allowed"
    )]
    CostExceedsLimit { cost: u32, limit: u32, index: usize },
    #[error("the key table is full ({max_keys} keys) and every key in it is busy")]
    KeyTableFull { max_keys: usize },
}

pub(crate) fn validate(req: &CheckRequest<'_>) -> Result<(), CheckError> {
    if req.key.is_empty() {
        return Err(CheckError::EmptyKey);
    }
    if req.key.len() > MAX_KEY_BYTES {
        return Err(CheckError::KeyTooLong {
            len: req.key.len(),
            max: MAX_KEY_BYTES,
        });
    }
    if req.limits.is_empty() {
        return Err(CheckError::NoLimits);
    }
    if req.limits.len() > MAX_LIMITS_PER_CHECK {
        return Err(CheckError::TooManyLimits {
            count: req.limits.len(),
            max: MAX_LIMITS_PER_CHECK,
        });
    }
    if req.cost == 0 {
        return Err(CheckError::ZeroCost);
    }
    for (index, l) in req.limits.iter().enumerate() {
        // A limit of 0 blocks everything; that is a verdict, not a malformed request.
        if l.limit > 0 && req.cost > l.limit {
            return Err(CheckError::CostExceedsLimit {
                cost: req.cost,
                limit: l.limit,
                index,
            });
        }
    }
    Ok(())
}
