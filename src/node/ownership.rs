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
//!
//! This file holds owner mode's state ([`Ownership`]); the node's rounds that use it are in
//! `owner_mode.rs`.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::placement::{Member, Ring};
use super::unanswered::UnansweredRegisters;
use crate::gossip::wire::Destination;
use crate::limiter::KeyId;

/// Largest cluster (this node included) that sends every register to every member.
pub const FULL_MESH_UP_TO: usize = 16;
/// A cluster in owner mode goes back to the full mesh once it is this small.
pub const BACK_TO_FULL_MESH: usize = 12;
/// A window far from its limit goes out once in this many rounds (see `owner_round`).
pub const CALM_EVERY: u64 = 5;
/// A contended window's register that is a minor part of its demand (`Limiter::minor`) goes
/// out once in this many rounds. Fewer than the four rounds of the silence threshold, so that
/// its owner never holds the node as quiet between two (a quiet node's demand stops counting,
/// and its share goes to the others). Pinned by
/// `a_window_every_node_uses_is_reported_every_other_round_and_holds_its_limit`
/// (`sim/tests/fleet.rs`).
pub const MINOR_EVERY: u64 = 2;
/// In a quiet cluster, a node announces itself to a random member (`spread_membership`) at
/// most this many membership rounds apart: the gap doubles from one round after each
/// announcement while the members do not change.
pub const SPREAD_EVERY_MAX: u32 = 16;
/// Announcements per membership round while most members count more members than this node:
/// each answer is a packet of members picked at random, so in a large fleet one answer a round
/// finds a missing member only after many rounds, and a few answers a round find it sooner.
/// Not pinned by a test.
pub const SPREAD_WHEN_MISSING: usize = 3;
/// A node that has sent an owner no register of a window for this long stops hearing of it;
/// and a node that has heard no sum of a window from a member it does not count as the
/// window's owner for this long stops sending it its registers (see `heard_sums`).
pub(super) const SUBSCRIPTION: std::time::Duration = std::time::Duration::from_secs(3);
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
pub(super) struct Subscriber {
    pub(super) to: Destination,
    pub(super) heard: Instant,
    /// It sends registers of the window at least every other round (it counts the window
    /// near its limit) and has had no sum since its last: it gets one next round, even where
    /// this node counts the window calm, while this node is on a partition's side. (Always
    /// false for a member acting as an owner, which gets registers, not sums.)
    pub(super) prompt: bool,
}

/// The state of owner mode.
#[derive(Debug)]
pub struct Ownership {
    /// Shared with the ledger's views of it (a ring of a thousand members is a megabyte): a
    /// change makes a new one.
    pub(super) ring: std::sync::Arc<Ring>,
    /// Owners of the windows looked up since the ring was built (the same windows come up
    /// every round).
    pub(super) cache:
        std::collections::HashMap<KeyId, Option<[Member; 2]>, crate::limiter::KeyIdHashBuilder>,
    /// The members changed since the ring was built.
    pub(super) stale: bool,
    /// The members SWIM suspected when the ring was built (left off it).
    pub(super) suspects: BTreeSet<u128>,
    /// Under the ledger: the members, this node among them, that said they lease nothing for
    /// their clocks when the ring was built (left off it: `not_leasing.rs`).
    pub(super) off_ring: BTreeSet<u128>,
    /// The members changed since the last round brought the member list up to date.
    pub(super) members_dirty: bool,
    /// Newcomers to push the windows they own to, once the ring includes them.
    pub(super) bootstraps: Vec<Destination>,
    /// Per owned window, the nodes that use it: where they are and when they last sent.
    pub(super) subscribers: BTreeMap<KeyId, BTreeMap<u128, Subscriber>>,
    /// Per window, a member that sends this node its sums while this node's ring names
    /// another first owner, and when it last did: the window's users count the registers
    /// that member holds, so this node's registers go there too (see `heard_sums`).
    acting: BTreeMap<KeyId, Subscriber>,
    /// Owned windows whose sums changed since the last round.
    pub(super) changed: BTreeSet<KeyId>,
    /// Windows whose registers this node sends to an owner, and no sum came back since.
    pub(super) unanswered: UnansweredRegisters,
    /// Windows another member owns that this node knew only from its state file when its
    /// warm-up ended, until their owners' first sums (or until they are found blind): they
    /// admit nothing here meanwhile (`Limiter::set_unconfirmed`).
    pub(super) unconfirmed: BTreeSet<KeyId>,
    /// Send every live register of this node to both its owners next round (owners moved, or
    /// anti-entropy is due).
    pub(super) resend_all: bool,
    /// Members that said they are leaving since the last round: the registers of the windows
    /// they own go to the next owners (`ledger_leave.rs`).
    resend_of: BTreeSet<u128>,
    /// Membership rounds between announcements to a random member, and rounds left until
    /// the next (see [`Ownership::spread_due`]).
    spread_every: u32,
    spread_wait: u32,
    /// Bumped whenever the ring changes.
    pub(super) generation: u64,
}

impl Ownership {
    /// Owner mode on a ring whose points `ring_key` places.
    pub(super) fn new(ring_key: super::placement::RingKey) -> Self {
        Self {
            ring: std::sync::Arc::new(Ring::new(ring_key)),
            cache: Default::default(),
            stale: true,
            suspects: BTreeSet::new(),
            off_ring: BTreeSet::new(),
            members_dirty: true,
            bootstraps: Vec::new(),
            subscribers: BTreeMap::new(),
            acting: BTreeMap::new(),
            changed: BTreeSet::new(),
            unanswered: UnansweredRegisters::default(),
            unconfirmed: BTreeSet::new(),
            resend_all: true,
            resend_of: BTreeSet::new(),
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
    pub(super) fn owners(&mut self, key: KeyId) -> Option<[Member; 2]> {
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
    pub(super) fn register_destinations(
        &mut self,
        key: KeyId,
        me: u128,
        both: bool,
    ) -> Vec<Destination> {
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

    /// See `NodeCore::heard_sums` (`owner_mode.rs`); `me` is this node, and `holds` says whether it holds a
    /// window (asked only of the windows whose first owner here is not `sender`: the rare
    /// case, and the one a forged datagram could use to grow the table).
    pub(super) fn heard_sums(
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
    pub(super) fn forget_acting(&mut self, at: Instant) {
        self.acting
            .retain(|_, a| at.saturating_duration_since(a.heard) < SUBSCRIPTION);
    }

    pub(super) fn owns(&mut self, key: KeyId, me: u128) -> bool {
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

    /// `member` said it is leaving: the registers of the windows it owns go to their next
    /// owners next round.
    pub fn resend_windows_of(&mut self, member: u128) {
        self.resend_of.insert(member);
    }

    /// The members whose windows' registers go to their next owners this round (taken).
    pub(super) fn take_resend_of(&mut self) -> BTreeSet<u128> {
        std::mem::take(&mut self.resend_of)
    }

    /// The ring, and how many times it has changed.
    pub(super) fn ring(&self) -> (&std::sync::Arc<Ring>, u64) {
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
}

#[cfg(test)]
mod tests;
