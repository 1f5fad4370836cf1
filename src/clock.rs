//! Wall-clock time, the only place limitmesh reads it.
//!
//! Rate windows are aligned to Unix-epoch milliseconds so that every node agrees on bucket
//! boundaries without talking. The core (`window`, `crdt`, `limiter`) never reads a clock: it is
//! handed `now_ms`. Monotonic time for timers and intervals is `tokio::time`, which the
//! simulation controls; wall time goes through [`Clock`], which it cannot.
//!
//! Two guarantees live here:
//! - [`RollbackGuard`] never returns less than it already returned, so a clock stepped backwards
//!   (NTP, a VM resume) never attributes counts to a bucket that is already in the past;
//! - [`Hlc`] stamps replica registers with a hybrid logical clock that stays monotone across
//!   rollbacks and merges.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use thiserror::Error;

/// Monotonic time for timers, intervals and elapsed-time measurements: `tokio::time`, which a
/// simulation drives and `tokio::time::pause` freezes. Every read of a monotonic clock goes
/// through here, as every read of the wall clock goes through [`Clock`].
pub fn monotonic_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// The operating system's wall clock, as is: it can jump backwards.
///
/// On Linux this is `CLOCK_REALTIME_COARSE`: the kernel's wall time as of its last tick, read
/// from the vDSO in a few nanoseconds instead of the ~40 ns of a precise read. It trails real
/// time by at most one tick (1 to 4 ms), which to a window of 100 ms buckets is a skew no
/// larger than NTP leaves between nodes anyway; and the check path reads it on every request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawSystemClock;

impl Clock for RawSystemClock {
    #[cfg(target_os = "linux")]
    fn now_ms(&self) -> u64 {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        // A clock set before 1970 reads as 0; the rollback guard then holds the last good value.
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        secs.saturating_mul(1_000).saturating_add(nanos / 1_000_000)
    }

    #[cfg(not(target_os = "linux"))]
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// Wraps a raw clock so that readings never go backwards.
///
/// Invariant: every value returned is `>=` every value returned before (the high-water mark).
/// While the raw clock is behind the mark, readings stay at the mark, and the first such reading
/// counts one rollback event.
#[derive(Debug, Default)]
pub struct RollbackGuard<C> {
    raw: C,
    high_water: AtomicU64,
    rolled_back: AtomicBool,
    rollbacks: AtomicU64,
    deepest_rollback_ms: AtomicU64,
}

/// The production clock: the system wall clock behind a rollback guard.
pub type SystemClock = RollbackGuard<RawSystemClock>;

impl SystemClock {
    pub fn system() -> Self {
        Self::new(RawSystemClock)
    }
}

impl<C: Clock> RollbackGuard<C> {
    pub fn new(raw: C) -> Self {
        Self {
            raw,
            high_water: AtomicU64::new(0),
            rolled_back: AtomicBool::new(false),
            rollbacks: AtomicU64::new(0),
            deepest_rollback_ms: AtomicU64::new(0),
        }
    }

    /// How many times the raw clock was seen to step backwards.
    pub fn rollbacks(&self) -> u64 {
        self.rollbacks.load(Ordering::Relaxed)
    }

    /// The largest backwards step seen, in milliseconds.
    pub fn deepest_rollback_ms(&self) -> u64 {
        self.deepest_rollback_ms.load(Ordering::Relaxed)
    }

    pub fn raw(&self) -> &C {
        &self.raw
    }

    fn observe(&self, raw_ms: u64) -> u64 {
        let mark = self.high_water.load(Ordering::Relaxed);
        if raw_ms >= mark {
            if raw_ms > mark {
                // Only a new millisecond writes the shared line, so concurrent readers mostly load.
                self.high_water.fetch_max(raw_ms, Ordering::Relaxed);
            }
            if self.rolled_back.load(Ordering::Relaxed) {
                self.rolled_back.store(false, Ordering::Relaxed);
            }
            return raw_ms;
        }
        if !self.rolled_back.swap(true, Ordering::Relaxed) {
            self.rollbacks.fetch_add(1, Ordering::Relaxed);
        }
        self.deepest_rollback_ms
            .fetch_max(mark - raw_ms, Ordering::Relaxed);
        mark
    }
}

impl<C: Clock> Clock for RollbackGuard<C> {
    fn now_ms(&self) -> u64 {
        self.observe(self.raw.now_ms())
    }
}

/// A clock for tests: set or advanced by hand; clones share the same time. It may be set
/// backwards, which is how tests model a raw clock rollback under a [`RollbackGuard`].
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(now_ms: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(now_ms)),
        }
    }

    pub fn set(&self, now_ms: u64) {
        self.now.store(now_ms, Ordering::Relaxed);
    }

    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
}

/// A hybrid-logical-clock timestamp: wall milliseconds in the high 48 bits, a logical counter in
/// the low 16. Ordered as a plain integer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HlcTimestamp(u64);

const LOGICAL_BITS: u32 = 16;
const LOGICAL_MASK: u64 = (1 << LOGICAL_BITS) - 1;
/// Largest physical time an HLC can carry (about the year 10889).
pub const HLC_MAX_PHYSICAL_MS: u64 = u64::MAX >> LOGICAL_BITS;

impl HlcTimestamp {
    pub const ZERO: Self = Self(0);

    pub const fn new(physical_ms: u64, logical: u16) -> Self {
        let physical = if physical_ms > HLC_MAX_PHYSICAL_MS {
            HLC_MAX_PHYSICAL_MS
        } else {
            physical_ms
        };
        Self((physical << LOGICAL_BITS) | logical as u64)
    }

    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    pub const fn to_bits(self) -> u64 {
        self.0
    }

    pub const fn physical_ms(self) -> u64 {
        self.0 >> LOGICAL_BITS
    }

    pub const fn logical(self) -> u16 {
        (self.0 & LOGICAL_MASK) as u16
    }

    /// The next timestamp after `self` at the same physical time; when the logical counter is
    /// exhausted it borrows the next millisecond, so the result is always greater.
    fn tick(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum HlcError {
    #[error(
        "remote timestamp {remote_ms} ms is {ahead_ms} ms ahead of local wall time (limit {max_drift_ms} ms)"
    )]
    TooFarAhead {
        remote_ms: u64,
        ahead_ms: u64,
        max_drift_ms: u64,
    },
}

/// A hybrid logical clock (Kulkarni et al.). Not shared: one owner stamps what it emits.
///
/// Invariant: successive results of [`Hlc::now`] and [`Hlc::update`] strictly increase, whatever
/// the wall clock does, so a register emitted later always carries a larger stamp.
#[derive(Debug, Clone)]
pub struct Hlc {
    last: HlcTimestamp,
    max_drift_ms: u64,
}

impl Hlc {
    /// `max_drift_ms` bounds how far ahead of local wall time a remote stamp may pull this clock;
    /// a peer with a wildly wrong clock is refused instead of dragging everyone along.
    pub fn new(max_drift_ms: u64) -> Self {
        Self {
            last: HlcTimestamp::ZERO,
            max_drift_ms,
        }
    }

    pub fn last(&self) -> HlcTimestamp {
        self.last
    }

    /// A stamp for a local event at wall time `wall_ms`.
    pub fn now(&mut self, wall_ms: u64) -> HlcTimestamp {
        let wall = HlcTimestamp::new(wall_ms, 0);
        self.last = if wall > self.last {
            wall
        } else {
            self.last.tick()
        };
        self.last
    }

    /// Checks a remote stamp seen at local wall time `wall_ms`: refused if it is further ahead
    /// than the allowed drift.
    ///
    /// The stamp does not pull this clock forward. Registers are ordered only against others of
    /// the same origin, so nothing needs one origin's stamps to follow another's; and a clock
    /// that followed a fast peer would carry that peer's error into every register it stamps
    /// from then on, until nodes with correct clocks refused them as from the future.
    pub fn check_remote(&self, remote: HlcTimestamp, wall_ms: u64) -> Result<(), HlcError> {
        let remote_ms = remote.physical_ms();
        if remote_ms > wall_ms.saturating_add(self.max_drift_ms) {
            return Err(HlcError::TooFarAhead {
                remote_ms,
                ahead_ms: remote_ms - wall_ms,
                max_drift_ms: self.max_drift_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_guard_holds_high_water_mark_and_counts_events() {
        let raw = ManualClock::new(10_000);
        let clock = RollbackGuard::new(raw.clone());
        assert_eq!(clock.now_ms(), 10_000);
        raw.set(12_000);
        assert_eq!(clock.now_ms(), 12_000);

        // Step back 5 s: readings stay at the mark; one event, however many reads.
        raw.set(7_000);
        assert_eq!(clock.now_ms(), 12_000);
        raw.set(8_000);
        assert_eq!(clock.now_ms(), 12_000);
        assert_eq!(clock.rollbacks(), 1);
        assert_eq!(clock.deepest_rollback_ms(), 5_000);

        // Raw time catches up and passes the mark: readings follow it again.
        raw.set(12_500);
        assert_eq!(clock.now_ms(), 12_500);
        raw.set(12_400);
        assert_eq!(clock.now_ms(), 12_500);
        assert_eq!(clock.rollbacks(), 2);
    }

    #[test]
    fn rollback_guard_is_monotone_across_threads() {
        let raw = ManualClock::new(1_000);
        let clock = Arc::new(RollbackGuard::new(raw.clone()));
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let clock = clock.clone();
                std::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..20_000 {
                        let now = clock.now_ms();
                        assert!(now >= last, "went backwards: {now} < {last}");
                        last = now;
                    }
                })
            })
            .collect();
        for i in 0..20_000u64 {
            // A raw clock that jumps back and forth.
            raw.set(1_000 + (i % 97) * 3 + (i / 1000));
        }
        for r in readers {
            r.join().unwrap();
        }
    }

    #[test]
    fn system_clock_agrees_with_the_precise_clock() {
        let precise = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        };
        let before = precise();
        let now = SystemClock::system().now_ms();
        let after = precise();
        // The coarse clock trails by at most a kernel tick (10 ms at HZ=100).
        assert!(
            now + 10 >= before && now <= after,
            "{before} <= {now} <= {after}"
        );
    }

    #[test]
    fn hlc_now_is_strictly_monotone_across_rollback() {
        let mut hlc = Hlc::new(60_000);
        let a = hlc.now(5_000);
        let b = hlc.now(5_000);
        let c = hlc.now(4_000); // wall clock rolled back
        let d = hlc.now(6_000);
        assert!(a < b && b < c && c < d, "{a:?} {b:?} {c:?} {d:?}");
        assert_eq!(c.physical_ms(), 5_000);
        assert_eq!(c.logical(), 2);
        assert_eq!(d, HlcTimestamp::new(6_000, 0));
    }

    #[test]
    fn hlc_logical_overflow_borrows_the_next_millisecond() {
        let mut hlc = Hlc::new(0);
        let mut last = hlc.now(100);
        for _ in 0..70_000 {
            let next = hlc.now(100);
            assert!(next > last);
            last = next;
        }
        assert_eq!(last.physical_ms(), 101);
    }

    #[test]
    fn a_remote_stamp_ahead_does_not_pull_this_clock() {
        let mut hlc = Hlc::new(10_000);
        hlc.now(10_000);
        // A peer 8 s fast: accepted, but this clock's next stamps stay on its own time.
        hlc.check_remote(HlcTimestamp::new(18_000, 3), 10_000)
            .unwrap();
        assert_eq!(hlc.now(10_001), HlcTimestamp::new(10_001, 0));
    }

    #[test]
    fn hlc_refuses_remote_stamps_beyond_drift() {
        let mut hlc = Hlc::new(1_000);
        let before = hlc.now(10_000);
        let err = hlc
            .check_remote(HlcTimestamp::new(20_000, 0), 10_000)
            .unwrap_err();
        assert_eq!(
            err,
            HlcError::TooFarAhead {
                remote_ms: 20_000,
                ahead_ms: 10_000,
                max_drift_ms: 1_000
            }
        );
        assert_eq!(
            hlc.last(),
            before,
            "a refused stamp must not move the clock"
        );
    }

    #[test]
    fn hlc_physical_time_saturates_instead_of_wrapping() {
        let ts = HlcTimestamp::new(u64::MAX, 3);
        assert_eq!(ts.physical_ms(), HLC_MAX_PHYSICAL_MS);
        assert_eq!(ts.logical(), 3);
    }
}
