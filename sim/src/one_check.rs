//! One simulated request: a check of one item, as a sidecar's gRPC service makes it for a
//! request of one descriptor.

use limitmesh::limiter::{CheckError, CheckItem, CheckRequest, Decision, Limit, Limiter};

/// Checks `cost` of `key` under `limit` at cluster time `now_ms`; `again`: a request that
/// waited for a token, decided again (`Limiter::check_again`, as the gRPC service).
pub fn check_one(
    limiter: &Limiter,
    (key, limit, cost): (&[u8], Limit, u32),
    now_ms: u64,
    again: bool,
) -> Result<Decision, CheckError> {
    let item = [CheckItem { key, limit, cost }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    if again {
        limiter.check_again(&req, now_ms)
    } else {
        limiter.check(&req, now_ms)
    }
}
