//! What a fleet run is: how many nodes, their network, their traffic and the faults.

use limitmesh::limiter::{LimiterConfig, Policy};
use limitmesh::node::Dissemination;

use super::traffic::Traffic;

/// A fault, at a time in the run (ms since the start).
#[derive(Debug, Clone, PartialEq)]
pub enum FleetFault {
    /// The first `⌈fraction × N⌉` nodes cannot reach the others from `from_ms` until
    /// `until_ms`.
    Partition {
        fraction: f64,
        from_ms: u64,
        until_ms: u64,
    },
    /// Node `node` dies at `at_ms`, for good (its traffic goes nowhere).
    Crash { node: usize, at_ms: u64 },
    /// A rolling deploy: `count` nodes, one every `every_ms` from `from_ms`, each stopped
    /// gracefully and replaced by a new process at a new address, which takes its traffic.
    Replace {
        count: usize,
        from_ms: u64,
        every_ms: u64,
    },
}

#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub seed: u64,
    pub nodes: usize,
    pub duration_ms: u64,
    /// Windows ending before this, and traffic before it, are left out of the measures.
    pub warmup_ms: u64,
    pub gossip_interval_ms: u64,
    pub min_latency_ms: u64,
    pub max_latency_ms: u64,
    /// Every datagram is lost with this probability.
    pub loss: f64,
    pub policy: Policy,
    pub dissemination: Dissemination,
    pub traffic: Traffic,
    pub faults: Vec<FleetFault>,
    /// Nodes every node is given as seeds (the first ones).
    pub seeds: usize,
    /// Nodes that watch node 0's probe admissions, for staleness.
    pub observers: usize,
    /// Every node's `LimiterConfig::credit_from_sums` (`--credit`): the whole-request credit
    /// where the others' demand comes in an owner's sum.
    pub credit_from_sums: f64,
}

impl FleetConfig {
    /// `nodes` nodes on 1–20 ms links, 200 ms rounds, the `fleet` traffic, 60 s of which the
    /// first 10 are warm-up.
    pub fn new(seed: u64, nodes: usize) -> Self {
        Self {
            seed,
            nodes: nodes.max(2),
            duration_ms: 60_000,
            warmup_ms: 10_000,
            gossip_interval_ms: 200,
            min_latency_ms: 1,
            max_latency_ms: 20,
            loss: 0.0,
            policy: Policy::default(),
            dissemination: Dissemination::Auto,
            traffic: Traffic::fleet(),
            faults: Vec::new(),
            seeds: 3,
            observers: 10,
            credit_from_sums: LimiterConfig::default().credit_from_sums,
        }
    }

    /// The nodes on the first side of the partition, if there is one.
    pub fn partition(&self) -> Option<(usize, u64, u64)> {
        self.faults.iter().find_map(|f| match f {
            FleetFault::Partition {
                fraction,
                from_ms,
                until_ms,
            } => Some((
                ((*fraction * self.nodes as f64).ceil() as usize).clamp(1, self.nodes - 1),
                *from_ms,
                *until_ms,
            )),
            _ => None,
        })
    }
}

/// The fleet scenarios.
pub const FLEET_SCENARIOS: [&str; 4] = [
    "fleet",
    "fleet-partition",
    "fleet-churn",
    "fleet-small-share",
];

/// The configuration of fleet scenario `name`, or `None` if there is no such scenario. Every
/// scenario also crashes one node for good 15 s before the end, to time failure detection.
pub fn fleet_scenario(name: &str, seed: u64, nodes: usize) -> Option<FleetConfig> {
    let mut c = FleetConfig::new(seed, nodes);
    let last = c.nodes - 1;
    match name {
        "fleet" => {}
        "fleet-partition" => c.faults.push(FleetFault::Partition {
            fraction: 0.6,
            from_ms: 20_000,
            until_ms: 40_000,
        }),
        "fleet-churn" => {
            let count = (c.nodes / 5).max(1);
            c.faults.push(FleetFault::Replace {
                count,
                from_ms: 12_000,
                every_ms: (30_000 / count as u64).max(1),
            });
        }
        "fleet-small-share" => c.traffic = Traffic::small_share(),
        _ => return None,
    }
    c.faults.push(FleetFault::Crash {
        node: last,
        at_ms: c.duration_ms - 15_000,
    });
    Some(c)
}
