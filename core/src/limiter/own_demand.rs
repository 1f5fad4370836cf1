//! This node's demand for a window where its share binds: the one it publishes, and the one it
//! divides the limit by (ALGORITHM.md §4, "A binding share").
//!
//! Shares sum to the limit only while every node divides it by the same demands, and a node's
//! count holds what it admitted under its share of the last window, not its share of now. Where
//! shares bind (a node refusing much of its load), two things kept them from both, and the
//! whole-request credit had to stay small to hold the over-admission p99 at 5 %:
//!
//! - **Chance.** A node's demand is a Poisson count over the window: at 20 requests a window
//!   it moves by a fifth from one second to the next with the load steady. Each move shifts
//!   every share; a node whose share rose takes the rise at once, one whose share fell keeps
//!   what it admitted until it leaves the window. So a binding share publishes a demand that
//!   moves toward its measure with a time constant of [`DEMAND_SMOOTHING_MS`] instead of
//!   following every draw, as long as the move is within chance ([`CHANCE_SIGMAS`]).
//! - **The owner's round.** In a large cluster a node hears of the others from the window's
//!   owner, whose sum holds the registers it had when it made the sum: this node's demand as
//!   of its emission before that, the others' likewise. Dividing by its newer demand, the node
//!   used a vector nobody else had, one round apart. So a node whose share bound at its last
//!   emission counts its own demand as the owner had it: the one it published before, while
//!   the newest sum it holds is older than its last emission.
//!
//! In `fleet` at 50 nodes, with the credit at 0.65 of a request, the second alone took the
//! over-admission p99 from 5 % to 2 %.

use std::sync::atomic::{AtomicU64, Ordering};

/// The time constant of the demand a binding share publishes: it moves `1 − e^(−Δ/τ)` of the
/// way to its measure at an emission `Δ` after the last, 28 % at a round of 200 ms.
pub const DEMAND_SMOOTHING_MS: f64 = 600.0;

/// How far a demand may move from the one published, in standard deviations of a Poisson
/// count of it, and still be smoothed: further is the load moving, which a share follows at
/// once. Smoothed, a burst's ramp moved shares for a second, each node's demand rising from
/// where its first emission caught the burst (5-node `burst`: over-admission mean 0.90 %,
/// p99 5.2 %; 0.13 % and 0.4 % with this).
pub const CHANCE_SIGMAS: f64 = 3.0;

/// Whether a window's share binds: it refused more than a fifth of its load over the window.
/// A node that refused a few requests at a chance surge of a window far from its limit is not
/// held to its share; one offered twice its share refuses half.
pub fn share_binds(offered: u64, admitted: u64) -> bool {
    offered.saturating_mul(4) > admitted.saturating_mul(5)
}

/// The demand to publish for a window whose share binds, `measured` now, `published` at the
/// last emission `elapsed_ms` ago: part of the way, and at least one request of it, so that a
/// small demand does not stick within rounding of where it was; all of it past
/// [`CHANCE_SIGMAS`].
pub fn smoothed_demand(published: u32, measured: u32, elapsed_ms: u64) -> u32 {
    let gap = (f64::from(measured) - f64::from(published)).abs();
    if gap > CHANCE_SIGMAS * (f64::from(published) + 1.0).sqrt() {
        // Past what chance moves a Poisson count: the load moved.
        return measured;
    }
    if elapsed_ms == 0 || published == measured {
        // A second emission in the same round (a calm round's full snapshot): the same demand.
        return published;
    }
    let part = 1.0 - (-(elapsed_ms as f64) / DEMAND_SMOOTHING_MS).exp();
    let step = ((f64::from(measured) - f64::from(published)) * part)
        .abs()
        .ceil() as u32;
    if measured > published {
        published.saturating_add(step.max(1)).min(measured)
    } else {
        published.saturating_sub(step.max(1)).max(measured)
    }
}

/// `binding (1) | previous demand + 1 (31) | emitted at, low 32 bits of its ms (32)`.
const BINDING: u64 = 1 << 63;
const PREVIOUS_SHIFT: u32 = 32;
const PREVIOUS_MASK: u64 = (1 << 31) - 1;
const AT_MASK: u64 = (1 << 32) - 1;

/// The last emission of a window by this node: when, whether its share bound then, and the
/// demand it published before (its current one is the ring's). One word; the time is kept
/// modulo 2^32 ms (49 days) and compared within half of that, far past any round.
#[derive(Debug, Default)]
pub(crate) struct LastEmission(AtomicU64);

impl LastEmission {
    /// Records an emission at `at_ms` (cluster time, as the owners stamp their sums) that
    /// replaced `previous` (`None`: no demand was published). A second emission at the same
    /// instant is the same round's and keeps the demand before it. Written under the
    /// replication lock only.
    ///
    /// Every emission is recorded, including those the owner does not get (a minor part's
    /// register on a round it skips, a snapshot for anti-entropy or a newcomer), and one sent
    /// just before the owner's round may be in flight when the sum is made: the demand counted
    /// is then one emission off the owner's, as it was for every emission before this rule.
    pub fn record(&self, previous: Option<u32>, at_ms: u64, binding: bool) {
        let word = self.0.load(Ordering::Acquire);
        let previous_bits = if word != 0 && word & AT_MASK == at_ms & AT_MASK {
            (word >> PREVIOUS_SHIFT) & PREVIOUS_MASK
        } else {
            previous.map_or(0, |d| u64::from(d.min(crate::window::MAX_PUBLISHED)) + 1)
        };
        let flag = if binding { BINDING } else { 0 };
        self.0.store(
            flag | (previous_bits << PREVIOUS_SHIFT) | (at_ms & AT_MASK),
            Ordering::Release,
        );
    }

    /// How long before `now_ms` the last emission was, if there was one.
    pub fn elapsed_ms(&self, now_ms: u64) -> Option<u64> {
        let word = self.0.load(Ordering::Acquire);
        (word != 0).then(|| (now_ms.wrapping_sub(word & AT_MASK)) & AT_MASK)
    }

    /// The demand this node had published when a sum emitted at `sum_ms` was made, given
    /// `current` (the one it publishes now): the previous one if its share bound at the last
    /// emission and that emission is not older than the sum, `current` otherwise.
    pub fn demand_as_of(&self, current: u32, sum_ms: u64) -> u32 {
        let word = self.0.load(Ordering::Acquire);
        if word & BINDING == 0 {
            return current;
        }
        let previous = ((word >> PREVIOUS_SHIFT) & PREVIOUS_MASK).checked_sub(1);
        // The emission's time minus the sum's, modulo 2^32: under 2^31 is "not before it".
        let ahead = (word & AT_MASK).wrapping_sub(sum_ms & AT_MASK) & AT_MASK;
        match previous {
            Some(previous) if ahead < 1 << 31 => previous as u32,
            _ => current,
        }
    }

    /// What [`LastEmission::demand_as_of`] reads besides the time, to tell whether an
    /// emission changed it: nothing unless the share binds.
    pub fn word(&self) -> u64 {
        let word = self.0.load(Ordering::Acquire);
        if word & BINDING == 0 {
            0
        } else {
            word & !AT_MASK
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_share_is_a_refusal_of_more_than_a_fifth() {
        assert!(!share_binds(0, 0));
        assert!(!share_binds(100, 100));
        assert!(!share_binds(125, 100), "a fifth refused exactly");
        assert!(share_binds(126, 100));
        assert!(share_binds(200, 100));
        assert!(share_binds(u64::MAX, 1), "no overflow");
    }

    #[test]
    fn a_smoothed_demand_moves_part_way_and_at_least_one_request() {
        // A round of 200 ms moves 28 % of the way, within chance (3 × √101 ≈ 30 here).
        assert_eq!(smoothed_demand(100, 120, 200), 106);
        assert_eq!(smoothed_demand(120, 100, 200), 114);
        // Past chance, the whole way.
        assert_eq!(smoothed_demand(100, 131, 200), 131);
        assert_eq!(smoothed_demand(100, 69, 200), 69);
        // Never past the measure, and never stuck within rounding of it.
        assert_eq!(smoothed_demand(10, 11, 200), 11);
        assert_eq!(smoothed_demand(11, 10, 200), 10);
        assert_eq!(smoothed_demand(10, 12, 200), 11);
        // A long gap goes the whole way; no time, none of it.
        assert_eq!(smoothed_demand(100, 120, 60_000), 120);
        assert_eq!(smoothed_demand(100, 120, 0), 100);
        assert_eq!(smoothed_demand(100, 131, 0), 131, "past chance at once");
        assert_eq!(smoothed_demand(u32::MAX - 1, u32::MAX, 1), u32::MAX);
        assert_eq!(smoothed_demand(1, 0, 1), 0);
    }

    #[test]
    fn the_demand_counted_is_the_one_the_owner_had_when_it_made_its_sum() {
        let last = LastEmission::default();
        assert_eq!(last.elapsed_ms(1_000), None);
        assert_eq!(last.demand_as_of(50, 900), 50, "nothing recorded");
        last.record(Some(40), 1_000, true);
        assert_eq!(last.elapsed_ms(1_200), Some(200));
        // A sum made before this emission (or at the same instant: in flight) holds the one
        // before it; a sum made after holds this one.
        assert_eq!(last.demand_as_of(50, 800), 40);
        assert_eq!(last.demand_as_of(50, 1_000), 40);
        assert_eq!(last.demand_as_of(50, 1_001), 50);
        // A share that did not bind at the last emission counts its demand as published.
        last.record(Some(50), 1_200, false);
        assert_eq!(last.demand_as_of(60, 1_000), 60);
        // Nothing published before: the current one.
        last.record(None, 1_400, true);
        assert_eq!(last.demand_as_of(60, 1_000), 60);
    }

    #[test]
    fn a_second_emission_in_the_same_round_keeps_the_demand_before_the_round() {
        let last = LastEmission::default();
        last.record(Some(40), 1_000, true);
        last.record(Some(55), 1_000, true);
        assert_eq!(last.demand_as_of(55, 900), 40);
        last.record(Some(55), 1_200, true);
        assert_eq!(last.demand_as_of(60, 1_100), 55);
    }

    #[test]
    fn emission_times_compare_across_the_wrap_of_their_low_bits() {
        let last = LastEmission::default();
        let at = (1u64 << 32) + 100; // just past a wrap of the low 32 bits
        last.record(Some(40), at, true);
        assert_eq!(last.demand_as_of(50, at - 300), 40, "a sum before the wrap");
        assert_eq!(last.demand_as_of(50, at + 1), 50);
        assert_eq!(last.elapsed_ms(at + 200), Some(200));
        // The largest demand a ring records fits.
        last.record(Some(crate::window::MAX_PUBLISHED), at + 200, true);
        assert_eq!(
            last.demand_as_of(1, at),
            crate::window::MAX_PUBLISHED,
            "not truncated"
        );
    }
}
