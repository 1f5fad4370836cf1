//! The hybrid logical clock that stamps every register an origin emits.

use thiserror::Error;

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
/// Invariant: successive results of [`Hlc::now`] strictly increase, whatever the clock does, so
/// a register emitted later always carries a larger stamp. A remote stamp never pulls it
/// forward (see [`Hlc::check_remote`]).
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
