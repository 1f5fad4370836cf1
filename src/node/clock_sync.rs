//! Keeps this node on cluster time: feeds the calibrator the send times of the members'
//! datagrams, steers the [`ClusterClock`] once per round, and decides who is cut off for a
//! clock too far from the cluster's (this node, or a peer).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use crate::clock::calibrator::{self, Calibrator, Steer, median};
use crate::clock::{ClusterClock, Now, TimeSource};
use crate::gossip::wire::SenderCluster;
use crate::limiter::IdHashBuilder;

/// What the node publishes about its clock (metrics, `members`, `inspect`).
#[derive(Debug, Default)]
pub struct ClockStats {
    /// This node's wall clock minus cluster time, in ms.
    pub offset_ms: AtomicI64,
    /// Cluster time minus this node's wall clock as it was at start: how far it was corrected.
    pub correction_ms: AtomicI64,
    /// This node's cluster time minus the median of the serving members' (as their words
    /// say it, each short by its latency), or 0 while none vouches: beyond the ledger's clock
    /// margin, the premise of its bound does not hold.
    pub cluster_lead_ms: AtomicI64,
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
    /// Per peer, its newest word on its cluster time, by its datagram counter (which orders
    /// its datagrams as it sent them, whatever its wall clock did): whether it vouched for it.
    cluster_words: HashMap<u128, (u64, bool), IdHashBuilder>,
    /// Estimates of the cluster times of the peers whose newest word vouched for one, as
    /// "its cluster − this node's mono": each datagram's word is a sample short by its
    /// latency, as a send time is, and the estimate is the largest of the last few (it lags
    /// a peer slewing back by the samples' span times the slew: tens of ms at most).
    served: Calibrator,
    /// Cluster time is left alone: this node's wall clock is beyond the tolerance, and its
    /// cluster time is its own, not the cluster's.
    uncorrected: bool,
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
            cluster_words: HashMap::default(),
            served: Calibrator::default(),
            uncorrected: false,
        }
    }

    /// Whether this node's cluster time is the cluster's, for it to vouch for: peers steered
    /// it, and its wall clock is within the tolerance (a node that served alone, or one left
    /// uncorrected, runs on its own clock).
    pub fn vouches(&self) -> bool {
        self.steered_by_peers && !self.uncorrected
    }

    /// `peer`'s datagram number `counter`, received at `mono_ms`, said `word` of its cluster
    /// time. The newest word decides whether the peer vouches: a late datagram does not take
    /// a newer word back.
    pub fn heard_cluster(&mut self, peer: u128, counter: u64, word: SenderCluster, mono_ms: u64) {
        let vouched = matches!(word, SenderCluster::At(_));
        let entry = self.cluster_words.entry(peer).or_insert((counter, vouched));
        if counter >= entry.0 {
            *entry = (counter, vouched);
            if !vouched {
                self.served.forget(peer);
            }
        }
        if let (SenderCluster::At(t), true) = (word, entry.1) {
            self.served.observe(peer, t, mono_ms);
        }
    }

    /// How many of `peers` said anything of their cluster time.
    pub fn cluster_words_of(&self, peers: impl IntoIterator<Item = u128>) -> usize {
        peers
            .into_iter()
            .filter(|p| self.cluster_words.contains_key(p))
            .count()
    }

    /// The base (cluster time minus this node's monotonic clock) that the members of `peers`
    /// that serve keep: the median of their estimates, of those within the tolerance of
    /// `reference` (a serving member is further only when the reference moved further at
    /// once, and is then cut off). `None` when no peer vouched for its cluster time. Where
    /// three or more vouch, one that lies moves the median no further than the others' words
    /// reach; where one or two do, a liar among them moves it anywhere within the tolerance of
    /// the reference (a member holds the cluster key; the wall clocks' median is as easily
    /// moved where there are as few).
    fn served_base(&self, peers: &[u128], reference: i64) -> Option<i64> {
        let tolerance = i64::try_from(self.max_drift_ms).unwrap_or(i64::MAX);
        let mut all: Vec<i64> = peers
            .iter()
            .filter(|p| self.cluster_words.get(p).is_some_and(|(_, v)| *v))
            .filter_map(|p| self.served.estimate(*p))
            .filter(|b| b.saturating_sub(reference).abs() <= tolerance)
            .collect();
        if all.is_empty() {
            return None;
        }
        Some(median(&mut all))
    }

    pub fn observe(&mut self, peer: u128, sent_wall_ms: u64, mono_ms: u64) {
        self.calibrator.observe(peer, sent_wall_ms, mono_ms);
    }

    pub fn retain(&mut self, keep: impl Fn(u128) -> bool) {
        self.cluster_words.retain(|p, _| keep(*p));
        self.served.retain(&keep);
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
    /// members SWIM holds up): at the slew bound while serving; at once while `warming` or at
    /// the first contact with peers, and then to the cluster time the serving members keep
    /// where they said it. Publishes the outcome to `stats` and logs changes of who is
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
        // A jump takes the cluster time the serving members keep where any vouches for it
        // (they may be slewing towards a reference that moved), and the reference otherwise.
        let jump = || {
            self.served_base(peers, reference)
                .map_or(Steer::Jump, Steer::JumpTo)
        };
        let how = match (warming || first_contact, self.last_steer_mono) {
            (true, _) => jump(),
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
        self.uncorrected = steering.uncorrected;
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
        let lead = self
            .served_base(peers, reference)
            .map_or(0, |served| steering.base.saturating_sub(served));
        stats.cluster_lead_ms.store(lead, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const MONO: u64 = 100_000;

    /// One warming round of a node whose wall clock reads its monotonic one, with peers 1 to 4
    /// whose wall clocks are 5 s ahead (seen 1 ms late); returns how far cluster time moved.
    fn warming_round(sync: &mut ClockSync) -> i64 {
        let clock = ClusterClock::new(ManualClock::new(MONO));
        let before = clock.base();
        for peer in 1..=4u128 {
            sync.observe(peer, MONO + 5_000 - 1, MONO);
        }
        let now = Now {
            at: crate::clock::monotonic_now(),
            cluster_ms: MONO,
            wall_ms: MONO,
            mono_ms: MONO,
        };
        sync.round(&clock, &now, &[1, 2, 3, 4], true, &ClockStats::default());
        clock.base() - before
    }

    /// The wall clocks of most members stepped 5 s ahead: the reference moved, and the members
    /// that serve slew towards it. A warming node jumps to the cluster time they keep, which
    /// their words say, not to the reference; with no word vouched for, to the reference.
    #[test]
    fn a_warming_node_jumps_to_the_cluster_time_the_serving_members_keep() {
        let mut sync = ClockSync::new(10_000, 0);
        assert_eq!(
            warming_round(&mut sync),
            5_000 - 1,
            "no word: the reference"
        );

        let mut sync = ClockSync::new(10_000, 0);
        // Serving: cluster time about where it was before their wall clocks stepped.
        for (peer, at) in [(1u128, MONO - 1), (2, MONO + 30), (3, MONO + 60)] {
            sync.heard_cluster(peer, 10, SenderCluster::At(at), MONO);
        }
        // Warming: its cluster time is not the cluster's.
        sync.heard_cluster(4, 10, SenderCluster::Unvouched, MONO);
        // An older word of peer 1 that came late does not take the newer one back: the
        // median stays peer 2's.
        sync.heard_cluster(1, 9, SenderCluster::Unvouched, MONO);
        assert_eq!(sync.cluster_words_of(1..=5), 4);
        assert_eq!(warming_round(&mut sync), 30);
    }

    /// A peer that stops vouching (cut off, or restarted into its warm-up) is left out at
    /// once; a word further from the reference than the tolerance (a liar's: a serving
    /// member's is not) moves nothing.
    #[test]
    fn a_jump_leaves_out_peers_that_stopped_vouching_and_words_beyond_the_tolerance() {
        let mut sync = ClockSync::new(10_000, 0);
        for (peer, at) in [(1u128, MONO + 2_000), (2, MONO + 2_000), (3, MONO + 40)] {
            sync.heard_cluster(peer, 10, SenderCluster::At(at), MONO);
        }
        for peer in 1..=2u128 {
            sync.heard_cluster(peer, 11, SenderCluster::Unvouched, MONO);
        }
        // Peer 4 says its cluster time is an hour ahead.
        sync.heard_cluster(4, 10, SenderCluster::At(MONO + 3_600_000), MONO);
        // Left: peer 3's word.
        assert_eq!(warming_round(&mut sync), 40);

        let mut sync = ClockSync::new(10_000, 0);
        sync.heard_cluster(4, 10, SenderCluster::At(MONO + 3_600_000), MONO);
        assert_eq!(
            warming_round(&mut sync),
            5_000 - 1,
            "the liar alone: the reference"
        );
    }
}
