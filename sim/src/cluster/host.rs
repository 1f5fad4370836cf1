//! One simulated host: each boot builds a real node on a simulated socket and drives its share
//! of the workload straight into its limiter, recording every decision at true time.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use limitmesh::clock::ClusterClock;
use limitmesh::gossip::wire::Keyring;
use limitmesh::limiter::{KeyHasher, Limit, Limiter, LimiterConfig};
use limitmesh::node::{ClusterView, Node, NodeBuilder, NodeKeys, NodeParams, WireSnapshot};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::mpsc;

use super::config::{SimConfig, convergence_limit, probe_limit};
use super::waits::{Requests, Traffic};
use super::{CONVERGENCE_KEY, MAIN_KEY, PORT, PROBE_EVERY_MS, PROBE_KEY};
use crate::clock::{ClockControl, SimClock};
use crate::net::{NetFaults, SimSocket};
use crate::workload::poisson;

/// One limited descriptor's decisions, per true millisecond.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Admitted, all nodes.
    pub admitted_per_ms: Vec<u32>,
    /// Offered, all nodes.
    pub offered_per_ms: Vec<u32>,
    /// Admitted per node.
    pub admitted_by_node: Vec<Vec<u32>>,
}

impl Series {
    pub(super) fn new(nodes: usize, len: usize) -> Self {
        Self {
            admitted_per_ms: vec![0; len],
            offered_per_ms: vec![0; len],
            admitted_by_node: vec![vec![0; len]; nodes],
        }
    }

    /// A request arrived at true ms `t`.
    fn offered(&mut self, t: u64) {
        if let Some(n) = self.offered_per_ms.get_mut(t as usize) {
            *n += 1;
        }
    }

    /// A request was admitted at `node` at true ms `t` (under the ledger, possibly a few ms
    /// after it arrived: when the token it waited for came).
    fn admitted(&mut self, node: usize, t: u64) {
        if let Some(n) = self.admitted_per_ms.get_mut(t as usize) {
            *n += 1;
            self.admitted_by_node[node][t as usize] += 1;
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Recorder {
    pub main: Series,
    /// One per [`SimConfig::descriptors`], in order.
    pub descriptors: Vec<Series>,
    pub probes: Vec<u64>,
}

/// What the harness shares with every boot of one host.
#[derive(Debug, Default)]
pub(super) struct HostShared {
    pub clock: Arc<ClockControl>,
    pub net: Arc<NetFaults>,
    pub boots: AtomicU32,
    pub limiter: Mutex<Option<Arc<Limiter>>>,
    pub cluster_clock: Mutex<Option<Arc<ClusterClock<SimClock>>>>,
    pub view: Mutex<Option<Arc<ClusterView>>>,
    /// Backward steps seen by earlier boots.
    pub past_rollbacks: AtomicU64,
    pub past_wire: Mutex<Vec<WireSnapshot>>,
}

pub(super) fn host_name(i: usize) -> String {
    format!("n{i}")
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut x =
        seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^ (x >> 33)
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) async fn host_main(
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
    params.set_gossip_interval(Duration::from_millis(cfg.gossip_interval_ms));
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
    // Room for a millisecond's asks at the busiest scenario's rate; a full channel skips an
    // ask, as the gRPC service's does.
    let (commands, rx) = mpsc::channel(256);
    let requests = Requests::new(limiter, clock, commands);
    let work = drive(i, cfg, requests, recorder, rng);
    tokio::join!(node.run(rx, std::future::pending()), work);
    Ok(())
}

/// This node's share of the workload, one tick per millisecond.
async fn drive(
    i: usize,
    cfg: Arc<SimConfig>,
    mut requests: Requests,
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
    // Keys of their own: a descriptor's name could be anything, the main key included.
    let extra: Vec<(Vec<u8>, Limit)> = cfg
        .descriptors
        .iter()
        .enumerate()
        .map(|(d, desc)| (format!("descriptor/{d}").into_bytes(), desc.limit()))
        .collect();
    // Records what a request was decided at `t`: admitted or refused.
    let record = |traffic: Traffic, admitted: bool, t: u64| {
        if !admitted {
            return;
        }
        let mut rec = lock(&recorder);
        match traffic {
            Traffic::Main => rec.main.admitted(i, t),
            Traffic::Descriptor(d) => rec.descriptors[d].admitted(i, t),
            Traffic::Probe => rec.probes.push(t),
            Traffic::Unrecorded => {}
        }
    };
    let mut decided = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut next_probe = 0;
    let mut probes_sent = 0u64;
    loop {
        tick.tick().await;
        let t = turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64);
        if t >= cfg.duration_ms {
            return;
        }
        requests.retry(t, &mut decided);
        for (traffic, admitted) in decided.drain(..) {
            record(traffic, admitted, t);
        }
        let mut offer = |traffic: Traffic, key: &[u8], limit: Limit| {
            match traffic {
                Traffic::Main => lock(&recorder).main.offered(t),
                Traffic::Descriptor(d) => lock(&recorder).descriptors[d].offered(t),
                Traffic::Probe | Traffic::Unrecorded => {}
            }
            if let Some(admitted) = requests.check(traffic, key, limit, t) {
                record(traffic, admitted, t);
            }
        };
        let lambda = cfg
            .workload
            .rate_per_ms(i, cfg.nodes, t, f64::from(cfg.limit), cfg.window_ms);
        for _ in 0..poisson(lambda, &mut rng) {
            offer(Traffic::Main, MAIN_KEY, main);
        }
        // After the main key's draws, so that a run without more descriptors draws as before.
        for (d, (desc, (key, limit))) in cfg.descriptors.iter().zip(&extra).enumerate() {
            let lambda =
                desc.workload
                    .rate_per_ms(i, cfg.nodes, t, f64::from(desc.limit), desc.window_ms);
            for _ in 0..poisson(lambda, &mut rng) {
                offer(Traffic::Descriptor(d), key, *limit);
            }
        }
        for _ in 0..poisson(background_lambda, &mut rng) {
            let k = rng.random_range(0..background_keys.len());
            offer(Traffic::Unrecorded, &background_keys[k], background_limit);
        }
        if cfg.converge_at_ms.is_some_and(|c| t < c) {
            for _ in 0..poisson(0.05, &mut rng) {
                offer(Traffic::Unrecorded, CONVERGENCE_KEY, conv);
            }
        }
        if cfg.probe_staleness && i == 0 && t >= next_probe {
            // Only an admitted probe is counted anywhere (a node warming up admits nothing).
            offer(Traffic::Probe, PROBE_KEY, probe);
            // Every 100 ms on average, at phases spread over the gossip round (37 is prime
            // to 100): probes all in phase with the round would measure the order in which
            // tasks run within one millisecond rather than staleness.
            probes_sent += 1;
            next_probe = t + PROBE_EVERY_MS / 2 + (probes_sent * 37) % PROBE_EVERY_MS;
        }
    }
}
