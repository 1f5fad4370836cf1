//! A node's cluster parameters.

use std::net::SocketAddr;
use std::time::Duration;

/// Cluster parameters of one node.
#[derive(Debug, Clone)]
pub struct NodeParams {
    /// This process's boot id; also the limiter's origin.
    pub node_id: uuid::Uuid,
    /// The address peers reach this node's socket at.
    pub advertise: SocketAddr,
    pub seeds: Vec<SocketAddr>,
    pub cluster_id: String,
    pub gossip_interval: Duration,
    pub anti_entropy_interval: Duration,
    pub max_packet_size: usize,
    pub gc_interval: Duration,
    /// Windows examined per GC pass.
    pub gc_budget: usize,
    /// Registers one periodic anti-entropy push carries at most; larger tables are pushed a
    /// page at a time, round-robin.
    pub anti_entropy_page: usize,
    /// A peer's clock offset beyond this is counted (`clock_offset_warnings`) and logged at
    /// debug level.
    pub offset_warn_ms: u64,
    /// A member not heard from for this long stops counting as live for admission (its
    /// demand leaves the shares and, under the strict policy, this side's scale shrinks),
    /// long before SWIM declares it down.
    pub silence_threshold: Duration,
    /// A member that just joined (or restarted, or came back from a partition) counts as live
    /// only this long after it appeared: until its registers can have arrived, its demand is
    /// unknown, and counting it live would hand this side its share before knowing it.
    pub join_grace: Duration,
    /// Seeds the node's randomness (SWIM probe order, anti-entropy targets).
    pub rng_seed: u64,
    /// The node has peers (seeds, or a DNS name that will give some) even if none is known
    /// yet: it then admits nothing until it holds the cluster's state. Static seeds imply it.
    pub expect_peers: bool,
    /// The longest a node with peers waits for the cluster's state before it serves anyway
    /// (the first node of a fleet, or one whose seeds are all down).
    pub warmup_timeout: Duration,
    /// Send registers only to addresses that have echoed this node's cookie (see
    /// `return_route.rs`): for clusters whose datagrams anyone can forge (`cluster.insecure`).
    /// Every node of a cluster must agree: it adds 16 bytes to register and heartbeat bodies.
    pub verify_return_route: bool,
    /// Registers saved at the last stop (`limiter.state_path`): read and merged when the node
    /// is built, before it pushes or answers anything, and merged again at the end of the
    /// warm-up, on cluster time.
    pub state_path: Option<std::path::PathBuf>,
    /// How registers spread: by cluster size (the default), or one way whatever the size.
    pub dissemination: super::Dissemination,
    /// Places members on the ring of window owners (`placement.rs`): a secret every member
    /// shares, so that nobody outside the cluster can compute where a boot id lands and no one
    /// can solve for a boot id that lands where it likes (a member that holds the key can only
    /// try ids at random). Every member must have the same. Default: derived from
    /// `cluster_id` as [`NodeParams::new`] and [`NodeParams::set_cluster_id`] set it
    /// ([`super::ring_key_of_cluster`]).
    pub ring_key: [u8; 32],
    /// The digest of the rules this node enforces, as the rules layer keeps it up to date
    /// (`rules_digest.rs`): said to the members, compared with theirs. Default: none (0).
    pub rules_digest: super::RulesDigest,
}

impl NodeParams {
    pub fn new(node_id: uuid::Uuid, advertise: SocketAddr, rng_seed: u64) -> Self {
        Self {
            node_id,
            advertise,
            seeds: Vec::new(),
            cluster_id: "limitmesh".to_owned(),
            gossip_interval: Duration::from_millis(200),
            anti_entropy_interval: Duration::from_secs(5),
            max_packet_size: 1400,
            gc_interval: Duration::from_secs(1),
            gc_budget: 10_000,
            anti_entropy_page: 4_096,
            offset_warn_ms: 50,
            silence_threshold: Duration::from_millis(800),
            join_grace: Duration::from_millis(500),
            rng_seed,
            expect_peers: false,
            warmup_timeout: Duration::from_secs(5),
            verify_return_route: false,
            state_path: None,
            dissemination: super::Dissemination::Auto,
            ring_key: super::placement::ring_key_of_cluster("limitmesh"),
            rules_digest: super::RulesDigest::default(),
        }
    }

    /// Sets the cluster id, and the ring key derived from it (which a cluster with a secret
    /// of its own then sets after this).
    pub fn set_cluster_id(&mut self, cluster_id: &str) {
        self.cluster_id = cluster_id.to_owned();
        self.ring_key = super::placement::ring_key_of_cluster(cluster_id);
    }

    /// Sets the summary-round interval, and the times measured in rounds with it: a member is
    /// silent after four rounds without a word from it, and a newcomer counts as live after two
    /// and a half (never less than the defaults, 800 and 500 ms, which a 200 ms round gives).
    /// Fixed times would make members of a cluster with slower rounds go silent between rounds
    /// and their shares flap.
    pub fn set_gossip_interval(&mut self, interval: Duration) {
        self.gossip_interval = interval;
        self.silence_threshold = (interval * 4).max(Duration::from_millis(800));
        self.join_grace = (interval * 5 / 2).max(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_and_join_grace_follow_the_round_interval() {
        let addr = "10.0.0.1:7946".parse().unwrap();
        let mut p = NodeParams::new(uuid::Uuid::nil(), addr, 0);
        let defaults = (p.silence_threshold, p.join_grace);
        p.set_gossip_interval(Duration::from_millis(200));
        assert_eq!((p.silence_threshold, p.join_grace), defaults);
        p.set_gossip_interval(Duration::from_secs(1));
        assert_eq!(p.silence_threshold, Duration::from_secs(4));
        assert_eq!(p.join_grace, Duration::from_millis(2_500));
        p.set_gossip_interval(Duration::from_millis(20));
        assert_eq!((p.silence_threshold, p.join_grace), defaults);
    }
}
