//! Time, and the only place limitmesh reads a clock.
//!
//! Rate windows are aligned to Unix-epoch milliseconds so that every node agrees on bucket
//! boundaries without talking. The core (`window`, `crdt`, `limiter`) never reads a clock: it is
//! handed `now_ms`, which is **cluster time** ([`ClusterClock`]): a monotonic clock steered to
//! the median of the members' wall clocks ([`calibrator`]), so that a minority of wrong clocks
//! is outvoted and a wrong clock's own node is corrected. Timers and intervals run on
//! `tokio::time`, which the simulation controls; raw readings of the system's clocks come from a
//! [`TimeSource`], which it replaces.
//!
//! Guarantees that live here:
//! - cluster time never goes backwards while a node serves, whatever its wall clock does;
//! - [`RollbackGuard`] never returns less than it already returned, for tests and tools that
//!   want a plain monotone wall clock.
//!
//! The hybrid logical clock that stamps registers is part of the CRDT (`crdt::Hlc`): it is
//! handed the time like the rest of the core.

pub mod calibrator;
mod cluster;
mod now;

pub use cluster::ClusterClock;
pub use now::Now;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// The raw clocks a [`ClusterClock`] is built on.
pub trait TimeSource: Send + Sync + 'static {
    /// Wall time, milliseconds since the Unix epoch. It may step either way at any moment.
    fn wall_ms(&self) -> u64;
    /// Milliseconds from an arbitrary origin that never step backwards (though their rate may
    /// differ a little from real time). Cheap: the check path reads it on every request.
    fn mono_ms(&self) -> u64;
    /// How long the machine has been suspended in all, which `mono_ms` does not count and a
    /// [`ClusterClock`] adds to cluster time at each reading of [`Now`] (0 where nothing
    /// suspends).
    fn suspended_ms(&self) -> u64 {
        0
    }
}

impl<T: TimeSource + ?Sized> TimeSource for Arc<T> {
    fn wall_ms(&self) -> u64 {
        (**self).wall_ms()
    }
    fn mono_ms(&self) -> u64 {
        (**self).mono_ms()
    }
    fn suspended_ms(&self) -> u64 {
        (**self).suspended_ms()
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
        // A clock set before 1970 reads as 0: a step back like any other, outvoted by the peers.
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

impl TimeSource for RawSystemClock {
    fn wall_ms(&self) -> u64 {
        self.now_ms()
    }

    /// `CLOCK_MONOTONIC_COARSE`, as cheap as the wall clock; elsewhere, `Instant`.
    #[cfg(target_os = "linux")]
    fn mono_ms(&self) -> u64 {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        secs.saturating_mul(1_000).saturating_add(nanos / 1_000_000)
    }

    /// `CLOCK_BOOTTIME` runs on through a suspend, `CLOCK_MONOTONIC` does not. Too slow for
    /// every check (about 25 ns), fine once a round.
    #[cfg(target_os = "linux")]
    fn suspended_ms(&self) -> u64 {
        let ms = |id| {
            let ts = rustix::time::clock_gettime(id);
            let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
            let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
            secs.saturating_mul(1_000).saturating_add(nanos / 1_000_000)
        };
        let monotonic = ms(rustix::time::ClockId::Monotonic);
        ms(rustix::time::ClockId::Boottime).saturating_sub(monotonic)
    }

    #[cfg(not(target_os = "linux"))]
    fn mono_ms(&self) -> u64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(std::time::Instant::now);
        u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// The system's clocks with the wall clock moved by a fixed amount: how a test or a drill runs
/// one node with a wrong clock (`LIMITMESH_TEST_CLOCK_OFFSET_MS`, see the README).
#[derive(Debug, Clone, Copy, Default)]
pub struct OffsetSystemClock {
    pub offset_ms: i64,
}

impl TimeSource for OffsetSystemClock {
    fn wall_ms(&self) -> u64 {
        RawSystemClock
            .wall_ms()
            .saturating_add_signed(self.offset_ms)
    }

    fn mono_ms(&self) -> u64 {
        RawSystemClock.mono_ms()
    }

    fn suspended_ms(&self) -> u64 {
        RawSystemClock.suspended_ms()
    }
}

/// The production clock: cluster time over the system's clocks.
pub type SystemClock = ClusterClock<OffsetSystemClock>;

impl SystemClock {
    /// Cluster time over the system's clocks as they are.
    pub fn system() -> Self {
        Self::new(OffsetSystemClock::default())
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

/// As a time source, both clocks read the same value: a manual clock never steps apart from
/// its monotonic twin unless set backwards.
impl TimeSource for ManualClock {
    fn wall_ms(&self) -> u64 {
        self.now_ms()
    }

    fn mono_ms(&self) -> u64 {
        self.now_ms()
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

    /// A wall clock stepped back must not put counts into a bucket that already passed: the
    /// rollback guard holds time, so the count lands in the current bucket and expires with it.
    #[test]
    fn a_rollback_never_counts_into_a_past_bucket() {
        use crate::limiter::{
            CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig, OriginId,
        };
        use crate::window::WindowSpec;
        const T0: u64 = 1_700_000_000_000;
        let limiter = Limiter::new(
            LimiterConfig::default(),
            OriginId(1),
            KeyHasher::from_secret(b"rollback"),
        );
        let limit = Limit {
            max: 10,
            window: WindowSpec::with_default_buckets(1_000).unwrap(),
        };
        let check = |cost: u32, now: u64| {
            let item = [CheckItem {
                key: b"k",
                limit,
                cost,
            }];
            let req = CheckRequest {
                items: &item,
                dry_run: false,
            };
            limiter.check(&req, now).unwrap().allowed
        };
        let raw = ManualClock::new(T0 + 550);
        let clock = RollbackGuard::new(raw.clone());
        assert!(check(4, clock.now_ms()));
        raw.set(T0 - 5_000); // five seconds back
        let now = clock.now_ms();
        assert_eq!(now, T0 + 550);
        assert!(check(6, now));
        assert_eq!(clock.rollbacks(), 1);
        // Had the 6 gone to T0 - 5000 they would be gone already: all 10 are in the bucket of
        // T0 + 500, which leaves the window at T0 + 1500.
        assert!(!check(1, T0 + 1_499));
        assert!(check(1, T0 + 1_600));
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
        // The coarse clock trails by at most a kernel tick (10 ms at HZ=100); whole
        // milliseconds of two clocks may differ by one more.
        assert!(
            now + 10 >= before && now <= after + 1,
            "{before} <= {now} <= {after}"
        );
    }
}
