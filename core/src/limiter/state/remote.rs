//! What peers said about a window, folded for a decision: the others' admissions and demand
//! from their registers and their owners' sums.

use super::{OriginIdx, WindowState, is_aggregate, is_held_as_sum_alone, is_held_in};
use crate::crdt::Replica;
use crate::window::{AgeProfile, WindowSpec};

/// Remote registers folded into the numbers a decision needs (hot path, no allocation).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RemoteScalars {
    pub admitted: f64,
    pub demand: u64,
    pub newest_admitted_age: Option<u64>,
    /// When the newest of the registers and sums was emitted, by its origin's clock.
    pub newest_emission_ms: Option<u64>,
    /// When the owner's sum that says the most demand was emitted, by the owner's clock, if
    /// it says more than the registers held (an owner holds those) or there are none: the
    /// others' demand is then a sum's. By what was said, lapsed or not.
    pub sum_emission_ms: Option<u64>,
    /// Whether the sums of departed owners (held as sums alone) are superseded: another
    /// owner's sum is at least as new as the newest of them, so they count as any old sum
    /// does (their demand lapses) rather than with the demand they said.
    pub departed_sums_superseded: bool,
}

impl RemoteScalars {
    /// The larger of two lower bounds of the same quantities, each field apart.
    fn max(self, other: Self) -> Self {
        Self {
            admitted: self.admitted.max(other.admitted),
            demand: self.demand.max(other.demand),
            newest_admitted_age: match (self.newest_admitted_age, other.newest_admitted_age) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            newest_emission_ms: self.newest_emission_ms.max(other.newest_emission_ms),
            sum_emission_ms: self.sum_emission_ms.max(other.sum_emission_ms),
            departed_sums_superseded: self.departed_sums_superseded
                || other.departed_sums_superseded,
        }
    }
}

/// What a window's remote registers and sums last said: the others' demand and admissions
/// (every bucket they hold).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LastSaid {
    pub demand: u64,
    pub admitted: u64,
}

/// The registers' totals, or an owner's sum where that says more demand (the sum with the most
/// demand, then the most admitted); and whether there was a sum.
fn last_said(replica: &Replica) -> (LastSaid, bool) {
    let (mut registers, mut sum, mut sums) = ((0u64, 0u64), (0u64, 0u64), false);
    for (origin, reg) in replica.iter() {
        let one = (
            u64::from(reg.demand),
            reg.buckets().map(|(_, c)| c).sum::<u64>(),
        );
        if is_aggregate(origin) {
            sums = true;
            sum = sum.max(one);
        } else {
            registers = (
                registers.0.saturating_add(one.0),
                registers.1.saturating_add(one.1),
            );
        }
    }
    let (demand, admitted) = registers.max(sum);
    (LastSaid { demand, admitted }, sums)
}

/// Remote registers folded for one instant, bucket by bucket (slow paths).
#[derive(Debug, Clone)]
pub(crate) struct RemoteUsage {
    pub admitted: AgeProfile,
    pub demand: u64,
}

impl WindowState {
    /// Folds the remote registers at `now_ms`. Origins in `silent` (sorted) do not count
    /// towards demand: a member that has gone silent is not competing for this side's share.
    /// Their counts still count towards the global estimate.
    ///
    /// Origins in `held` (sorted) are members this node has stopped hearing from, though they
    /// are not down yet: their registers (and, for an owner, its aggregates) keep the demand
    /// they last reported instead of letting it lapse, so that nobody's share grows before the
    /// cluster knows whether they are gone (see `node/ownership.rs`).
    pub fn remote_scalars(
        &self,
        spec: &WindowSpec,
        now_ms: u64,
        silent: Option<&[OriginIdx]>,
        held: Option<&[OriginIdx]>,
    ) -> RemoteScalars {
        let demand_of = |origin: OriginIdx, reg: &crate::crdt::RegisterRef<'_>| {
            if held.is_some_and(|h| is_held_in(h, origin)) {
                u64::from(reg.demand)
            } else {
                u64::from(reg.live_demand(spec, now_ms))
            }
        };
        let weigher = spec.weigher(now_ms);
        let fold = |reg: &crate::crdt::RegisterRef<'_>, out: &mut RemoteScalars| {
            out.newest_emission_ms = out.newest_emission_ms.max(Some(reg.hlc.physical_ms()));
            for (epoch, count) in reg.buckets() {
                let w = weigher.weight(epoch);
                if w > 0.0 {
                    out.admitted += w * count as f64;
                    let age = weigher.age(epoch);
                    if out.newest_admitted_age.is_none_or(|n| age < n) {
                        out.newest_admitted_age = Some(age);
                    }
                }
            }
        };
        let (mut out, mut best) = (RemoteScalars::default(), RemoteScalars::default());
        // Sums of departed owners (held as sums alone): held until another owner's sum is
        // newer, after which they count as any old sum does. Kept apart until then.
        let mut departed: Option<(u64, RemoteScalars)> = None;
        let mut newest_other_sum: Option<u64> = None;
        // The sum that says the most demand (then the newest), and what the registers say,
        // as said: which of them the others' demand comes from must not change with time
        // alone, or a bound cached for the bucket would outlive the credit and the demand it
        // was computed with (`bound_cache.rs`).
        let mut source: Option<(u32, u64)> = None;
        let mut registers_said = 0u64;
        if let Some(replica) = self.remote.load().as_deref() {
            for (origin, reg) in replica.iter() {
                if is_aggregate(origin) {
                    let mut one = RemoteScalars::default();
                    fold(&reg, &mut one);
                    let emitted = reg.hlc.physical_ms();
                    source = source.max(Some((reg.demand, emitted)));
                    if held.is_some_and(|h| is_held_as_sum_alone(h, origin)) {
                        one.demand = u64::from(reg.demand);
                        let merged = departed.map_or(one, |(_, d)| d.max(one));
                        let newest = departed.map_or(emitted, |(e, _)| e.max(emitted));
                        departed = Some((newest, merged));
                        // What it stands for once superseded.
                        one.demand = u64::from(reg.live_demand(spec, now_ms));
                    } else {
                        one.demand = demand_of(origin, &reg);
                        newest_other_sum = newest_other_sum.max(Some(emitted));
                    }
                    best = best.max(one);
                    continue;
                }
                fold(&reg, &mut out);
                registers_said = registers_said.saturating_add(u64::from(reg.demand));
                if silent.is_none_or(|s| s.binary_search(&origin).is_err()) {
                    out.demand += demand_of(origin, &reg);
                }
            }
        }
        let superseded =
            departed.is_some_and(|(emitted, _)| newest_other_sum.is_some_and(|n| n >= emitted));
        if let Some((_, held_sum)) = departed
            && !superseded
        {
            best = best.max(held_sum);
        }
        out = out.max(best);
        out.departed_sums_superseded = superseded;
        out.sum_emission_ms = source
            .filter(|(said, _)| registers_said == 0 || u64::from(*said) > registers_said)
            .map(|(_, emitted)| emitted);
        out
    }

    /// What the window's remote registers and sums last said, lapsed or not, if nothing of
    /// theirs was emitted lately (`None` as soon as something was): within `within_sums_ms` of
    /// `now_ms` where the node holds a sum, `within_registers_ms` (not shorter) where it holds
    /// registers only. `Limiter::collect_changed`.
    pub fn remote_unheard_since(
        &self,
        now_ms: u64,
        within_sums_ms: u64,
        within_registers_ms: u64,
    ) -> Option<LastSaid> {
        let replica = self.remote.load_full()?;
        let age = |reg: &crate::crdt::RegisterRef<'_>| now_ms.saturating_sub(reg.hlc.physical_ms());
        // Heard within the shorter bound is heard either way: at a window's owner, or at a
        // user with a current sum, this stops at the first fresh entry.
        if replica.iter().any(|(_, reg)| age(&reg) <= within_sums_ms) {
            return None;
        }
        let newest_age = replica.iter().map(|(_, reg)| age(&reg)).min();
        let (last, sums) = last_said(&replica);
        let within = if sums {
            within_sums_ms
        } else {
            within_registers_ms
        };
        if newest_age.is_none_or(|a| a <= within) {
            return None;
        }
        Some(last)
    }

    /// What the window's remote registers and sums last said, lapsed or not (`None` without
    /// any).
    pub fn remote_last_said(&self) -> Option<LastSaid> {
        self.remote
            .load()
            .as_deref()
            .map(|replica| last_said(replica).0)
    }

    pub fn remote_usage(&self, spec: &WindowSpec, now_ms: u64) -> RemoteUsage {
        let mut usage = RemoteUsage {
            admitted: AgeProfile::new(spec),
            demand: 0,
        };
        let Some(replica) = self.remote.load_full() else {
            return usage;
        };
        let mut best = usage.clone();
        for (origin, reg) in replica.iter() {
            let mut one = AgeProfile::new(spec);
            for (epoch, count) in reg.buckets() {
                one.add(spec, now_ms, epoch, count);
            }
            let demand = u64::from(reg.live_demand(spec, now_ms));
            if is_aggregate(origin) {
                // Each owner's sum, and the sum of the registers held, are lower bounds of the
                // same counts: the larger, bucket by bucket.
                best.admitted.max_with(&one);
                best.demand = best.demand.max(demand);
            } else {
                usage.admitted.absorb(&one);
                usage.demand += demand;
            }
        }
        usage.admitted.max_with(&best.admitted);
        usage.demand = usage.demand.max(best.demand);
        usage
    }
}
