//! One window of one key on this node: the local ring and what peers said about it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

use crate::crdt::Replica;
use crate::window::{AgeProfile, LocalRing, RingSnapshot, WindowSpec};

/// Interned origin: an index into the limiter's origin table. Four bytes instead of sixteen in
/// every register of every key.
pub(crate) type OriginIdx = u32;

/// A window's state. The hot path reads `ring` and `remote` without taking any lock; the ring
/// is written with CAS, and `remote` is replaced whole (copy on write) by the merge path.
#[derive(Debug)]
pub(crate) struct WindowState {
    window_ms: u64,
    buckets: u16,
    pub ring: LocalRing,
    pub remote: ArcSwapOption<Replica>,
    /// Set when the ring changed since the last emission; whoever sets it queues the key.
    pub dirty: AtomicBool,
    /// The current bucket's admission bound, cached for the rest of the bucket:
    /// `epoch tag (16) | membership generation (16) | bound (32)`, 0 when empty.
    ///
    /// A bound computed at time `t` of bucket `e` stays valid until `e` ends, because within a
    /// bucket everything it depends on only loosens: the straddling bucket fades, remote counts
    /// and demand age out, the onset period ends, and this node's own offered load only grows.
    /// The two things that can tighten it, a merge and a membership change, clear it (the
    /// merge directly, membership through the generation).
    pub bound: AtomicU64,
}

/// Remote registers folded into the numbers a decision needs (hot path, no allocation).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RemoteScalars {
    pub admitted: f64,
    pub demand: u64,
    pub newest_admitted_age: Option<u64>,
}

/// Remote registers folded for one instant, bucket by bucket (slow paths).
#[derive(Debug, Clone)]
pub(crate) struct RemoteUsage {
    pub admitted: AgeProfile,
    pub demand: u64,
    /// Offered more than admitted somewhere: someone is being limited.
    pub limiting: bool,
}

impl WindowState {
    pub fn new(spec: WindowSpec) -> Self {
        Self {
            ring: LocalRing::new(&spec),
            window_ms: spec.window_ms(),
            buckets: spec.buckets(),
            remote: ArcSwapOption::empty(),
            dirty: AtomicBool::new(false),
            bound: AtomicU64::new(0),
        }
    }

    /// The window's shape (interpolated). Kept as length and bucket count, the rest derived:
    /// there is one of these per key, and the check path uses the caller's spec.
    pub fn spec(&self) -> WindowSpec {
        WindowSpec::new(self.window_ms, self.buckets, Default::default())
            .expect("validated when the window was created")
    }

    /// Whether this window has `spec`'s length and bucket count (on the check path: no
    /// validation, unlike [`Self::spec`]).
    #[inline]
    pub fn has_shape(&self, spec: &WindowSpec) -> bool {
        self.window_ms == spec.window_ms() && self.buckets == spec.buckets()
    }

    /// The cached bound for `epoch` under membership generation `generation`, if any.
    pub fn cached_bound(&self, epoch: u64, generation: u16) -> Option<u32> {
        let word = self.bound.load(Ordering::Acquire);
        (word != 0 && word >> 48 == epoch & 0xFFFF && (word >> 32) as u16 == generation)
            .then_some(word as u32)
    }

    /// Caches a bound, unless the cache changed since `seen` was read (a merge cleared it while
    /// the bound was being computed from older state).
    pub fn store_bound(&self, seen: u64, epoch: u64, generation: u16, bound: u32) {
        let word = ((epoch & 0xFFFF) << 48) | (u64::from(generation) << 32) | u64::from(bound);
        let _ = self
            .bound
            .compare_exchange(seen, word, Ordering::AcqRel, Ordering::Relaxed);
    }

    pub fn clear_bound(&self) {
        self.bound.store(0, Ordering::Release);
    }

    /// Folds the remote registers at `now_ms`. Origins in `silent` (sorted) do not count
    /// towards demand: a member that has gone silent is not competing for this side's share.
    /// Their counts still count towards the global estimate.
    pub fn remote_scalars(
        &self,
        spec: &WindowSpec,
        now_ms: u64,
        silent: Option<&[OriginIdx]>,
    ) -> RemoteScalars {
        let mut out = RemoteScalars::default();
        let guard = self.remote.load();
        let Some(replica) = guard.as_deref() else {
            return out;
        };
        let weigher = spec.weigher(now_ms);
        for (origin, reg) in replica.iter() {
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
            if silent.is_none_or(|s| s.binary_search(&origin).is_err()) {
                out.demand += u64::from(reg.live_demand(spec, now_ms));
            }
        }
        out
    }

    pub fn remote_usage(&self, spec: &WindowSpec, now_ms: u64) -> RemoteUsage {
        let mut usage = RemoteUsage {
            admitted: AgeProfile::new(spec),
            demand: 0,
            limiting: false,
        };
        if let Some(replica) = self.remote.load().as_deref() {
            for (_, reg) in replica.iter() {
                let mut admitted = 0u64;
                for (epoch, count) in reg.buckets() {
                    usage.admitted.add(spec, now_ms, epoch, count);
                    admitted += count;
                }
                let demand = u64::from(reg.live_demand(spec, now_ms));
                usage.demand += demand;
                usage.limiting |= demand > admitted;
            }
        }
        usage
    }

    /// Marks the ring changed; returns true for the caller that must queue the key.
    pub fn mark_dirty(&self) -> bool {
        !self.dirty.load(Ordering::Relaxed) && !self.dirty.swap(true, Ordering::AcqRel)
    }

    /// Whether anyone is being refused in this window (such a key is never evicted).
    pub fn is_limiting(&self, now_ms: u64) -> bool {
        let local = self.ring.snapshot(&self.spec(), now_ms);
        let local_limiting = local
            .offered
            .by_age()
            .iter()
            .zip(local.admitted.by_age())
            .any(|(o, a)| o > a);
        local_limiting || self.remote_usage(&self.spec(), now_ms).limiting
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
