//! Dissemination through window owners, for clusters too large for every node to send every
//! register to every member.
//!
//! Each window has two owners on a ring of the members (`placement.rs`). A node sends its
//! register of a window to those two instead of to every member, and each round the first
//! owner sends every node that uses the window one register: the sum of every other origin
//! it holds (`Limiter::aggregates_for`). So a node's cost for a window depends on how many
//! nodes use it, not on the cluster's size, and a node with no traffic on a window pays
//! nothing for it. The second owner holds the registers too: when the first one goes, it takes
//! over with them.
//!
//! A cluster of up to [`FULL_MESH_UP_TO`] members sends to every member as before (one hop
//! instead of two, and no owner to lose); beyond it the owners carry the registers, and below
//! [`BACK_TO_FULL_MESH`] the full mesh comes back.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::core::NodeCore;
use super::placement::{Member, Ring};
use super::unanswered::UnansweredRegisters;
use crate::clock::{Now, TimeSource};
use crate::gossip::wire::{Destination, Kind};
use crate::limiter::{Batch, KeyId, OriginId, RegisterUpdate};

/// Largest cluster (this node included) that sends every register to every member.
pub const FULL_MESH_UP_TO: usize = 16;
/// A cluster in owner mode goes back to the full mesh once it is this small.
pub const BACK_TO_FULL_MESH: usize = 12;
/// A window far from its limit goes out once in this many rounds (see `owner_round`).
pub const CALM_EVERY: u64 = 5;
/// A contended window's register that is a minor part of its demand (`Limiter::minor`) goes
/// out once in this many rounds. Fewer than the four rounds of the silence threshold, so that
/// its owner never holds the node as quiet between two: once a second (the calm pace) cost
/// the global keys of a 400-node `fleet` a point of utilization, every other round nothing.
pub const MINOR_EVERY: u64 = 2;
/// In a quiet cluster, a node announces itself to a random member (`spread_membership`) at
/// most this many membership rounds apart: the gap doubles from one round after each
/// announcement while the members do not change.
pub const SPREAD_EVERY_MAX: u32 = 16;
/// Announcements per membership round while most members count more members than this node:
/// each answer is a packet of members picked at random, and the few nodes that miss a member
/// of a 1 000-node fleet went on missing it for tens of seconds at one a round.
pub const SPREAD_WHEN_MISSING: usize = 3;
/// A node that has sent an owner no register of a window for this long stops hearing of it;
/// and a node that has heard no sum of a window from a member it does not count as the
/// window's owner for this long stops sending it its registers (see `heard_sums`).
const SUBSCRIPTION: std::time::Duration = std::time::Duration::from_secs(3);
/// Most windows whose sums come from a member other than their owner in this node's view
/// (`Ownership::acting`): a member that sends sums of windows this node does not hold cannot
/// grow the table past it.
const MOST_ACTING: usize = 4_096;
/// Most windows whose owners are kept between changes of the ring.
const MOST_CACHED_OWNERS: usize = 1 << 16;

/// How a node spreads its registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dissemination {
    /// By cluster size: the full mesh up to [`FULL_MESH_UP_TO`] members, owners beyond.
    #[default]
    Auto,
    /// Every register to every member, whatever the size (for comparison).
    FullMesh,
    /// Through owners, whatever the size.
    Owners,
}

#[derive(Debug, Clone, Copy)]
struct Subscriber {
    to: Destination,
    heard: Instant,
    /// It sends registers of the window at least every other round (it counts the window
    /// near its limit) and has had no sum since its last: it gets one next round, even where
    /// this node counts the window calm, while this node is on a partition's side. (Always
    /// false for a member acting as an owner, which gets registers, not sums.)
    prompt: bool,
}

/// The state of owner mode.
#[derive(Debug)]
pub struct Ownership {
    ring: Ring,
    /// Owners of the windows looked up since the ring was built (the same windows come up
    /// every round).
    cache: std::collections::HashMap<KeyId, Option<[Member; 2]>, crate::limiter::KeyIdHashBuilder>,
    /// The members changed since the ring was built.
    stale: bool,
    /// The members SWIM suspected when the ring was built (left off it).
    suspects: BTreeSet<u128>,
    /// The members changed since the last round brought the member list up to date.
    pub(super) members_dirty: bool,
    /// Newcomers to push the windows they own to, once the ring includes them.
    bootstraps: Vec<Destination>,
    /// Per owned window, the nodes that use it: where they are and when they last sent.
    subscribers: BTreeMap<KeyId, BTreeMap<u128, Subscriber>>,
    /// Per window, a member that sends this node its sums while this node's ring names
    /// another first owner, and when it last did: the window's users count the registers
    /// that member holds, so this node's registers go there too (see `heard_sums`).
    acting: BTreeMap<KeyId, Subscriber>,
    /// Owned windows whose sums changed since the last round.
    changed: BTreeSet<KeyId>,
    /// Windows whose registers this node sends to an owner, and no sum came back since.
    unanswered: UnansweredRegisters,
    /// Send every live register of this node to both its owners next round (owners moved, or
    /// anti-entropy is due).
    resend_all: bool,
    /// Membership rounds between announcements to a random member, and rounds left until
    /// the next (see [`Ownership::spread_due`]).
    spread_every: u32,
    spread_wait: u32,
    /// Bumped whenever the ring changes.
    generation: u64,
}

impl Ownership {
    /// Owner mode on a ring whose points `ring_key` places.
    fn new(ring_key: super::placement::RingKey) -> Self {
        Self {
            ring: Ring::new(ring_key),
            cache: Default::default(),
            stale: true,
            suspects: BTreeSet::new(),
            members_dirty: true,
            bootstraps: Vec::new(),
            subscribers: BTreeMap::new(),
            acting: BTreeMap::new(),
            changed: BTreeSet::new(),
            unanswered: UnansweredRegisters::default(),
            resend_all: true,
            spread_every: 1,
            spread_wait: 0,
            generation: 0,
        }
    }

    /// Whether this membership round announces this node to random members, whose answers
    /// carry up to a packet of the members they know. Every round while the members change
    /// (a fleet forming, a rolling deploy) or while this node is `missing` members (most
    /// members count more than this node does: `SPREAD_WHEN_MISSING` announcements then);
    /// otherwise at 1, 2, 4 … up to
    /// [`SPREAD_EVERY_MAX`] rounds apart. An answer is a full packet (1.4 kB): at one every
    /// round, a twentieth of a 1 000-node fleet's gossip, and a node that knows every member
    /// learns nothing from it.
    pub fn spread_due(&mut self, missing: bool) -> bool {
        if missing {
            self.spread_restart();
        }
        if self.spread_wait > 0 {
            self.spread_wait -= 1;
            return false;
        }
        self.spread_wait = self.spread_every.saturating_sub(1);
        self.spread_every = (self.spread_every * 2).min(SPREAD_EVERY_MAX);
        true
    }

    /// Announcements every round again, starting with the next.
    fn spread_restart(&mut self) {
        self.spread_every = 1;
        self.spread_wait = 0;
    }

    /// The owners of `key` on the current ring.
    fn owners(&mut self, key: KeyId) -> Option<[Member; 2]> {
        if self.cache.len() >= MOST_CACHED_OWNERS && !self.cache.contains_key(&key) {
            // Windows come and go while the ring stays: start the cache over rather than keep
            // owners of windows long gone (a lookup is a binary search of the ring).
            self.cache.clear();
        }
        let ring = &self.ring;
        *self.cache.entry(key).or_insert_with(|| ring.owners(key))
    }

    /// Where to send a register of `key`: its owners other than `me`.
    pub(super) fn owner_destinations(
        &mut self,
        key: KeyId,
        me: u128,
    ) -> impl Iterator<Item = Destination> + use<> {
        let mut out = [None, None];
        if let Some([a, b]) = self.owners(key) {
            if a.id != me {
                out[0] = Some(a.destination());
            }
            if b.id != me && b.id != a.id {
                out[1] = Some(b.destination());
            }
        }
        out.into_iter().flatten()
    }

    /// Where a register of `key` goes this round: its first owner, its second too if `both`,
    /// and the member acting as its owner (if any) unless it is one of those.
    fn register_destinations(&mut self, key: KeyId, me: u128, both: bool) -> Vec<Destination> {
        let mut out: Vec<Destination> = self
            .owner_destinations(key, me)
            .take(if both { 2 } else { 1 })
            .collect();
        if let Some(acting) = self.acting.get(&key)
            && !out.iter().any(|d| d.node == acting.to.node)
        {
            out.push(acting.to);
        }
        out
    }

    /// See [`NodeCore::heard_sums`]; `me` is this node, and `holds` says whether it holds a
    /// window (asked only of the windows whose first owner here is not `sender`: the rare
    /// case, and the one a forged datagram could use to grow the table).
    fn heard_sums(
        &mut self,
        (me, sender): (u128, u128),
        to: Destination,
        keys: impl IntoIterator<Item = KeyId>,
        holds: impl Fn(&KeyId) -> bool,
        at: Instant,
    ) {
        if sender == me {
            return;
        }
        for key in keys {
            // The first owner's own sums do not end what another member's began: while both
            // reach this node (views that differ without a partition), this node's registers
            // go to both, until the other's sums have stopped for a subscription's time.
            if self.owners(key).is_some_and(|[a, _]| a.id == sender) || !holds(&key) {
                continue;
            }
            if self.acting.len() >= MOST_ACTING && !self.acting.contains_key(&key) {
                continue;
            }
            self.acting.insert(
                key,
                Subscriber {
                    to,
                    heard: at,
                    prompt: false,
                },
            );
        }
    }

    /// Members whose sums stopped [`SUBSCRIPTION`] ago get no more registers.
    fn forget_acting(&mut self, at: Instant) {
        self.acting
            .retain(|_, a| at.saturating_duration_since(a.heard) < SUBSCRIPTION);
    }

    fn owns(&mut self, key: KeyId, me: u128) -> bool {
        self.owners(key).is_some_and(|[a, _]| a.id == me)
    }

    /// The members changed: rebuild the ring, and what depends on the members, next round.
    pub fn members_changed(&mut self) {
        self.stale = true;
        self.members_dirty = true;
        self.spread_restart();
    }

    /// A newcomer to push the windows it owns to, next round.
    pub fn bootstrap(&mut self, to: Destination) {
        if !self.bootstraps.contains(&to) {
            self.bootstraps.push(to);
        }
    }

    /// Every own register goes to its owners next round.
    pub fn resend_all(&mut self) {
        self.resend_all = true;
    }

    /// The ring, and how many times it has changed.
    pub(super) fn ring(&self) -> (&Ring, u64) {
        (&self.ring, self.generation)
    }

    /// Whether every own register goes to its owners this round (and, taken, not the next).
    pub(super) fn take_resend_all(&mut self) -> bool {
        std::mem::take(&mut self.resend_all)
    }

    /// Newcomers to push the windows they own to (taken).
    pub(super) fn take_bootstraps(&mut self) -> Vec<Destination> {
        std::mem::take(&mut self.bootstraps)
    }

    /// The first owner of `key`.
    pub(super) fn first_owner(&mut self, key: KeyId) -> Option<Member> {
        self.owners(key).map(|[a, _]| a)
    }
}

impl<T: TimeSource> NodeCore<T> {
    /// Picks full mesh or owners for the cluster's size (with hysteresis). Returns whether
    /// owners carry the registers.
    ///
    /// The size is the larger of the members and `N_expected`, which holds a departed
    /// member for a minute: a partition does not change the mode. The side of a 30-node
    /// cluster's partition that fell to 12 members went back to the full mesh member by member
    /// as SWIM declared the far side down; for seconds its owners no longer sent sums while
    /// users still sent them registers, each user took half its side's share, and a window
    /// reached 1.56 x L.
    pub(super) fn choose_dissemination(&mut self) -> bool {
        let size = (self.membership.num_members() + 1).max(self.limiter.member_counts().1);
        let owners = match self.params.dissemination {
            // The ledger leases through owners at every size.
            _ if self.limiter.is_ledger() => true,
            Dissemination::FullMesh => false,
            Dissemination::Owners => true,
            Dissemination::Auto if self.ownership.is_some() => size > BACK_TO_FULL_MESH,
            Dissemination::Auto => size > FULL_MESH_UP_TO,
        };
        match (owners, self.ownership.is_some()) {
            (true, false) => {
                tracing::info!(members = size, "large cluster: registers go through owners");
                self.ownership = Some(Ownership::new(self.params.ring_key));
            }
            (false, true) => {
                tracing::info!(
                    members = size,
                    "small cluster: registers go to every member"
                );
                self.ownership = None;
                // Every member hears every register again.
                self.limiter.set_blind(Vec::new());
            }
            _ => {}
        }
        owners
    }

    /// Rebuilds the ring if the members changed (at most once a round: between rounds the
    /// ring of the last one serves); the owners it names may then have moved, so this node's
    /// registers all go out again.
    ///
    /// Members SWIM suspects are left off the ring: a window's owner across a partition would
    /// leave its users without sums until SWIM declares it down, seconds later, while both
    /// sides admit. So a change of the suspects rebuilds the ring too.
    pub(super) fn refresh_ring(&mut self) {
        // Under the ledger a suspect stays on the ring until SWIM declares it down: a window
        // changes owner only once its owner is down (or gone), by which time an owner cut off
        // with a partition's minority has stopped leasing (`ledger.rs`).
        let keep_suspects = self.limiter.is_ledger();
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        if !keep_suspects && self.suspects != ownership.suspects {
            ownership.suspects = self.suspects.clone();
            ownership.stale = true;
        }
        if !ownership.stale {
            return;
        }
        let mut members: Vec<Member> = self
            .membership
            .members()
            .iter()
            .filter(|m| keep_suspects || !ownership.suspects.contains(&m.node.as_u128()))
            .map(|m| Member {
                id: m.node.as_u128(),
                addr: m.addr,
            })
            .collect();
        members.push(Member {
            id: self.params.node_id.as_u128(),
            addr: self.params.advertise,
        });
        ownership.stale = false;
        if !ownership.ring.update(&members) {
            return;
        }
        ownership.cache.clear();
        ownership.generation += 1;
        // Owners may have moved: every register goes to both owners next round. Not only those
        // of the windows whose owners moved: a second owner takes over with the registers it
        // holds, and otherwise they are only as fresh as the last anti-entropy (5 s). Sending
        // only the moved windows, `fleet-churn` at 50 nodes (seed 1) had a window at 2.31 × its
        // limit; sending all, 1.20 ×.
        ownership.resend_all = true;
    }

    /// A node's registers of `keys` arrived: of the windows this node owns, the sender uses
    /// them.
    pub(super) fn subscribe(&mut self, sender: u128, to: Destination, keys: &[KeyId], now: Now) {
        let at = now.at;
        let me = self.params.node_id.as_u128();
        // A user sends every round (every other where its demand is a minor part) while it
        // counts the window near its limit, and once a second otherwise.
        let pace = self.params.gossip_interval * 5 / 2;
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        for key in keys {
            if ownership.owns(*key, me) {
                // An old owner's sum, held since it left, says less than the users' registers.
                self.limiter.release_departed_sums(*key, now.cluster_ms);
                let subscribers = ownership.subscribers.entry(*key).or_default();
                let prompt = subscribers
                    .get(&sender)
                    .is_some_and(|s| at.saturating_duration_since(s.heard) < pace);
                subscribers.insert(
                    sender,
                    Subscriber {
                        to,
                        heard: at,
                        prompt,
                    },
                );
                ownership.changed.insert(*key);
            }
        }
    }

    /// `sums` arrived from `sender`, at `to`: of their windows that this node holds, those whose first
    /// owner in this node's view is another member get this node's registers at `to` as well,
    /// for as long as its sums keep coming (and [`SUBSCRIPTION`] after).
    ///
    /// A member sends a window's sums while it counts itself the window's first owner (and,
    /// once it does not, for at most [`SUBSCRIPTION`]), and its users divide the limit by the
    /// demand it holds. While SWIM finds out a partition, views of the
    /// members differ for seconds: a node that still counts a member across the cut as the
    /// owner sends its registers there, and the owner its peers use hears from it only when
    /// its ring changes. For the rest, that owner's sums leave the node's demand out, its
    /// peers' shares sum to more than the limit, and in `fleet-partition` at 30 nodes (seed 1)
    /// a window reached 1.08 x L eight seconds into the cut.
    pub(super) fn heard_sums(&mut self, sender: u128, to: Destination, sums: &Batch, at: Instant) {
        let me = self.params.node_id.as_u128();
        let limiter = &self.limiter;
        if let Some(ownership) = self.ownership.as_mut() {
            for update in &sums.updates {
                let reg = &update.register;
                let alone = reg.demand == 0 && reg.admitted.iter().all(|c| *c == 0);
                ownership.unanswered.answered(update.key, alone, at);
            }
            let keys = sums.updates.iter().map(|u| u.key);
            ownership.heard_sums((me, sender), to, keys, |k| limiter.holds(k), at);
        }
    }

    /// One owner-mode round: this node's registers to their owners, and the sums of the
    /// windows it owns to the nodes that use them.
    ///
    /// Windows that refused something lately (`Limiter::contended`) go out every round, to the
    /// first owner (every [`MINOR_EVERY`]th round where this node's demand is a minor part of
    /// the window's), and their sums to their users; every [`CALM_EVERY`]th round every live
    /// register goes to the first owner, and the sums of every changed window to their users;
    /// at anti-entropy, and when the owners may have moved, every live register goes to both.
    /// A window far from its limit admits the same whether the others' counts are a round old
    /// or a second old; the second owner needs the registers only to take over. On a side of
    /// a partition a window near the side's part counts as contended too, and a user that
    /// sends every round gets its sum every round even where this node counts the window
    /// calm (`Subscriber::prompt`). Registers that get no sums back make their window blind
    /// (`unanswered.rs`).
    pub(super) fn owner_round(&mut self, now: Now, changed: Option<Batch>) {
        let me = self.params.node_id.as_u128();
        let origin = self.limiter.origin();
        self.refresh_ring();
        // Newcomers, now on the ring: the windows they own.
        let newcomers = self
            .ownership
            .as_mut()
            .map(|o| std::mem::take(&mut o.bootstraps))
            .unwrap_or_default();
        self.push_bootstraps(now, &newcomers);
        let calm_round = self.rounds.is_multiple_of(CALM_EVERY);
        let resend_all = self
            .ownership
            .as_mut()
            .is_some_and(|o| std::mem::take(&mut o.resend_all));
        let own = if resend_all || calm_round {
            self.limiter.snapshot_local(now.cluster_ms).updates
        } else {
            let mut updates = changed.map(|b| b.updates).unwrap_or_default();
            // A minor part of a window's demand goes every `MINOR_EVERY` rounds.
            let minor_round = self.rounds.is_multiple_of(MINOR_EVERY);
            updates.retain(|u| {
                self.limiter.contended(u.key, now.cluster_ms)
                    && (minor_round || !self.limiter.minor(u.key, now.cluster_ms))
            });
            updates
        };
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        let mut to_owners: BTreeMap<Destination, Vec<RegisterUpdate>> = BTreeMap::new();
        ownership.forget_acting(now.at);
        for update in own {
            let owned = ownership.owns(update.key, me);
            if owned {
                ownership.changed.insert(update.key);
            }
            // The second owner needs the registers only to take over: from anti-entropy (every
            // `anti_entropy_interval`) and whenever the owners may have moved.
            let destinations = ownership.register_destinations(update.key, me, resend_all);
            if !owned && !destinations.is_empty() {
                // Counted whether or not the registers can leave (an owner's address not yet
                // shown to receive, in an insecure cluster): either way no sum comes, and this
                // node knows nothing of the window's other users.
                ownership.unanswered.sent(update.key, now.at);
            }
            for to in destinations {
                to_owners.entry(to).or_default().push(update.clone());
            }
        }
        // Registers that get no sums back: no member counts itself the window's first owner
        // in this node's view, or they never reach it (`unanswered.rs`).
        self.limiter.set_blind(ownership.unanswered.blind(now.at));

        // The sums of the owned windows that changed, one datagram (or a few) per subscriber:
        // the contended ones now, the others on a calm round, except to the users that count
        // them near their limit (`Subscriber::prompt`): those get theirs now too.
        let mut changed = std::mem::take(&mut ownership.changed);
        let mut prompt_only = BTreeSet::new();
        // Only while this node's side of the cluster is scaled (a partition), where a window
        // calm before can be near its side's part: in steady state, users near their limit
        // that refuse little cost 7 % more gossip at 50 nodes and gained nothing measurable.
        let prompt_answers = self.limiter.side_part().is_some();
        if !calm_round {
            let (now_due, later): (BTreeSet<KeyId>, BTreeSet<KeyId>) = changed
                .into_iter()
                .partition(|k| self.limiter.contended(*k, now.cluster_ms));
            prompt_only = later
                .iter()
                .filter(|k| {
                    prompt_answers
                        && ownership
                            .subscribers
                            .get(k)
                            .is_some_and(|subs| subs.values().any(|s| s.prompt))
                })
                .copied()
                .collect();
            ownership.changed = later;
            changed = now_due;
            changed.extend(prompt_only.iter().copied());
        }
        let mut to_users: BTreeMap<Destination, Vec<RegisterUpdate>> = BTreeMap::new();
        let stamp = self.limiter.aggregate_stamp(now.cluster_ms);
        for key in changed {
            let Some(subs) = ownership.subscribers.get_mut(&key) else {
                continue;
            };
            subs.retain(|_, s| now.at.saturating_duration_since(s.heard) < SUBSCRIPTION);
            if subs.is_empty() {
                ownership.subscribers.remove(&key);
                continue;
            }
            let only_prompt = prompt_only.contains(&key);
            let ids: Vec<OriginId> = subs
                .iter()
                .filter(|(_, s)| !only_prompt || s.prompt)
                .map(|(id, _)| OriginId(*id))
                .collect();
            let sums = self
                .limiter
                .aggregates_for(key, &ids, stamp, now.cluster_ms);
            let answered = subs.values_mut().filter(|s| !only_prompt || s.prompt);
            for (sub, sum) in answered.zip(sums) {
                sub.prompt = false;
                to_users.entry(sub.to).or_default().push(sum);
            }
        }
        // In an insecure cluster, only to addresses that have shown they receive: a forged
        // member must not draw every user's registers, or an owner's sums, to a victim. (A
        // secure cluster checks nothing, and skips the round's list of destinations.)
        if self.return_route.is_some() {
            let destinations: BTreeSet<Destination> =
                to_owners.keys().chain(to_users.keys()).copied().collect();
            for to in destinations {
                if !self.may_send_state(now, to) {
                    to_owners.remove(&to);
                    to_users.remove(&to);
                }
            }
        }
        // Whoever gets registers or sums hears, now and then, what this build reads: so
        // that it may send this node an exchange.
        for to in to_owners
            .keys()
            .chain(to_users.keys())
            .copied()
            .collect::<Vec<_>>()
        {
            self.announce_features(now, to);
        }
        for (to, updates) in to_owners {
            // A node this one sends registers to may also use windows this one owns: one
            // datagram for both (at 100 nodes, a fifth of the round's datagrams).
            let sums = to_users.remove(&to).unwrap_or_default();
            self.send_registers_and_sums(
                now,
                to,
                &Batch { origin, updates },
                &Batch {
                    origin,
                    updates: sums,
                },
            );
        }
        for (to, updates) in to_users {
            self.send_batch(now, Kind::Aggregate, &Batch { origin, updates }, &[to]);
        }
        if resend_all {
            self.relay_departed(now);
        }
    }

    /// The registers this node holds of departed origins, each to its window's owners: when
    /// the owners move (a restart of every node moves them all) the old owners' registers,
    /// restored from snapshots or kept since, are what the new owners' sums must count.
    pub(super) fn relay_departed(&mut self, now: Now) {
        let me = self.params.node_id.as_u128();
        let departed = self.departed_registers(now);
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        let mut by_owner: BTreeMap<(Destination, OriginId), Vec<RegisterUpdate>> = BTreeMap::new();
        for Batch { origin, updates } in departed {
            for update in updates {
                for to in ownership.owner_destinations(update.key, me) {
                    by_owner
                        .entry((to, origin))
                        .or_default()
                        .push(update.clone());
                }
            }
        }
        for ((to, origin), updates) in by_owner {
            if self.may_send_state(now, to) {
                self.send_batch(now, Kind::AntiEntropy, &Batch { origin, updates }, &[to]);
            }
        }
    }

    /// The boot ids of `key`'s two owners in this node's view, in owner mode.
    pub fn owners_of(&mut self, key: KeyId) -> Option<[uuid::Uuid; 2]> {
        self.refresh_ring();
        let [a, b] = self.ownership.as_mut()?.owners(key)?;
        Some([uuid::Uuid::from_u128(a.id), uuid::Uuid::from_u128(b.id)])
    }

    /// The first owner of `key` in this node's view, in owner mode.
    pub(super) fn first_owner(&mut self, key: KeyId) -> Option<Member> {
        self.ownership.as_mut()?.first_owner(key)
    }

    /// Whether `key`'s owners (in this node's view) include `member`.
    pub(super) fn owned_by(&mut self, key: KeyId, member: u128) -> bool {
        self.ownership
            .as_mut()
            .and_then(|o| o.owners(key))
            .is_some_and(|[a, b]| a.id == member || b.id == member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u128) -> Member {
        Member {
            id,
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7_000 + id as u16)),
        }
    }

    /// Node 1's ownership in a cluster of nodes 1-5, and a window whose first owner in its
    /// view is neither node 1 nor node 5 (node 5 will claim it).
    fn viewed_from_node_1() -> (Ownership, KeyId, Member) {
        let mut o = Ownership::new([3; 32]);
        o.ring.update(&(1..=5).map(member).collect::<Vec<_>>());
        let key = (0u128..)
            .map(|i| KeyId(i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)))
            .find(|k| {
                o.owners(*k)
                    .is_some_and(|[a, b]| a.id != 1 && a.id != 5 && b.id != 5)
            })
            .expect("some window is owned by others");
        let first = o.owners(key).unwrap()[0];
        (o, key, first)
    }

    #[test]
    fn a_member_sending_sums_of_a_window_it_does_not_own_here_gets_the_registers_while_it_does() {
        let (mut o, key, first) = viewed_from_node_1();
        let t0 = crate::clock::monotonic_now();
        let to = |o: &mut Ownership, both| o.register_destinations(key, 1, both);
        assert_eq!(to(&mut o, false), vec![first.destination()]);
        // Node 5 counts itself the owner (its view differs) and sends node 1 its sums.
        let acting = member(5).destination();
        o.heard_sums((1, 5), acting, [key], |_| true, t0);
        assert_eq!(to(&mut o, false), vec![first.destination(), acting]);
        assert_eq!(to(&mut o, true).len(), 3, "both owners and node 5");
        // Its sums keep coming: still there after more than a subscription's time.
        o.heard_sums((1, 5), acting, [key], |_| true, t0 + SUBSCRIPTION / 2);
        o.forget_acting(t0 + SUBSCRIPTION);
        assert!(to(&mut o, false).contains(&acting));
        // They stop: a subscription's time after the last, node 5 gets nothing more.
        o.forget_acting(t0 + SUBSCRIPTION / 2 + SUBSCRIPTION);
        assert_eq!(to(&mut o, false), vec![first.destination()]);
        // The first owner's own sums, and this node's, do not add a destination; nor do
        // they end what another member's began (both may reach this node).
        o.heard_sums((1, first.id), first.destination(), [key], |_| true, t0);
        o.heard_sums((1, 1), member(1).destination(), [key], |_| true, t0);
        assert_eq!(to(&mut o, false), vec![first.destination()]);
        let t1 = t0 + SUBSCRIPTION * 2;
        o.heard_sums((1, 5), acting, [key], |_| true, t1);
        o.heard_sums((1, first.id), first.destination(), [key], |_| true, t1);
        o.forget_acting(t1 + SUBSCRIPTION / 2);
        assert_eq!(to(&mut o, false), vec![first.destination(), acting]);
    }

    #[test]
    fn the_owners_cache_stays_within_its_bound_as_windows_come_and_go() {
        let (mut o, key, first) = viewed_from_node_1();
        for k in 0..MOST_CACHED_OWNERS as u128 + 10 {
            o.owners(KeyId(k));
        }
        assert!(o.cache.len() <= MOST_CACHED_OWNERS, "{}", o.cache.len());
        assert_eq!(
            o.owners(key).map(|[a, _]| a.id),
            Some(first.id),
            "still right"
        );
    }

    #[test]
    fn sums_of_ever_more_windows_cannot_grow_the_table_past_its_bound() {
        let (mut o, _, _) = viewed_from_node_1();
        let t0 = crate::clock::monotonic_now();
        let keys: Vec<KeyId> = (0..MOST_ACTING as u128 * 2).map(KeyId).collect();
        o.heard_sums((1, 5), member(5).destination(), keys, |_| true, t0);
        assert!(o.acting.len() <= MOST_ACTING, "{} windows", o.acting.len());
        assert!(o.acting.len() >= MOST_ACTING / 2, "the bound is not zero");
    }

    /// The rounds, of `rounds`, in which `o` announces.
    fn announcing(o: &mut Ownership, rounds: u32) -> Vec<u32> {
        (0..rounds).filter(|_| o.spread_due(false)).collect()
    }

    #[test]
    fn announcements_slow_down_while_nothing_is_missing_and_resume_when_the_members_change() {
        let mut o = Ownership::new([3; 32]);
        // Gaps of 1, 2, 4, 8, then 16 rounds.
        assert_eq!(
            announcing(&mut o, 64),
            vec![0, 1, 3, 7, 15, 31, 47, 63],
            "rounds of the first 64 that announce"
        );
        assert_eq!(announcing(&mut o, 32).len(), 2, "one in 16 rounds at most");
        // A change, mid-wait: the next round announces, and the pace starts over.
        assert!(!o.spread_due(false));
        o.members_changed();
        assert_eq!(announcing(&mut o, 8), vec![0, 1, 3, 7]);
        // Behind another member's count: every round, for as long as it lasts.
        assert!((0..20).all(|_| o.spread_due(true)));
        // Then slowing again, from where the last of those left the gap (two rounds).
        assert_eq!(announcing(&mut o, 8), vec![0, 2, 6]);
    }
}
