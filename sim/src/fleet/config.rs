//! What a fleet run is: how many nodes, their network, their traffic and the faults; and the
//! bounds a run is held to, so that no description of one (a traffic file, `--nodes`) makes the
//! simulator allocate without bound.

use limitmesh::limiter::{LimiterConfig, Policy};
use limitmesh::node::Dissemination;

use super::traffic::Traffic;

/// Admissions are recorded in slots of this many ms (measured windows slide by one slot).
pub const SLOT_MS: u64 = 10;

/// Most nodes in a run: a node's core and the tables it keeps of the others take the run's
/// memory to gigabytes past this.
pub const MAX_NODES: usize = 5_000;
/// Longest run: three simulated hours, room for an hour-long window measured after one of
/// warm-up.
pub const MAX_DURATION_MS: u64 = 3 * 3_600_000;
/// Most (key, node using it) streams: each is a few bytes of the arrivals' tables and a key's
/// state at a node.
pub const MAX_STREAMS: usize = 1_000_000;
/// Most requests a second offered at the loads' peaks, all keys together: a run's work.
pub const MAX_REQUESTS_PER_S: f64 = 10_000_000.0;
/// Most counters the recorder keeps: two for every 10 ms slot of every overloaded key, two
/// for every window of every node on a key all nodes share (8 bytes a cell).
pub const MAX_RECORDED_CELLS: u64 = 100_000_000;

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

    /// When the first crash is, if there is one.
    pub fn first_crash_ms(&self) -> Option<u64> {
        self.faults
            .iter()
            .filter_map(|f| match f {
                FleetFault::Crash { at_ms, .. } => Some(*at_ms),
                _ => None,
            })
            .min()
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
pub const FLEET_SCENARIOS: [&str; 5] = [
    "fleet",
    "fleet-fast-links",
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
        "fleet-fast-links" => (c.min_latency_ms, c.max_latency_ms) = (1, 2),
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

/// Checks that `cfg` stays within the simulator's bounds ([`MAX_NODES`], [`MAX_STREAMS`],
/// [`MAX_REQUESTS_PER_S`], [`MAX_RECORDED_CELLS`]); the error says which is passed, and by
/// how much.
pub fn check_size(cfg: &FleetConfig) -> Result<(), String> {
    let nodes = cfg.nodes;
    if !(2..=MAX_NODES).contains(&nodes) {
        return Err(format!("{nodes} nodes: expected 2 to {MAX_NODES}"));
    }
    let streams = cfg.traffic.streams(nodes);
    if streams > MAX_STREAMS {
        return Err(format!(
            "{streams} streams (a key's nodes, summed over the keys) on {nodes} nodes: \
             at most {MAX_STREAMS}"
        ));
    }
    let (mut per_s, mut measured) = (0.0f64, 0u64);
    for c in &cfg.traffic.classes {
        let keys = c.key_count(nodes);
        let overloaded = keys.div_ceil(c.overloaded_every.max(1));
        let rate = f64::from(c.limit) * 1_000.0 / c.window_ms.max(1) as f64 / f64::from(c.cost);
        for (count, load) in [(overloaded, &c.overload), (keys - overloaded, &c.underload)] {
            per_s += count as f64 * rate * load.peak();
            if load.peak() > 1.0 {
                measured += count as u64;
            }
        }
    }
    if !per_s.is_finite() || per_s > MAX_REQUESTS_PER_S {
        return Err(format!(
            "{per_s:.0} requests a second offered at the peak on {nodes} nodes: at most \
             {MAX_REQUESTS_PER_S:.0}"
        ));
    }
    let slots = cfg.duration_ms.div_ceil(SLOT_MS);
    let mut cells = measured.saturating_mul(slots);
    // The recorder's per-node windows, when the run's only key is every node's.
    let mut with_keys = cfg
        .traffic
        .classes
        .iter()
        .filter(|c| c.key_count(nodes) > 0);
    if let (Some(only), None) = (with_keys.next(), with_keys.next())
        && only.key_count(nodes) == 1
        && only.users_per_key(nodes) == nodes
    {
        let windows = cfg.duration_ms.div_ceil(only.window_ms.max(1));
        cells = cells.saturating_add((nodes as u64).saturating_mul(windows));
    }
    if cells > MAX_RECORDED_CELLS {
        return Err(format!(
            "{measured} overloaded keys over {} ms on {nodes} nodes: {cells} recorded counters, \
             at most {MAX_RECORDED_CELLS} (fewer overloaded keys or a shorter run)",
            cfg.duration_ms
        ));
    }
    Ok(())
}
