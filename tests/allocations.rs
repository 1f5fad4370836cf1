//! Allocations per check on the hot path, counted by a global allocator that counts per
//! thread: a check of a key the table already holds, on the allowed path, allocates nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use limitmesh::limiter::{
    CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig, OriginId,
};
use limitmesh::window::WindowSpec;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: delegates to the system allocator and only adds a thread-local count.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const T0: u64 = 1_700_000_000_000;

fn allocations_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn check(limiter: &Limiter, key: &str, limit: Limit, now: u64) -> bool {
    let item = [CheckItem {
        key: key.as_bytes(),
        limit,
        cost: 1,
    }];
    limiter
        .check(
            &CheckRequest {
                items: &item,
                dry_run: false,
            },
            now,
        )
        .expect("valid")
        .allowed
}

#[test]
fn checks_of_known_keys_on_the_allowed_path_allocate_nothing() {
    let limiter = Limiter::new(
        LimiterConfig::default(),
        OriginId(1),
        KeyHasher::from_secret(b"allocations"),
    );
    let limit = Limit {
        max: u32::MAX,
        window: WindowSpec::with_default_buckets(1_000).expect("valid window"),
    };
    let keys: Vec<String> = (0..1_000).map(|i| format!("tenant={i}")).collect();
    // The first check of a key takes its table entry (and the first of all, the table's
    // shards): that allocates.
    let first = allocations_in(|| {
        for k in &keys {
            assert!(check(&limiter, k, limit, T0));
        }
    });
    assert!(first > 0, "the counter counts: a new key's entry allocates");
    // Two rounds for the changed-keys queue to reach its steady capacity.
    for round in 1..=2 {
        limiter.collect_changed(T0 + round);
        for k in &keys {
            assert!(check(&limiter, k, limit, T0 + round));
        }
    }
    // Then 100 000 checks over known keys, across buckets and windows, with a gossip round
    // (which takes the changed keys, so that the next check marks its key changed again)
    // every 2 000 checks, on the round's side of the count.
    let mut allowed = 0;
    let mut hot = 0;
    for i in 0..100_000u64 {
        if i % 2_000 == 0 {
            limiter.collect_changed(T0 + 1 + i / 20);
        }
        let k = &keys[(i * 7_919 % 1_000) as usize];
        hot += allocations_in(|| {
            allowed += u64::from(check(&limiter, k, limit, T0 + 1 + i / 20));
        });
    }
    assert_eq!(allowed, 100_000);
    println!("first checks of 1 000 keys: {first} allocations; then 100 000 checks: {hot}");
    assert_eq!(hot, 0, "{hot} allocations in 100 000 checks of known keys");
}
