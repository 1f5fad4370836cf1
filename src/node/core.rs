//! The node's protocol as a plain state machine: no socket, no runtime, no clock of its own.
//!
//! A driver feeds it inputs, each with the time it happened ([`Now`]): a datagram and the
//! address it came from ([`NodeCore::on_datagram`]), a wake-up at the time it asked for
//! ([`NodeCore::on_wake`]), a command ([`NodeCore::on_command`]), the end
//! ([`NodeCore::leave`]). After each input it takes the sealed datagrams to send
//! ([`NodeCore::take_outgoing`]) and sleeps until [`NodeCore::next_wake`]. The tokio loop
//! (`driver.rs`), the simulators and the unit tests are such drivers.
//!
//! What it does with them is split by concern: `receive.rs` (one datagram),
//! `dissemination.rs` (summary rounds, anti-entropy, bootstrap pushes), `liveness.rs` (whose
//! demand counts), `warmup.rs` (when a starting node may admit), `clock_sync.rs` (cluster
//! time). This file holds the state and the inputs.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::clock_sync::ClockSync;
use super::features::PeerFeatures;
use super::liveness::Liveness;
use super::member_log::{MemberChange, MemberLog};
use super::outbox::{Outbox, Outgoing};
use super::ownership::{Ownership, SPREAD_WHEN_MISSING};
use super::return_route::ReturnRoute;
use super::rules_digest::RulesAgreement;
use super::timers::{Periodic, Timers};
use super::view::ClusterView;
use super::warmup::Warmup;
use super::{Command, NodeError, NodeParams};
use crate::clock::{ClusterClock, Now, TimeSource};
use crate::gossip::wire::{Destination, Keyring, Kind, Opener, Sealer, cluster_tag};
use crate::limiter::Limiter;
use crate::membership::{MemberEvent, Membership, NodeId, REJOIN_INTERVAL};
use crate::snapshot::Saved;

/// A node's protocol state. See the module documentation.
pub struct NodeCore<T> {
    pub(super) params: NodeParams,
    /// Cluster time, which this node steers (`clock_sync.rs`).
    pub(super) clock: Arc<ClusterClock<T>>,
    pub(super) limiter: Arc<Limiter>,
    pub(super) keyring: Arc<Keyring>,
    pub(super) view: Arc<ClusterView>,
    pub(super) membership: Membership,
    pub(super) outbox: Outbox,
    pub(super) opener: Opener,
    pub(super) clock_sync: ClockSync,
    pub(super) liveness: Liveness,
    /// What each member's build reads of the wire (`features.rs`).
    pub(super) features: PeerFeatures,
    /// What the members said of their rules (`rules_digest.rs`).
    pub(super) rules: RulesAgreement,
    /// Which addresses have shown they receive what this node sends, when that must be
    /// checked (`verify_return_route`).
    pub(super) return_route: Option<ReturnRoute>,
    pub(super) timers: Timers,
    pub(super) discovered: Vec<SocketAddr>,
    pub(super) rng: StdRng,
    pub(super) boot_ms: u64,
    /// Where the next periodic anti-entropy page starts in the local snapshot.
    pub(super) anti_entropy_cursor: usize,
    /// The same, in the registers of departed origins this node relays.
    pub(super) relay_cursor: usize,
    /// New keys refused for a full table, as of the last GC pass (logged when it grows).
    pub(super) table_full_seen: u64,
    /// Until the node holds the cluster's state.
    pub(super) warmup: Option<Warmup>,
    /// This node has cut itself off: senders whose clocks are a minute from its own outnumber
    /// its live members (see `liveness.rs`).
    pub(super) far_fenced: bool,
    /// Under the ledger: who said it leases nothing for its clock, and this node's word.
    pub(super) not_leasing: super::not_leasing::NotLeasing,
    /// Registers saved at the last stop, merged when the node is built and merged again (the
    /// merge is idempotent) once it runs on cluster time: a register refused then as stamped
    /// in the future by a clock that was behind gets its second look.
    pub(super) saved: Option<Saved>,
    /// In a large cluster: each window's owners, and the windows this node owns.
    pub(super) ownership: Option<Ownership>,
    /// Under the ledger: the rings the limiter's view of the owners is made from.
    pub(super) ledger: Option<super::ledger_view::LedgerNode>,
    /// Summary rounds run, to publish the member list of a large cluster less often.
    pub(super) rounds: u64,
    /// Membership changes as the log tells them.
    pub(super) member_log: MemberLog,
    /// The members SWIM suspected at the start of the last round (one look a round serves
    /// the log, the ring and liveness).
    pub(super) suspects: std::collections::BTreeSet<u128>,
    /// Relays of live members' registers, refused, merged once their origin no longer speaks
    /// for itself here.
    pub(super) held_relays: super::held_relays::HeldRelays,
}

impl<T> std::fmt::Debug for NodeCore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCore")
            .field("id", &self.params.node_id)
            .field("advertise", &self.params.advertise)
            .finish_non_exhaustive()
    }
}

/// Everything a node core runs on besides its parameters.
#[derive(Debug)]
pub struct CoreParts<T> {
    pub clock: Arc<ClusterClock<T>>,
    pub limiter: Arc<Limiter>,
    pub keyring: Arc<Keyring>,
    pub view: Arc<ClusterView>,
    /// Registers saved at the last stop (`limiter.state_path`), already read.
    pub saved: Option<Saved>,
}

impl<T: TimeSource> NodeCore<T> {
    pub fn new(params: NodeParams, parts: CoreParts<T>, now: Now) -> Result<Self, NodeError> {
        let CoreParts {
            clock,
            limiter,
            keyring,
            view,
            saved,
        } = parts;
        let max_body = params
            .max_packet_size
            .checked_sub(crate::gossip::wire::OVERHEAD)
            .filter(|b| *b >= 256)
            .ok_or(NodeError::PacketTooSmall(params.max_packet_size))?;
        let identity = NodeId::new(params.node_id, params.advertise, now.cluster_ms);
        let warmup = (params.expect_peers || !params.seeds.is_empty()).then(|| {
            // Until further notice: the warm-up ends on the monotonic clock
            // (`update_readiness`), not when the wall clock, which can step, reaches a time.
            limiter.set_warming_until(u64::MAX);
            Warmup::new(now.at)
        });
        if warmup.is_none() {
            // Counting from now; a node that warms up counts from the end of its warm-up.
            limiter.start_observing(now.cluster_ms);
        }
        let mut rng = StdRng::seed_from_u64(params.rng_seed ^ 0x5EED_A11E);
        let return_route = params
            .verify_return_route
            .then(|| ReturnRoute::new(rng.random()));
        let tag = cluster_tag(&params.cluster_id);
        let sender = params.node_id.as_u128();
        let timers = Timers::new(
            now.at,
            [
                params.gossip_interval,
                params.anti_entropy_interval,
                REJOIN_INTERVAL,
                params.gc_interval,
            ],
        );
        let mut core = Self {
            membership: Membership::new(identity, max_body, params.rng_seed),
            outbox: Outbox::new(
                Sealer::new(tag, sender, params.max_packet_size),
                keyring.clone(),
            ),
            opener: Opener::new(tag, params.max_packet_size, sender),
            rng,
            clock_sync: ClockSync::new(limiter.config().max_clock_drift_ms, clock.base()),
            liveness: Liveness::new(params.silence_threshold, params.join_grace),
            features: PeerFeatures::default(),
            rules: RulesAgreement::default(),
            timers,
            discovered: Vec::new(),
            boot_ms: now.cluster_ms,
            anti_entropy_cursor: 0,
            relay_cursor: 0,
            table_full_seen: 0,
            warmup,
            far_fenced: false,
            not_leasing: Default::default(),
            saved,
            ownership: None,
            ledger: None,
            rounds: 0,
            member_log: MemberLog::default(),
            suspects: Default::default(),
            held_relays: Default::default(),
            return_route,
            params,
            clock,
            limiter,
            keyring,
            view,
        };
        // The saved registers go in before anything is pushed or answered: a member that
        // comes up is pushed what this node holds at once, restored registers included.
        if let Some(saved) = &core.saved {
            saved.restore(&core.limiter, now.cluster_ms);
        }
        if core.warmup.is_none() {
            // No peers to wait for: this node's clock is cluster time already.
            core.saved = None;
            core.view.set_ready();
        }
        core.publish();
        Ok(core)
    }

    /// This node's identity in the cluster.
    pub fn identity(&self) -> &NodeId {
        self.membership.identity()
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    pub fn view(&self) -> &Arc<ClusterView> {
        &self.view
    }

    pub fn clock(&self) -> &Arc<ClusterClock<T>> {
        &self.clock
    }

    /// Whether the node holds the cluster's state (it is past its warm-up).
    pub fn is_ready(&self) -> bool {
        self.warmup.is_none()
    }

    /// When the core next needs [`NodeCore::on_wake`].
    pub fn next_wake(&self) -> Instant {
        let periodic = self.timers.next();
        self.membership
            .next_timer()
            .map_or(periodic, |m| m.min(periodic))
    }

    /// Sealed datagrams to send, in the order they were made.
    pub fn take_outgoing(&mut self) -> Vec<Outgoing> {
        self.outbox.take()
    }

    /// Runs whatever is due at `now`: SWIM's timers first, then the periodic work in
    /// `Periodic` order (`timers.rs`).
    pub fn on_wake(&mut self, mut now: Now) {
        if self.membership.next_timer().is_some_and(|t| t <= now.at) {
            self.membership.fire_due(now.at);
            self.settle(now);
        }
        for due in self.timers.take_due(now.at) {
            match due {
                // A round steers cluster time: what comes after it in this wake-up sees the
                // steered time.
                Periodic::SummaryRound => now = self.summary_round(now),
                Periodic::AntiEntropy => self.periodic_anti_entropy(now),
                Periodic::Rejoin => {
                    let seeds = self.seeds();
                    let route = self.return_route.as_ref();
                    self.membership.announce_to_absent(
                        &seeds,
                        |down| route.is_none_or(|r| r.is_verified(down)),
                        now.at,
                    );
                    // Most members count more members than this node does: they know some this
                    // node does not. Each answer brings a packet of members picked at random,
                    // so this node asks several at once.
                    let missing = self
                        .liveness
                        .most_count_more_than(self.members_counted(), now.at);
                    if self
                        .ownership
                        .as_mut()
                        .is_some_and(|o| o.spread_due(missing))
                    {
                        let asks = if missing { SPREAD_WHEN_MISSING } else { 1 };
                        self.spread_membership(now, asks);
                    }
                }
                Periodic::CollectGarbage => self.collect_garbage(now),
            }
            self.settle(now);
        }
    }

    pub fn on_command(&mut self, now: Now, command: Command) {
        match command {
            Command::DiscoveredSeeds(seeds) => self.discovered = seeds,
            Command::Ask(need) => self.ask_owner(now, need),
        }
        self.settle(now);
    }

    /// The node stops: what it admitted since the last round goes out, then it leaves the
    /// cluster. Its peers keep its registers (and relay them) for as long as their windows
    /// live. A node still warming up stays so: the final round must not open admission after
    /// the drain.
    pub fn leave(&mut self, now: Now) {
        self.warmup = None;
        let now = self.summary_round(now);
        self.hand_back(now);
        self.settle(now);
        self.member_log.leaving();
        self.membership.leave(now.at);
        self.settle(now);
        tracing::info!(id = %self.params.node_id, "left the cluster");
    }

    /// Seals what membership queued and reacts to its events. Runs after every input.
    pub(super) fn settle(&mut self, now: Now) {
        for (to, data) in self.membership.take_outbox() {
            self.seal(now, Kind::Membership, &data, destination(&to));
        }
        let events = self.membership.take_events();
        if events.is_empty() {
            return;
        }
        for event in &events {
            tracing::debug!(?event, "membership");
            let change = self.member_log.event(event, now.at);
            let new_here = matches!(
                change,
                Some(MemberChange::Joined { .. } | MemberChange::Restarted { .. })
            );
            if let Some(change) = change {
                change.log();
            }
            if let MemberEvent::Up(id) | MemberEvent::Renamed { new: id, .. } = event {
                // A member that comes up, or restarts, has admissions this node has not heard
                // of yet. A member that renewed its identity while live here (declared down
                // on the far side of a partition) is the same process, heard all along: after
                // a heal every node renews, and a grace for each held the whole cluster to
                // this node's part of each limit for the grace's length.
                let renewed_while_live = matches!(
                    event,
                    MemberEvent::Renamed { old, new }
                        if old.node == new.node && self.counted_live_before(old, now.at)
                );
                if !renewed_while_live {
                    // New to this node: a first join or a restart, and an identity never
                    // renewed (one declared down anywhere renews it to come back).
                    let new_here = new_here && id.bump == 0;
                    self.liveness.joined(id.node.as_u128(), now.at, new_here);
                }
                if let Some(w) = &mut self.warmup {
                    w.member_changed(now.at);
                }
                self.queue_bootstrap(now, destination(id));
            }
        }
        if let Some(o) = &mut self.ownership {
            // A large cluster: what depends on the whole member list is brought up to date
            // once a round (`summary_round`), not at each of the thousands of changes a
            // fleet's formation brings.
            o.members_changed();
            return;
        }
        self.members_changed(now);
    }

    /// Brings what depends on the member list up to date.
    pub(super) fn members_changed(&mut self, now: Now) {
        let members = self.membership.members();
        let ids = self.liveness.set_members(&members, now.at);
        self.clock_sync.retain(|s| ids.contains(&s));
        self.features.retain(&ids);
        self.rules.retain(&ids, now.at);
        if let Some(route) = &mut self.return_route {
            let addrs = members.iter().map(|m| m.addr).collect();
            route.retain(&ids, &addrs);
        }
        self.update_live(now);
        self.publish();
    }

    /// One GC pass, and a warning (at most one per pass) when new keys met a full table.
    fn collect_garbage(&mut self, now: Now) {
        self.limiter.gc(now.cluster_ms, self.params.gc_budget);
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

    /// In a large cluster, windows' owners are only agreed on if the members' lists agree,
    /// and SWIM's gossip can leave a member unknown to a node for minutes. So this node
    /// announces itself to `asks` distinct members at random, whose answers carry members it
    /// may not know yet: twice a second while the members change, less often as they stay
    /// the same (`Ownership::spread_due`).
    fn spread_membership(&mut self, now: Now, asks: usize) {
        let members = self.membership.members();
        let asks = asks.min(members.len());
        // A partial shuffle: the first `asks` picks are distinct.
        let mut order: Vec<usize> = (0..members.len()).collect();
        for i in 0..asks {
            let j = self.rng.random_range(i..order.len());
            order.swap(i, j);
            self.membership.announce(members[order[i]].addr, now.at);
        }
    }

    /// Whether `member` counted as live just before a change of its identity: not suspected
    /// by SWIM at the last round (a large cluster, where a node hears only the members it
    /// shares windows with), or heard lately (the full mesh). A member only suspected here,
    /// silent across a partition, is renamed without going down first when it renews.
    fn counted_live_before(&self, member: &NodeId, at: Instant) -> bool {
        let id = member.node.as_u128();
        if self.ownership.is_some() {
            !self.suspects.contains(&id)
        } else {
            self.liveness
                .silent(std::slice::from_ref(member), self.clock_sync.fences(), at)
                .is_empty()
        }
    }

    /// Static and discovered seeds, this node excluded.
    fn seeds(&self) -> Vec<SocketAddr> {
        let mut s: BTreeSet<SocketAddr> = self.params.seeds.iter().copied().collect();
        s.extend(self.discovered.iter().copied());
        s.remove(&self.params.advertise);
        s.into_iter().collect()
    }

    /// Whether this node counts `member` live for admission at `at`: a member, heard from
    /// lately, past its join grace, its clock not cut off.
    pub fn counts_live(&self, member: uuid::Uuid, at: Instant) -> bool {
        let Some(m) = self.membership.member_by_id(member) else {
            return false;
        };
        self.liveness
            .silent(std::slice::from_ref(&m), self.clock_sync.fences(), at)
            .is_empty()
    }
}

/// Where datagrams for member `id` go: bound to its boot id, unless it is a seed known only by
/// its address.
pub(super) fn destination(id: &NodeId) -> Destination {
    Destination {
        addr: id.addr,
        node: (!id.node.is_nil()).then(|| id.node.as_u128()),
    }
}
