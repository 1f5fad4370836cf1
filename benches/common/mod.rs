//! What both hot-path benchmarks measure on: the same limiter, keys and access order.

use limitmesh::limiter::{KeyHasher, Limit, Limiter, LimiterConfig, OriginId};
use limitmesh::window::WindowSpec;

pub const KEYS: usize = 10_000;

/// A limit high enough that every check takes the allowed path.
pub fn open_limit() -> Limit {
    Limit {
        max: u32::MAX,
        window: WindowSpec::with_default_buckets(1_000).expect("valid window"),
    }
}

pub fn limiter() -> Limiter {
    Limiter::new(
        LimiterConfig {
            max_keys: KEYS * 2,
            ..LimiterConfig::default()
        },
        OriginId(1),
        KeyHasher::from_secret(b"bench"),
    )
}

pub fn keys() -> Vec<String> {
    (0..KEYS)
        .map(|i| format!("tenant={i}|route=/api/v1/items"))
        .collect()
}

/// A fixed pseudo-random access order over the keys (the same for both limiters).
pub fn access_order(n: usize) -> Vec<usize> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % KEYS as u64) as usize
        })
        .collect()
}
