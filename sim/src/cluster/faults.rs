//! Applying the fault schedule between simulation steps.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::FaultsFired;
use super::config::{Fault, SimConfig};
use super::host::{HostShared, host_name};

pub(super) fn in_partition(cfg: &SimConfig, t: u64) -> bool {
    cfg.faults.iter().any(|f| {
        matches!(f, Fault::Partition { from_ms, until_ms, .. } if t >= from_ms + 6_000 && t < *until_ms)
    })
}

pub(super) fn apply_faults(
    sim: &mut turmoil::Sim<'_>,
    cfg: &SimConfig,
    hosts: &[Arc<HostShared>],
    t: u64,
    fired: &mut FaultsFired,
) {
    for fault in &cfg.faults {
        match fault {
            Fault::Partition {
                side,
                from_ms,
                until_ms,
            } => {
                let pairs = || {
                    side.iter().flat_map(|a| {
                        (0..cfg.nodes)
                            .filter(|b| !side.contains(b))
                            .map(move |b| (host_name(*a), host_name(b)))
                    })
                };
                if t == *from_ms {
                    for (a, b) in pairs() {
                        sim.partition(a, b);
                    }
                    fired.partitions += 1;
                }
                if t == *until_ms {
                    for (a, b) in pairs() {
                        sim.repair(a, b);
                    }
                    fired.repairs += 1;
                }
            }
            Fault::Crash {
                node,
                at_ms,
                restart_ms,
            } => {
                if t == *at_ms {
                    if restart_ms == &Some(*at_ms) {
                        sim.bounce(host_name(*node));
                        fired.restarts += 1;
                    } else {
                        sim.crash(host_name(*node));
                    }
                    fired.crashes += 1;
                } else if restart_ms == &Some(t) {
                    sim.bounce(host_name(*node));
                    fired.restarts += 1;
                }
            }
            Fault::Loss {
                p,
                from_ms: Some(from),
                until_ms,
            } => {
                if t == *from {
                    for h in hosts {
                        h.net.set_loss(*p);
                    }
                } else if until_ms == &Some(t) {
                    for h in hosts {
                        h.net.set_loss(0.0);
                    }
                }
            }
            Fault::ClockStep { node, at_ms, by_ms } if t == *at_ms => {
                if let Some(h) = hosts.get(*node) {
                    h.clock.skew_ms.fetch_add(*by_ms, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }
}
