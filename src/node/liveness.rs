//! Which members count as live for admission: those heard from lately, and present long enough
//! for their state to have arrived. SWIM decides who is a member; this decides whose demand
//! this node shares the limit with, long before SWIM would declare a silent member down.
//! Senders a minute off count as silent members (`far.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::clock_sync::Fences;
use crate::limiter::OriginId;
use crate::membership::NodeId;

#[derive(Debug)]
pub struct Liveness {
    silence_threshold: Duration,
    join_grace: Duration,
    // The per-member tables are hashed: in a large cluster a tree's walk misses the cache at
    // every level. Nothing depends on their order (what is listed from them is sorted).
    /// What is known of each member, in one entry: every datagram reads or writes most of
    /// it, and one entry is one cache miss where a table per field was one each.
    members: Members<MemberRecord>,
    /// When each member appeared (up or renamed), while in its join grace.
    joined_at: Members<Instant>,
    /// When each process new to this node came up, while a member (`came_up_within`).
    came_up: Members<Instant>,
    /// Senders whose clocks are more than a minute from this node's (`far.rs`).
    far: far::FarSenders,
    /// Members that left (went down, or were renamed by a restart), and when this node
    /// learned it: their sums are held a while after (`Liveness::departed_within`).
    departed: BTreeMap<u128, Instant>,
    /// Each member by its short id (`relayed.rs`), where no other member has the same one.
    shorts: HashMap<u32, u128>,
}

type Members<V> = HashMap<u128, V, crate::limiter::IdHashBuilder>;

#[derive(Debug, Clone, Copy)]
struct MemberRecord {
    /// Its address, to tell whose datagrams may steer this node's clock.
    addr: SocketAddr,
    /// When it was last heard from (registers and heartbeats only).
    last_heard: Option<Instant>,
    /// When its last datagram of any kind (SWIM's included) arrived, in cluster time: what
    /// `members` shows an operator.
    last_datagram: Option<u64>,
    /// The latest cluster time another member said it heard from it (`relayed.rs`).
    relayed: Option<u64>,
    /// How many members it says it counts, itself included (the prefix of its register and
    /// heartbeat bodies), and when that was heard.
    count: Option<(usize, Instant)>,
}

/// The least time a member's count stays fresh enough to say whether this node lacks members
/// ([`Liveness::most_count_more_than`]). It is 5 calm rounds of registers and sums (a calm
/// window's go every fifth round), so the members a node shares windows with are heard
/// within it: `25 × gossip_interval`, which is `6.25 × silence_threshold` (4 rounds), and 5 s
/// at the default 200 ms round.
const COUNT_FRESH_MIN: Duration = Duration::from_secs(5);

/// How long a count stays fresh, for a silence threshold of 4 rounds.
fn count_fresh(silence_threshold: Duration) -> Duration {
    (silence_threshold * 25 / 4).max(COUNT_FRESH_MIN)
}

/// A member quiet for longer than this is not held any more (see [`Liveness::held`]): SWIM
/// has long said whether it is down, and a relationship this old has simply ended.
pub const HOLD_FOR: Duration = Duration::from_secs(30);

impl Liveness {
    pub fn new(silence_threshold: Duration, join_grace: Duration) -> Self {
        Self {
            silence_threshold,
            join_grace,
            members: Members::default(),
            joined_at: Members::default(),
            came_up: Members::default(),
            far: far::FarSenders::default(),
            departed: BTreeMap::new(),
            shorts: HashMap::new(),
        }
    }

    /// A genuine datagram from `sender`, sent at `sent_ms` on its clock, was more than a
    /// minute from this node's clock: whether to tell it so (`FarSenders::clock`).
    pub fn far_clock(&mut self, sender: u128, sent_ms: u64, counted: bool, at: Instant) -> bool {
        self.far.clock(sender, sent_ms, counted, at)
    }

    /// `sender`, a minute off, says it counts this many members.
    pub fn far_counted(&mut self, sender: u128, members: usize) {
        self.far.said_count(sender, members);
    }

    /// Senders heard lately with clocks a minute off that are not members
    /// (`FarSenders::refresh`).
    pub fn far_clocks(&mut self, members: &[NodeId], at: Instant) -> Vec<OriginId> {
        self.far.refresh(members, at)
    }

    /// How many of the senders a minute off are not members, as of the last
    /// [`Liveness::far_clocks`]: members all the same, in the count this node tells its peers.
    pub fn far_members(&self) -> usize {
        self.far.members()
    }

    /// A register or heartbeat from `sender` arrived. Recorded for members only: anyone who
    /// can open a datagram (anyone at all, in an insecure cluster) could otherwise fill the
    /// table, and have made-up senders held (`held`).
    pub fn heard(&mut self, sender: u128, at: Instant) {
        if let Some(m) = self.members.get_mut(&sender) {
            m.last_heard = Some(at);
        }
    }

    /// A datagram of any kind from `sender` opened at cluster time `at_ms`. Recorded for
    /// members only: the table cannot grow past the member list.
    pub fn heard_any(&mut self, sender: u128, at_ms: u64) {
        if let Some(m) = self.members.get_mut(&sender) {
            m.last_datagram = Some(at_ms);
        }
    }

    /// Whether `sender` is a member.
    pub fn is_member(&self, sender: u128) -> bool {
        self.members.contains_key(&sender)
    }

    /// When `member`'s last datagram arrived (cluster time, Unix ms).
    pub fn last_datagram(&self, member: u128) -> Option<u64> {
        self.members.get(&member).and_then(|m| m.last_datagram)
    }

    /// `member` came up or was renamed (a restart): its demand is unknown until its registers
    /// can have arrived. `new_here`: a process new to this node, not one back after a heal.
    pub fn joined(&mut self, member: u128, at: Instant, new_here: bool) {
        self.joined_at.insert(member, at);
        if new_here {
            self.came_up.insert(member, at);
        }
    }

    /// Whether `member`, a process new to this node (holding no token yet), came up within
    /// `within` of `at`.
    pub fn came_up_within(&self, member: u128, within: Duration, at: Instant) -> bool {
        self.came_up
            .get(&member)
            .is_some_and(|t| at.saturating_duration_since(*t) < within)
    }

    /// `sender` counts this many members, itself included (heard at `at`).
    pub fn counted(&mut self, sender: u128, members: usize, at: Instant) {
        if let Some(m) = self.members.get_mut(&sender) {
            m.count = Some((members, at));
        }
    }

    /// The count `member` last reported, and when it was heard.
    #[cfg(test)]
    pub fn count_of(&self, member: u128) -> Option<(usize, Instant)> {
        self.members.get(&member).and_then(|m| m.count)
    }

    /// The largest member count any member reports, or any sender a minute off.
    ///
    /// Stale counts stay in: a count too small cannot be the largest, and one too large is
    /// forgotten when a member leaves (`set_members`). This feeds `N_expected` and the strict
    /// scale's fence, where leaving out a member that only a peer hears would over-admit.
    pub fn largest_count(&self) -> usize {
        let far = self.far.counts();
        self.members
            .values()
            .filter_map(|m| m.count.map(|(count, _)| count))
            .chain(far)
            .max()
            .unwrap_or(0)
    }

    /// Whether most members whose count this node heard lately count more members than `mine`:
    /// this node then lacks members most of the cluster knows of. Not the largest count: a
    /// member that missed a departure and still counts the departed one would keep every
    /// other node asking for members it does not lack, through a whole rolling deploy, each
    /// ask answered with a full packet of members.
    ///
    /// Only counts heard lately (5 calm rounds, [`COUNT_FRESH_MIN`] at least) before `at`: in a
    /// large cluster a node hears again only from the members it shares windows with, and the
    /// counts of the others, heard once while the fleet formed, said fewer members than there
    /// are for good. With them, a node that lacked one member (the first owner of a window it
    /// used) would not ask for it while the stale counts held the majority: it would see no
    /// sums of that window and take the whole limit. Pinned by
    /// `a_node_lacks_members_when_most_count_more_not_when_one_does` and
    /// `a_count_heard_before_a_departure_does_not_outlive_it_but_one_heard_before_a_join_does`.
    pub fn most_count_more_than(&self, mine: usize, at: Instant) -> bool {
        let fresh = count_fresh(self.silence_threshold);
        let (more, heard) = self
            .members
            .values()
            .filter_map(|m| m.count)
            .filter(|(_, heard)| at.saturating_duration_since(*heard) <= fresh)
            .map(|(count, _)| count)
            .fold((0usize, 0usize), |(more, heard), c| {
                (more + usize::from(c > mine), heard + 1)
            });
        more * 2 > heard
    }

    /// The address SWIM holds for `member`.
    pub fn address_of(&self, member: u128) -> Option<SocketAddr> {
        self.members.get(&member).map(|m| m.addr)
    }

    /// The members changed: forget whoever is no longer one. Returns the members' ids.
    ///
    /// When a member left, every count reported so far may include it, so they are all
    /// forgotten until each member speaks again: a count heard before a crash would otherwise
    /// stay the largest for as long as its sender is not heard (in a large cluster, a node
    /// hears from only the members it shares windows with), and keep this node announcing
    /// itself every round and its clock fence up. `N_expected` holds the size of the cluster
    /// before the departure on its own (`Limiter::set_liveness`).
    pub fn set_members(&mut self, members: &[NodeId], at: Instant) -> BTreeSet<u128> {
        let staying: BTreeSet<u128> = members.iter().map(|m| m.node.as_u128()).collect();
        let mut someone_left = false;
        for id in self.members.keys().filter(|id| !staying.contains(id)) {
            someone_left = true;
            self.departed.insert(*id, at);
        }
        self.departed.retain(|id, left| {
            !staying.contains(id) && at.saturating_duration_since(*left) <= HOLD_FOR
        });
        let mut records = Members::default();
        for m in members {
            let id = m.node.as_u128();
            let record = match self.members.get(&id) {
                Some(known) => MemberRecord {
                    addr: m.addr,
                    count: if someone_left { None } else { known.count },
                    ..*known
                },
                None => MemberRecord {
                    addr: m.addr,
                    last_heard: None,
                    last_datagram: None,
                    relayed: None,
                    count: None,
                },
            };
            records.insert(id, record);
        }
        self.members = records;
        self.shorts = relayed::unique_shorts(self.members.keys().copied());
        let ids: BTreeSet<u128> = self.members.keys().copied().collect();
        self.joined_at.retain(|s, _| ids.contains(s));
        self.came_up.retain(|s, _| ids.contains(s));
        ids
    }

    /// The members that left within `within` of `at`, whose sums are held
    /// (`Limiter::set_held`): the sums' other users are still there, and the new owners'
    /// sums take a few rounds to come. Older departures are forgotten.
    pub fn departed_within(&mut self, within: Duration, at: Instant) -> Vec<OriginId> {
        self.departed
            .retain(|_, left| at.saturating_duration_since(*left) <= within);
        self.departed.keys().map(|id| OriginId(*id)).collect()
    }

    /// The members that do not count as live at `at`: not heard from within the silence
    /// threshold, present for less than the join grace, or cut off for their clocks. When this
    /// node's own clock is cut off, every member is (ALGORITHM.md §1, fences).
    pub fn silent(&self, members: &[NodeId], fences: &Fences, at: Instant) -> Vec<OriginId> {
        members
            .iter()
            .map(|m| m.node.as_u128())
            .filter(|id| {
                let heard = self
                    .members
                    .get(id)
                    .and_then(|m| m.last_heard)
                    .is_some_and(|t| at.saturating_duration_since(t) <= self.silence_threshold);
                let settled = self
                    .joined_at
                    .get(id)
                    .is_none_or(|t| at.saturating_duration_since(*t) >= self.join_grace);
                !(heard && settled) || fences.own || fences.peers.contains(id)
            })
            .map(OriginId)
            .collect()
    }

    /// In a large cluster: the members this node exchanged registers or sums with lately (in
    /// the last [`HOLD_FOR`]) that have gone quiet for `quiet`: on the other side of a
    /// partition, perhaps, and still admitting. Their demand is held (`Limiter::set_held`).
    pub fn held(&self, quiet: Duration, at: Instant) -> Vec<OriginId> {
        let mut held: Vec<OriginId> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.last_heard.is_some_and(|t| {
                    let since = at.saturating_duration_since(t);
                    since > quiet && since <= HOLD_FOR
                })
            })
            .map(|(id, _)| OriginId(*id))
            .collect();
        held.sort_unstable();
        held
    }

    /// As [`Liveness::silent`], for a large cluster, where a node hears only the members it
    /// shares windows with: a member is silent while SWIM suspects it, rather than when this
    /// node has not heard from it lately.
    pub fn silent_by_swim(
        &mut self,
        members: &[NodeId],
        suspects: &BTreeSet<u128>,
        fences: &Fences,
        at: Instant,
    ) -> Vec<OriginId> {
        if fences.own {
            return members.iter().map(|m| OriginId(m.node.as_u128())).collect();
        }
        // Past its grace a join says nothing more (a member with no entry is settled): so
        // the entries left are the few recent joins, not every member of a large cluster.
        self.joined_at
            .retain(|_, t| at.saturating_duration_since(*t) < self.join_grace);
        // Suspects, recent joins and fenced peers are all members (`set_members` keeps
        // `joined_at` to the members; the fences are computed over them), so the union is the
        // filter of the members that `silent` applies, at the cost of the few it names.
        let mut silent: BTreeSet<u128> = suspects.clone();
        silent.extend(self.joined_at.keys().copied());
        silent.extend(fences.peers.iter().copied());
        silent.into_iter().map(OriginId).collect()
    }
}

mod far;
pub(super) mod relayed;
#[cfg(test)]
mod tests;
