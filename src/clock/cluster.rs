//! Cluster time: the clock buckets, stamps and expiry are keyed by.
//!
//! Cluster time is this node's monotonic clock plus a `base` that the node loop steers towards
//! the median of the members' wall clocks (`calibrator.rs`). Readers (every check) pay two
//! atomic loads and the monotonic read; only the node loop writes.
//!
//! Invariant: within one *generation*, readings never go backwards (a high-water mark, as in
//! [`RollbackGuard`](super::RollbackGuard)). A jump backwards, allowed only while the node
//! admits nothing (warm-up), starts a new generation. The generation sits in the top 16 bits of
//! both the state word and the high-water word, so a reader that computed a time from the old
//! base and publishes it after the jump loses against any reading of the new generation in
//! `fetch_max`, and cannot hold the new time at the old, later value.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::{Clock, TimeSource};

/// Bits below the generation: milliseconds up to 2⁴⁸ (the year 10889), bases within ±2⁴⁷.
const LOW_BITS: u32 = 48;
const LOW_MASK: u64 = (1 << LOW_BITS) - 1;
/// A wall clock that moved this much further or less far than the monotonic clock between two
/// readings was stepped (NTP, an operator, a VM resume); smaller differences are rate.
const STEP_MS: i64 = 100;

/// Cluster time over a [`TimeSource`].
#[derive(Debug)]
pub struct ClusterClock<S> {
    source: S,
    /// Generation (16 bits) and base (48 bits, two's complement).
    state: AtomicU64,
    /// Generation (16 bits) and the largest reading handed out (48 bits).
    high_water: AtomicU64,
    /// The last "wall − mono" the node loop saw, to tell steps of the wall clock.
    last_gap: AtomicI64,
    /// Suspended time already added to the base: the monotonic clock the calibrator sees is
    /// the source's plus this, so a suspend moves cluster time forward as real time moved.
    accounted_suspend: AtomicU64,
    rollbacks: AtomicU64,
    deepest_rollback_ms: AtomicU64,
    forward_steps: AtomicU64,
}

fn pack(generation: u16, low: u64) -> u64 {
    (u64::from(generation) << LOW_BITS) | (low & LOW_MASK)
}

fn unpack_base(state: u64) -> (u16, i64) {
    let generation = (state >> LOW_BITS) as u16;
    // Sign-extend the 48-bit base.
    let base = (((state & LOW_MASK) << 16) as i64) >> 16;
    (generation, base)
}

fn clamp_base(base: i64) -> u64 {
    const LIMIT: i64 = (1 << (LOW_BITS - 1)) - 1;
    (base.clamp(-LIMIT, LIMIT) as u64) & LOW_MASK
}

impl<S: TimeSource> ClusterClock<S> {
    /// Starts on the source's wall clock: cluster time equals wall time until steered.
    pub fn new(source: S) -> Self {
        let raw_gap = gap(&source);
        let suspended = source.suspended_ms();
        Self {
            source,
            state: AtomicU64::new(pack(0, clamp_base(raw_gap))),
            high_water: AtomicU64::new(0),
            last_gap: AtomicI64::new(raw_gap.saturating_sub(suspended.min(i64::MAX as u64) as i64)),
            accounted_suspend: AtomicU64::new(suspended),
            rollbacks: AtomicU64::new(0),
            deepest_rollback_ms: AtomicU64::new(0),
            forward_steps: AtomicU64::new(0),
        }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// The raw wall clock (it may step): what datagrams carry as their send time.
    pub fn wall_ms(&self) -> u64 {
        self.source.wall_ms()
    }

    /// The monotonic clock, suspends included (as of the last [`ClusterClock::account_suspend`]).
    pub fn mono_ms(&self) -> u64 {
        self.source
            .mono_ms()
            .saturating_add(self.accounted_suspend.load(Ordering::Relaxed))
    }

    /// Cluster time minus [`ClusterClock::mono_ms`].
    pub fn base(&self) -> i64 {
        let raw = unpack_base(self.state.load(Ordering::Acquire)).1;
        raw.saturating_sub(self.accounted() as i64)
    }

    fn accounted(&self) -> u64 {
        self.accounted_suspend
            .load(Ordering::Relaxed)
            .min(i64::MAX as u64)
    }

    /// Adds the time the machine was suspended since the last call to cluster time, at once:
    /// real time passed, and the cluster's clocks moved on by as much. Every reading of
    /// [`Now`](super::Now) calls it first, before anything is measured against
    /// [`ClusterClock::mono_ms`].
    pub fn account_suspend(&self) {
        let suspended = self.source.suspended_ms();
        let before = self.accounted_suspend.load(Ordering::Relaxed);
        if suspended <= before {
            return;
        }
        self.accounted_suspend.store(suspended, Ordering::Relaxed);
        let moved = i64::try_from(suspended - before).unwrap_or(i64::MAX);
        let (generation, raw) = unpack_base(self.state.load(Ordering::Acquire));
        self.state.store(
            pack(generation, clamp_base(raw.saturating_add(moved))),
            Ordering::Release,
        );
    }

    /// This node's wall clock minus its monotonic clock at a reading of both ([`Now`], taken
    /// after [`ClusterClock::account_suspend`]); counts the steps the wall clock took since the
    /// last call (the node core calls it every round).
    ///
    /// [`Now`]: super::Now
    pub fn own_gap(&self, wall_ms: u64, mono_ms: u64) -> i64 {
        let now = gap_of(wall_ms, mono_ms);
        let before = self.last_gap.swap(now, Ordering::Relaxed);
        let moved = now.saturating_sub(before);
        if moved <= -STEP_MS {
            self.rollbacks.fetch_add(1, Ordering::Relaxed);
            self.deepest_rollback_ms
                .fetch_max(moved.unsigned_abs(), Ordering::Relaxed);
        } else if moved >= STEP_MS {
            self.forward_steps.fetch_add(1, Ordering::Relaxed);
        }
        now
    }

    /// Moves cluster time by changing the base. With `jump`, time may go backwards (a new
    /// generation); otherwise readings hold at the high-water mark until time catches up.
    pub fn set_base(&self, base: i64, jump: bool) {
        let (generation, current) = unpack_base(self.state.load(Ordering::Acquire));
        let base = base.saturating_add(self.accounted() as i64);
        if base == current {
            return;
        }
        // Saturating: a wrapped generation would lose every `fetch_max` to the old mark and
        // stop time. Jumps back happen only in warm-ups, a handful per process.
        let generation = if jump && base < current {
            generation.saturating_add(1)
        } else {
            generation
        };
        self.state
            .store(pack(generation, clamp_base(base)), Ordering::Release);
    }

    /// Times the wall clock was seen to step backwards.
    pub fn rollbacks(&self) -> u64 {
        self.rollbacks.load(Ordering::Relaxed)
    }

    /// The largest backwards step seen, in milliseconds.
    pub fn deepest_rollback_ms(&self) -> u64 {
        self.deepest_rollback_ms.load(Ordering::Relaxed)
    }

    /// Times the wall clock was seen to step forwards.
    pub fn forward_steps(&self) -> u64 {
        self.forward_steps.load(Ordering::Relaxed)
    }
}

fn gap<S: TimeSource>(source: &S) -> i64 {
    gap_of(source.wall_ms(), source.mono_ms())
}

fn gap_of(wall: u64, mono: u64) -> i64 {
    if wall >= mono {
        i64::try_from(wall - mono).unwrap_or(i64::MAX)
    } else {
        i64::try_from(mono - wall).map_or(i64::MIN, |d| -d)
    }
}

impl<S: TimeSource> Clock for ClusterClock<S> {
    fn now_ms(&self) -> u64 {
        let (generation, base) = unpack_base(self.state.load(Ordering::Acquire));
        let now = self.source.mono_ms().saturating_add_signed(base) & LOW_MASK;
        let reading = pack(generation, now);
        let mark = self.high_water.load(Ordering::Relaxed);
        if reading > mark {
            // Only a new millisecond writes the shared line, so concurrent readers mostly load.
            let before = self.high_water.fetch_max(reading, Ordering::Relaxed);
            return before.max(reading) & LOW_MASK;
        }
        mark & LOW_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Wall and monotonic clocks set apart, as a stepped wall clock leaves them.
    #[derive(Debug, Default)]
    struct Split {
        wall: AtomicU64,
        mono: AtomicU64,
        suspended: AtomicU64,
    }

    impl TimeSource for Split {
        fn wall_ms(&self) -> u64 {
            self.wall.load(Ordering::Relaxed)
        }
        fn mono_ms(&self) -> u64 {
            self.mono.load(Ordering::Relaxed)
        }
        fn suspended_ms(&self) -> u64 {
            self.suspended.load(Ordering::Relaxed)
        }
    }

    /// The gap at a fresh reading, as the node core takes it once a round.
    fn gap_now(c: &ClusterClock<Arc<Split>>) -> i64 {
        let now = super::super::Now::read_at(c, crate::clock::monotonic_now());
        c.own_gap(now.wall_ms, now.mono_ms)
    }

    fn split(wall: u64, mono: u64) -> Arc<Split> {
        Arc::new(Split {
            wall: AtomicU64::new(wall),
            mono: AtomicU64::new(mono),
            suspended: AtomicU64::new(0),
        })
    }

    #[test]
    fn starts_on_wall_time_and_follows_the_monotonic_clock() {
        let s = split(1_700_000_000_000, 5_000);
        let c = ClusterClock::new(s.clone());
        assert_eq!(c.now_ms(), 1_700_000_000_000);
        // The wall clock steps 5 s ahead: cluster time does not.
        s.wall.fetch_add(5_000, Ordering::Relaxed);
        s.mono.fetch_add(10, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 1_700_000_000_010);
        assert_eq!(gap_now(&c), 1_700_000_000_000 - 5_000 + 4_990);
        assert_eq!(c.forward_steps(), 1);
        // And back by 8 s: counted as a rollback, cluster time untouched.
        s.wall.fetch_sub(8_000, Ordering::Relaxed);
        gap_now(&c);
        assert_eq!((c.rollbacks(), c.deepest_rollback_ms()), (1, 8_000));
        assert_eq!(c.now_ms(), 1_700_000_000_010);
    }

    #[test]
    fn a_slew_back_holds_time_and_a_jump_back_starts_a_generation() {
        let s = split(1_000_000, 0);
        let c = ClusterClock::new(s.clone());
        s.mono.store(100, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 1_000_100);
        // Pulled back 50 ms without a jump: held at the mark until time catches up.
        c.set_base(c.base() - 50, false);
        assert_eq!(c.now_ms(), 1_000_100);
        s.mono.store(151, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 1_000_101);
        // A jump back 8 s goes back at once, and stays monotone from there.
        c.set_base(c.base() - 8_000, true);
        assert_eq!(c.now_ms(), 992_101);
        s.mono.store(152, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 992_102);
        // Forward moves apply at once either way.
        c.set_base(c.base() + 1_000, false);
        assert_eq!(c.now_ms(), 993_102);
    }

    #[test]
    fn a_reader_late_with_the_old_base_cannot_hold_time_after_a_jump() {
        let s = split(1_000_000, 0);
        let c = ClusterClock::new(s.clone());
        let (generation, base) = unpack_base(c.state.load(Ordering::Acquire));
        c.set_base(base - 8_000, true);
        assert_eq!(c.now_ms(), 992_000);
        // A reader that computed its time from the old state publishes it only now.
        let stale = pack(generation, 1_000_000);
        c.high_water.fetch_max(stale, Ordering::Relaxed);
        s.mono.store(1, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 992_001);
    }

    #[test]
    fn negative_and_large_bases_round_trip() {
        for base in [0i64, 1, -1, -5_000, 1_700_000_000_000, -(1 << 46)] {
            let (g, b) = unpack_base(pack(7, clamp_base(base)));
            assert_eq!((g, b), (7, base));
        }
    }

    #[test]
    fn a_suspend_moves_cluster_time_on_as_real_time_moved() {
        let s = split(1_000_000, 500);
        s.suspended.store(7_000, Ordering::Relaxed); // suspended before this process began
        let c = ClusterClock::new(s.clone());
        assert_eq!(c.now_ms(), 1_000_000);
        let (gap, base) = (gap_now(&c), c.base());
        assert_eq!(gap, base, "wall and cluster time agree at start");
        // Suspended 90 s: the wall clock and the suspend counter move on, the monotonic
        // clock does not.
        s.wall.fetch_add(90_000, Ordering::Relaxed);
        s.suspended.fetch_add(90_000, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 1_000_000, "not accounted before the round");
        assert_eq!(gap_now(&c), gap, "no wall step seen: it was a suspend");
        assert_eq!(c.now_ms(), 1_090_000);
        assert_eq!(c.base(), base, "the calibrator's view is unchanged");
        assert_eq!((c.rollbacks(), c.forward_steps()), (0, 0));
        // Steering still moves cluster time by what it asks.
        c.set_base(base + 100, false);
        assert_eq!(c.now_ms(), 1_090_100);
    }

    #[test]
    fn readings_never_go_backwards_across_threads_while_the_base_is_steered() {
        let s = split(1_000_000, 0);
        let c = Arc::new(ClusterClock::new(s.clone()));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..50_000 {
                        let now = c.now_ms();
                        assert!(now >= last, "went backwards: {now} < {last}");
                        last = now;
                    }
                })
            })
            .collect();
        for i in 0..50_000u64 {
            s.mono.store(i / 10, Ordering::Relaxed);
            // Slews back and forth by up to 3 ms, never jumping.
            let base = c.base();
            c.set_base(base + if i % 3 == 0 { -3 } else { 2 }, false);
        }
        for r in readers {
            r.join().unwrap();
        }
    }
}
