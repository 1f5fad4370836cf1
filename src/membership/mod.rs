//! Cluster membership on SWIM (foca).
//!
//! [`Membership`] owns the `Foca` instance, its timers and its outbox, and is driven by the
//! node's event loop: hand it data, due timers and commands; take packets to send and events.
//! It reads no clock and no socket itself (time is a `tokio::time::Instant` it is given), so the
//! same code runs on real UDP and inside the simulation.
//!
//! Three things foca leaves to the application are handled here:
//! - **timers** go through one ordered heap (foca's timer order matters: ties resolve in
//!   `Timer` order), and the runtime's queues are drained after every foca call;
//! - **rejoin**: an idle foca never announces again, and after a partition heals both sides
//!   still have members, so neither would look for the other for a minute or more. Twice a
//!   second this node announces itself to seeds that are not members and to members it holds
//!   as down ([`Membership::announce_to_absent`]): to [`ANNOUNCE_AT_A_TIME`] of them in turn
//!   while nothing comes back, and to all of them once when one does (a heal). Down members
//!   are forgotten after two minutes, which bounds what a node that is really gone costs.
//! - **sizing**: foca's LAN preset is re-derived whenever the member count changes.

mod codec;
mod identity;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use bytes::Bytes;
use foca::{AccumulatingRuntime, Config, Foca, NoCustomBroadcast, OwnedNotification, Timer};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;

pub use codec::{BincodeCodec, CodecError};
pub use identity::NodeId;

/// What membership tells the rest of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberEvent {
    Up(NodeId),
    Down(NodeId),
    /// The member at an address changed identity: a restart, or a renewal after a partition.
    /// Liveness may not have changed, so no `Up` follows.
    Renamed {
        old: NodeId,
        new: NodeId,
    },
    /// This node joined (or rejoined) a cluster.
    Active,
    /// This node has no live members.
    Idle,
    /// This node was declared down and could not renew its identity.
    Defunct,
    /// This node renewed its identity to rejoin.
    Rejoined(NodeId),
}

type Swim = Foca<NodeId, BincodeCodec, StdRng, NoCustomBroadcast>;

pub struct Membership {
    foca: Swim,
    runtime: AccumulatingRuntime<NodeId>,
    /// Due time, insertion order (stable among equal times), timer.
    timers: BinaryHeap<Reverse<(Instant, u64, Timer<NodeId>)>>,
    timer_seq: u64,
    outbox: Vec<(NodeId, Bytes)>,
    events: Vec<MemberEvent>,
    max_packet: usize,
    sized_for: u32,
    /// The active members in address order, as of the last change: a large cluster's node
    /// asks for them several times a round and they change far less often.
    members: std::cell::OnceCell<Vec<NodeId>>,
    /// The addresses the last [`Membership::announce_to_absent`] found absent.
    absent: std::collections::BTreeSet<SocketAddr>,
    /// Where the next capped announce round starts in the absent list.
    announce_cursor: usize,
    /// Set when an absent address comes back up, or this node renews its identity (it was told
    /// it is held down): the next announce round goes to every absent address, once
    /// [`FULL_ROUND_EVERY`] has passed since the last such round (it stays set until then, or
    /// until a round goes to every absent address anyway).
    heal_seen: bool,
    /// When an announce round last went to every absent address because of a heal.
    last_full_round: Option<Instant>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("identity", self.foca.identity())
            .field("members", &self.foca.num_members())
            .finish_non_exhaustive()
    }
}

/// How often SWIM probes a member.
const PROBE_PERIOD: Duration = Duration::from_millis(500);
/// Largest cluster (this node included) whose suspects go down after three probe periods:
/// that of the full mesh (`node::FULL_MESH_UP_TO`).
const FAST_DOWN_UP_TO: usize = 16;

fn config_for(members: u32, max_packet: usize) -> Config {
    let mut c = Config::new_lan(NonZeroU32::new(members.max(1)).unwrap_or(NonZeroU32::MIN));
    // SWIM probes twice as often as foca's LAN preset (foca refuses to change the period of a
    // running instance, so at every size): a probe is a few hundred bytes. A small cluster
    // also declares a suspect down sooner (1.5 s rather than 4 s), so that an operator reads
    // a partition in the logs within 5 s: a node cut off alone must probe each far member in
    // turn before it can suspect it, and admission never waited for SWIM (`liveness.rs`). A
    // large cluster keeps foca's time to down: there a partition's far side is held (its
    // demand kept) until SWIM declares it down, and a quicker down would release its demand
    // before the owners' sums on this side have counted the partition, every share rising at
    // once. The sizes are pinned by `the_swim_config_follows_the_cluster_size_without_foca_refusing_it`;
    // the bound a slower down keeps is not pinned by a test.
    c.probe_period = PROBE_PERIOD;
    c.probe_rtt = PROBE_PERIOD / 2;
    if members as usize <= FAST_DOWN_UP_TO {
        c.suspect_to_down_after = PROBE_PERIOD * 3;
    }
    if let Some(size) = std::num::NonZeroUsize::new(max_packet) {
        c.max_packet_size = size;
    }
    c.remove_down_after = Some(FORGET_DOWN_AFTER);
    c
}

impl Membership {
    /// `max_packet` is what foca may put in one datagram body; `seed` seeds its randomness
    /// (probe order, gossip targets), fixed in simulation.
    pub fn new(identity: NodeId, max_packet: usize, seed: u64) -> Self {
        let foca = Foca::new(
            identity,
            config_for(1, max_packet),
            StdRng::seed_from_u64(seed),
            BincodeCodec,
        );
        Self {
            foca,
            runtime: AccumulatingRuntime::new(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            outbox: Vec::new(),
            events: Vec::new(),
            max_packet,
            sized_for: 1,
            members: std::cell::OnceCell::new(),
            absent: std::collections::BTreeSet::new(),
            // Nodes that hold the same members down start at different places in the list,
            // so that their capped rounds reach different members.
            announce_cursor: usize::try_from(seed % 65_536).unwrap_or(0),
            heal_seen: false,
            last_full_round: None,
        }
    }

    pub fn identity(&self) -> &NodeId {
        self.foca.identity()
    }

    /// The active member at `addr`, if any.
    pub fn member_at(&self, addr: SocketAddr) -> Option<NodeId> {
        self.foca
            .iter_members()
            .map(|m| m.id())
            .find(|id| id.addr == addr)
            .cloned()
    }

    /// The active member whose boot id is `id`, if any.
    pub fn member_by_id(&self, id: uuid::Uuid) -> Option<NodeId> {
        self.foca
            .iter_members()
            .map(|m| m.id())
            .find(|m| m.node == id)
            .cloned()
    }

    /// Live members, this node excluded, in address order.
    pub fn members(&self) -> Vec<NodeId> {
        self.members
            .get_or_init(|| {
                let mut m: Vec<NodeId> = self.foca.iter_members().map(|m| m.id().clone()).collect();
                m.sort_by_key(|id| id.addr);
                m
            })
            .clone()
    }

    /// The boot ids of the live members.
    pub fn member_ids(&self) -> Vec<u128> {
        self.foca
            .iter_members()
            .map(|m| m.id().node.as_u128())
            .collect()
    }

    /// The members SWIM suspects, by id.
    pub fn suspect_members(&self) -> BTreeMap<u128, NodeId> {
        self.foca
            .iter_membership_state()
            .filter(|m| m.state() == foca::State::Suspect)
            .map(|m| (m.id().node.as_u128(), m.id().clone()))
            .collect()
    }

    pub fn num_members(&self) -> usize {
        self.foca.num_members()
    }

    /// The members foca knows about, with their SWIM state, including suspects and the dead
    /// it still remembers.
    pub fn states(&self) -> BTreeMap<SocketAddr, (NodeId, foca::State)> {
        self.foca
            .iter_membership_state()
            .map(|m| (m.id().addr, (m.id().clone(), m.state())))
            .collect()
    }

    /// Feeds a SWIM packet. Junk or stale packets are normal in SWIM (a restarted peer, a
    /// member we declared down): the error is returned for counting, not acted on.
    pub fn handle_data(&mut self, data: &[u8], now: Instant) -> Result<(), foca::Error> {
        let r = self.foca.handle_data(data, &mut self.runtime);
        self.drain(now);
        r
    }

    /// When the next timer is due.
    pub fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Fires every timer due at `now`, in order.
    pub fn fire_due(&mut self, now: Instant) {
        while let Some(Reverse((at, _, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, _, timer))) = self.timers.pop() else {
                break;
            };
            let _ = self.foca.handle_timer(timer, &mut self.runtime);
            self.drain(now);
        }
    }

    pub fn announce(&mut self, to: SocketAddr, now: Instant) {
        if to == self.identity().addr {
            return;
        }
        let _ = self.foca.announce(NodeId::seed(to), &mut self.runtime);
        self.drain(now);
    }

    /// Announces to seeds that are not live members and to members held as down whose address
    /// `down_ok` accepts. Returns how many announces went out.
    ///
    /// A partition holds hundreds of members down on each side, and announcing to each of them
    /// twice a second was a quarter of a large cluster's gossip during one. So while nothing
    /// comes back, a round goes to [`ANNOUNCE_AT_A_TIME`] of them, in turn; the first answer
    /// across a heal (an absent address back up, or this node told to renew its identity)
    /// makes the next round go to all of them, so that the two sides' views merge as fast as
    /// they did when every round went to all (at most once every [`FULL_ROUND_EVERY`]). A
    /// node with no members at all announces to every absent address, seeds and down members
    /// alike: it is joining, or cut off alone, and it is one node.
    pub fn announce_to_absent(
        &mut self,
        seeds: &[SocketAddr],
        down_ok: impl Fn(SocketAddr) -> bool,
        now: Instant,
    ) -> usize {
        let present: std::collections::BTreeSet<SocketAddr> =
            self.foca.iter_members().map(|m| m.id().addr).collect();
        let me = self.identity().addr;
        let mut absent: std::collections::BTreeSet<SocketAddr> = seeds
            .iter()
            .copied()
            .filter(|s| *s != me && !present.contains(s))
            .collect();
        absent.extend(
            self.foca
                .iter_membership_state()
                .filter(|m| m.state() == foca::State::Down)
                .map(|m| m.id().addr)
                .filter(|a| *a != me && !present.contains(a) && down_ok(*a)),
        );
        let all_anyway = present.is_empty() || absent.len() <= ANNOUNCE_AT_A_TIME;
        let heal_round = self.heal_seen
            && self
                .last_full_round
                .is_none_or(|last| now.saturating_duration_since(last) >= FULL_ROUND_EVERY);
        if heal_round || (self.heal_seen && all_anyway) {
            self.heal_seen = false;
            // Only a round the heal widened counts against the next one.
            if !all_anyway {
                self.last_full_round = Some(now);
            }
        }
        let all = heal_round || all_anyway;
        let to: Vec<SocketAddr> = if all {
            absent.iter().copied().collect()
        } else {
            let start = self.announce_cursor % absent.len();
            self.announce_cursor = start + ANNOUNCE_AT_A_TIME;
            absent
                .iter()
                .copied()
                .cycle()
                .skip(start)
                .take(ANNOUNCE_AT_A_TIME)
                .collect()
        };
        self.absent = absent;
        for addr in &to {
            self.announce(*addr, now);
        }
        to.len()
    }

    /// Tells the cluster this node is leaving (a graceful shutdown).
    pub fn leave(&mut self, now: Instant) {
        let _ = self.foca.leave_cluster(&mut self.runtime);
        self.drain(now);
    }

    /// Packets foca wants sent, to their recipients (a seed known only by its address has a
    /// nil id: see [`NodeId::seed`]).
    pub fn take_outbox(&mut self) -> Vec<(NodeId, Bytes)> {
        std::mem::take(&mut self.outbox)
    }

    pub fn take_events(&mut self) -> Vec<MemberEvent> {
        std::mem::take(&mut self.events)
    }

    fn drain(&mut self, now: Instant) {
        while let Some((to, data)) = self.runtime.to_send() {
            self.outbox.push((to, data));
        }
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.timer_seq += 1;
            self.timers
                .push(Reverse((now + after, self.timer_seq, timer)));
        }
        while let Some(n) = self.runtime.to_notify() {
            // Foca tells every change of its active members (up, down, renamed): the cached
            // list is recomputed when next asked for.
            self.members.take();
            let event = match n {
                OwnedNotification::MemberUp(id) => MemberEvent::Up(id),
                OwnedNotification::MemberDown(id) => MemberEvent::Down(id),
                OwnedNotification::Rename(old, new) => MemberEvent::Renamed { old, new },
                OwnedNotification::Active => MemberEvent::Active,
                OwnedNotification::Idle => MemberEvent::Idle,
                OwnedNotification::Defunct => MemberEvent::Defunct,
                OwnedNotification::Rejoin(id) => MemberEvent::Rejoined(id),
                #[allow(unreachable_patterns)]
                _ => continue,
            };
            // A member back from down comes Up (foca notifies a rename first, and the rename
            // alone may be of one down identity by another).
            if let MemberEvent::Up(id) = &event {
                self.heal_seen |= self.absent.contains(&id.addr);
            }
            self.heal_seen |= matches!(event, MemberEvent::Rejoined(_));
            self.events.push(event);
        }
        if self
            .members
            .get()
            .is_some_and(|m| m.len() != self.foca.num_members())
        {
            self.members.take();
        }
        self.resize();
    }

    /// Re-derives foca's parameters (transmissions, suspicion timeout) for the current size.
    fn resize(&mut self) {
        let n = u32::try_from(self.foca.num_members() + 1).unwrap_or(u32::MAX);
        if n != self.sized_for && self.foca.set_config(config_for(n, self.max_packet)).is_ok() {
            self.sized_for = n;
        }
    }
}

/// How often a node announces itself to seeds that are not members and to down members.
pub const REJOIN_INTERVAL: Duration = Duration::from_millis(500);
/// How many absent addresses a rejoin round announces to while none of them answers.
pub const ANNOUNCE_AT_A_TIME: usize = 8;
/// The least time between two announce rounds that go to every absent address because of a
/// heal. A member back up, or this node told to renew its identity, is a sign of a heal; a
/// member that lies (or anyone, in a cluster without keys) can send such signs at will, and
/// each made the next round announce to every address held down: hundreds in a large
/// cluster's partition, for one datagram. A sign within this time of the last such round
/// waits for its end (it is kept until then). So a heal is acted on at once unless another
/// sign widened a round in the last 5 s; one heal gives several signs (members back up one by
/// one, this node renewing its identity), and the later ones come while the two sides' views
/// merge anyway, so waiting costs a heal nothing. Pinned by
/// `members_held_down_get_a_few_announces_at_a_time_until_one_answers_then_all`.
pub const FULL_ROUND_EVERY: Duration = Duration::from_secs(5);
/// How long a member declared down is remembered (and announced to).
pub const FORGET_DOWN_AFTER: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests;
