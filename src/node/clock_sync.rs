//! Keeps this node on cluster time: feeds the calibrator the send times of the members'
//! datagrams, steers the [`ClusterClock`] once per round, and decides who is cut off for a
//! clock too far from the cluster's (this node, or a peer).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use crate::clock::calibrator::{self, Calibrator, Steer};
use crate::clock::{ClusterClock, Now, TimeSource};

/// What the node publishes about its clock (metrics, `members`, `inspect`).
#[derive(Debug, Default)]
pub struct ClockStats {
    /// This node's wall clock minus cluster time, in ms.
    pub offset_ms: AtomicI64,
    /// Cluster time minus this node's wall clock as it was at start: how far it was corrected.
    pub correction_ms: AtomicI64,
    /// This node is cut off for admission: its clock is beyond `max_clock_drift_ms`.
    pub fenced: AtomicBool,
    /// Peers this node cuts off for their clocks.
    pub fenced_members: AtomicU64,
    /// Senders whose datagrams arrive more than 60 s from this node's clock (`liveness.rs`).
    pub far_members: AtomicU64,
    /// Times this node or a peer was newly cut off for its clock.
    pub fence_events: AtomicU64,
    pub rollbacks: AtomicU64,
    pub forward_steps: AtomicU64,
}

/// The outcome of one round, for the limiter's view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fences {
    /// This node's own clock is beyond the tolerance.
    pub own: bool,
    /// Peers whose clocks are beyond the tolerance, as this node sees them.
    pub peers: BTreeSet<u128>,
}

#[derive(Debug)]
pub struct ClockSync {
    calibrator: Calibrator,
    max_drift_ms: u64,
    /// The cluster's reference ("wall − mono") as of the last round.
    reference: Option<i64>,
    /// The monotonic time of the last steer, for the slew bound.
    last_steer_mono: Option<u64>,
    /// Whether cluster time has been steered by peers' clocks yet: until then a serving node
    /// (one that started without peers) runs on its own clock, and its first contact jumps.
    steered_by_peers: bool,
    fences: Fences,
    start_gap: i64,
}

impl ClockSync {
    pub fn new(max_drift_ms: u64, start_gap: i64) -> Self {
        Self {
            calibrator: Calibrator::default(),
            max_drift_ms,
            reference: None,
            last_steer_mono: None,
            steered_by_peers: false,
            fences: Fences::default(),
            start_gap,
        }
    }

    pub fn observe(&mut self, peer: u128, sent_wall_ms: u64, mono_ms: u64) {
        self.calibrator.observe(peer, sent_wall_ms, mono_ms);
    }

    pub fn retain(&mut self, keep: impl Fn(u128) -> bool) {
        self.calibrator.retain(keep);
    }

    /// A member's wall clock minus cluster time, in ms, once it has sent something.
    pub fn offset_of(&self, peer: u128) -> Option<i64> {
        Some(
            self.calibrator
                .estimate(peer)?
                .saturating_sub(self.reference?),
        )
    }

    /// How late `peer`'s newest datagram, sent at `sent_wall_ms`, arrived at `mono_ms`, against
    /// its quickest of late (see [`Calibrator::lateness_ms`]).
    pub fn lateness_ms(
        &self,
        peer: u128,
        sent_wall_ms: u64,
        mono_ms: u64,
        within_ms: u64,
    ) -> Option<u64> {
        self.calibrator
            .lateness_ms(peer, sent_wall_ms, mono_ms, within_ms)
    }

    /// Whether every one of `peers` has sent this node something to estimate its clock by.
    pub fn has_estimates(&self, peers: impl IntoIterator<Item = u128>) -> bool {
        peers
            .into_iter()
            .all(|p| self.calibrator.estimate(p).is_some())
    }

    /// How many of `peers` have sent this node something to estimate their clocks by.
    pub fn estimates_of(&self, peers: impl IntoIterator<Item = u128>) -> usize {
        peers
            .into_iter()
            .filter(|p| self.calibrator.estimate(*p).is_some())
            .count()
    }

    pub fn fences(&self) -> &Fences {
        &self.fences
    }

    /// Steers `clock` towards the median of this node's wall clock and those of `peers` (the
    /// members SWIM holds up): at once while `warming` or at the first contact with peers, at
    /// the slew bound otherwise. Publishes the outcome to `stats` and logs changes of who is
    /// cut off.
    pub fn round<T: TimeSource>(
        &mut self,
        clock: &ClusterClock<T>,
        now: &Now,
        peers: &[u128],
        warming: bool,
        stats: &ClockStats,
    ) {
        let own = clock.own_gap(now.wall_ms, now.mono_ms);
        let mono = now.mono_ms;
        let reference = self.calibrator.reference(own, peers.iter().copied());
        let heard_peers = peers.iter().any(|p| self.calibrator.estimate(*p).is_some());
        let first_contact = heard_peers && !self.steered_by_peers;
        let how = match (warming || first_contact, self.last_steer_mono) {
            (true, _) => Steer::Jump,
            (false, None) => Steer::Slew { elapsed_ms: 0 },
            (false, Some(last)) => Steer::Slew {
                elapsed_ms: mono.saturating_sub(last),
            },
        };
        // A clock left alone (beyond the tolerance) keeps its jump for when it is fixed.
        let steering = calibrator::steer(
            clock.base(),
            own,
            reference,
            self.max_drift_ms,
            self.fences.own,
            how,
        );
        // Back in time only while nothing is admitted; a serving node's jump back holds its
        // cluster time still until the cluster's catches up.
        clock.set_base(steering.base, warming);
        self.steered_by_peers |= heard_peers && !steering.uncorrected;
        self.last_steer_mono = Some(mono);
        self.reference = Some(reference);

        let peers_fenced: BTreeSet<u128> = peers
            .iter()
            .copied()
            .filter(|p| {
                self.calibrator.estimate(*p).is_some_and(|e| {
                    let was = self.fences.peers.contains(p);
                    calibrator::peer_fenced(e, reference, self.max_drift_ms, was)
                })
            })
            .collect();
        if steering.fenced && !self.fences.own {
            stats.fence_events.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                offset_ms = steering.offset_ms,
                max_clock_drift_ms = self.max_drift_ms,
                corrected = !steering.uncorrected,
                "this node's wall clock is too far from the cluster's: it is cut off for \
                 admission (its share of each limit only) until the clock is fixed"
            );
        } else if !steering.fenced && self.fences.own {
            tracing::info!(
                offset_ms = steering.offset_ms,
                "this node's wall clock is back within the tolerance: admitting normally"
            );
        }
        for p in peers_fenced.difference(&self.fences.peers) {
            stats.fence_events.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                peer = %uuid::Uuid::from_u128(*p),
                offset_ms = self.offset_of(*p),
                max_clock_drift_ms = self.max_drift_ms,
                "a member's wall clock is too far from the cluster's: it is cut off for admission"
            );
        }
        self.fences = Fences {
            own: steering.fenced,
            peers: peers_fenced,
        };
        stats.offset_ms.store(steering.offset_ms, Ordering::Relaxed);
        stats.correction_ms.store(
            steering.base.saturating_sub(self.start_gap),
            Ordering::Relaxed,
        );
        stats.fenced.store(steering.fenced, Ordering::Relaxed);
        stats
            .fenced_members
            .store(self.fences.peers.len() as u64, Ordering::Relaxed);
        stats.rollbacks.store(clock.rollbacks(), Ordering::Relaxed);
        stats
            .forward_steps
            .store(clock.forward_steps(), Ordering::Relaxed);
    }
}
