//! What a simulated run is: the cluster, its traffic, and the faults on a timeline.

use limitmesh::limiter::{Limit, Policy};
use limitmesh::window::WindowSpec;

use crate::workload::Workload;

/// A fault, at a time in the simulation (ms since start). In a scenario file, a `[[faults]]`
/// table whose `kind` is the variant's name in kebab case (`scenario_file.rs`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// `side` cannot reach the other nodes from `from_ms` until `until_ms`.
    Partition {
        side: Vec<usize>,
        from_ms: u64,
        until_ms: u64,
    },
    /// The node's process dies at `at_ms` and, if `restart_ms` is set, boots again then.
    Crash {
        node: usize,
        at_ms: u64,
        restart_ms: Option<u64>,
    },
    /// Every datagram is lost with probability `p`: all run long, or from `from_ms` until
    /// `until_ms` (the end of the run if not given).
    Loss {
        p: f64,
        #[serde(default)]
        from_ms: Option<u64>,
        #[serde(default)]
        until_ms: Option<u64>,
    },
    /// Datagrams from `from` to `to` (only that way) are lost with probability `p`.
    LossOneWay { from: usize, to: usize, p: f64 },
    /// Every datagram is delivered twice with probability `p`, all run long.
    Duplication { p: f64 },
    /// The node's wall clock is off by `ms` (positive: ahead), all run long.
    Skew { node: usize, ms: i64 },
    /// The node's wall clock steps by `by_ms` at `at_ms` (negative: back, a rollback).
    ClockStep { node: usize, at_ms: u64, by_ms: i64 },
}

impl Fault {
    /// `p` of every datagram lost, all run long.
    pub fn loss(p: f64) -> Self {
        Fault::Loss {
            p,
            from_ms: None,
            until_ms: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub nodes: usize,
    pub duration_ms: u64,
    /// Windows ending before this are left out of the measures.
    pub warmup_ms: u64,
    pub limit: u32,
    pub window_ms: u64,
    pub buckets: u16,
    pub policy: Policy,
    pub gossip_interval_ms: u64,
    pub min_latency_ms: u64,
    pub max_latency_ms: u64,
    pub workload: Workload,
    pub faults: Vec<Fault>,
    /// When set, traffic on the convergence key stops then, and the time until every node's
    /// estimate of it agrees within 1 % is measured.
    pub converge_at_ms: Option<u64>,
    /// Measure staleness with probe admissions at node 0.
    pub probe_staleness: bool,
    /// Other keys with light traffic (never limited), so that rounds carry many registers as
    /// in a real deployment: `(keys, requests per second per key per node)`.
    pub background: Option<(usize, f64)>,
    /// The main limit's descriptor, as a person would name it (`tenant=acme`), when known.
    pub main_name: Option<String>,
    /// More limited descriptors, each with its own limit and traffic, measured like the main
    /// one. Their traffic comes as requests of their own, beside the main key's.
    pub descriptors: Vec<SimDescriptor>,
}

/// A limited descriptor besides the main one, with its own limit and offered load.
#[derive(Debug, Clone, PartialEq)]
pub struct SimDescriptor {
    /// What reports call it (`tenant=globex`); unique within a run.
    pub name: String,
    pub limit: u32,
    pub window_ms: u64,
    pub buckets: u16,
    pub workload: Workload,
}

impl SimDescriptor {
    pub fn limit(&self) -> Limit {
        Limit {
            max: self.limit,
            window: WindowSpec::new(self.window_ms, self.buckets, Default::default())
                .unwrap_or_else(|_| WindowSpec::with_default_buckets(1_000).expect("valid")),
        }
    }
}

impl SimConfig {
    /// 5 nodes, a 1 s window of 10 buckets and a limit of 1000, 200 ms gossip, 1–20 ms
    /// latency, uniform 2× overload for 30 s.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            nodes: 5,
            duration_ms: 30_000,
            warmup_ms: 5_000,
            limit: 1_000,
            window_ms: 1_000,
            buckets: 10,
            policy: Policy::default(),
            gossip_interval_ms: 200,
            min_latency_ms: 1,
            max_latency_ms: 20,
            workload: Workload::Uniform { overload: 2.0 },
            faults: Vec::new(),
            converge_at_ms: None,
            probe_staleness: false,
            background: None,
            main_name: None,
            descriptors: Vec::new(),
        }
    }

    pub fn main_limit(&self) -> Limit {
        Limit {
            max: self.limit,
            window: WindowSpec::new(self.window_ms, self.buckets, Default::default())
                .unwrap_or_else(|_| WindowSpec::with_default_buckets(1_000).expect("valid")),
        }
    }
}

pub(super) fn convergence_limit() -> Limit {
    Limit {
        max: 1_000_000,
        window: WindowSpec::with_default_buckets(10_000).expect("valid"),
    }
}

pub(super) fn probe_limit() -> Limit {
    Limit {
        max: u32::MAX,
        window: WindowSpec::with_default_buckets(60_000).expect("valid"),
    }
}
