//! Building and running a simulated cluster.
//!
//! Each host boots a real node (limiter, membership, gossip) on a simulated UDP socket and
//! drives its share of the workload straight into its limiter, recording every decision at the
//! simulation's true time. The harness outside the hosts applies the fault schedule between
//! steps and samples the nodes: how long a probe admission at node 0 takes to be counted at
//! every other node (staleness), and how long estimates take to agree after a restart or a
//! partition heals (convergence).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use limitmesh::clock::{Clock, ClusterClock};
use limitmesh::gossip::wire::Keyring;
use limitmesh::limiter::{
    CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig, Policy,
};
use limitmesh::node::{ClusterView, Node, NodeBuilder, NodeKeys, NodeParams, WireSnapshot};
use limitmesh::window::WindowSpec;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::mpsc;

use crate::clock::{ClockControl, SimClock};
use crate::net::{NetFaults, SimSocket};
use crate::workload::{Workload, poisson};

/// Wall time at the start of every simulation (2023-11-14T22:13:20Z).
pub const EPOCH_MS: u64 = 1_700_000_000_000;
const PORT: u16 = 7946;
/// The main key every scenario measures.
pub const MAIN_KEY: &[u8] = b"tenant=42";
/// A key whose traffic stops at the convergence instant, on a long window.
const CONVERGENCE_KEY: &[u8] = b"convergence";
const PROBE_KEY: &[u8] = b"probe";
const PROBE_EVERY_MS: u64 = 100;

/// A fault, at a time in the simulation (ms since start).
#[derive(Debug, Clone, PartialEq)]
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
    /// Every datagram is lost with probability `p`, all run long.
    Loss { p: f64 },
    /// Datagrams from `from` to `to` (only that way) are lost with probability `p`.
    LossOneWay { from: usize, to: usize, p: f64 },
    /// Every datagram is delivered twice with probability `p`, all run long.
    Duplication { p: f64 },
    /// The node's wall clock is off by `ms` (positive: ahead), all run long.
    Skew { node: usize, ms: i64 },
    /// The node's wall clock steps by `by_ms` at `at_ms` (negative: back, a rollback).
    ClockStep { node: usize, at_ms: u64, by_ms: i64 },
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

fn convergence_limit() -> Limit {
    Limit {
        max: 1_000_000,
        window: WindowSpec::with_default_buckets(10_000).expect("valid"),
    }
}

fn probe_limit() -> Limit {
    Limit {
        max: u32::MAX,
        window: WindowSpec::with_default_buckets(60_000).expect("valid"),
    }
}

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
}

#[derive(Debug, Default)]
struct Recorder {
    admitted: Vec<u32>,
    offered: Vec<u32>,
    by_node: Vec<Vec<u32>>,
    probes: Vec<u64>,
}

impl Recorder {
    fn record(&mut self, node: usize, t_ms: u64, allowed: bool) {
        let t = t_ms as usize;
        if t >= self.offered.len() {
            return;
        }
        self.offered[t] += 1;
        if allowed {
            self.admitted[t] += 1;
            self.by_node[node][t] += 1;
        }
    }
}

/// What the harness shares with every boot of one host.
#[derive(Debug, Default)]
struct HostShared {
    clock: Arc<ClockControl>,
    net: Arc<NetFaults>,
    boots: AtomicU32,
    limiter: Mutex<Option<Arc<Limiter>>>,
    cluster_clock: Mutex<Option<Arc<ClusterClock<SimClock>>>>,
    view: Mutex<Option<Arc<ClusterView>>>,
    /// Backward steps seen by earlier boots.
    past_rollbacks: AtomicU64,
    past_wire: Mutex<Vec<WireSnapshot>>,
}

fn host_name(i: usize) -> String {
    format!("n{i}")
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut x =
        seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^ (x >> 33)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn host_main(
    i: usize,
    cfg: Arc<SimConfig>,
    shared: Arc<HostShared>,
    recorder: Arc<Mutex<Recorder>>,
) -> turmoil::Result {
    let boot = shared.boots.fetch_add(1, Ordering::Relaxed);
    let mut rng = StdRng::seed_from_u64(mix(cfg.seed, i as u64, u64::from(boot)));
    let socket = turmoil::net::UdpSocket::bind(("0.0.0.0", PORT)).await?;
    let advertise = SocketAddr::new(turmoil::lookup(host_name(i)), PORT);
    let node_id = uuid::Uuid::from_u128(rng.random());
    // A new boot: bank the previous boot's counters before replacing it.
    if let Some(old) = lock(&shared.cluster_clock).take() {
        shared
            .past_rollbacks
            .fetch_add(old.rollbacks(), Ordering::Relaxed);
    }
    if let Some(old) = lock(&shared.view).take() {
        lock(&shared.past_wire).push(old.wire.snapshot());
    }
    let mut params = NodeParams::new(node_id, advertise, rng.random());
    params.cluster_id = "sim".into();
    params.gossip_interval = Duration::from_millis(cfg.gossip_interval_ms);
    params.seeds = (0..cfg.nodes.min(2))
        .map(|s| SocketAddr::new(turmoil::lookup(host_name(s)), PORT))
        .collect();
    let keys = NodeKeys {
        keyring: Keyring::new(&[[42u8; 32]])?,
        hasher: KeyHasher::from_secret(b"simulated cluster"),
    };
    let limiter_config = LimiterConfig {
        policy: cfg.policy,
        ..LimiterConfig::default()
    };
    let core = NodeBuilder::new(
        params,
        limiter_config,
        keys,
        SimClock::new(shared.clock.clone()),
    )
    .build()?;
    let (clock, limiter) = (core.clock().clone(), core.limiter().clone());
    *lock(&shared.limiter) = Some(limiter.clone());
    *lock(&shared.cluster_clock) = Some(clock.clone());
    *lock(&shared.view) = Some(core.view().clone());
    let socket = Arc::new(SimSocket::new(socket, shared.net.clone(), rng.random()));
    let node = Node::new(core, socket);
    let (_commands, rx) = mpsc::channel(1);
    let work = drive(i, cfg, limiter, clock, recorder, rng);
    tokio::join!(node.run(rx, std::future::pending()), work);
    Ok(())
}

/// This node's share of the workload, one tick per millisecond.
async fn drive(
    i: usize,
    cfg: Arc<SimConfig>,
    limiter: Arc<Limiter>,
    clock: Arc<ClusterClock<SimClock>>,
    recorder: Arc<Mutex<Recorder>>,
    mut rng: StdRng,
) {
    let main = cfg.main_limit();
    let conv = convergence_limit();
    let probe = probe_limit();
    let background_keys: Vec<Vec<u8>> = (0..cfg.background.map_or(0, |(n, _)| n))
        .map(|k| format!("background={k}").into_bytes())
        .collect();
    let background_lambda = cfg
        .background
        .map_or(0.0, |(n, per_s)| n as f64 * per_s / 1_000.0);
    let background_limit = Limit {
        max: u32::MAX,
        window: main.window,
    };
    let check = |key: &[u8], limit: Limit| {
        let item = [CheckItem {
            key,
            limit,
            cost: 1,
        }];
        limiter
            .check(
                &CheckRequest {
                    items: &item,
                    dry_run: false,
                },
                clock.now_ms(),
            )
            .map(|d| d.allowed)
            .unwrap_or(false)
    };
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut next_probe = 0;
    let mut probes_sent = 0u64;
    loop {
        tick.tick().await;
        let t = turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64);
        if t >= cfg.duration_ms {
            return;
        }
        let lambda = cfg
            .workload
            .rate_per_ms(i, cfg.nodes, t, f64::from(cfg.limit), cfg.window_ms);
        for _ in 0..poisson(lambda, &mut rng) {
            let allowed = check(MAIN_KEY, main);
            lock(&recorder).record(i, t, allowed);
        }
        for _ in 0..poisson(background_lambda, &mut rng) {
            let k = rng.random_range(0..background_keys.len());
            check(&background_keys[k], background_limit);
        }
        if cfg.converge_at_ms.is_some_and(|c| t < c) {
            for _ in 0..poisson(0.05, &mut rng) {
                check(CONVERGENCE_KEY, conv);
            }
        }
        if cfg.probe_staleness && i == 0 && t >= next_probe {
            // Only an admitted probe is counted anywhere (a node warming up admits nothing).
            if check(PROBE_KEY, probe) {
                lock(&recorder).probes.push(t);
            }
            // Every 100 ms on average, at phases spread over the gossip round (37 is prime
            // to 100): probes all in phase with the round would measure the order in which
            // tasks run within one millisecond rather than staleness.
            probes_sent += 1;
            next_probe = t + PROBE_EVERY_MS / 2 + (probes_sent * 37) % PROBE_EVERY_MS;
        }
    }
}

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
        admitted: vec![0; len],
        offered: vec![0; len],
        by_node: vec![vec![0; len]; cfg.nodes],
        probes: Vec::new(),
    }));
    let hosts: Vec<Arc<HostShared>> = (0..cfg.nodes).map(|_| Arc::default()).collect();
    for (i, shared) in hosts.iter().enumerate() {
        for fault in &cfg.faults {
            match fault {
                Fault::Loss { p } => shared.net.set_loss(*p),
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
        admitted_per_ms: rec.admitted,
        offered_per_ms: rec.offered,
        admitted_by_node: rec.by_node,
        staleness_ms: staleness,
        convergence_ms: convergence,
        wire,
        faults: fired,
        final_live,
    })
}

fn in_partition(cfg: &SimConfig, t: u64) -> bool {
    cfg.faults.iter().any(|f| {
        matches!(f, Fault::Partition { from_ms, until_ms, .. } if t >= from_ms + 6_000 && t < *until_ms)
    })
}

fn apply_faults(
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
            Fault::ClockStep { node, at_ms, by_ms } if t == *at_ms => {
                if let Some(h) = hosts.get(*node) {
                    h.clock.skew_ms.fetch_add(*by_ms, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }
}

/// Records, for every probe node 0 admitted, when each other node first counts it.
fn observe_probes(
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
fn estimates_agree(hosts: &[Arc<HostShared>]) -> bool {
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
