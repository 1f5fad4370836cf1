//! Memory, measured with a counting allocator: bytes per active key with five origins (target
//! ≤ 512 B, excluding the key string, which limitmesh never stores), and a key cardinality
//! explosion (a million keys stay within `max_keys`; ALGORITHM.md §6).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicIsize, Ordering};

use limitmesh::crdt::HlcTimestamp;
use limitmesh::crdt::Register;
use limitmesh::limiter::{
    Batch, CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig, OriginId,
    RegisterUpdate,
};
use limitmesh::window::WindowSpec;

struct Counting;

/// Bytes held, counted as glibc malloc chunks: the request plus an 8-byte header, rounded up
/// to 16, at least 32. That is what the process really holds per allocation.
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

fn chunk(size: usize) -> isize {
    ((size + 8).div_ceil(16) * 16).max(32) as isize
}

// SAFETY: delegates to the system allocator and only adds bookkeeping.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The tests read one global counter, so they take turns.
static MEASURING: Mutex<()> = Mutex::new(());

const T0: u64 = 1_700_000_000_000;
const KEYS: usize = 20_000;
/// At most 512 bytes per active key at five origins.
const TARGET_BYTES_PER_KEY: f64 = 512.0;

#[test]
fn bytes_per_active_key_with_five_origins() {
    let _turn = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let spec = WindowSpec::with_default_buckets(1_000).unwrap();
    let limit = [Limit {
        max: 1_000_000,
        window: spec,
    }];
    let keys: Vec<String> = (0..KEYS).map(|i| format!("tenant={i}")).collect();
    let limiter = Limiter::new(
        LimiterConfig {
            max_keys: KEYS * 2,
            ..LimiterConfig::default()
        },
        OriginId(1),
        KeyHasher::from_secret(b"memory"),
    );
    // Four peers' registers, with every bucket of the window in use.
    let peers: Vec<Batch> = (2..=5u128)
        .map(|origin| Batch {
            origin: OriginId(origin),
            updates: keys
                .iter()
                .map(|k| RegisterUpdate {
                    key: limiter.key_id(k.as_bytes(), &spec),
                    window_ms: 1_000,
                    buckets: 10,
                    register: Register {
                        version: 7,
                        hlc: HlcTimestamp::new(T0 + 999, 0),
                        newest_epoch: spec.epoch(T0 + 999),
                        demand: 400,
                        admitted: vec![20; 11],
                    },
                })
                .collect(),
        })
        .collect();

    let before = LIVE_BYTES.load(Ordering::Relaxed);
    for (i, k) in keys.iter().enumerate() {
        // Traffic in every bucket of this node's ring too.
        for bucket in 0..10 {
            let item = [CheckItem {
                key: k.as_bytes(),
                limit: limit[0],
                cost: 1,
            }];
            let req = CheckRequest {
                items: &item,
                dry_run: false,
            };
            limiter
                .check(&req, T0 + bucket * 100 + (i % 50) as u64)
                .unwrap();
        }
    }
    drop(limiter.collect_changed(T0 + 999));
    drop(limiter.collect_changed(T0 + 999));
    for batch in &peers {
        let report = limiter.merge(batch, T0 + 999);
        assert_eq!(report.inserted as usize, KEYS);
    }
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    assert_eq!(limiter.stats().keys, KEYS);

    let per_key = (after - before) as f64 / KEYS as f64;
    println!("bytes per active key at 5 origins: {per_key:.0} (target {TARGET_BYTES_PER_KEY})");
    assert!(
        per_key <= TARGET_BYTES_PER_KEY,
        "{per_key:.0} bytes per key exceeds the {TARGET_BYTES_PER_KEY} byte target"
    );
}

/// A million distinct keys, a thousand per 10 ms, each asked once, as a scan or an attack on
/// per-IP limits would: the table never holds more than `max_keys` and the memory held stays
/// that of `max_keys` windows. No window that holds an admission is evicted to make room (that
/// would hand its quota out again): keys past the table's room are denied, and counted, until
/// windows expire and make room again. The node's loop drains the emission queue and collects
/// garbage every round; this does the same every 200 ms.
#[test]
fn a_million_keys_stay_within_max_keys() {
    const MAX_KEYS: usize = 10_000;
    const DISTINCT: usize = 1_000_000;
    let _turn = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let limit = Limit {
        max: 100,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    };
    let limiter = Limiter::new(
        LimiterConfig {
            max_keys: MAX_KEYS,
            ..LimiterConfig::default()
        },
        OriginId(1),
        KeyHasher::from_secret(b"cardinality"),
    );
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut peak_bytes = 0isize;
    let mut key = String::new();
    let mut admitted = 0usize;
    for i in 0..DISTINCT {
        let now = T0 + (i / 100) as u64;
        key.clear();
        use std::fmt::Write as _;
        write!(
            key,
            "remote_address=10.{}.{}.{}",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        )
        .unwrap();
        let item = [CheckItem {
            key: key.as_bytes(),
            limit,
            cost: 1,
        }];
        let decision = limiter
            .check(
                &CheckRequest {
                    items: &item,
                    dry_run: false,
                },
                now,
            )
            .expect("the default policy denies rather than errs");
        admitted += usize::from(decision.allowed);
        if i % 20_000 == 19_999 {
            drop(limiter.collect_changed(now));
            limiter.gc(now, 4_096);
            assert!(limiter.stats().keys <= MAX_KEYS, "{:?}", limiter.stats());
            peak_bytes = peak_bytes.max(LIVE_BYTES.load(Ordering::Relaxed) - before);
        }
    }
    let stats = limiter.stats();
    println!(
        "a million keys: {stats:?}, peak {:.1} MiB",
        peak_bytes as f64 / (1 << 20) as f64
    );
    println!("admitted {admitted} of {DISTINCT}");
    assert_eq!(admitted + stats.refused_table_full as usize, DISTINCT);
    // Ten seconds of keys with 1.1 s windows: the table turns over about eight times, each
    // window removed only once its admission has left the window (evicted or expired).
    assert!(
        admitted >= 5 * MAX_KEYS,
        "{admitted} admitted: room never came back"
    );
    assert!(
        (stats.evicted_keys + stats.expired_keys) as usize >= admitted - MAX_KEYS,
        "{stats:?}"
    );
    // A window is about 200 bytes here (no peers); allow the table's slack and the queues.
    let ceiling = (MAX_KEYS * 1_024) as isize;
    assert!(
        peak_bytes <= ceiling,
        "{peak_bytes} bytes held for {MAX_KEYS} keys (ceiling {ceiling})"
    );
}
