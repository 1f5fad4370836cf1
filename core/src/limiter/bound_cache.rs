//! The cached admission bound of one window: what lets a check far from its limit be three
//! loads and one CAS.
//!
//! A bound is "the most the current bucket may hold for the rest of the bucket". It is computed
//! on the exact path from everything a decision depends on, and reused only under exactly those
//! inputs (ALGORITHM.md, "what the cache may assume"):
//!
//! - the limit value and the estimate mode: part of the cache's key, so a check under another
//!   limit (an Envoy `limit` override, an inline limit, a reloaded rule) never uses it;
//! - the bucket: part of the key;
//! - the liveness (who is live, `N_expected`, who is silent or cut off, which windows are
//!   blind): its generation is part of the key. A blind window's bound is never stored: its
//!   cap depends on whether the others' demand has lapsed, which can tighten it mid-bucket;
//! - the remote registers: a merge invalidates the cache ([`BoundCache::invalidate`]);
//! - this node's own demand as its peers know it: an emission that changes it invalidates the
//!   cache (`WindowState::publish_demand`), and so does one that changes the demand before it
//!   or whether the share binds (`own_demand::LastEmission`, for the demand as an owner's sum
//!   has it). Whether the others' demand is a sum's, and that sum's time, follow what the
//!   registers and sums said, not how much of it has lapsed: they move only with a merge;
//! - the cost: the bound is computed for a cost of 1, and the allowance only grows with cost;
//! - the local ring and the passing of time within the bucket: both only loosen the bound
//!   (the straddling bucket fades, remote counts and demand age out, onset ends, this node's
//!   offered load only grows).
//!
//! The key and the bound do not fit in one 64-bit word, so they live in two, guarded as a
//! sequence lock: `head = seq (31) | mode (1) | limit (32)` and
//! `body = epoch tag (16) | liveness generation (16) | bound (32)`. A writer makes `seq` odd,
//! writes `body`, and makes it even again; a reader accepts a pair only if `head` read the same
//! even value before and after `body`. Invalidation moves `seq` on by 2, clearing `body` in
//! between when no writer is storing, and otherwise leaving that writer to find `seq` moved and
//! withdraw its body: a writer that computed its bound before a merge never keeps it.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use crate::window::EstimateMode;

const SEQ_SHIFT: u32 = 33;
const SEQ_ONE: u64 = 1 << SEQ_SHIFT;
const KEY_MASK: u64 = SEQ_ONE - 1;
const MODE_BIT: u64 = 1 << 32;

/// Everything a cached bound was computed for, besides the remote registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BoundKey {
    pub epoch: u64,
    pub limit: u32,
    pub mode: EstimateMode,
    pub generation: u16,
}

impl BoundKey {
    /// The key's part of `head`: mode and limit.
    fn head_key(&self) -> u64 {
        let mode = match self.mode {
            EstimateMode::Interpolated => 0,
            EstimateMode::Exact => MODE_BIT,
        };
        mode | u64::from(self.limit)
    }

    /// The key's part of `body`: epoch tag and liveness generation.
    fn body_key(&self) -> u64 {
        ((self.epoch & 0xFFFF) << 48) | (u64::from(self.generation) << 32)
    }
}

/// A position in the cache's sequence, read before a bound is computed (see
/// [`BoundCache::store`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen(u64);

#[derive(Debug, Default)]
pub(crate) struct BoundCache {
    head: AtomicU64,
    /// 0 when empty or invalidated. A zero body read as a bound is a bound of 0, which admits
    /// nothing: the check then takes the exact path.
    body: AtomicU64,
}

impl BoundCache {
    /// The bound cached for exactly `key`, if any.
    #[inline]
    pub fn get(&self, key: &BoundKey) -> Option<u32> {
        let head = self.head.load(Ordering::Acquire);
        if head & SEQ_ONE != 0 || head & KEY_MASK != key.head_key() {
            return None;
        }
        let body = self.body.load(Ordering::Relaxed);
        // The body must be read before `head` is read again.
        fence(Ordering::Acquire);
        if self.head.load(Ordering::Relaxed) != head || body & !0xFFFF_FFFF != key.body_key() {
            return None;
        }
        Some(body as u32)
    }

    /// The limit the window was last checked under (0: never checked here): the limit of the
    /// last bound stored, or noted ([`BoundCache::note_limit`]).
    pub fn last_limit(&self) -> u32 {
        self.head.load(Ordering::Relaxed) as u32
    }

    /// Records `limit` as the window's limit where the last bound stored was for another: a
    /// bound of 0 under it, which sends every check to the exact path as an empty cache does.
    /// Checks that cache nothing call it (several items at once, the cache turned off), so
    /// that the limit is known to `Limiter::contended` all the same; an inspection or a dry
    /// run does not.
    pub fn note_limit(&self, limit: u32) {
        if self.last_limit() == limit {
            return;
        }
        let key = BoundKey {
            epoch: 0,
            limit,
            mode: EstimateMode::Interpolated,
            generation: 0,
        };
        self.store(self.seen(), &key, 0);
    }

    /// Where the sequence stands. Read it before reading anything the bound is computed from.
    #[inline]
    pub fn seen(&self) -> Seen {
        Seen(self.head.load(Ordering::Acquire))
    }

    /// Caches `bound` for `key`, unless anything was invalidated or stored since `seen` was
    /// read (the bound might then be computed from state older than a merge).
    pub fn store(&self, seen: Seen, key: &BoundKey, bound: u32) {
        let Seen(head) = seen;
        if head & SEQ_ONE != 0 {
            return;
        }
        let writing = head.wrapping_add(SEQ_ONE);
        if self
            .head
            .compare_exchange(head, writing, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // The odd `head` must be visible before the new body.
        fence(Ordering::Release);
        self.body
            .store(key.body_key() | u64::from(bound), Ordering::Relaxed);
        let done = (writing.wrapping_add(SEQ_ONE) & !KEY_MASK) | key.head_key();
        if self
            .head
            .compare_exchange(writing, done, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            // Invalidated while writing: withdraw the body, then make `head` even again.
            self.body.store(0, Ordering::Relaxed);
            self.head.fetch_add(SEQ_ONE, Ordering::Release);
        }
    }

    /// Forgets the bound: something it was computed from changed in a way that may tighten
    /// it. A store racing with this withdraws its bound.
    pub fn invalidate(&self) {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            if head & SEQ_ONE != 0 {
                // A writer is storing: moving `seq` by 2 keeps it odd and makes the writer's
                // last step fail, so the writer withdraws its body itself.
                match self.head.compare_exchange_weak(
                    head,
                    head.wrapping_add(2 * SEQ_ONE),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return,
                    Err(now) => head = now,
                }
            } else {
                // Write as a writer would (odd, clear the body, even), so that no writer's body
                // can land after the clearing and survive it.
                match self.head.compare_exchange_weak(
                    head,
                    head.wrapping_add(SEQ_ONE),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        fence(Ordering::Release);
                        self.body.store(0, Ordering::Relaxed);
                        self.head.fetch_add(SEQ_ONE, Ordering::Release);
                        return;
                    }
                    Err(now) => head = now,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(limit: u32) -> BoundKey {
        BoundKey {
            epoch: 12_345,
            limit,
            mode: EstimateMode::Interpolated,
            generation: 7,
        }
    }

    #[test]
    fn a_noted_limit_is_the_last_limit_and_leaves_no_bound_that_admits() {
        let cache = BoundCache::default();
        assert_eq!(cache.last_limit(), 0);
        let k = key(1_000);
        cache.store(cache.seen(), &k, 400);
        assert_eq!(cache.last_limit(), 1_000);
        // The same limit noted: the bound stays.
        cache.note_limit(1_000);
        assert_eq!(cache.get(&k), Some(400));
        // Another: it is the last limit now, and no bound under either admits anything.
        cache.note_limit(50);
        assert_eq!(cache.last_limit(), 50);
        assert_eq!(cache.get(&k), None);
        assert!(matches!(cache.get(&key(50)), None | Some(0)));
    }

    #[test]
    fn a_bound_is_found_only_under_the_inputs_it_was_stored_for() {
        let cache = BoundCache::default();
        let k = key(1_000);
        cache.store(cache.seen(), &k, 400);
        assert_eq!(cache.get(&k), Some(400));
        assert_eq!(cache.get(&key(10)), None, "another limit");
        assert_eq!(
            cache.get(&BoundKey {
                mode: EstimateMode::Exact,
                ..k
            }),
            None,
            "another mode"
        );
        assert_eq!(
            cache.get(&BoundKey { epoch: 12_346, ..k }),
            None,
            "another bucket"
        );
        assert_eq!(
            cache.get(&BoundKey { generation: 8, ..k }),
            None,
            "another liveness"
        );
    }

    #[test]
    fn a_store_replaces_the_key_with_the_bound() {
        let cache = BoundCache::default();
        cache.store(cache.seen(), &key(1_000), 400);
        cache.store(cache.seen(), &key(10), 4);
        assert_eq!(cache.get(&key(1_000)), None);
        assert_eq!(cache.get(&key(10)), Some(4));
    }

    #[test]
    fn invalidation_forgets_and_defeats_a_store_computed_before_it() {
        let cache = BoundCache::default();
        let k = key(1_000);
        cache.store(cache.seen(), &k, 400);
        let seen = cache.seen();
        cache.invalidate();
        assert_eq!(cache.get(&k), None);
        // A bound computed from state read before the invalidation is not stored.
        cache.store(seen, &k, 400);
        assert_eq!(cache.get(&k), None);
        // One computed after it is.
        cache.store(cache.seen(), &k, 300);
        assert_eq!(cache.get(&k), Some(300));
    }

    #[test]
    fn an_invalidation_during_a_store_defeats_it() {
        // A writer has made `seq` odd and is about to write its body when a merge invalidates.
        let cache = BoundCache::default();
        let k = key(1_000);
        let seen = cache.seen();
        let writing = seen.0.wrapping_add(SEQ_ONE);
        cache.head.store(writing, Ordering::Relaxed);
        cache.invalidate();
        // The writer's remaining steps, as `store` takes them.
        cache.body.store(k.body_key() | 400, Ordering::Relaxed);
        let done = (writing.wrapping_add(SEQ_ONE) & !KEY_MASK) | k.head_key();
        if cache
            .head
            .compare_exchange(writing, done, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            cache.body.store(0, Ordering::Relaxed);
            cache.head.fetch_add(SEQ_ONE, Ordering::Release);
        }
        assert_eq!(
            cache.get(&k),
            None,
            "a bound from before the merge survived it"
        );
        assert_eq!(
            cache.head.load(Ordering::Relaxed) & SEQ_ONE,
            0,
            "left locked"
        );
    }

    #[test]
    fn a_store_from_a_stale_position_loses_to_a_newer_store() {
        let cache = BoundCache::default();
        let seen = cache.seen();
        cache.store(cache.seen(), &key(10), 4);
        cache.store(seen, &key(1_000), 400);
        assert_eq!(cache.get(&key(10)), Some(4));
        assert_eq!(cache.get(&key(1_000)), None);
    }

    #[test]
    fn concurrent_writers_never_pair_a_bound_with_another_limit() {
        // Two limits whose bounds are told apart by value: a reader that ever sees limit A's
        // key with limit B's bound has read a torn pair.
        let cache = std::sync::Arc::new(BoundCache::default());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = [(1_000u32, 999u32), (10, 9)]
            .into_iter()
            .map(|(limit, bound)| {
                let cache = cache.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut i = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        cache.store(cache.seen(), &key(limit), bound);
                        i = i.wrapping_add(1);
                        if i.is_multiple_of(7) {
                            cache.invalidate();
                        }
                    }
                })
            })
            .collect();
        let mut hits = 0u64;
        for _ in 0..2_000_000 {
            if let Some(b) = cache.get(&key(1_000)) {
                assert_eq!(b, 999);
                hits += 1;
            }
            if let Some(b) = cache.get(&key(10)) {
                assert_eq!(b, 9);
                hits += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().expect("writer");
        }
        assert!(
            hits > 0,
            "the readers never saw a bound: the test tested nothing"
        );
    }
}
