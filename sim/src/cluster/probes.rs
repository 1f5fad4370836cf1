//! Sampling the nodes from outside the simulation: staleness probes and convergence.

use std::sync::{Arc, Mutex};

use limitmesh::clock::Clock;

use super::config::{convergence_limit, probe_limit};
use super::host::{HostShared, Recorder, lock};
use super::{CONVERGENCE_KEY, PROBE_KEY};

/// Records, for every probe node 0 admitted, when each other node first counts it.
pub(super) fn observe_probes(
    hosts: &[Arc<HostShared>],
    recorder: &Arc<Mutex<Recorder>>,
    t: u64,
    seen: &mut [usize],
    staleness: &mut Vec<u64>,
) {
    let probes = lock(recorder).probes.clone();
    let Some(origin) = lock(&hosts[0].limiter).as_ref().map(|l| l.origin()) else {
        return;
    };
    for (j, h) in hosts.iter().enumerate().skip(1) {
        if seen[j] >= probes.len() {
            continue;
        }
        let (Some(limiter), Some(clock)) =
            (lock(&h.limiter).clone(), lock(&h.cluster_clock).clone())
        else {
            continue;
        };
        let Some(insp) = limiter.inspect(PROBE_KEY, &probe_limit(), clock.now_ms()) else {
            continue;
        };
        let counted = insp
            .origins
            .iter()
            .find(|o| o.origin == origin)
            .map_or(0, |o| o.admitted.round() as usize);
        while seen[j] < counted.min(probes.len()) {
            staleness.push(t - probes[seen[j]]);
            seen[j] += 1;
        }
    }
}

/// Whether every running node's estimate of the convergence key agrees within 1 %.
pub(super) fn estimates_agree(hosts: &[Arc<HostShared>]) -> bool {
    let mut estimates = Vec::new();
    for h in hosts {
        let (Some(limiter), Some(clock)) =
            (lock(&h.limiter).clone(), lock(&h.cluster_clock).clone())
        else {
            return false;
        };
        let est = limiter
            .inspect(CONVERGENCE_KEY, &convergence_limit(), clock.now_ms())
            .map_or(0.0, |i| i.global_admitted);

        estimates.push(est);
    }
    let max = estimates.iter().copied().fold(0.0, f64::max);
    let min = estimates.iter().copied().fold(f64::INFINITY, f64::min);
    max > 0.0 && max - min <= 0.01 * max
}
