//! This node's demand for a window: the one it publishes where its share binds, the one it
//! divides the limit by (ALGORITHM.md §4, "A binding share"), and its count over a process's
//! first window scaled to the whole (ALGORITHM.md §9, "A first window's demand").
//!
//! Shares sum to the limit only while every node divides it by the same demands, and a node's
//! count holds what it admitted under its share of the last window, not its share of now. Where
//! shares bind (a node refusing much of its load), two things keep them from both, and every
//! share that drifts past its part of the limit leaves less room for the whole-request credit
//! within the over-admission p99 of 5 %:
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
//!   would use a vector nobody else had, one round apart. So a node whose share bound at its
//!   last emission counts its own demand as the owner had it: the one it published before,
//!   while the newest sum it holds is older than its last emission.
//!
//! Pinned by `a_smoothed_demand_moves_part_way_and_at_least_one_request`,
//! `the_demand_counted_is_the_one_the_owner_had_when_it_made_its_sum` (below) and
//! `a_binding_share_divides_by_the_demand_the_owners_sum_was_made_with`
//! (`limiter/tests/cluster.rs`); the bars they buy in a fleet by
//! `a_fleet_in_owner_mode_uses_its_limits_within_the_over_admission_bars` (`sim/tests/fleet.rs`).

use crate::window::{RingSnapshot, WindowSpec};

/// The time constant of the demand a binding share publishes: it moves `1 − e^(−Δ/τ)` of the
/// way to its measure at an emission `Δ` after the last, 28 % at a round of 200 ms.
pub const DEMAND_SMOOTHING_MS: f64 = 600.0;

/// How far a demand may move from the one published, in standard deviations of a Poisson
/// count of it, and still be smoothed: further is the load moving, which a share follows at
/// once. Smoothed, a burst's ramp would move shares for a second, each node's demand rising
/// from where its first emission caught the burst, and the shares of the nodes the burst
/// reached first would sum past the limit meanwhile. The burst's bound is pinned by
/// `burst_from_idle` (`sim/tests/faults.rs`); what the threshold adds to it is not pinned by a
/// test.
pub const CHANCE_SIGMAS: f64 = 3.0;

/// The most a demand counted over part of a window is scaled up to the whole
/// ([`whole_window_demand`]): a count over the first few milliseconds is mostly chance.
pub const MAX_WHOLE_WINDOW_SCALE: f64 = 5.0;

/// The longest window whose demand is scaled to the whole after a start
/// ([`span_counted_ms`]). A restart leaves its downtime and warm-up uncounted, seconds: most
/// of a one-second window, a small part of a minute's. And the longer the window, the more of
/// what a count over its first part holds is traffic that began after the start, which the
/// window never had before: a tenant that appears an hour after a restart would publish five
/// times its demand for the rest of a day.
pub const MAX_SCALED_WINDOW_MS: u64 = 10_000;

/// How much of the window `snap` was taken in (at `now_ms`) this process has counted the
/// offers of, for [`whole_window_demand`]: `observed_ms` (how long it has counted anything,
/// `Limiter::start_observing`) where the window is short and its traffic here was there from
/// the start of counting, which says it was there before too: in the bucket counting began
/// in, or in the next if counting began in that bucket's second half (too short a span to
/// expect traffic in); otherwise the whole window.
pub fn span_counted_ms(
    snap: &RingSnapshot,
    spec: &WindowSpec,
    now_ms: u64,
    observed_ms: u64,
) -> u64 {
    if observed_ms >= spec.window_ms() || spec.window_ms() > MAX_SCALED_WINDOW_MS {
        return spec.window_ms();
    }
    let began_ms = now_ms.saturating_sub(observed_ms);
    let began_epoch = spec.epoch(began_ms);
    let first = snap.epoch.saturating_sub(began_epoch);
    let first_was_short =
        began_ms.saturating_sub(spec.epoch_start_ms(began_epoch)) > spec.bucket_ms() / 2;
    let by_age = snap.offered.by_age();
    let offered_at = |age: u64| {
        usize::try_from(age)
            .ok()
            .and_then(|age| by_age.get(age))
            .is_some_and(|offered| *offered > 0)
    };
    if offered_at(first) || (first_was_short && first > 0 && offered_at(first - 1)) {
        observed_ms
    } else {
        spec.window_ms()
    }
}

/// The demand of a window whose span this process has counted only `counted_ms` of
/// ([`span_counted_ms`]): `offered` over that part, scaled to the whole window, by at most
/// [`MAX_WHOLE_WINDOW_SCALE`]. What this process was offered before it counted (it started,
/// or its warm-up refused without counting), it does not know: counting it as nothing made a
/// restarted node publish a fraction of its demand for a window while its old process's
/// demand lapsed, and its peers took the rest. Counted a whole window: the count as it is.
pub fn whole_window_demand(offered: u32, window_ms: u64, counted_ms: u64) -> u32 {
    let scale = window_scale(window_ms, counted_ms);
    if scale <= 1.0 {
        return offered;
    }
    (f64::from(offered) * scale)
        .ceil()
        .min(f64::from(crate::window::MAX_PUBLISHED)) as u32
}

/// What [`whole_window_demand`] scales a count over `counted_ms` of a window by: the window
/// over the part counted, at most [`MAX_WHOLE_WINDOW_SCALE`]; 1 once the whole is counted.
pub fn window_scale(window_ms: u64, counted_ms: u64) -> f64 {
    if counted_ms >= window_ms {
        return 1.0;
    }
    (window_ms as f64 / counted_ms.max(1) as f64).min(MAX_WHOLE_WINDOW_SCALE)
}

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
///
/// `scale` is what the measure was scaled by ([`window_scale`], 1 but in a process's first
/// window): a Poisson count scaled by `s` spreads `√s` times as wide.
pub fn smoothed_demand(published: u32, measured: u32, elapsed_ms: u64, scale: f64) -> u32 {
    let gap = (f64::from(measured) - f64::from(published)).abs();
    if gap > CHANCE_SIGMAS * (scale.max(1.0) * (f64::from(published) + 1.0)).sqrt() {
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

/// This node's last emission of a window, in the 20 bits of the window's shape word that it
/// keeps it in (`WindowState`: a window stays 128 bytes, and a key under 512 bytes of memory
/// at five origins): `binding (1) | emitted at, in 4 ms units modulo 256 (8) | the demand
/// published before it minus the one published by it (11, two's complement)`. A demand that
/// moved by more than 1 023 in one emission keeps no previous one, and counts as published
/// (the node then divides by its newest demand, one emission ahead of the owner's sum).
///
/// Times compare within half the 1 024 ms the units span, which is more than the round
/// between a binding share's emissions (every round while its ring changes) and its owner's
/// sums (every round while the window refuses). Past it they alias: a sum more than 512 ms
/// older than the emission, or an owner whose cluster time is that far off, may count either
/// demand; an emission 1 024 ms after the last reads as the same round (and keeps the demand
/// before that one); and the smoothing step after a binding share's traffic paused for more
/// than a second is taken for the gap modulo 1 024 ms (none at 2 048 ms). Either demand is
/// one this node published; what aliasing costs is the consistency this rule is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LastEmission(u32);

/// The bits [`LastEmission`] takes.
pub(crate) const EMISSION_BITS: u32 = 20;
const BINDING: u32 = 1 << 19;
const AT_SHIFT: u32 = 11;
const AT_UNITS: u64 = 256;
const AT_UNIT_MS: u64 = 4;
const DELTA_MASK: u32 = (1 << 11) - 1;
/// −1 024: no previous demand.
const NO_DELTA: u32 = 1 << 10;
const DELTA_MAX: i64 = (1 << 10) - 1;

impl LastEmission {
    /// What readers find while an emission is being recorded: not binding, so the demand
    /// counted is the one published.
    pub const PENDING: Self = Self(0);

    pub fn from_bits(bits: u32) -> Self {
        Self(bits & ((1 << EMISSION_BITS) - 1))
    }

    pub fn bits(self) -> u32 {
        self.0
    }

    fn at_units(at_ms: u64) -> u32 {
        ((at_ms / AT_UNIT_MS) % AT_UNITS) as u32
    }

    fn at(self) -> u32 {
        (self.0 >> AT_SHIFT) & (AT_UNITS as u32 - 1)
    }

    /// The demand published before this emission, given the one published by it.
    fn previous(self, current: u32) -> Option<u32> {
        let raw = self.0 & DELTA_MASK;
        if raw == NO_DELTA {
            return None;
        }
        // Sign-extend the 11 bits.
        let delta = i64::from(((raw << 21) as i32) >> 21);
        u32::try_from((i64::from(current) + delta).max(0)).ok()
    }

    /// The record of an emission at `at_ms` (cluster time, as the owners stamp their sums)
    /// that published `demand` where `previous` was published (`None`: nothing was), after
    /// `self`. A second emission in the same 4 ms is the same round's and keeps the demand
    /// before the round.
    ///
    /// Every emission is recorded, including those the owner does not get (a minor part's
    /// register on a round it skips, a snapshot for anti-entropy or a newcomer), and one sent
    /// just before the owner's round may be in flight when the sum is made: the demand counted
    /// is then one emission off the owner's, the same as with no record at all.
    pub fn after(self, previous: Option<u32>, demand: u32, at_ms: u64, binding: bool) -> Self {
        let at = Self::at_units(at_ms);
        let before = match previous {
            Some(p) if self != Self::PENDING && self.at() == at => self.previous(p),
            p => p,
        };
        let delta = before
            .map(|b| i64::from(b) - i64::from(demand))
            .filter(|d| d.abs() <= DELTA_MAX)
            .map_or(NO_DELTA, |d| (d as i32 as u32) & DELTA_MASK);
        let flag = if binding { BINDING } else { 0 };
        Self(flag | (at << AT_SHIFT) | delta)
    }

    /// How long before `now_ms` this emission was, to 4 ms and modulo 1 024 ms.
    pub fn elapsed_ms(self, now_ms: u64) -> u64 {
        let now = u64::from(Self::at_units(now_ms));
        (now + AT_UNITS - u64::from(self.at())) % AT_UNITS * AT_UNIT_MS
    }

    /// The demand this node had published when a sum emitted at `sum_ms` was made, given
    /// `current` (the one it publishes now): the previous one if its share bound at this
    /// emission and the emission is not older than the sum, `current` otherwise.
    pub fn demand_as_of(self, current: u32, sum_ms: u64) -> u32 {
        if self.0 & BINDING == 0 {
            return current;
        }
        // The emission's time minus the sum's, in units modulo 256: under 128 is "not before".
        let sum = u64::from(Self::at_units(sum_ms));
        let ahead = (u64::from(self.at()) + AT_UNITS - sum) % AT_UNITS;
        match self.previous(current) {
            Some(previous) if ahead < AT_UNITS / 2 => previous,
            _ => current,
        }
    }

    /// What [`LastEmission::demand_as_of`] reads besides the time and the current demand, to
    /// tell whether an emission changed it: nothing unless the share binds.
    pub fn counted_part(self) -> u32 {
        if self.0 & BINDING == 0 {
            0
        } else {
            self.0 & (BINDING | DELTA_MASK)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::MAX_PUBLISHED;

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
    fn a_demand_over_part_of_a_window_is_scaled_to_the_whole_within_a_bound() {
        // 300 ms of a 1 s window seen: the count times 10/3.
        assert_eq!(whole_window_demand(90, 1_000, 300), 300);
        assert_eq!(whole_window_demand(120, 1_000, 400), 300);
        // The first 50 ms: at most five times the count.
        assert_eq!(whole_window_demand(20, 1_000, 50), 100);
        assert_eq!(whole_window_demand(20, 1_000, 0), 100);
        // A whole window seen, or more: the count as it is.
        assert_eq!(whole_window_demand(90, 1_000, 1_000), 90);
        assert_eq!(whole_window_demand(90, 1_000, u64::MAX), 90);
        assert_eq!(whole_window_demand(0, 1_000, 300), 0);
        // Never past what a register can say.
        let most = crate::window::MAX_PUBLISHED;
        assert_eq!(whole_window_demand(most, 1_000, 300), most);
    }

    #[test]
    fn only_a_short_window_with_traffic_from_the_start_of_counting_is_scaled() {
        use crate::window::LocalRing;
        let t = 1_700_000_000_000; // a bucket boundary of 100 ms
        let second = WindowSpec::with_default_buckets(1_000).unwrap();
        let now = t + 330;
        let span = |at: &[u64], observed: u64| {
            let ring = LocalRing::new(&second);
            for a in at {
                ring.reject(second.epoch(t + a), 1);
            }
            span_counted_ms(&ring.snapshot(&second, now), &second, now, observed)
        };
        // Counting began at t + 30 (observed 300 ms); traffic in that bucket and after.
        assert_eq!(span(&[40, 250], 300), 300);
        // A whole window counted: nothing to scale.
        assert_eq!(span(&[40, 250], 1_000), 1_000);
        // The first bucket counted was 70 ms long: traffic first seen in the next one began
        // after the start.
        assert_eq!(span(&[150], 300), 1_000);
        // Counting began at t + 80 (observed 250 ms): a first bucket of 20 ms may well be
        // empty, and traffic in the next was there from the start.
        assert_eq!(span(&[150], 250), 250);
        assert_eq!(span(&[250], 250), 1_000);
        // Counting began on a bucket boundary (observed 330 ms): the first bucket only.
        assert_eq!(span(&[40], 330), 330);
        assert_eq!(span(&[150], 330), 1_000);
        // A long window is never scaled.
        let minute = WindowSpec::with_default_buckets(60_000).unwrap();
        let ring = LocalRing::new(&minute);
        ring.reject(minute.epoch(t + 40), 3);
        let snap = ring.snapshot(&minute, now);
        assert_eq!(span_counted_ms(&snap, &minute, now, 300), 60_000);
    }

    #[test]
    fn a_smoothed_demand_moves_part_way_and_at_least_one_request() {
        // A round of 200 ms moves 28 % of the way, within chance (3 × √101 ≈ 30 here).
        assert_eq!(smoothed_demand(100, 120, 200, 1.0), 106);
        assert_eq!(smoothed_demand(120, 100, 200, 1.0), 114);
        // Past chance, the whole way.
        assert_eq!(smoothed_demand(100, 131, 200, 1.0), 131);
        assert_eq!(smoothed_demand(100, 69, 200, 1.0), 69);
        // Never past the measure, and never stuck within rounding of it.
        assert_eq!(smoothed_demand(10, 11, 200, 1.0), 11);
        assert_eq!(smoothed_demand(11, 10, 200, 1.0), 10);
        assert_eq!(smoothed_demand(10, 12, 200, 1.0), 11);
        // A long gap goes the whole way; no time, none of it.
        assert_eq!(smoothed_demand(100, 120, 60_000, 1.0), 120);
        assert_eq!(smoothed_demand(100, 120, 0, 1.0), 100);
        assert_eq!(
            smoothed_demand(100, 131, 0, 1.0),
            131,
            "past chance at once"
        );
        assert_eq!(smoothed_demand(u32::MAX - 1, u32::MAX, 1, 1.0), u32::MAX);
        assert_eq!(smoothed_demand(1, 0, 1, 1.0), 0);
        // A count scaled by 4 spreads twice as wide: 131 is within chance of 100 there.
        assert_eq!(smoothed_demand(100, 131, 200, 4.0), 109);
        assert_eq!(smoothed_demand(100, 161, 200, 4.0), 161);
    }

    #[test]
    fn the_demand_counted_is_the_one_the_owner_had_when_it_made_its_sum() {
        let t = 1_700_000_000_000;
        let last = LastEmission::PENDING.after(Some(40), 50, t, true);
        assert_eq!(last.elapsed_ms(t + 200), 200);
        // A sum made before this emission (or in the same 4 ms: in flight) holds the one
        // before it; a sum made after holds this one.
        assert_eq!(last.demand_as_of(50, t - 200), 40);
        assert_eq!(last.demand_as_of(50, t), 40);
        assert_eq!(last.demand_as_of(50, t + 4), 50);
        // A share that did not bind at the last emission counts its demand as published.
        let calm = last.after(Some(50), 60, t + 200, false);
        assert_eq!(calm.demand_as_of(60, t), 60);
        assert_eq!(calm.counted_part(), 0);
        // Nothing published before: the current one.
        let first = calm.after(None, 60, t + 400, true);
        assert_eq!(first.demand_as_of(60, t), 60);
        // Until the record is written, readers count the demand published.
        assert_eq!(LastEmission::PENDING.demand_as_of(60, t), 60);
    }

    #[test]
    fn a_second_emission_in_the_same_round_keeps_the_demand_before_the_round() {
        let t = 1_700_000_000_000;
        let once = LastEmission::PENDING.after(Some(40), 50, t, true);
        let twice = once.after(Some(50), 55, t + 1, true);
        assert_eq!(twice.demand_as_of(55, t - 100), 40);
        let next = twice.after(Some(55), 60, t + 200, true);
        assert_eq!(next.demand_as_of(60, t + 100), 55);
    }

    #[test]
    fn emission_times_compare_across_the_wrap_of_their_units() {
        // 4 ms units modulo 256: unit 0 at `wrap`, every 1 024 ms.
        let wrap = 1_700_000_000_000;
        assert_eq!(wrap % 1_024, 0);
        // Emitted in unit 1, just past a wrap; sums in units 250 (before) and 2 (after).
        let at = wrap + 4;
        let last = LastEmission::PENDING.after(Some(40), 50, at, true);
        assert_eq!(
            last.demand_as_of(50, wrap - 24),
            40,
            "a sum before the wrap"
        );
        assert_eq!(
            last.demand_as_of(50, at + 4),
            50,
            "a sum after the emission"
        );
        assert_eq!(last.elapsed_ms(at + 200), 200);
        assert_eq!(last.elapsed_ms(wrap + 1_020), 1_016, "up to the next wrap");
        assert_eq!(last.elapsed_ms(at + 1_024), 0, "modulo 1 024 ms");
        // Emitted in the last unit before a wrap, a sum made in the next unit is after it.
        let late = LastEmission::PENDING.after(Some(40), 50, wrap - 4, true);
        assert_eq!(late.demand_as_of(50, wrap), 50);
        assert_eq!(late.demand_as_of(50, wrap - 100), 40);
    }

    #[test]
    fn a_previous_demand_is_kept_within_its_bits_and_forgotten_past_them() {
        let t = 1_700_000_000_000;
        let kept = [
            (0, 1_023),
            (1_023, 0),
            (5_000, 4_000),
            (MAX_PUBLISHED - 1_023, MAX_PUBLISHED),
        ];
        for (before, now) in kept {
            let last = LastEmission::PENDING.after(Some(before), now, t, true);
            assert_eq!(
                last.demand_as_of(now, t - 100),
                before,
                "{before} then {now}"
            );
            assert_eq!(LastEmission::from_bits(last.bits()), last);
        }
        for (before, now) in [(0, 1_024), (1_024, 0), (0, MAX_PUBLISHED)] {
            let last = LastEmission::PENDING.after(Some(before), now, t, true);
            assert_eq!(last.demand_as_of(now, t - 100), now, "{before} then {now}");
        }
        assert!(LastEmission::from_bits(u32::MAX).bits() < 1 << EMISSION_BITS);
    }
}
