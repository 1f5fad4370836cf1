//! Which members count as live for admission: those heard from lately, and present long enough
//! for their state to have arrived. SWIM decides who is a member; this decides whose demand
//! this node shares the limit with, long before SWIM would declare a silent member down.

use std::collections::{BTreeMap, BTreeSet};
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
    /// When each member was last heard from (registers and heartbeats only).
    last_heard: BTreeMap<u128, Instant>,
    /// When each member appeared (up or renamed).
    joined_at: BTreeMap<u128, Instant>,
    /// Each member's address, to tell whose datagrams may steer this node's clock.
    addrs: BTreeMap<u128, SocketAddr>,
    /// How many members each member says it counts, itself included (the prefix of its
    /// register and heartbeat bodies).
    counts: BTreeMap<u128, usize>,
}

impl Liveness {
    pub fn new(silence_threshold: Duration, join_grace: Duration) -> Self {
        Self {
            silence_threshold,
            join_grace,
            last_heard: BTreeMap::new(),
            joined_at: BTreeMap::new(),
            addrs: BTreeMap::new(),
            counts: BTreeMap::new(),
        }
    }

    /// A register or heartbeat from `sender` arrived.
    pub fn heard(&mut self, sender: u128, at: Instant) {
        self.last_heard.insert(sender, at);
    }

    /// `member` came up or was renamed (a restart): its demand is unknown until its registers
    /// can have arrived.
    pub fn joined(&mut self, member: u128, at: Instant) {
        self.joined_at.insert(member, at);
    }

    /// `sender` counts this many members, itself included.
    pub fn counted(&mut self, sender: u128, members: usize) {
        self.counts.insert(sender, members);
    }

    /// The largest member count any member reports.
    pub fn largest_count(&self) -> usize {
        self.counts.values().copied().max().unwrap_or(0)
    }

    /// The address SWIM holds for `member`.
    pub fn address_of(&self, member: u128) -> Option<SocketAddr> {
        self.addrs.get(&member).copied()
    }

    /// The members changed: forget whoever is no longer one. Returns the members' ids.
    pub fn set_members(&mut self, members: &[NodeId]) -> BTreeSet<u128> {
        self.addrs = members.iter().map(|m| (m.node.as_u128(), m.addr)).collect();
        let ids: BTreeSet<u128> = self.addrs.keys().copied().collect();
        self.last_heard.retain(|s, _| ids.contains(s));
        self.joined_at.retain(|s, _| ids.contains(s));
        self.counts.retain(|s, _| ids.contains(s));
        ids
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
                    .last_heard
                    .get(id)
                    .is_some_and(|t| at.saturating_duration_since(*t) <= self.silence_threshold);
                let settled = self
                    .joined_at
                    .get(id)
                    .is_none_or(|t| at.saturating_duration_since(*t) >= self.join_grace);
                !(heard && settled) || fences.own || fences.peers.contains(id)
            })
            .map(OriginId)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(i: u128) -> NodeId {
        NodeId::new(
            uuid::Uuid::from_u128(i),
            format!("10.0.0.{i}:7946").parse().unwrap(),
            1,
        )
    }

    #[test]
    fn heard_and_settled_members_are_live_others_are_silent() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut live = Liveness::new(ms(800), ms(500));
        let members = [member(1), member(2), member(3)];
        live.set_members(&members);
        live.joined(2, t0);
        live.heard(1, t0);
        live.heard(2, t0);
        let fences = Fences::default();
        // 3 was never heard from; 2 is in its join grace.
        assert_eq!(
            live.silent(&members, &fences, t0 + ms(100)),
            [OriginId(2), OriginId(3)]
        );
        assert_eq!(live.silent(&members, &fences, t0 + ms(500)), [OriginId(3)]);
        // Past the silence threshold, everyone not heard from again is silent.
        live.heard(3, t0 + ms(600));
        assert_eq!(
            live.silent(&members, &fences, t0 + ms(900)),
            [OriginId(1), OriginId(2)]
        );
        // A member cut off for its clock is silent however recently heard.
        let fenced = Fences {
            own: false,
            peers: [3].into(),
        };
        assert_eq!(
            live.silent(&members[2..], &fenced, t0 + ms(900)),
            [OriginId(3)]
        );
        let own = Fences {
            own: true,
            peers: BTreeSet::new(),
        };
        assert_eq!(
            live.silent(&members[2..], &own, t0 + ms(900)),
            [OriginId(3)]
        );
    }

    #[test]
    fn a_member_that_leaves_is_forgotten() {
        let mut live = Liveness::new(Duration::from_millis(800), Duration::ZERO);
        live.set_members(&[member(1), member(2)]);
        live.counted(1, 7);
        live.counted(2, 3);
        assert_eq!(live.largest_count(), 7);
        assert_eq!(live.address_of(1), Some(member(1).addr));
        live.set_members(&[member(2)]);
        assert_eq!(live.largest_count(), 3);
        assert_eq!(live.address_of(1), None);
    }
}
