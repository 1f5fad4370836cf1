//! Who the limiter shares each limit with: live and silent members, `N_expected`, clock
//! fences. Every change bumps the liveness generation, which every cached bound is keyed by.

use std::sync::atomic::Ordering;

use super::replication::{OriginList, ReplicationState};
use super::{Limiter, MAX_PEERS_COUNT, OriginId, admission, state};

impl Limiter {
    /// Says whether this node, or a member, is cut off for a clock beyond
    /// `max_clock_drift_ms`. The cut-off members are also among the silent ones of
    /// [`Limiter::set_liveness`] (all of them, when it is this node's clock): that takes their
    /// demand out of the shares. This makes the scale `live / N_expected` of the `strict`
    /// policy apply even under `available`, on both sides, so that the node with the wrong
    /// clock and the others together stay within the limit.
    pub fn set_clock_fenced(&self, fenced: bool) {
        if self.clock_fenced.swap(fenced, Ordering::Relaxed) != fenced {
            self.liveness_generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether [`Limiter::set_clock_fenced`] last said someone is cut off.
    pub fn clock_fenced(&self) -> bool {
        self.clock_fenced.load(Ordering::Relaxed)
    }

    /// Live members (this node included) and `N_expected`, as last set.
    pub fn member_counts(&self) -> (usize, usize) {
        (
            self.live.load(Ordering::Relaxed),
            self.expected.load(Ordering::Relaxed),
        )
    }

    /// Tells the limiter how many members are live, this node included. Call it on every
    /// membership change and periodically, so that `N_expected` can age.
    pub fn set_members(&self, live: usize, now_ms: u64) {
        self.set_liveness(live, &[], 0, now_ms);
    }

    /// Tells the limiter how many members are live (this node included) and which members
    /// have gone silent: not heard from lately, though not yet declared down. A silent
    /// member is on the other side of a partition as far as this node can tell, so its
    /// demand leaves the shares here while the live count (and, under `strict`, this side's
    /// scale) drops. Origins that are not members at all (a crashed or restarted process)
    /// keep their demand until it lapses, one window after their last register, so that
    /// their share is handed over only as their admissions leave the window.
    ///
    /// `peers_count` is the largest number of members any peer says it counts (itself
    /// included): a member this node cannot hear at all, and that SWIM has therefore declared
    /// down here, is still expected as long as its peers count it.
    pub fn set_liveness(&self, live: usize, silent: &[OriginId], peers_count: usize, now_ms: u64) {
        let mut sync = self.lock_sync();
        let idx = sync.intern_list(OriginList::Silent, silent, self.origin, now_ms);
        // Silent members are still members: `N_expected` counts them, so that a member this
        // node never hears (one-way loss) is expected all the same and this side's scale
        // shrinks, rather than the member being forgotten and its share taken.
        let members = (live.max(1) + idx.len()).max(peers_count.min(MAX_PEERS_COUNT));
        let current = self.silent_origins.load();
        let changed = current.as_deref().map_or(!idx.is_empty(), |c| *c != idx);
        if changed {
            self.silent_origins
                .store((!idx.is_empty()).then(|| std::sync::Arc::new(idx)));
        }
        self.update_liveness(&mut sync, live, members, now_ms, changed);
    }

    /// Tells the limiter which origins are members it has stopped hearing from, though they
    /// are not down: in a large cluster a node hears only the members it shares windows with,
    /// and one of those falling silent may be on the other side of a partition, still
    /// admitting its share. Until the cluster knows, their registers keep the demand they last
    /// reported (it does not lapse) and are not expired, so that no share grows in their
    /// absence; a member that goes down is released.
    ///
    /// `sums_held` are owners whose sums alone are held, each until another owner's sum of the
    /// window is newer, or this node owns the window and its users' registers come
    /// ([`Limiter::release_departed_sums`]):
    /// members that went down lately. A sum is mostly the demand of the window's other users
    /// (the owner's own is one part of it); they are still there (most of them), and until the
    /// new owners' sums arrive it is all this node knows of them. Released with its owner, it
    /// would leave a node on the side of a partition that lost the owner alone on the window
    /// (its share the whole of its side's) for the round trip to the new owners, or for as long
    /// as no new owner served it. Pinned by
    /// `a_departed_owners_sum_is_held_without_holding_its_own_register` (`limiter/tests/cluster.rs`).
    pub fn set_held(&self, held: &[OriginId], sums_held: &[OriginId], now_ms: u64) {
        let mut sync = self.lock_sync();
        let mut idx = sync.intern_list(OriginList::Held, held, self.origin, now_ms);
        // Looked up, not interned: a departed member this node never heard from has no sum
        // here, and interning it could evict an origin of a full table.
        let sums = sums_held
            .iter()
            .filter_map(|o| sync.lookup_origin(*o))
            .map(state::aggregate_of);
        let before = idx.len();
        idx.extend(sums);
        if idx.len() > before {
            idx.sort_unstable();
            idx.dedup();
        }
        let current = self.held_origins.load();
        if current.as_deref().map_or(!idx.is_empty(), |c| *c != idx) {
            self.held_origins
                .store((!idx.is_empty()).then(|| std::sync::Arc::new(idx)));
            // Shares change with the demand held: cached bounds were computed without it.
            self.liveness_generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether `idx` (an origin, or an owner's aggregate) is held.
    pub(super) fn is_held(&self, idx: state::OriginIdx) -> bool {
        self.held_origins
            .load()
            .as_deref()
            .is_some_and(|h| state::is_held_in(h, idx))
    }

    fn update_liveness(
        &self,
        sync: &mut ReplicationState,
        live: usize,
        members: usize,
        now_ms: u64,
        set_changed: bool,
    ) {
        sync.expected.observe(members, now_ms);
        let expected = sync.expected.expected(now_ms);
        let live = live.clamp(1, expected);
        let (was_live, was_expected) = self.member_counts();
        let counts_changed = (live, expected) != (was_live, was_expected);
        // Updated under the replication lock, as every call here is.
        let whole_before = self.whole_expected.load(Ordering::Relaxed);
        let in_sight = !admission::out_of_sight(live, expected);
        if in_sight && expected > whole_before {
            self.whole_expected.store(expected, Ordering::Relaxed);
        }
        // Back in sight: from a side of a partition to whole again, with members back (not
        // `N_expected` lapsing to the side's size after `expected_hold_ms`: nobody came back).
        // After a partition longer than that hold, the members back are silent in their join
        // grace first, which raises `N_expected` before they count as live: out of sight, then
        // back in sight, as after a short one. (Members back are a change of the counts.)
        let came_back = live > was_live && admission::out_of_sight(was_live, was_expected);
        if came_back && in_sight && expected <= whole_before {
            // Before the counts and the generation: a check that sees the new generation (an
            // Acquire load, `check_one`) sees when the cluster became whole. One that reads
            // the counts alone may give the credit once, racing the heal.
            // 0 means never out of sight.
            self.back_in_sight_ms
                .store(now_ms.max(1), Ordering::Relaxed);
        }
        if counts_changed {
            self.live.store(live, Ordering::Relaxed);
            self.expected.store(expected, Ordering::Relaxed);
        }
        if counts_changed || set_changed {
            // After the values: a reader that sees the new generation sees the new values.
            self.liveness_generation.fetch_add(1, Ordering::Release);
        }
    }

    pub(super) fn generation(&self) -> u16 {
        self.liveness_generation.load(Ordering::Acquire) as u16
    }
}
