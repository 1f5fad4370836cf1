//! What reads of a ring return: a snapshot by age, the hot path's folded usage, and the
//! offered totals.

use super::super::estimate::AgeProfile;

/// What a ring holds at one instant, by age (0 = current bucket).
#[derive(Debug, Clone)]
pub struct RingSnapshot {
    /// The epoch the snapshot was taken in.
    pub epoch: u64,
    pub admitted: AgeProfile,
    /// Admitted plus rejected.
    pub offered: AgeProfile,
}

impl RingSnapshot {
    /// `(epoch, admitted)` for every bucket with admissions, newest first.
    pub fn admitted_buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        Self::buckets(self.epoch, &self.admitted)
    }

    /// `(epoch, admitted + rejected)` for every bucket with any traffic, newest first.
    pub fn offered_buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        Self::buckets(self.epoch, &self.offered)
    }

    fn buckets(epoch: u64, profile: &AgeProfile) -> impl Iterator<Item = (u64, u64)> + '_ {
        profile
            .by_age()
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(move |(age, c)| (epoch - age as u64, *c))
    }

    pub fn is_empty(&self) -> bool {
        self.offered.is_empty()
    }

    /// The newest epoch with any traffic.
    pub fn newest_active_epoch(&self) -> Option<u64> {
        self.offered_buckets().next().map(|(e, _)| e)
    }
}

/// The offered load of a ring ([`LocalRing::offered_totals`](super::LocalRing::offered_totals)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferedTotals {
    /// The newest epoch with any traffic ([`RingSnapshot::newest_active_epoch`]).
    pub newest_epoch: Option<u64>,
    /// Admitted plus rejected, over every live bucket.
    pub total: u64,
}

/// A ring folded into the few numbers a decision needs, in one pass and without allocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RingUsage {
    /// The epoch the read was taken in.
    pub epoch: u64,
    /// Sliding estimate of admissions.
    pub admitted: f64,
    /// Sliding estimate of admissions plus refusals.
    pub offered: f64,
    /// The part of `offered` that comes from the bucket straddling the window's start (it
    /// fades away during the current bucket).
    pub straddle_offered: f64,
    /// Admissions counted in the current bucket (always at full weight).
    pub current: u32,
    /// Admissions plus refusals in the current bucket.
    pub current_offered: u64,
    /// Admissions plus refusals in the full buckets of the recent span (ages `1..recent`; see
    /// [`LocalRing::usage`](super::LocalRing::usage)).
    pub recent_offered: u64,
    /// Admissions plus refusals in the full buckets before the recent span (ages
    /// `recent..B`; the straddling bucket is not included).
    pub older_offered: u64,
    /// Age in buckets of the newest bucket with admissions.
    pub newest_admitted_age: Option<u64>,
    /// Age in buckets of the oldest bucket with any traffic.
    pub oldest_active_age: Option<u64>,
    /// Whether the window saw any traffic at all.
    pub active: bool,
}
