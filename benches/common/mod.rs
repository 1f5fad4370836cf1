//! What both hot-path benchmarks measure on: the same limiter, keys and access order.

use limitmesh::ledger::{Lease, Segment};
use limitmesh::limiter::{
    KeyHasher, LeaseGrant, Limit, Limiter, LimiterConfig, OriginId, PartitionPolicy, Policy,
};
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

/// The same limiter admitting under the ledger, every key of `keys` holding a lease (taken at
/// `now_ms`, for an hour) of more tokens than a benchmark spends: every check spends a token it
/// holds, as a node does between two renewals.
pub fn ledger_limiter(keys: &[String], now_ms: u64) -> Limiter {
    let limiter = Limiter::new(
        LimiterConfig {
            max_keys: KEYS * 2,
            policy: Policy::Ledger(PartitionPolicy::Strict),
            ..LimiterConfig::default()
        },
        OriginId(1),
        KeyHasher::from_secret(b"bench"),
    );
    let window = open_limit().window;
    for key in keys {
        let grant = LeaseGrant {
            user: 1,
            key: limiter.key_id(key.as_bytes(), &window),
            window_ms: window.window_ms(),
            buckets: window.buckets(),
            lease: Lease {
                owner: 2,
                seq: 1,
                expires_ms: now_ms + 3_600_000,
                segments: vec![Segment {
                    id: 1,
                    count: u32::MAX,
                    valid_from_ms: 0,
                }]
                .into(),
            },
        };
        assert!(limiter.accept_lease(&grant, now_ms), "lease taken");
    }
    limiter
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
