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
    pub spec: WindowSpec,
    pub ring: LocalRing,
    pub remote: ArcSwapOption<Replica<OriginIdx>>,
    /// Set when the ring changed since the last emission; whoever sets it queues the key.
    pub dirty: AtomicBool,
    /// When this node's demand for the window last started after idleness.
    pub active_since_ms: AtomicU64,
}

/// Remote registers folded for one instant.
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
            spec,
            remote: ArcSwapOption::empty(),
            dirty: AtomicBool::new(false),
            active_since_ms: AtomicU64::new(0),
        }
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
        let local = self.ring.snapshot(&self.spec, now_ms);
        let local_limiting = local
            .offered
            .by_age()
            .iter()
            .zip(local.admitted.by_age())
            .any(|(o, a)| o > a);
        local_limiting || self.remote_usage(&self.spec, now_ms).limiting
    }

    /// When the last thing counted in this window stops counting, or `None` if nothing
    /// counts any more.
    pub fn live_until_ms(&self, local: &RingSnapshot) -> Option<u64> {
        let local_end = local.newest_active_epoch().map(|e| self.spec.expiry_ms(e));
        let remote_end = self
            .remote
            .load()
            .as_deref()
            .and_then(|r| r.newest_epoch())
            .map(|e| self.spec.expiry_ms(e));
        local_end.max(remote_end)
    }
}
