//! The named scenarios of the design's measures (5 nodes, a limit of 1000 per 1 s window of 10
//! buckets, 200 ms gossip, 1–20 ms latency unless the scenario says otherwise).

use crate::cluster::{Fault, SimConfig};
use crate::workload::Workload;

pub const SCENARIOS: [&str; 21] = [
    "steady",
    "skewed",
    "burst",
    "burst-trickle",
    "partition",
    "restart",
    "loss",
    "loss36",
    "loss40",
    "loss-oneway",
    "skew",
    "skew500",
    "rollback",
    "skew8",
    "skew-12",
    "skew6x2",
    "skew8-4",
    "skew15",
    "skew90",
    "step5",
    "pair3",
];

/// The configuration of scenario `name`, or `None` if there is no such scenario.
pub fn scenario(name: &str, seed: u64, nodes: usize) -> Option<SimConfig> {
    let mut c = SimConfig::new(seed);
    c.nodes = nodes.max(2);
    let last = c.nodes - 1;
    match name {
        // Uniform 2× overload on the measured key, and 200 other keys in light use.
        "steady" => {
            c.probe_staleness = true;
            c.background = Some((200, 5.0));
        }
        // 2× overload, one node taking 80 % of it.
        "skewed" => {
            c.workload = Workload::Skewed {
                overload: 2.0,
                hot_share: 0.8,
            }
        }
        // Idle, then 10× at once on every node.
        "burst" => {
            c.duration_ms = 16_000;
            c.warmup_ms = 10_000;
            c.workload = Workload::Burst {
                overload: 10.0,
                onset_ms: 10_000,
            };
        }
        // As `burst`, but node 0 had a trickle (5 % of the limit) for the 10 s before.
        "burst-trickle" => {
            c.duration_ms = 16_000;
            c.warmup_ms = 10_000;
            c.workload = Workload::BurstAfterTrickle {
                overload: 10.0,
                onset_ms: 10_000,
                trickle: 0.05,
            };
        }
        // The last two nodes cut off from the first three for 20 s, then healed.
        "partition" => {
            c.duration_ms = 40_000;
            c.faults.push(Fault::Partition {
                side: vec![last - 1, last],
                from_ms: 10_000,
                until_ms: 30_000,
            });
            c.converge_at_ms = Some(30_000);
        }
        // The last node restarts (a new process, a new origin) under load.
        "restart" => {
            c.duration_ms = 20_000;
            c.faults.push(Fault::Crash {
                node: last,
                at_ms: 10_000,
                restart_ms: Some(10_000),
            });
            c.converge_at_ms = Some(10_000);
        }
        // 20 % of all datagrams lost.
        "loss" => c.faults.push(Fault::loss(0.2)),
        // 20 % lost on the way out of every node and 20 % on the way in: 36 % per datagram.
        "loss36" => c.faults.push(Fault::loss(0.36)),
        "loss40" => c.faults.push(Fault::loss(0.4)),
        // Node 1 hears node 0, node 0 never hears node 1.
        "loss-oneway" => c.faults.push(Fault::LossOneWay {
            from: 1,
            to: 0,
            p: 1.0,
        }),
        // Clocks spread over ±100 ms, or over ±500 ms.
        "skew" | "skew500" => {
            let spread = if name == "skew" { 100 } else { 500 };
            for i in 0..c.nodes {
                let ms = -spread + (2 * spread * i as i64) / (c.nodes as i64 - 1);
                c.faults.push(Fault::Skew { node: i, ms });
            }
        }
        // One node runs 500 ms fast, then NTP steps its clock back to the right time.
        "rollback" => {
            let node = 2.min(last);
            c.faults.push(Fault::Skew { node, ms: 500 });
            c.faults.push(Fault::ClockStep {
                node,
                at_ms: 10_000,
                by_ms: -500,
            });
        }
        // Clocks seconds off, from the start: one node +8 s; one −12 s; +6 s and −6 s; +8 s and
        // −4 s; one +15 s, beyond the default tolerance (`limiter.max_clock_drift_ms`, 10 s).
        "skew8" => c.faults.push(Fault::Skew { node: 1, ms: 8_000 }),
        "skew-12" => c.faults.push(Fault::Skew {
            node: 1,
            ms: -12_000,
        }),
        "skew6x2" => {
            c.faults.push(Fault::Skew { node: 1, ms: 6_000 });
            c.faults.push(Fault::Skew {
                node: last,
                ms: -6_000,
            });
        }
        "skew8-4" => {
            c.faults.push(Fault::Skew { node: 0, ms: 8_000 });
            c.faults.push(Fault::Skew {
                node: last,
                ms: -4_000,
            });
        }
        "skew15" => c.faults.push(Fault::Skew {
            node: 1,
            ms: 15_000,
        }),
        // Beyond the minute past which datagrams are refused as stale: the node cannot join.
        "skew90" => c.faults.push(Fault::Skew {
            node: 1,
            ms: 90_000,
        }),
        // A correct clock stepped 5 s ahead in the middle of the run (an operator, a VM resume).
        "step5" => c.faults.push(Fault::ClockStep {
            node: 1,
            at_ms: 10_000,
            by_ms: 5_000,
        }),
        // Two nodes, one clock 3 s ahead: no majority, they meet halfway.
        "pair3" => {
            c.nodes = 2;
            c.faults.push(Fault::Skew { node: 1, ms: 3_000 });
        }
        _ => return None,
    }
    Some(c)
}
