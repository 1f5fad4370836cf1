//! One window of one key on this node: the local ring and what peers said about it.

use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

use super::bound_cache::BoundCache;
use super::own_demand::{EMISSION_BITS, LastEmission};
use crate::crdt::Replica;
use crate::ledger::Holdings;
use crate::window::{AgeProfile, LocalRing, RingSnapshot, WindowSpec};

pub(crate) use crate::crdt::OriginIdx;

/// Marks a replica entry as an owner's aggregate rather than an origin's register. Origin
/// indices stay below it (`OriginTable` wraps within them).
pub(crate) const AGGREGATE: OriginIdx = 1 << 31;

/// The entry under which `owner`'s aggregate of a window is kept.
///
/// What the window's owners said every other origin admitted and demands (in a large cluster
/// a node hears of a window from its owner, not from every origin) is one register per owner,
/// each a sum over the origins it holds. Each is a lower bound of what the others admitted, as
/// is the sum of the origins' own registers; a decision takes the largest, so combining them
/// never counts an admission twice.
pub(crate) fn aggregate_of(owner: OriginIdx) -> OriginIdx {
    owner | AGGREGATE
}

pub(crate) fn is_aggregate(idx: OriginIdx) -> bool {
    idx & AGGREGATE != 0
}

/// Whether aggregate `idx` is held as a departed owner's sum alone (listed marked as an
/// aggregate, its owner not listed bare): held only until another owner's sum of the window is
/// newer (`WindowState::remote_scalars`).
pub(crate) fn is_held_as_sum_alone(held: &[OriginIdx], idx: OriginIdx) -> bool {
    is_aggregate(idx)
        && held.binary_search(&idx).is_ok()
        && held.binary_search(&(idx & !AGGREGATE)).is_err()
}

/// Whether `idx` (an origin's register, or an owner's aggregate) is held by the sorted list
/// `held` (`Limiter::set_held`): an origin listed bare holds its register and its aggregate;
/// one listed marked as an aggregate, its aggregate alone.
pub(crate) fn is_held_in(held: &[OriginIdx], idx: OriginIdx) -> bool {
    held.binary_search(&(idx & !AGGREGATE)).is_ok()
        || (is_aggregate(idx) && held.binary_search(&idx).is_ok())
}

/// A window's state. The hot path reads `ring` and `remote` without taking any lock; the ring
/// is written with CAS, and `remote` is replaced whole (copy on write) by the merge path.
#[derive(Debug)]
pub(crate) struct WindowState {
    /// `dirty (1) | queued (1) | last emission (20) | buckets (7) | window_ms (35)`: whether
    /// the ring changed since the last emission, whether the key is in the queue for the next
    /// one (whoever sets that flag queues it), this node's last emission of the window
    /// (`own_demand::LastEmission`), and the window's shape (at most 64 buckets and 366 days,
    /// both validated by `WindowSpec`). One word, so that a window with its cached bound stays
    /// 128 bytes.
    shape: AtomicU64,
    pub ring: LocalRing,
    /// Other origins' registers, and the window's owners' aggregates under marked indices
    /// (see [`aggregate_of`]).
    pub remote: ArcSwapOption<Replica>,
    /// The current bucket's admission bound, cached for the rest of the bucket under exactly
    /// the inputs it was computed from (see `bound_cache.rs`).
    pub bound: BoundCache,
    /// The tokens this node holds for the window, under the ledger (`crate::ledger`).
    pub holdings: Holdings,
}

const DIRTY: u64 = 1 << 63;
const QUEUED: u64 = 1 << 62;
const FLAGS: u64 = DIRTY | QUEUED;
const WINDOW_MASK: u64 = (1 << 35) - 1;
const BUCKETS_SHIFT: u32 = 35;
const BUCKETS_MASK: u64 = (1 << 7) - 1;
const SHAPE_MASK: u64 = (1 << 42) - 1;
const EMISSION_SHIFT: u32 = 42;
const EMISSION_MASK: u64 = ((1 << EMISSION_BITS) - 1) << EMISSION_SHIFT;
/// How often `counted_demand` reads a record and a demand before it gives up on pairing them.
const RECORD_READS: usize = 4;

/// A shape as the low bits of `WindowState::shape` (a window is under 2^35 ms, 366 days being
/// 2^34.9, and has at most 64 buckets: both validated by `WindowSpec`).
fn shape_bits(spec: &WindowSpec) -> u64 {
    (spec.window_ms() & WINDOW_MASK) | ((u64::from(spec.buckets()) & BUCKETS_MASK) << BUCKETS_SHIFT)
}

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
    pub fn new(spec: WindowSpec) -> Self {
        Self {
            ring: LocalRing::new(&spec),
            shape: AtomicU64::new(shape_bits(&spec)),
            remote: ArcSwapOption::empty(),
            bound: BoundCache::default(),
            holdings: Holdings::default(),
        }
    }

    /// Records the demand this node just emitted for the window at `now_ms`, and whether its
    /// share bound then (`own_demand::share_binds`). A change of the demand counted forgets
    /// the cached bound, which was computed from the one before.
    ///
    /// The record says how the demand published before differs from this one, so a reader
    /// must not pair one demand with the other's record: it is marked pending while the demand
    /// changes (readers then count the demand published), and a reader takes a record only if
    /// it reads the same one before and after the demand (`counted_demand`). Written under
    /// the replication lock only.
    pub fn publish_demand(&self, demand: u32, now_ms: u64, binding: bool) {
        // As the ring records it.
        let demand = demand.min(crate::window::MAX_PUBLISHED);
        let before = self.ring.published();
        let emission_before = self.last_emission();
        let emission = emission_before.after(before, demand, now_ms, binding);
        self.set_last_emission(LastEmission::PENDING);
        let moved = self.ring.publish(demand) != Some(demand);
        self.set_last_emission(emission);
        if moved || emission.counted_part() != emission_before.counted_part() {
            self.bound.invalidate();
        }
    }

    /// This node's last emission of the window, as recorded.
    pub fn last_emission(&self) -> LastEmission {
        let shape = self.shape.load(Ordering::Acquire);
        LastEmission::from_bits(((shape & EMISSION_MASK) >> EMISSION_SHIFT) as u32)
    }

    fn set_last_emission(&self, emission: LastEmission) {
        let bits = u64::from(emission.bits()) << EMISSION_SHIFT;
        // The flags change under it (`mark_dirty` on the check path): only these bits.
        let _ = self
            .shape
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some((w & !EMISSION_MASK) | bits)
            });
    }

    /// The demand this node divides the limit by (ALGORITHM.md §4): its published one, or
    /// where its share binds and its peers' demand comes in an owner's sum emitted at
    /// `sum_ms`, the one it had published when the sum was made (`own_demand.rs`).
    pub fn counted_demand(&self, active: bool, sum_ms: Option<u64>) -> Option<u32> {
        let Some(sum_ms) = sum_ms else {
            return self.published_demand(active);
        };
        // An emission in between (the replication path takes nanoseconds to write one): read
        // again. Should it go on changing, count the demand published and forget the cached
        // bound, which a check that read a mixed pair might otherwise store for the bucket.
        for _ in 0..RECORD_READS {
            let record = self.last_emission();
            let published = self.published_demand(active)?;
            if self.last_emission() == record {
                return Some(record.demand_as_of(published, sum_ms));
            }
            std::hint::spin_loop();
        }
        self.bound.invalidate();
        self.published_demand(active)
    }

    /// The demand this node's peers know it by: that of its last emitted register. `active` is
    /// whether this node's ring holds any traffic in the window: once it holds none, the node
    /// has not emitted for about a window, peers no longer trust that register
    /// (`RegisterRef::live_demand`), and the demand is forgotten.
    pub fn published_demand(&self, active: bool) -> Option<u32> {
        if active {
            self.ring.published()
        } else {
            if self.ring.forget_published() {
                self.bound.invalidate();
            }
            None
        }
    }

    /// Whether this node's traffic on the window has lasted past its onset, since it last
    /// had none in a window (see [`LocalRing::establish`]).
    pub fn established(&self, active: bool) -> bool {
        active && self.ring.established()
    }

    /// Records that this node's traffic on the window has lasted past its onset.
    pub fn establish(&self) {
        // Called on every check past its onset: a load, and a write once per stretch.
        if !self.ring.established() {
            self.ring.establish();
        }
    }

    /// The window's shape (interpolated). Kept as length and bucket count, the rest derived:
    /// there is one of these per key, and the check path uses the caller's spec.
    pub fn spec(&self) -> WindowSpec {
        let shape = self.shape.load(Ordering::Relaxed);
        WindowSpec::new(
            shape & WINDOW_MASK,
            ((shape >> BUCKETS_SHIFT) & BUCKETS_MASK) as u16,
            Default::default(),
        )
        .expect("validated when the window was created")
    }

    /// Whether this window has `spec`'s length and bucket count (on the check path: no
    /// validation, unlike [`Self::spec`]).
    #[inline]
    pub fn has_shape(&self, spec: &WindowSpec) -> bool {
        self.shape.load(Ordering::Relaxed) & SHAPE_MASK == shape_bits(spec)
    }

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

    /// Marks the ring changed; returns true for the caller that must queue the key (it was
    /// not queued yet).
    pub fn mark_dirty(&self) -> bool {
        self.shape.load(Ordering::Relaxed) & FLAGS != FLAGS
            && self.shape.fetch_or(FLAGS, Ordering::AcqRel) & QUEUED == 0
    }

    /// Takes the key off the queue and clears the changed flag (the emission path, which then
    /// reads the ring); returns whether the ring had changed.
    pub fn take_dirty(&self) -> bool {
        self.shape.fetch_and(!FLAGS, Ordering::AcqRel) & DIRTY != 0
    }

    /// Queues the key again without marking it changed (to be sent once more next round);
    /// returns true for the caller that must push it.
    pub fn requeue(&self) -> bool {
        self.shape.fetch_or(QUEUED, Ordering::AcqRel) & QUEUED == 0
    }

    /// When the last thing counted in this window stops counting, or `None` if nothing
    /// counts any more.
    pub fn live_until_ms(&self, local: &RingSnapshot) -> Option<u64> {
        let spec = self.spec();
        let local_end = local.newest_active_epoch().map(|e| spec.expiry_ms(e));
        let remote_end = self
            .remote
            .load()
            .as_deref()
            .and_then(|r| r.newest_epoch())
            .map(|e| spec.expiry_ms(e));
        local_end.max(remote_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::bound_cache::BoundKey;
    use crate::window::EstimateMode;

    #[test]
    fn published_demand_lasts_while_the_ring_is_active_and_a_change_forgets_the_cached_bound() {
        let spec = WindowSpec::with_default_buckets(1_000).unwrap();
        let state = WindowState::new(spec);
        let t = 1_700_000_000_050;
        assert_eq!(state.published_demand(true), None);
        state.establish();
        assert!(
            !state.established(true),
            "not before a demand is recorded (a check racing a forget)"
        );
        let key = BoundKey {
            epoch: spec.epoch(t),
            limit: 100,
            mode: EstimateMode::Interpolated,
            generation: 0,
        };
        state.bound.store(state.bound.seen(), &key, 7);
        state.publish_demand(40, t + 200, false);
        assert_eq!(state.bound.get(&key), None, "a first demand is a change");
        state.bound.store(state.bound.seen(), &key, 7);
        state.publish_demand(40, t + 400, false);
        assert_eq!(
            state.bound.get(&key),
            Some(7),
            "the same demand changes nothing"
        );
        state.publish_demand(41, t + 600, false);
        assert_eq!(state.bound.get(&key), None);
        assert_eq!(state.published_demand(true), Some(41));
        // Established traffic stays so across emissions, while the window has traffic.
        assert!(!state.established(true));
        state.establish();
        state.publish_demand(42, t + 800, false);
        assert_eq!(state.published_demand(true), Some(42));
        assert!(state.established(true));
        assert!(!state.established(false), "not without traffic");
        state.publish_demand(41, t + 1000, false);
        // A window with no traffic left: peers have stopped counting that register.
        state.bound.store(state.bound.seen(), &key, 7);
        assert_eq!(state.published_demand(false), None);
        assert_eq!(state.bound.get(&key), None);
        assert_eq!(state.published_demand(true), None, "forgotten");
        assert!(!state.established(true), "forgotten with it");
        state.publish_demand(u32::MAX, t + 1200, false);
        assert_eq!(
            state.published_demand(true),
            Some(crate::window::MAX_PUBLISHED)
        );
        // 128 bytes, and the ledger's holdings (one pointer).
        assert!(
            std::mem::size_of::<WindowState>() <= 136,
            "a window stays 136 bytes"
        );
    }

    #[test]
    fn a_binding_share_counts_the_demand_the_owners_sum_was_made_with() {
        let spec = WindowSpec::with_default_buckets(1_000).unwrap();
        let state = WindowState::new(spec);
        let t = 1_700_000_000_050;
        let key = BoundKey {
            epoch: spec.epoch(t),
            limit: 100,
            mode: EstimateMode::Interpolated,
            generation: 0,
        };
        state.publish_demand(40, t, true);
        state.publish_demand(60, t + 200, true);
        assert_eq!(state.counted_demand(true, None), Some(60), "no sum");
        assert_eq!(state.counted_demand(true, Some(t + 100)), Some(40));
        assert_eq!(state.counted_demand(true, Some(t + 250)), Some(60));
        // The same demand again moves the one before it, which a bound may have counted.
        state.bound.store(state.bound.seen(), &key, 7);
        state.publish_demand(60, t + 400, true);
        assert_eq!(
            state.bound.get(&key),
            None,
            "the one before moved: 40 to 60"
        );
        state.bound.store(state.bound.seen(), &key, 7);
        state.publish_demand(60, t + 600, true);
        assert_eq!(state.bound.get(&key), Some(7), "nothing moved");
        state.publish_demand(60, t + 800, false);
        assert_eq!(state.bound.get(&key), None, "no longer binding");
        assert_eq!(state.counted_demand(true, Some(t + 700)), Some(60));
        assert_eq!(
            state.counted_demand(false, Some(t + 700)),
            None,
            "no traffic"
        );
    }

    #[test]
    fn the_last_emission_shares_the_shape_word_without_touching_the_shape_or_the_flags() {
        let largest =
            WindowSpec::new(crate::window::MAX_WINDOW_MS, 64, EstimateMode::Interpolated).unwrap();
        for spec in [largest, WindowSpec::with_default_buckets(1_000).unwrap()] {
            let state = WindowState::new(spec);
            assert!(state.mark_dirty(), "queued once");
            state.set_last_emission(LastEmission::from_bits(u32::MAX));
            assert_eq!(state.last_emission().bits(), (1 << EMISSION_BITS) - 1);
            assert_eq!(state.spec(), spec);
            assert!(state.has_shape(&spec));
            assert!(state.take_dirty(), "the flags survive");
            state.publish_demand(10, 1_700_000_000_000, true);
            assert_eq!(state.spec(), spec);
            assert!(!state.take_dirty(), "an emission marks nothing");
        }
    }
}
