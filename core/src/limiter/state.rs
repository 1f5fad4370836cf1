//! One window of one key on this node: the local ring and what peers said about it.

mod remote;

use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

use super::bound_cache::BoundCache;
use super::own_demand::{EMISSION_BITS, LastEmission};
use crate::crdt::Replica;
use crate::ledger::Holdings;
use crate::window::{LocalRing, RingSnapshot, WindowSpec};

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
    /// counts any more. A lease's segments count until its end and the spend tail after it
    /// (`margin_ms`, the ledger's clock margin): dropped sooner, a message of the lease still
    /// on its way would make them afresh with nothing spent.
    pub fn live_until_ms(&self, local: &RingSnapshot, margin_ms: u64) -> Option<u64> {
        let spec = self.spec();
        let local_end = local.newest_active_epoch().map(|e| spec.expiry_ms(e));
        let remote_end = self
            .remote
            .load()
            .as_deref()
            .and_then(|r| r.newest_epoch())
            .map(|e| spec.expiry_ms(e));
        let lease_end = self.holdings.lease_end_ms().map(|end| {
            end.saturating_add(crate::ledger::spend_tail_ms(spec.window_ms(), margin_ms))
        });
        local_end.max(remote_end).max(lease_end)
    }
}

#[cfg(test)]
mod tests;
