//! Building and running a simulated cluster.
//!
//! Each host boots a real node (limiter, membership, gossip) on a simulated UDP socket and
//! drives its share of the workload straight into its limiter, recording every decision at the
//! simulation's true time. The harness outside the hosts applies the fault schedule between
//! steps and samples the nodes: how long a probe admission at node 0 takes to be counted at
//! every other node (staleness), and how long estimates take to agree after a restart or a
//! partition heals (convergence).

mod config;
mod faults;
mod host;
mod probes;
mod waits;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use limitmesh::node::WireSnapshot;

pub use self::config::SimDescriptor;
pub use self::config::{Fault, SimConfig};
use self::faults::{apply_faults, in_partition};
pub use self::host::Series;
use self::host::{HostShared, Recorder, host_main, host_name, lock};
use self::probes::{estimates_agree, observe_probes};

/// Wall time at the start of every simulation (2023-11-14T22:13:20Z).
pub const EPOCH_MS: u64 = 1_700_000_000_000;
pub(super) const PORT: u16 = 7946;
/// The main key every scenario measures.
pub const MAIN_KEY: &[u8] = b"tenant=42";
/// A key whose traffic stops at the convergence instant, on a long window.
pub(super) const CONVERGENCE_KEY: &[u8] = b"convergence";
pub(super) const PROBE_KEY: &[u8] = b"probe";
pub(super) const PROBE_EVERY_MS: u64 = 100;

/// Which injected faults took effect, so tests can assert they happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultsFired {
    pub datagrams_sent: u64,
    pub datagrams_dropped: u64,
    pub datagrams_duplicated: u64,
    pub partitions: u32,
    pub repairs: u32,
    pub crashes: u32,
    pub restarts: u32,
    /// Boots per node over the run.
    pub boots: Vec<u32>,
    /// Backward steps of the nodes' wall clocks that their cluster clocks saw.
    pub clock_rollbacks: u64,
    /// The smallest live-member count any node reported during a partition.
    pub min_live_during_partition: Option<usize>,
    /// The largest clock offset any node estimated for a peer (ms).
    pub max_estimated_offset_ms: i64,
    /// Forward steps of the nodes' wall clocks that their cluster clocks saw.
    pub clock_forward_steps: u64,
    /// Nodes that had cut themselves off for their clocks at the end, with their offsets
    /// from cluster time (ms).
    pub clock_fenced: Vec<(usize, i64)>,
    /// Times a node cut itself or a peer off for a clock, over the run.
    pub clock_fence_events: u64,
}

/// Everything a run recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub config_seed: u64,
    /// Admitted on the main key, per true millisecond, all nodes.
    pub admitted_per_ms: Vec<u32>,
    pub offered_per_ms: Vec<u32>,
    /// Admitted per node per millisecond.
    pub admitted_by_node: Vec<Vec<u32>>,
    /// Probe admission at node 0 → counted at another node, per probe and observer (ms).
    pub staleness_ms: Vec<u64>,
    /// Time from the convergence instant until every estimate agreed within 1 % (ms).
    pub convergence_ms: Option<u64>,
    pub wire: Vec<WireSnapshot>,
    pub faults: FaultsFired,
    /// Live members each node saw at the end.
    pub final_live: Vec<usize>,
    /// Every [`LIVE_SAMPLE_MS`]: the time (ms) and the members each node saw up (SWIM alive or
    /// suspect, itself included; 0 while it is down).
    pub live_samples: Vec<(u64, Vec<usize>)>,
    /// What each of [`SimConfig::descriptors`] recorded, in order.
    pub descriptors: Vec<Series>,
}

/// How often the members each node sees are sampled.
pub const LIVE_SAMPLE_MS: u64 = 100;

/// Runs a scenario to the end and returns what it recorded.
pub fn run(cfg: &SimConfig) -> turmoil::Result<Outcome> {
    let cfg = Arc::new(cfg.clone());
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_millis(cfg.duration_ms + 10_000))
        .tick_duration(Duration::from_millis(1))
        .epoch(UNIX_EPOCH + Duration::from_millis(EPOCH_MS))
        .rng_seed(cfg.seed)
        .min_message_latency(Duration::from_millis(cfg.min_latency_ms))
        .max_message_latency(Duration::from_millis(cfg.max_latency_ms))
        .udp_capacity(4_096)
        .build();
    let len = cfg.duration_ms as usize;
    let recorder = Arc::new(Mutex::new(Recorder {
        main: Series::new(cfg.nodes, len),
        descriptors: vec![Series::new(cfg.nodes, len); cfg.descriptors.len()],
        probes: Vec::new(),
    }));
    let hosts: Vec<Arc<HostShared>> = (0..cfg.nodes).map(|_| Arc::default()).collect();
    for (i, shared) in hosts.iter().enumerate() {
        for fault in &cfg.faults {
            match fault {
                Fault::Loss {
                    p, from_ms: None, ..
                } => shared.net.set_loss(*p),
                Fault::LossOneWay { from, to, p } if *from == i => {
                    shared.net.add_loss_to(host_name(*to), *p)
                }
                Fault::Duplication { p } => shared.net.set_duplication(*p),
                Fault::Skew { node, ms } if *node == i => {
                    shared.clock.skew_ms.store(*ms, Ordering::Relaxed)
                }
                _ => {}
            }
        }
        let (cfg, shared, recorder) = (cfg.clone(), shared.clone(), recorder.clone());
        sim.host(host_name(i), move || {
            host_main(i, cfg.clone(), shared.clone(), recorder.clone())
        });
    }

    let mut fired = FaultsFired::default();
    let mut staleness = Vec::new();
    let mut seen_probes = vec![0usize; cfg.nodes];
    let mut convergence = None;
    let mut live_samples = Vec::new();
    let mut t = 0u64;
    while t < cfg.duration_ms {
        apply_faults(&mut sim, &cfg, &hosts, t, &mut fired);
        for h in &hosts {
            h.clock
                .outside_now_ms
                .store(EPOCH_MS + t, Ordering::Relaxed);
            h.clock.outside_elapsed_ms.store(t, Ordering::Relaxed);
        }
        sim.step()?;
        t = sim.elapsed().as_millis() as u64;
        for h in &hosts {
            h.clock
                .outside_now_ms
                .store(EPOCH_MS + t, Ordering::Relaxed);
            h.clock.outside_elapsed_ms.store(t, Ordering::Relaxed);
        }
        if in_partition(&cfg, t) {
            let live = hosts
                .iter()
                .filter_map(|h| lock(&h.view).as_ref().map(|v| v.live_count()))
                .min();
            fired.min_live_during_partition = match (fired.min_live_during_partition, live) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if cfg.probe_staleness {
            observe_probes(&hosts, &recorder, t, &mut seen_probes, &mut staleness);
        }
        if t.is_multiple_of(LIVE_SAMPLE_MS) {
            let live = hosts
                .iter()
                .map(|h| lock(&h.view).as_ref().map_or(0, |v| v.live_count()))
                .collect();
            live_samples.push((t, live));
        }
        if let Some(at) = cfg.converge_at_ms
            && convergence.is_none()
            && t > at
            && t.is_multiple_of(5)
            && estimates_agree(&hosts)
        {
            convergence = Some(t - at);
        }
    }

    let rec = std::mem::take(&mut *lock(&recorder));
    let mut wire = Vec::new();
    for h in &hosts {
        fired.datagrams_sent += h.net.sent.load(Ordering::Relaxed);
        fired.datagrams_dropped += h.net.dropped.load(Ordering::Relaxed);
        fired.datagrams_duplicated += h.net.duplicated.load(Ordering::Relaxed);
        fired.boots.push(h.boots.load(Ordering::Relaxed));
        fired.clock_rollbacks += h.past_rollbacks.load(Ordering::Relaxed)
            + lock(&h.cluster_clock).as_ref().map_or(0, |g| g.rollbacks());
        fired.clock_forward_steps += lock(&h.cluster_clock)
            .as_ref()
            .map_or(0, |g| g.forward_steps());
        let mut snaps = lock(&h.past_wire).clone();
        if let Some(v) = lock(&h.view).as_ref() {
            snaps.push(v.wire.snapshot());
            fired.clock_fence_events += v.clock.fence_events.load(Ordering::Relaxed);
            if v.clock.fenced.load(Ordering::Relaxed) {
                let node = hosts
                    .iter()
                    .position(|x| Arc::ptr_eq(x, h))
                    .unwrap_or(usize::MAX);
                fired
                    .clock_fenced
                    .push((node, v.clock.offset_ms.load(Ordering::Relaxed)));
            }
            for m in v.members().iter() {
                if let Some(o) = m.clock_offset_ms {
                    fired.max_estimated_offset_ms = fired.max_estimated_offset_ms.max(o.abs());
                }
            }
        }
        wire.extend(snaps);
    }
    let final_live = hosts
        .iter()
        .map(|h| lock(&h.view).as_ref().map_or(0, |v| v.live_count()))
        .collect();
    Ok(Outcome {
        config_seed: cfg.seed,
        admitted_per_ms: rec.main.admitted_per_ms,
        offered_per_ms: rec.main.offered_per_ms,
        admitted_by_node: rec.main.admitted_by_node,
        staleness_ms: staleness,
        convergence_ms: convergence,
        wire,
        faults: fired,
        final_live,
        live_samples,
        descriptors: rec.descriptors,
    })
}
