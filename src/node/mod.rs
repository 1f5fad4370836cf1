//! A cluster node: one task that owns the UDP socket, SWIM membership and the gossip of window
//! registers, around a shared [`Limiter`].
//!
//! The node runs on three seams only: a [`Datagram`] socket, a [`TimeSource`], and
//! `tokio::time` for its timers, so the same code runs on real UDP and inside a deterministic
//! simulation. Its loop `select!`s with `biased;` (no hidden randomness) over shutdown, incoming
//! datagrams, membership timers, the summary round, anti-entropy, the seed announcer, garbage
//! collection and commands.
//!
//! - **Summary rounds** (every `gossip_interval`, 200 ms by default): the registers that changed
//!   since the last round (plus, once, those of the round before, against a single lost
//!   datagram) go to every live member directly. For full replication that is the
//!   bandwidth-optimal scheme, and every register reaches every peer within one round and one
//!   network latency.
//! - **Anti-entropy**: when a member comes up or is renamed (a restart), this node pushes it its
//!   own live registers and those of origins that are gone, so a new or restarted node holds the
//!   live state within a round trip. Every `anti_entropy_interval` it pushes its registers to one
//!   member in turn, repairing what losses left behind.

mod clock_sync;
mod collector;
mod return_route;
mod stats;
mod view;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use thiserror::Error;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

pub use clock_sync::ClockStats;
pub use collector::ClusterCollector;
pub use stats::{WireSnapshot, WireStats};
pub use view::{ClusterView, MemberInfo, MemberState};

use self::clock_sync::ClockSync;
use self::return_route::ReturnRoute;
use crate::clock::{Clock, ClusterClock, TimeSource};
use crate::gossip::message::{decode_batch, empty_batch_body, encode_batch, members_count};
use crate::gossip::wire::{Destination, Keyring, Kind, Opener, Sealer, cluster_tag};
use crate::limiter::{Batch, Limiter, OriginId};
use crate::membership::{MemberEvent, Membership, NodeId, REJOIN_INTERVAL};
use crate::transport::Datagram;

/// Cluster parameters of one node.
#[derive(Debug, Clone)]
pub struct NodeParams {
    /// This process's boot id; also the limiter's origin.
    pub node_id: uuid::Uuid,
    /// The address peers reach this node's socket at.
    pub advertise: SocketAddr,
    pub seeds: Vec<SocketAddr>,
    pub cluster_id: String,
    pub gossip_interval: Duration,
    pub anti_entropy_interval: Duration,
    pub max_packet_size: usize,
    pub gc_interval: Duration,
    /// Windows examined per GC pass.
    pub gc_budget: usize,
    /// Registers one periodic anti-entropy push carries at most; larger tables are pushed a
    /// page at a time, round-robin.
    pub anti_entropy_page: usize,
    /// Clock offsets beyond this are logged and counted (half the smallest bucket in use).
    pub offset_warn_ms: u64,
    /// A member not heard from for this long stops counting as live for admission (its
    /// demand leaves the shares and, under the strict policy, this side's scale shrinks),
    /// long before SWIM declares it down.
    pub silence_threshold: Duration,
    /// A member that just joined (or restarted, or came back from a partition) counts as live
    /// only this long after it appeared: until its registers can have arrived, its demand is
    /// unknown, and counting it live would hand this side its share before knowing it.
    pub join_grace: Duration,
    /// Seeds the node's randomness (SWIM probe order, anti-entropy targets).
    pub rng_seed: u64,
    /// The node has peers (seeds, or a DNS name that will give some) even if none is known
    /// yet: it then admits nothing until it holds the cluster's state. Static seeds imply it.
    pub expect_peers: bool,
    /// The longest a node with peers waits for the cluster's state before it serves anyway
    /// (the first node of a fleet, or one whose seeds are all down).
    pub warmup_timeout: Duration,
    /// Send registers only to addresses that have echoed this node's cookie (see
    /// `return_route.rs`): for clusters whose datagrams anyone can forge (`cluster.insecure`).
    /// Every node of a cluster must agree: it adds 16 bytes to register and heartbeat bodies.
    pub verify_return_route: bool,
    /// Registers saved at the last stop (`limiter.state_path`), loaded once the node runs on
    /// cluster time: at once without peers, at the end of the warm-up with them.
    pub state_path: Option<std::path::PathBuf>,
}

impl NodeParams {
    pub fn new(node_id: uuid::Uuid, advertise: SocketAddr, rng_seed: u64) -> Self {
        Self {
            node_id,
            advertise,
            seeds: Vec::new(),
            cluster_id: "limitmesh".to_owned(),
            gossip_interval: Duration::from_millis(200),
            anti_entropy_interval: Duration::from_secs(5),
            max_packet_size: 1400,
            gc_interval: Duration::from_secs(1),
            gc_budget: 10_000,
            anti_entropy_page: 4_096,
            offset_warn_ms: 50,
            silence_threshold: Duration::from_millis(800),
            join_grace: Duration::from_millis(500),
            rng_seed,
            expect_peers: false,
            warmup_timeout: Duration::from_secs(5),
            verify_return_route: false,
            state_path: None,
        }
    }
}

/// Instructions for a running node.
#[derive(Debug)]
pub enum Command {
    /// Replace the discovered seeds (from DNS); static seeds are kept.
    DiscoveredSeeds(Vec<SocketAddr>),
}

#[derive(Debug, Error)]
pub enum NodeError {
    #[error("max_packet_size {0} leaves no room for a body after the envelope")]
    PacketTooSmall(usize),
}

/// A node, ready to [`Node::run`].
pub struct Node<S, T> {
    params: NodeParams,
    socket: Arc<S>,
    /// Cluster time, which this node steers (`clock_sync.rs`).
    clock: Arc<ClusterClock<T>>,
    limiter: Arc<Limiter>,
    keyring: Arc<Keyring>,
    view: Arc<ClusterView>,
    membership: Membership,
    sealer: Sealer,
    opener: Opener,
    clock_sync: ClockSync,
    discovered: Vec<SocketAddr>,
    rng: StdRng,
    boot_ms: u64,
    /// Sealed datagrams waiting to be sent at the end of the loop turn.
    pending: Vec<(Kind, SocketAddr, Vec<u8>)>,
    /// When each origin was last heard from (any authenticated datagram).
    last_heard: std::collections::BTreeMap<u128, Instant>,
    /// When each member appeared (up or renamed).
    joined_at: std::collections::BTreeMap<u128, Instant>,
    /// Each member's address, to tell whose datagrams may steer this node's clock.
    member_addrs: std::collections::BTreeMap<u128, SocketAddr>,
    /// How many members each member says it counts, itself included (the prefix of its
    /// register and heartbeat bodies).
    peers_count: std::collections::BTreeMap<u128, usize>,
    /// Which addresses have shown they receive what this node sends, when that must be
    /// checked (`verify_return_route`).
    return_route: Option<ReturnRoute>,
    /// Where the next periodic anti-entropy page starts in the local snapshot.
    anti_entropy_cursor: usize,
    /// New keys refused for a full table, as of the last GC pass (logged when it grows).
    table_full_seen: u64,
    /// Until the node holds the cluster's state: when it started, the members whose registers
    /// (or word that they have none) have arrived, and when the member set last grew.
    warmup: Option<Warmup>,
}

/// What a starting node waits for before it admits anything: every member it knows has sent it
/// its bootstrap push (see `on_datagram` for how that is told), and no member has appeared for
/// the settle time; or the warm-up timeout has passed.
#[derive(Debug)]
struct Warmup {
    started: Instant,
    heard_state: BTreeSet<u128>,
    last_member_change: Option<Instant>,
}

impl<S, T> std::fmt::Debug for Node<S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.params.node_id)
            .field("advertise", &self.params.advertise)
            .finish_non_exhaustive()
    }
}

impl<S: Datagram, T: TimeSource> Node<S, T> {
    pub fn new(
        params: NodeParams,
        socket: Arc<S>,
        clock: Arc<ClusterClock<T>>,
        limiter: Arc<Limiter>,
        keyring: Arc<Keyring>,
        view: Arc<ClusterView>,
    ) -> Result<Self, NodeError> {
        let max_body = params
            .max_packet_size
            .checked_sub(crate::gossip::wire::OVERHEAD)
            .filter(|b| *b >= 256)
            .ok_or(NodeError::PacketTooSmall(params.max_packet_size))?;
        let boot_ms = clock.now_ms();
        let identity = NodeId::new(params.node_id, params.advertise, boot_ms);
        let warmup = (params.expect_peers || !params.seeds.is_empty()).then(|| {
            // Until further notice: the warm-up ends on the monotonic clock (`update_readiness`),
            // not when the wall clock, which can step, reaches a time.
            limiter.set_warming_until(u64::MAX);
            Warmup {
                started: crate::clock::monotonic_now(),
                heard_state: BTreeSet::new(),
                last_member_change: None,
            }
        });
        if warmup.is_none() {
            if let Some(path) = &params.state_path {
                crate::snapshot::restore(&limiter, path, clock.now_ms());
            }
            view.set_ready();
        }
        let mut rng = StdRng::seed_from_u64(params.rng_seed ^ 0x5EED_A11E);
        let return_route = params
            .verify_return_route
            .then(|| ReturnRoute::new(rng.random()));
        let tag = cluster_tag(&params.cluster_id);
        let sender = params.node_id.as_u128();
        Ok(Self {
            membership: Membership::new(identity, max_body, params.rng_seed),
            sealer: Sealer::new(tag, sender, params.max_packet_size),
            opener: Opener::new(tag, params.max_packet_size, sender),
            rng,
            clock_sync: ClockSync::new(limiter.config().max_clock_drift_ms, clock.base()),
            discovered: Vec::new(),
            boot_ms,
            pending: Vec::new(),
            last_heard: std::collections::BTreeMap::new(),
            joined_at: std::collections::BTreeMap::new(),
            member_addrs: std::collections::BTreeMap::new(),
            peers_count: std::collections::BTreeMap::new(),
            return_route,
            anti_entropy_cursor: 0,
            table_full_seen: 0,
            warmup,
            params,
            socket,
            clock,
            limiter,
            keyring,
            view,
        })
    }

    /// Runs until `shutdown` resolves, then leaves the cluster gracefully.
    pub async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut buf = vec![0u8; self.params.max_packet_size + 1];
        let mut round = tokio::time::interval(self.params.gossip_interval);
        let mut anti_entropy = tokio::time::interval(self.params.anti_entropy_interval);
        let mut rejoin = tokio::time::interval(REJOIN_INTERVAL);
        let mut gc = tokio::time::interval(self.params.gc_interval);
        for t in [&mut round, &mut anti_entropy, &mut rejoin, &mut gc] {
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
        }
        let mut commands_open = true;
        self.publish();
        loop {
            let next_timer = self.membership.next_timer();
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                r = self.socket.recv_from(&mut buf) => {
                    if let Ok((n, from)) = r {
                        let len = n.min(buf.len());
                        self.on_datagram(&mut buf[..len], from);
                    }
                }
                _ = async { tokio::time::sleep_until(next_timer.unwrap_or_else(Instant::now)).await },
                    if next_timer.is_some() => {
                    self.membership.fire_due(crate::clock::monotonic_now());
                }
                _ = round.tick() => self.summary_round(),
                _ = anti_entropy.tick() => self.periodic_anti_entropy(),
                _ = rejoin.tick() => {
                    let seeds = self.seeds();
                    let route = self.return_route.as_ref();
                    self.membership.announce_to_absent(
                        &seeds,
                        |down| route.is_none_or(|r| r.is_verified(down)),
                        crate::clock::monotonic_now(),
                    );
                }
                _ = gc.tick() => self.collect_garbage(),
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(Command::DiscoveredSeeds(seeds)) => self.discovered = seeds,
                    None => commands_open = false,
                },
            }
            self.flush().await;
        }
        // What this node admitted since the last round goes out before it leaves: its peers
        // keep its registers (and relay them) for as long as their windows live. A node still
        // warming up stays so: the final round must not open admission after the drain.
        self.warmup = None;
        self.summary_round();
        self.flush().await;
        self.membership.leave(crate::clock::monotonic_now());
        self.flush().await;
        tracing::info!(id = %self.params.node_id, "left the cluster");
    }

    /// Ends the warm-up once the node holds the cluster's state (see [`Warmup`]).
    fn update_readiness(&mut self) {
        let Some(w) = &self.warmup else {
            return;
        };
        let now = crate::clock::monotonic_now();
        let members = self.membership.members();
        // Two rounds for the members' pushes to land, and their join grace, after which this
        // node counts them live (and so shares the limit with them).
        let settle = (2 * self.params.gossip_interval).max(self.params.join_grace);
        let settled = w
            .last_member_change
            .is_some_and(|t| now.saturating_duration_since(t) >= settle);
        // Every member's state, and its clock: a node that ends its warm-up on cluster time
        // does not have to move it while it serves.
        let heard_all = !members.is_empty()
            && members
                .iter()
                .all(|m| w.heard_state.contains(&m.node.as_u128()))
            && self
                .clock_sync
                .has_estimates(members.iter().map(|m| m.node.as_u128()));
        let waited = now.saturating_duration_since(w.started);
        if heard_all && settled {
            tracing::info!(
                members = members.len(),
                waited_ms = waited.as_millis() as u64,
                "ready: holds the cluster's state"
            );
        } else if waited >= self.params.warmup_timeout {
            tracing::warn!(
                members = members.len(),
                waited_ms = waited.as_millis() as u64,
                "ready without the state or the clock of every member: the warm-up timed out"
            );
        } else {
            return;
        }
        self.warmup = None;
        if let Some(path) = &self.params.state_path {
            crate::snapshot::restore(&self.limiter, path, self.clock.now_ms());
        }
        self.limiter.set_warming_until(0);
        self.view.set_ready();
    }

    /// One GC pass, and a warning (at most one per pass) when new keys met a full table.
    fn collect_garbage(&mut self) {
        self.limiter.gc(self.clock.now_ms(), self.params.gc_budget);
        let stats = self.limiter.stats();
        if stats.refused_table_full > self.table_full_seen {
            tracing::warn!(
                refused = stats.refused_table_full - self.table_full_seen,
                max_keys = stats.max_keys,
                policy = ?self.limiter.config().when_full,
                "key table full: every window in it still counts something, so new keys were \
                 refused (raise limiter.max_keys, or see limiter.when_table_full)"
            );
            self.table_full_seen = stats.refused_table_full;
        }
    }

    fn seeds(&self) -> Vec<SocketAddr> {
        let mut s: BTreeSet<SocketAddr> = self.params.seeds.iter().copied().collect();
        s.extend(self.discovered.iter().copied());
        s.remove(&self.params.advertise);
        s.into_iter().collect()
    }

    fn on_datagram(&mut self, datagram: &mut [u8], from: SocketAddr) {
        // After a suspend, before anything is measured against the monotonic clock.
        self.clock.account_suspend();
        let now_ms = self.clock.now_ms();
        let opened = match self.opener.open(&self.keyring, datagram, now_ms) {
            Ok(o) => o,
            Err(reason) => {
                self.view.wire.dropped(reason);
                return;
            }
        };
        let header = opened.header;
        if let Some(route) = &mut self.return_route {
            route.heard_from(from);
        }
        self.view.wire.received(
            header.kind,
            opened.body.len() + crate::gossip::wire::OVERHEAD,
        );
        if header.kind != Kind::Membership {
            // Only registers and heartbeats count as hearing a member: a member that sends this
            // node SWIM traffic but no state (it holds this node as down, or its state is lost
            // on the way) leaves this node blind to its admissions, which is what silence is.
            self.last_heard
                .insert(header.sender, crate::clock::monotonic_now());
            // A member's bootstrap push goes out before anything else it sends this node, so any
            // register or heartbeat says the push has been sent; except where return
            // routability is checked: there heartbeats come first, and the push (which every
            // member opens with an anti-entropy datagram, empty or not) only once this node's
            // address is verified.
            let pushed = header.kind == Kind::AntiEntropy || self.return_route.is_none();
            if pushed && let Some(w) = &mut self.warmup {
                w.heard_state.insert(header.sender);
            }
        }
        // Only a member's own datagrams, bound to this node and from its address (and, where
        // anyone can forge datagrams, from an address that has shown it receives), steer this
        // node's clock: a datagram that merely opens could name any sender.
        let steers = header.addressed
            && self.member_addrs.get(&header.sender) == Some(&from)
            && self
                .return_route
                .as_ref()
                .is_none_or(|r| r.is_verified(from));
        if steers {
            self.clock_sync
                .observe(header.sender, header.sent_ms, self.clock.mono_ms());
        }
        if let Some(offset) = self.clock_sync.offset_of(header.sender)
            && offset.unsigned_abs() > self.params.offset_warn_ms
        {
            self.view
                .wire
                .clock_offset_warnings
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(sender = %uuid::Uuid::from_u128(header.sender), offset_ms = offset, "peer clock offset");
        }
        match header.kind {
            Kind::Membership => {
                if self
                    .membership
                    .handle_data(opened.body, crate::clock::monotonic_now())
                    .is_err()
                {
                    self.view
                        .wire
                        .membership_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Kind::Heartbeat | Kind::Summary | Kind::AntiEntropy => {
                let Some((count, rest)) = members_count::decode(opened.body) else {
                    self.view
                        .wire
                        .dropped(crate::gossip::wire::DropReason::Malformed);
                    return;
                };
                self.peers_count.insert(header.sender, count);
                let rest = match &mut self.return_route {
                    None => rest,
                    Some(route) => {
                        let member = self
                            .membership
                            .member_at(from)
                            .filter(|m| m.node.as_u128() == header.sender);
                        let Some((rest, newly)) =
                            route.observe(rest, from, member.as_ref().map(|m| m.node.as_u128()))
                        else {
                            self.view
                                .wire
                                .dropped(crate::gossip::wire::DropReason::Malformed);
                            return;
                        };
                        if newly
                            && route.take_bootstrap(from)
                            && let Some(m) = member
                        {
                            self.queue_bootstrap(destination(&m));
                        }
                        rest
                    }
                };
                if header.kind == Kind::Heartbeat {
                    return;
                }
                match decode_batch(rest, OriginId(header.sender)) {
                    Ok((batch, rejects)) => {
                        let report = self.limiter.merge(&batch, now_ms);
                        self.view.wire.merged(&report, rejects.bad_shape);
                    }
                    Err(_) => self
                        .view
                        .wire
                        .dropped(crate::gossip::wire::DropReason::Malformed),
                }
            }
        }
    }

    /// Seals what membership queued, reacts to its events, then sends everything pending.
    async fn flush(&mut self) {
        let now_ms = self.clock.now_ms();
        for (to, data) in self.membership.take_outbox() {
            let to = destination(&to);
            let mut out = Vec::with_capacity(data.len() + crate::gossip::wire::OVERHEAD);
            if self
                .sealer
                .seal(
                    &self.keyring,
                    Kind::Membership,
                    self.clock.wall_ms(),
                    &data,
                    to,
                    &mut out,
                )
                .is_ok()
            {
                self.pending.push((Kind::Membership, to.addr, out));
            }
        }
        let events = self.membership.take_events();
        if !events.is_empty() {
            for event in &events {
                tracing::debug!(?event, "membership");
                if let MemberEvent::Up(id) | MemberEvent::Renamed { new: id, .. } = event {
                    self.joined_at
                        .insert(id.node.as_u128(), crate::clock::monotonic_now());
                    if let Some(w) = &mut self.warmup {
                        w.last_member_change = Some(crate::clock::monotonic_now());
                    }
                    self.queue_bootstrap(destination(id));
                }
            }
            self.member_addrs = self
                .membership
                .members()
                .iter()
                .map(|m| (m.node.as_u128(), m.addr))
                .collect();
            let members: BTreeSet<u128> = self.member_addrs.keys().copied().collect();
            self.clock_sync.retain(|s| members.contains(&s));
            self.last_heard.retain(|s, _| members.contains(s));
            self.joined_at.retain(|s, _| members.contains(s));
            self.peers_count.retain(|s, _| members.contains(s));
            if let Some(route) = &mut self.return_route {
                let addrs = self.membership.members().iter().map(|m| m.addr).collect();
                route.retain(&members, &addrs);
            }
            self.update_live(now_ms);
            self.publish();
        }
        for (kind, to, datagram) in std::mem::take(&mut self.pending) {
            match self.socket.send_to(&datagram, to).await {
                Ok(_) => self.view.wire.sent(kind, datagram.len()),
                Err(e) => {
                    self.view
                        .wire
                        .send_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(%to, error = %e, "send failed");
                }
            }
        }
    }

    fn publish(&self) {
        let me = self.membership.identity();
        let mut members = vec![MemberInfo {
            id: me.node,
            addr: me.addr,
            state: MemberState::Alive,
            is_self: true,
            boot_ms: self.boot_ms,
            clock_offset_ms: Some(
                self.view
                    .clock
                    .offset_ms
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            clock_fenced: self.clock_sync.fences().own,
        }];
        for (_, (id, state)) in self.membership.states() {
            members.push(MemberInfo {
                id: id.node,
                addr: id.addr,
                state: match state {
                    foca::State::Alive => MemberState::Alive,
                    foca::State::Suspect => MemberState::Suspect,
                    foca::State::Down => MemberState::Down,
                },
                is_self: false,
                boot_ms: id.boot_ms,
                clock_offset_ms: self.clock_sync.offset_of(id.node.as_u128()),
                clock_fenced: self.clock_sync.fences().peers.contains(&id.node.as_u128()),
            });
        }
        self.view.publish(members);
    }

    /// The limiter's view: members heard from within the silence threshold, and present for
    /// the join grace, are live; the others are silent.
    fn update_live(&mut self, now_ms: u64) {
        let now = crate::clock::monotonic_now();
        let (threshold, grace) = (self.params.silence_threshold, self.params.join_grace);
        let members = self.membership.members();
        let silent: Vec<OriginId> = members
            .iter()
            .filter(|m| {
                let id = m.node.as_u128();
                let heard = self
                    .last_heard
                    .get(&id)
                    .is_some_and(|at| now.saturating_duration_since(*at) <= threshold);
                let settled = self
                    .joined_at
                    .get(&id)
                    .is_none_or(|at| now.saturating_duration_since(*at) >= grace);
                // A member whose clock is beyond the tolerance is cut off as if unheard; and a
                // node whose own clock is cuts off everyone (DESIGN §9).
                let fences = self.clock_sync.fences();
                !(heard && settled) || fences.own || fences.peers.contains(&id)
            })
            .map(|m| OriginId(m.node.as_u128()))
            .collect();
        let fences = self.clock_sync.fences();
        self.limiter
            .set_clock_fenced(fences.own || !fences.peers.is_empty());
        let peers_count = self.peers_count.values().copied().max().unwrap_or(0);
        self.limiter.set_view(
            members.len() - silent.len() + 1,
            &silent,
            peers_count,
            now_ms,
        );
    }

    /// One summary round: what changed, to every live member; a heartbeat to members that
    /// would otherwise hear nothing from this node this round.
    fn summary_round(&mut self) {
        let peers: Vec<u128> = self
            .membership
            .members()
            .iter()
            .map(|m| m.node.as_u128())
            .collect();
        self.clock_sync
            .round(&self.clock, &peers, self.warmup.is_some(), &self.view.clock);
        // The member list carries clock offsets and cut-offs, which move every round.
        self.publish();
        let now_ms = self.clock.now_ms();
        self.update_live(now_ms);
        self.update_readiness();
        let peers: Vec<Destination> = self.membership.members().iter().map(destination).collect();
        let batch = self.limiter.collect_changed(now_ms);
        self.view
            .wire
            .summary_rounds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if peers.is_empty() {
            return;
        }
        // Registers go only where they can be received (see `return_route.rs`); the others
        // get a heartbeat, as does everyone in a round with nothing to send.
        let (receiving, unverified): (Vec<Destination>, Vec<Destination>) =
            peers.into_iter().partition(|p| self.may_push_to(p.addr));
        let heartbeats = match batch {
            Some(batch) if !batch.updates.is_empty() => {
                self.view.wire.summary_register_sends.fetch_add(
                    (batch.updates.len() * receiving.len()) as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
                self.send_batch_later(Kind::Summary, &batch, &receiving);
                unverified
            }
            _ => receiving.into_iter().chain(unverified).collect(),
        };
        for peer in heartbeats {
            if let Some(route) = &mut self.return_route
                && !route.is_verified(peer.addr)
                && !route.may_probe(peer.addr)
            {
                continue;
            }
            let body = self.body_prefix(peer);
            let mut out = Vec::with_capacity(body.len() + crate::gossip::wire::OVERHEAD);
            if self
                .sealer
                .seal(
                    &self.keyring,
                    Kind::Heartbeat,
                    self.clock.wall_ms(),
                    &body,
                    peer,
                    &mut out,
                )
                .is_ok()
            {
                self.pending.push((Kind::Heartbeat, peer.addr, out));
            }
        }
    }

    /// Whether registers may be sent to `addr`: always, unless return routability is checked
    /// and `addr` has not shown it receives.
    fn may_push_to(&self, addr: SocketAddr) -> bool {
        self.return_route
            .as_ref()
            .is_none_or(|route| route.is_verified(addr))
    }

    /// The front of every register and heartbeat body to `to`: the members count, and the
    /// cookies when return routability is checked.
    fn body_prefix(&self, to: Destination) -> Vec<u8> {
        let mut prefix = members_count::encode(self.membership.num_members() + 1);
        if let Some(route) = &self.return_route {
            prefix.extend_from_slice(&route.cookies(to.addr, to.node));
        }
        prefix
    }

    fn periodic_anti_entropy(&mut self) {
        let members = self.membership.members();
        if members.is_empty() {
            return;
        }
        let to = destination(&members[self.rng.random_range(0..members.len())]);
        if !self.may_push_to(to.addr) {
            return;
        }
        let mut own = self.limiter.snapshot_local(self.clock.now_ms());
        let page = self.params.anti_entropy_page.max(1);
        if own.updates.len() > page {
            let start = self.anti_entropy_cursor % own.updates.len();
            own.updates.rotate_left(start);
            own.updates.truncate(page);
            self.anti_entropy_cursor = start + page;
        }
        self.send_batch_later(Kind::AntiEntropy, &own, &[to]);
    }

    /// Queues for `to` this node's live registers and those of origins that are no longer
    /// members (they cannot push their own).
    fn queue_bootstrap(&mut self, to: Destination) {
        if let Some(route) = &mut self.return_route
            && !route.is_verified(to.addr)
        {
            // Pushed once the address has shown it receives: a forged announce must not turn
            // this node into an amplifier.
            route.defer_bootstrap(to.addr);
            return;
        }
        let now_ms = self.clock.now_ms();
        let mut live: BTreeSet<OriginId> = self
            .membership
            .members()
            .iter()
            .map(|m| OriginId(m.node.as_u128()))
            .collect();
        live.insert(self.limiter.origin());
        let own = self.limiter.snapshot_local(now_ms);
        let relayed = self.limiter.relay(now_ms, |o| !live.contains(&o));
        if own.updates.is_empty() && relayed.is_empty() {
            // Nothing to push, said all the same: the newcomer waits for word from every
            // member before it serves (see `Warmup`).
            let mut body = self.body_prefix(to);
            body.extend_from_slice(&empty_batch_body());
            let mut out = Vec::with_capacity(body.len() + crate::gossip::wire::OVERHEAD);
            if self
                .sealer
                .seal(
                    &self.keyring,
                    Kind::AntiEntropy,
                    self.clock.wall_ms(),
                    &body,
                    to,
                    &mut out,
                )
                .is_ok()
            {
                self.pending.push((Kind::AntiEntropy, to.addr, out));
            }
            return;
        }
        self.send_batch_later(Kind::AntiEntropy, &own, &[to]);
        for batch in relayed {
            self.send_batch_later(Kind::AntiEntropy, &batch, &[to]);
        }
    }

    /// Encodes and seals a batch for each peer into the pending queue; sends happen from the
    /// loop (sealing is synchronous, sending is not).
    fn send_batch_later(&mut self, kind: Kind, batch: &Batch, peers: &[Destination]) {
        if batch.updates.is_empty() {
            return;
        }
        let prefix_len = members_count::MAX_LEN + return_route::COOKIES_LEN;
        let max_batch = self.sealer.max_body().saturating_sub(prefix_len);
        let Ok(bodies) = encode_batch(batch, self.limiter.origin(), max_batch) else {
            return;
        };
        let wall_ms = self.clock.wall_ms();
        for batch_body in &bodies {
            for peer in peers {
                let mut body = self.body_prefix(*peer);
                body.extend_from_slice(batch_body);
                let mut out = Vec::with_capacity(body.len() + crate::gossip::wire::OVERHEAD);
                if self
                    .sealer
                    .seal(&self.keyring, kind, wall_ms, &body, *peer, &mut out)
                    .is_ok()
                {
                    self.pending.push((kind, peer.addr, out));
                }
            }
        }
    }
}

/// Where datagrams for member `id` go: bound to its boot id, unless it is a seed known only by
/// its address.
fn destination(id: &NodeId) -> Destination {
    Destination {
        addr: id.addr,
        node: (!id.node.is_nil()).then(|| id.node.as_u128()),
    }
}
