//! What an operator reads in the logs as the cluster changes: each member that joins, becomes
//! suspect, is alive again, goes down, leaves or restarts, once, at `info`, with its id and
//! address; so that a partition can be read from the logs of either side.
//!
//! SWIM tells joins, downs and renames ([`MemberEvent`]); suspicion it only records, so the
//! suspects are compared once a round. A graceful stop and a failure both reach foca as a
//! member gone down: one that goes down without having been suspected here announced itself
//! down, which is how a member leaves (a failed member is suspected before it is declared
//! down, and the suspicion spreads with the gossip).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::membership::{MemberEvent, NodeId};

/// A change in the cluster worth a line in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// A member this node had not seen before.
    Joined { id: Uuid, addr: SocketAddr },
    /// SWIM suspects it: it did not answer probes.
    Suspect { id: Uuid, addr: SocketAddr },
    /// A suspect, or a member that was down, is alive again (a partition healed).
    Alive { id: Uuid, addr: SocketAddr },
    /// Declared down after it was suspected: failed, or out of reach.
    Down { id: Uuid, addr: SocketAddr },
    /// Went down without being suspected first: it announced its leaving.
    Left { id: Uuid, addr: SocketAddr },
    /// A new process at a member's address (new id).
    Restarted {
        old: Uuid,
        id: Uuid,
        addr: SocketAddr,
    },
    /// This node joined a cluster.
    ThisNodeJoined,
    /// This node has no live members left.
    ThisNodeAlone,
    /// This node was declared down by the others and rejoined under a renewed identity.
    ThisNodeRejoined,
    /// This node was declared down and could not rejoin.
    ThisNodeDefunct,
}

/// How long a member that went down is remembered, to tell its return from a first join.
const REMEMBER_DOWN: Duration = Duration::from_secs(600);
/// How long a member's word that it leaves holds for the Down that should follow it: SWIM
/// spreads a graceful leave within a few rounds.
const LEAVE_WORD_HOLDS: Duration = Duration::from_secs(10);
/// Most members remembered as down (a fleet's worth; the oldest are forgotten first).
const MAX_REMEMBERED: usize = 4096;

/// Turns SWIM's events and the suspects of each round into [`MemberChange`]s.
#[derive(Debug, Default)]
pub struct MemberLog {
    /// Members suspect at the last look, by id.
    suspects: BTreeMap<u128, SocketAddr>,
    /// Members seen going down, and when.
    gone: BTreeMap<u128, Instant>,
    /// Members that went down without saying they were leaving (crashed, or cut off by a
    /// partition: they may still be admitting on the far side), and when.
    crashed: BTreeMap<u128, Instant>,
    /// The same, kept for [`REMEMBER_DOWN`] whatever `expected_hold_ms` is: the ledger's ring
    /// asks it when the member leaves the ring (`went_down_unsaid`).
    unsaid: BTreeMap<u128, Instant>,
    /// Members that said they were leaving (`LedgerEntry::Leaving`), and when.
    leaving_said: BTreeMap<u128, Instant>,
    /// This node is leaving: foca then counts it as down, which is no trouble.
    leaving: bool,
}

impl MemberLog {
    /// This node leaves the cluster (a graceful stop).
    pub fn leaving(&mut self) {
        self.leaving = true;
    }

    /// What SWIM's `event` means for the log, if anything.
    pub fn event(&mut self, event: &MemberEvent, at: Instant) -> Option<MemberChange> {
        Some(match event {
            MemberEvent::Defunct | MemberEvent::Idle if self.leaving => return None,
            MemberEvent::Up(m) => {
                let key = m.node.as_u128();
                self.suspects.remove(&key);
                self.crashed.remove(&key);
                self.unsaid.remove(&key);
                self.leaving_said.remove(&key);
                if self.gone.remove(&key).is_some() {
                    MemberChange::Alive {
                        id: m.node,
                        addr: m.addr,
                    }
                } else {
                    MemberChange::Joined {
                        id: m.node,
                        addr: m.addr,
                    }
                }
            }
            MemberEvent::Down(m) => {
                let key = m.node.as_u128();
                self.remember_gone(key, at);
                // Its word counts only if the Down follows it closely: a member that said it
                // was leaving and stayed is expected like any other.
                let left = self
                    .leaving_said
                    .remove(&key)
                    .is_some_and(|said| at.saturating_duration_since(said) <= LEAVE_WORD_HOLDS);
                if !left {
                    remember(&mut self.crashed, key, at);
                    self.unsaid
                        .retain(|_, t| at.saturating_duration_since(*t) < REMEMBER_DOWN);
                    remember(&mut self.unsaid, key, at);
                }
                if self.suspects.remove(&key).is_some() {
                    MemberChange::Down {
                        id: m.node,
                        addr: m.addr,
                    }
                } else {
                    MemberChange::Left {
                        id: m.node,
                        addr: m.addr,
                    }
                }
            }
            // The same process renewing its identity after it was declared down (a healed
            // partition): the `Up` that follows says it is alive again.
            MemberEvent::Renamed { old, new } if old.node == new.node => {
                self.suspects.remove(&old.node.as_u128());
                return None;
            }
            MemberEvent::Renamed { old, new } => {
                self.suspects.remove(&old.node.as_u128());
                self.crashed.remove(&old.node.as_u128());
                self.unsaid.remove(&old.node.as_u128());
                MemberChange::Restarted {
                    old: old.node,
                    id: new.node,
                    addr: new.addr,
                }
            }
            MemberEvent::Active => MemberChange::ThisNodeJoined,
            MemberEvent::Idle => MemberChange::ThisNodeAlone,
            MemberEvent::Rejoined(_) => MemberChange::ThisNodeRejoined,
            MemberEvent::Defunct => MemberChange::ThisNodeDefunct,
        })
    }

    /// This round's suspects (`suspects`, by id): the members newly suspected, and those no
    /// longer suspected that are still members (refuted: alive again).
    pub fn round(&mut self, suspects: BTreeMap<u128, NodeId>) -> Vec<MemberChange> {
        let mut changes = Vec::new();
        for (key, addr) in &self.suspects {
            if !suspects.contains_key(key) {
                changes.push(MemberChange::Alive {
                    id: Uuid::from_u128(*key),
                    addr: *addr,
                });
            }
        }
        let mut now = BTreeMap::new();
        for (key, m) in suspects {
            if !self.suspects.contains_key(&key) {
                changes.push(MemberChange::Suspect {
                    id: m.node,
                    addr: m.addr,
                });
            }
            now.insert(key, m.addr);
        }
        self.suspects = now;
        changes
    }

    /// Whether `member` said, within the time its word holds as of `at`, that it is leaving.
    pub fn said_leaving(&self, member: u128, at: Instant) -> bool {
        self.leaving_said
            .get(&member)
            .is_some_and(|said| at.saturating_duration_since(*said) <= LEAVE_WORD_HOLDS)
    }

    /// `member` said it is leaving the cluster for good (under its boot id). Only a member's
    /// own word counts: the caller checks the datagram came from it.
    pub fn leaving_said(&mut self, member: u128, at: Instant) {
        self.leaving_said
            .retain(|_, t| at.saturating_duration_since(*t) <= LEAVE_WORD_HOLDS);
        remember(&mut self.leaving_said, member, at);
        // Down already (its word came after SWIM's, from the address SWIM held for it): not on
        // a far side after all.
        self.crashed.remove(&member);
        self.unsaid.remove(&member);
    }

    /// Members that went down within `hold` before `at` without saying they were leaving, and
    /// have not come back: as far as this node can tell they may be on the far side of a
    /// partition.
    pub fn crashed_within(&mut self, hold: Duration, at: Instant) -> usize {
        self.crashed
            .retain(|_, t| at.saturating_duration_since(*t) < hold);
        self.crashed.len()
    }

    /// The members that went down without saying they were leaving, within [`REMEMBER_DOWN`],
    /// and when.
    pub fn unsaid_downs(&self) -> Vec<(u128, Instant)> {
        self.unsaid.iter().map(|(id, at)| (*id, *at)).collect()
    }

    fn remember_gone(&mut self, key: u128, at: Instant) {
        self.gone
            .retain(|_, t| at.saturating_duration_since(*t) < REMEMBER_DOWN);
        if self.gone.len() >= MAX_REMEMBERED
            && let Some(oldest) = self.gone.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k)
        {
            self.gone.remove(&oldest);
        }
        self.gone.insert(key, at);
    }
}

/// Records `key` at `at` in `map`, the oldest forgotten first past [`MAX_REMEMBERED`].
fn remember(map: &mut BTreeMap<u128, Instant>, key: u128, at: Instant) {
    if map.len() >= MAX_REMEMBERED
        && !map.contains_key(&key)
        && let Some(oldest) = map.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k)
    {
        map.remove(&oldest);
    }
    map.insert(key, at);
}

impl MemberChange {
    /// Writes the change to the log, at `info` (`warn` for this node's own troubles).
    pub fn log(&self) {
        match self {
            MemberChange::Joined { id, addr } => {
                tracing::info!(member = %id, %addr, "member joined");
            }
            MemberChange::Suspect { id, addr } => {
                tracing::info!(member = %id, %addr, "member suspect: it does not answer probes");
            }
            MemberChange::Alive { id, addr } => {
                tracing::info!(member = %id, %addr, "member alive again");
            }
            MemberChange::Down { id, addr } => {
                tracing::info!(member = %id, %addr, "member down: declared failed or unreachable");
            }
            MemberChange::Left { id, addr } => {
                tracing::info!(member = %id, %addr, "member left the cluster");
            }
            MemberChange::Restarted { old, id, addr } => {
                tracing::info!(member = %id, previous = %old, %addr, "member restarted (renamed)");
            }
            MemberChange::ThisNodeJoined => tracing::info!("this node joined the cluster"),
            MemberChange::ThisNodeAlone => tracing::warn!("this node has no live members"),
            MemberChange::ThisNodeRejoined => {
                tracing::warn!("this node was declared down by its peers and rejoined");
            }
            MemberChange::ThisNodeDefunct => {
                tracing::warn!("this node was declared down and cannot rejoin");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(n: u128, port: u16) -> NodeId {
        NodeId::new(
            Uuid::from_u128(n),
            SocketAddr::from(([10, 0, 0, 1], port)),
            1_000,
        )
    }

    fn suspects(ms: &[&NodeId]) -> BTreeMap<u128, NodeId> {
        ms.iter()
            .map(|m| (m.node.as_u128(), (*m).clone()))
            .collect()
    }

    #[test]
    fn a_partition_reads_suspect_down_then_alive_again() {
        let t = crate::clock::monotonic_now();
        let mut log = MemberLog::default();
        let a = member(1, 7001);
        assert!(matches!(
            log.event(&MemberEvent::Up(a.clone()), t),
            Some(MemberChange::Joined { .. })
        ));
        assert_eq!(
            log.round(suspects(&[&a])),
            vec![MemberChange::Suspect {
                id: a.node,
                addr: a.addr
            }]
        );
        // Suspected once, logged once.
        assert!(log.round(suspects(&[&a])).is_empty());
        assert!(matches!(
            log.event(&MemberEvent::Down(a.clone()), t),
            Some(MemberChange::Down { .. })
        ));
        // Down members are no suspects: nothing is said to be alive.
        assert!(log.round(suspects(&[])).is_empty());
        // The heal: renewed identity (same process), then up.
        let mut renewed = a.clone();
        renewed.bump += 1;
        assert_eq!(
            log.event(
                &MemberEvent::Renamed {
                    old: a.clone(),
                    new: renewed.clone()
                },
                t
            ),
            None
        );
        assert_eq!(
            log.event(&MemberEvent::Up(renewed), t),
            Some(MemberChange::Alive {
                id: a.node,
                addr: a.addr
            })
        );
    }

    #[test]
    fn a_refuted_suspicion_is_alive_again_and_a_graceful_stop_is_left() {
        let t = crate::clock::monotonic_now();
        let mut log = MemberLog::default();
        let (a, b) = (member(1, 7001), member(2, 7002));
        log.round(suspects(&[&a]));
        assert_eq!(
            log.round(suspects(&[])),
            vec![MemberChange::Alive {
                id: a.node,
                addr: a.addr
            }]
        );
        assert_eq!(
            log.event(&MemberEvent::Down(b.clone()), t),
            Some(MemberChange::Left {
                id: b.node,
                addr: b.addr
            })
        );
    }

    /// Only a member's own word that it leaves keeps it out of the members expected: one
    /// that goes down without it (suspected first or not, as when the others' gossip says so
    /// across a partition) may be admitting on the far side until the hold passes.
    #[test]
    fn a_member_is_expected_back_unless_it_said_it_was_leaving() {
        let t = crate::clock::monotonic_now();
        let hold = Duration::from_secs(60);
        let mut log = MemberLog::default();
        let (a, b, c) = (member(1, 7001), member(2, 7002), member(3, 7003));
        log.round(suspects(&[&a]));
        log.event(&MemberEvent::Down(a.clone()), t);
        log.event(&MemberEvent::Down(b.clone()), t);
        log.leaving_said(c.node.as_u128(), t);
        log.event(&MemberEvent::Down(c.clone()), t);
        assert_eq!(log.crashed_within(hold, t), 2, "a and b, not c");
        // A member that said it was leaving and stayed: its later Down counts as a crash.
        let d = member(4, 7004);
        log.leaving_said(d.node.as_u128(), t);
        log.event(&MemberEvent::Down(d.clone()), t + 2 * LEAVE_WORD_HOLDS);
        assert_eq!(log.crashed_within(hold, t + 2 * LEAVE_WORD_HOLDS), 3);
        log.event(&MemberEvent::Up(d.clone()), t);
        // Back up: expected as a member again, not as one that may be on the far side.
        log.event(&MemberEvent::Up(b.clone()), t);
        assert_eq!(log.crashed_within(hold, t), 1);
        assert_eq!(log.crashed_within(hold, t + hold), 0, "the hold passed");
    }

    #[test]
    fn a_new_process_at_an_address_is_a_restart() {
        let t = crate::clock::monotonic_now();
        let mut log = MemberLog::default();
        let old = member(1, 7001);
        let new = member(9, 7001);
        assert_eq!(
            log.event(
                &MemberEvent::Renamed {
                    old: old.clone(),
                    new: new.clone()
                },
                t
            ),
            Some(MemberChange::Restarted {
                old: old.node,
                id: new.node,
                addr: new.addr
            })
        );
    }

    #[test]
    fn a_node_that_leaves_is_not_said_to_be_in_trouble() {
        let t = crate::clock::monotonic_now();
        let mut log = MemberLog::default();
        assert_eq!(
            log.event(&MemberEvent::Defunct, t),
            Some(MemberChange::ThisNodeDefunct)
        );
        log.leaving();
        assert_eq!(log.event(&MemberEvent::Defunct, t), None);
        assert_eq!(log.event(&MemberEvent::Idle, t), None);
    }

    #[test]
    fn members_remembered_as_gone_are_bounded() {
        let t = crate::clock::monotonic_now();
        let mut log = MemberLog::default();
        for n in 0..(MAX_REMEMBERED as u128 + 10) {
            log.event(&MemberEvent::Down(member(n, 7000)), t);
        }
        assert_eq!(log.gone.len(), MAX_REMEMBERED);
    }
}
