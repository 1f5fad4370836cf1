//! The discrete-event engine: node cores driven in one thread, in virtual time.
//!
//! Events (a datagram arriving, a node's wake-up, a request, a fault, a sample) are taken
//! earliest first, ties in the order they were made (a request that arrives in the same
//! microsecond as another event comes after it), so a seed gives the same run byte for byte. A datagram's latency is drawn uniformly between the configured bounds; loss and
//! partitions drop it at the sender. Each node is a real [`NodeCore`] with a real limiter:
//! only the socket and the clocks are simulated.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use limitmesh::clock::{Now, monotonic_now};
use limitmesh::gossip::wire::Keyring;
use limitmesh::limiter::{KeyHasher, LimiterConfig};
use limitmesh::node::{NodeBuilder, NodeCore, NodeKeys, NodeParams};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::arrivals::Arrivals;
use super::config::{FleetConfig, FleetFault};
use super::event::{Event, EventQueue};
use super::record::Recorder;
use super::traffic::{self, KeySpec};
use super::vtime::{NodeTime, VirtualClock};

const PORT: u16 = 7946;

/// A request waiting at a node.
#[derive(Debug, Clone, Copy)]
pub(super) struct Waiting {
    pub key: usize,
    /// Until when it waits (µs of the run).
    pub until_us: u64,
}

/// One place in the fleet: the node process running there now (if any), its address, and
/// what crossed its socket.
#[derive(Debug)]
pub(super) struct Slot {
    pub core: Option<NodeCore<NodeTime>>,
    addr: SocketAddr,
    boots: u32,
    wake_us: u64,
    wake_generation: u64,
    skew_ms: Arc<AtomicI64>,
    /// Requests waiting for a token here (the ledger: `waiting.rs`).
    pub(super) waiting: Vec<Waiting>,
    /// The node's count of lease arrivals when its waiting requests last looked.
    pub(super) leases_seen: u64,
}

/// A run in progress.
pub struct Engine<'c> {
    pub cfg: &'c FleetConfig,
    pub keys: Vec<KeySpec>,
    clock: Arc<VirtualClock>,
    t0: Instant,
    pub(super) now_us: u64,
    events: EventQueue,
    pub(super) slots: Vec<Slot>,
    by_addr: BTreeMap<SocketAddr, usize>,
    arrivals: Arrivals,
    rng: StdRng,
    pub rec: Recorder,
    pub(super) partition: Option<(usize, bool)>,
    pub(super) probes_sent: u64,
    /// Replaced or crashed boots whose absence the others have yet to count: (boot id, since).
    pub(super) pending_detection: Vec<(uuid::Uuid, u64)>,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("now_us", &self.now_us)
            .field("nodes", &self.slots.len())
            .finish_non_exhaustive()
    }
}

fn slot_addr(slot: usize, boot: u32) -> SocketAddr {
    let [_, _, hi, lo] = (slot as u32).to_be_bytes();
    SocketAddr::from((
        Ipv4Addr::new(10, 100u8.wrapping_add(boot as u8), hi, lo),
        PORT,
    ))
}

pub(super) fn ms(us: u64) -> u64 {
    us / 1_000
}

impl<'c> Engine<'c> {
    pub fn new(cfg: &'c FleetConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0xF1EE_7000);
        let keys = traffic::keys(&cfg.traffic, cfg.nodes, &mut rng);
        let arrivals = Arrivals::new(&keys, &cfg.traffic, cfg.seed, cfg.duration_ms);
        let rec = Recorder::new(cfg, &keys);
        let mut engine = Self {
            cfg,
            keys,
            clock: Arc::new(VirtualClock::default()),
            t0: monotonic_now(),
            now_us: 0,
            events: EventQueue::default(),
            slots: Vec::new(),
            by_addr: BTreeMap::new(),
            arrivals,
            rng,
            rec,
            partition: None,
            probes_sent: 0,
            pending_detection: Vec::new(),
        };
        for slot in 0..cfg.nodes {
            engine.slots.push(Slot {
                core: None,
                addr: slot_addr(slot, 0),
                boots: 0,
                wake_us: u64::MAX,
                wake_generation: 0,
                skew_ms: Arc::new(AtomicI64::new(0)),
                waiting: Vec::new(),
                leases_seen: 0,
            });
        }
        // Real processes start at unrelated moments, so their summary rounds fall at unrelated
        // phases; booting every node at 0 would line all rounds up, and every owner would lease
        // on reports a whole round old.
        let round_us = cfg.gossip_interval_ms.max(1) * 1_000;
        for slot in 0..cfg.nodes {
            let phase_us = engine.rng.random_range(0..round_us);
            engine.push(phase_us, Event::Boot(slot));
        }
        for (i, fault) in cfg.faults.iter().enumerate() {
            match fault {
                FleetFault::Partition {
                    from_ms, until_ms, ..
                } => {
                    engine.push(from_ms * 1_000, Event::Fault(i));
                    engine.push(until_ms * 1_000, Event::Fault(i));
                }
                FleetFault::Crash { at_ms, .. } => engine.push(at_ms * 1_000, Event::Fault(i)),
                FleetFault::Replace {
                    count,
                    from_ms,
                    every_ms,
                } => {
                    for k in 0..*count {
                        engine.push((from_ms + k as u64 * every_ms) * 1_000, Event::Replace(k));
                    }
                }
            }
        }
        engine.push(0, Event::Probe);
        engine.push(0, Event::Observe);
        engine.push(0, Event::Sample);
        engine
    }

    pub(super) fn push(&mut self, at_us: u64, event: Event) {
        self.events.push(at_us, event);
    }

    pub(super) fn at(&self) -> Instant {
        self.t0 + Duration::from_micros(self.now_us)
    }

    pub(super) fn now_of(&self, slot: usize) -> Option<Now> {
        let core = self.slots[slot].core.as_ref()?;
        Some(Now::read_at(core.clock(), self.at()))
    }

    /// Starts a new process in `slot`: a new boot id, and a new address after the first boot.
    pub(super) fn boot(&mut self, slot: usize) {
        let boots = self.slots[slot].boots;
        let addr = slot_addr(slot, boots);
        self.by_addr.remove(&self.slots[slot].addr);
        self.by_addr.insert(addr, slot);
        let node_id = uuid::Uuid::from_u128(
            (u128::from(self.cfg.seed) << 64) | ((slot as u128) << 16) | u128::from(boots),
        );
        let mut params = NodeParams::new(node_id, addr, self.rng.random());
        params.cluster_id = "fleet".into();
        params.set_gossip_interval(Duration::from_millis(self.cfg.gossip_interval_ms));
        params.seeds = (0..self.cfg.seeds.min(self.cfg.nodes))
            .filter(|s| *s != slot)
            .map(|s| self.slots[s].addr)
            .collect();
        params.expect_peers = true;
        params.dissemination = self.cfg.dissemination;
        let keys = NodeKeys {
            keyring: Keyring::new(&[[42u8; 32]]).expect("a key"),
            hasher: KeyHasher::from_secret(b"simulated fleet"),
        };
        let limiter = LimiterConfig {
            policy: self.cfg.policy,
            credit_from_sums: self.cfg.credit_from_sums,
            ..LimiterConfig::default()
        };
        let time = NodeTime::new(self.clock.clone(), self.slots[slot].skew_ms.clone());
        let core = NodeBuilder::new(params, limiter, keys, time)
            .build_at(self.at())
            .expect("valid parameters");
        let s = &mut self.slots[slot];
        s.addr = addr;
        s.boots += 1;
        s.core = Some(core);
        self.after_input(slot);
    }

    /// Sends what `slot` sealed, and schedules its next wake-up.
    pub(super) fn after_input(&mut self, slot: usize) {
        let Some(core) = self.slots[slot].core.as_mut() else {
            return;
        };
        let outgoing = core.take_outgoing();
        let wake = core.next_wake();
        let from = self.slots[slot].addr;
        let measuring = ms(self.now_us) >= self.cfg.warmup_ms;
        let now_ms = ms(self.now_us);
        for out in outgoing {
            self.rec.sent_at(now_ms, out.datagram.len());
            if measuring {
                self.rec.sent(slot, out.kind.as_str(), out.datagram.len());
            }
            let Some(&to_slot) = self.by_addr.get(&out.to) else {
                continue;
            };
            if self.cfg.loss > 0.0 && self.rng.random_bool(self.cfg.loss) {
                continue;
            }
            if let Some((side, true)) = self.partition
                && (slot < side) != (to_slot < side)
            {
                continue;
            }
            let latency = self
                .rng
                .random_range(self.cfg.min_latency_ms..=self.cfg.max_latency_ms);
            self.push(
                self.now_us + latency * 1_000,
                Event::Deliver {
                    to: out.to,
                    from,
                    datagram: out.datagram,
                },
            );
        }
        // Rounded up: a wake-up a fraction of a microsecond early would find nothing due and
        // ask for the same time again.
        let wake_us = u64::try_from(
            wake.saturating_duration_since(self.t0)
                .as_nanos()
                .div_ceil(1_000),
        )
        .unwrap_or(u64::MAX)
        .max(self.now_us);
        let s = &mut self.slots[slot];
        if s.wake_us != wake_us {
            s.wake_us = wake_us;
            s.wake_generation += 1;
            let generation = s.wake_generation;
            self.push(wake_us, Event::Wake { slot, generation });
        }
    }

    /// Runs to the end.
    pub fn run(&mut self) {
        let end_us = self.cfg.duration_ms * 1_000;
        loop {
            let next_event = self.events.peek_us();
            let next_arrival = self.arrivals.peek_us();
            let take_arrival = match (next_event, next_arrival) {
                (None, None) => break,
                (Some(e), Some(a)) => a < e,
                (None, Some(_)) => true,
                (Some(_), None) => false,
            };
            if take_arrival {
                let Some((t, key, node)) = self.arrivals.pop() else {
                    break;
                };
                if t >= end_us {
                    break;
                }
                self.set_time(t);
                self.request(key, node);
                continue;
            }
            let Some((at_us, event)) = self.events.pop() else {
                break;
            };
            if at_us >= end_us {
                break;
            }
            self.set_time(at_us);
            self.handle(event);
        }
    }

    fn set_time(&mut self, t_us: u64) {
        self.now_us = t_us;
        self.clock.set(ms(t_us));
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver {
                to,
                from,
                mut datagram,
            } => {
                let Some(&slot) = self.by_addr.get(&to) else {
                    return;
                };
                let Some(now) = self.now_of(slot) else {
                    return;
                };
                if ms(self.now_us) >= self.cfg.warmup_ms {
                    self.rec.received(slot, datagram.len());
                }
                if let Some(core) = self.slots[slot].core.as_mut() {
                    core.on_datagram(now, &mut datagram, from);
                }
                self.after_input(slot);
                self.retry_if_leased(slot);
            }
            Event::Wake { slot, generation } => {
                if self.slots[slot].wake_generation != generation {
                    return;
                }
                self.slots[slot].wake_us = u64::MAX;
                let Some(now) = self.now_of(slot) else {
                    return;
                };
                if let Some(core) = self.slots[slot].core.as_mut() {
                    core.on_wake(now);
                }
                self.after_input(slot);
                self.retry_if_leased(slot);
            }
            Event::Probe => self.probe(),
            Event::Observe => self.observe(),
            Event::Sample => self.sample(),
            Event::Fault(i) => self.fault(i),
            Event::Replace(k) => self.replace(k),
            Event::Boot(slot) => self.boot(slot),
            Event::Waiting { slot } => self.retry_waiting(slot),
        }
    }

    fn request(&mut self, key: usize, node: usize) {
        let Some(decision) = self.decide(node, key, false) else {
            return;
        };
        if !decision.allowed && !decision.needs.is_empty() {
            self.wait_for_token(node, key, &decision);
            return;
        }
        if decision.allowed {
            self.ask_ahead(node, &decision);
        }
        self.rec
            .request(key, node, ms(self.now_us), decision.allowed);
    }
}
