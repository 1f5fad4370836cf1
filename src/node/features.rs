//! What each member's build reads of the wire, for datagrams an older build would drop.
//!
//! A node learns it from the member itself: a heartbeat whose body goes on past its prefix
//! carries a byte of feature flags. Builds that predate a flag stop reading a heartbeat at the
//! prefix, so an announcement costs them nothing; and a node sends a member a datagram of a
//! newer kind only once that member has said it reads it. So a fleet upgraded one node at a
//! time keeps every register and sum: until both ends run the newer build, they talk as the
//! older one did.
//!
//! The flags may be followed by the digest of the sender's rules (`rules_digest.rs`), which
//! builds that predate it do not read either.
//!
//! Entries are kept for members only (the callers check), and dropped with them. What a member
//! said lapses unless it says it again: a flag that could be forged (in an insecure cluster)
//! could otherwise mark a member of an older build for good, and every exchange to it would be
//! lost.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

/// Reads `Kind::Exchange`.
pub const EXCHANGE: u8 = 1;
/// Reads the compact envelope header (`gossip/wire/envelope.rs`).
pub const COMPACT: u8 = 4;
/// Not a feature but a request: the sender has not seen this node echo its cookie (an
/// insecure cluster's return routability, `return_route.rs`), and asks for a heartbeat back,
/// which carries the echo. In owner mode nothing else may ever come back from a member this
/// node only ever sends to.
pub const ASKS_ECHO: u8 = 2;
/// Reads a ledger report with sealed buckets (`LedgerEntry::Report` with
/// `HoldingsReport::sealed`, on the wire as its own variant).
pub const SEALED: u8 = 8;
/// Reads a leaving owner's `LedgerEntry::Handoff` (a build before it drops the whole
/// section).
pub const HANDOFF: u8 = 16;
/// Reads the timed header, which says the sender's cluster time (`gossip/wire/envelope.rs`).
pub const CLUSTER_TIME: u8 = 32;
/// Not a feature but a request: the sender is warming up and waits for this node's word on
/// its cluster time (`status.rs`, `update_readiness`), which a heartbeat back carries under
/// the timed header.
pub const ASKS_CLUSTER_TIME: u8 = 64;
/// Reads a leaving owner's `LedgerEntry::Books` (a build before it drops the whole section).
/// The byte's last bit: a further flag needs a byte more, after the rules' digest.
pub const BOOKS: u8 = 128;
/// What this build reads: the flags it announces.
pub const READS: u8 = EXCHANGE | COMPACT | SEALED | HANDOFF | CLUSTER_TIME | BOOKS;

/// How often a member this node sends to hears its flags again: an announcement is one
/// datagram, and may be lost like any other.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(30);
/// How long what a member said holds: two announcements may be lost.
const FLAGS_LAST: Duration = Duration::from_secs(75);

#[derive(Debug, Default)]
pub struct PeerFeatures {
    /// What each member said it reads, and when it last said so.
    reads: HashMap<u128, (u8, Instant)>,
    /// When this node last announced its flags to each member.
    announced: HashMap<u128, Instant>,
    /// Members whose ask for this node's cluster time was answered this round.
    answered: BTreeSet<u128>,
}

impl PeerFeatures {
    /// `member` announced `flags` at `at`.
    pub fn heard(&mut self, member: u128, flags: u8, at: Instant) {
        let flags = flags & READS;
        if flags != 0 {
            self.reads.insert(member, (flags, at));
        } else {
            self.reads.remove(&member);
        }
    }

    /// Whether `member` said, lately as of `at`, that it reads all of `flags`.
    fn reads(&self, member: u128, flags: u8, at: Instant) -> bool {
        self.reads.get(&member).is_some_and(|(said, t)| {
            said & flags == flags && at.saturating_duration_since(*t) < FLAGS_LAST
        })
    }

    /// Whether `member` said, lately as of `at`, that it reads an exchange.
    pub fn reads_exchange(&self, member: u128, at: Instant) -> bool {
        self.reads(member, EXCHANGE, at)
    }

    /// Whether `member`'s ask for this node's cluster time (`ASKS_CLUSTER_TIME`) may be
    /// answered: once a round, so that asks cannot draw more heartbeats than the warm-up needs.
    pub fn may_answer(&mut self, member: u128) -> bool {
        self.answered.insert(member)
    }

    /// A new round: every member may be answered again.
    pub fn new_round(&mut self) {
        self.answered.clear();
    }

    /// Whether `member` said, lately as of `at`, that it reads the timed header.
    pub fn reads_cluster_time(&self, member: u128, at: Instant) -> bool {
        self.reads(member, CLUSTER_TIME, at)
    }

    /// Whether `member` said, lately as of `at`, that it reads the compact header.
    pub fn reads_compact(&self, member: u128, at: Instant) -> bool {
        self.reads(member, COMPACT, at)
    }

    /// Whether `member` said, lately as of `at`, that it reads sealed buckets in a report.
    pub fn reads_sealed(&self, member: u128, at: Instant) -> bool {
        self.reads(member, SEALED, at)
    }

    /// Whether `member` said, lately as of `at`, that it reads all of `flags`.
    pub fn reads_flag(&self, member: u128, flags: u8, at: Instant) -> bool {
        self.reads(member, flags, at)
    }

    /// Every member is due this node's flags at its next chance (what they carry changed).
    pub fn announce_again(&mut self) {
        self.announced.clear();
    }

    /// Whether `member` is due this node's flags at `at` (never told, or not for
    /// [`ANNOUNCE_EVERY`]); if so, counts them as told.
    pub fn announce_due(&mut self, member: u128, at: Instant) -> bool {
        let due = self
            .announced
            .get(&member)
            .is_none_or(|t| at.saturating_duration_since(*t) >= ANNOUNCE_EVERY);
        if due {
            self.announced.insert(member, at);
        }
        due
    }

    /// Forgets whoever is no longer a member.
    pub fn retain(&mut self, members: &BTreeSet<u128>) {
        self.reads.retain(|m, _| members.contains(m));
        self.announced.retain(|m, _| members.contains(m));
        self.answered.retain(|m| members.contains(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_what_it_said_last_until_it_leaves_or_stops_saying_so() {
        let mut f = PeerFeatures::default();
        let t = crate::clock::monotonic_now();
        assert!(!f.reads_exchange(7, t));
        f.heard(7, 0, t);
        assert!(!f.reads_exchange(7, t), "flags without the bit");
        f.heard(7, EXCHANGE | 0x80, t);
        assert!(f.reads_exchange(7, t));
        assert!(!f.reads_compact(7, t), "said exchange only");
        f.heard(7, EXCHANGE | COMPACT, t);
        assert!(f.reads_exchange(7, t) && f.reads_compact(7, t));
        f.heard(7, COMPACT, t);
        assert!(
            !f.reads_exchange(7, t) && f.reads_compact(7, t),
            "the latest word holds"
        );
        f.heard(7, EXCHANGE | SEALED, t);
        assert!(f.reads_sealed(7, t) && !f.reads_compact(7, t));
        f.heard(7, EXCHANGE, t);
        assert!(!f.reads_sealed(7, t), "the latest word holds");
        f.heard(7, COMPACT | CLUSTER_TIME, t);
        assert!(f.reads_cluster_time(7, t) && !f.reads_exchange(7, t));
        f.heard(7, EXCHANGE, t);
        assert!(!f.reads_cluster_time(7, t), "the latest word holds");
        // Said once and never again (lost, or forged for a member that cannot read one).
        assert!(f.reads_exchange(7, t + Duration::from_secs(74)));
        assert!(!f.reads_exchange(7, t + FLAGS_LAST));
        f.heard(7, EXCHANGE, t + FLAGS_LAST);
        assert!(f.reads_exchange(7, t + FLAGS_LAST));
        f.retain(&BTreeSet::from([8]));
        assert!(!f.reads_exchange(7, t + FLAGS_LAST), "gone with the member");
    }

    #[test]
    fn announcements_are_due_at_first_and_then_every_thirty_seconds() {
        let mut f = PeerFeatures::default();
        let t = crate::clock::monotonic_now();
        assert!(f.announce_due(3, t));
        assert!(!f.announce_due(3, t + Duration::from_secs(29)));
        assert!(f.announce_due(3, t + ANNOUNCE_EVERY));
        assert!(f.announce_due(4, t), "per member");
        f.retain(&BTreeSet::new());
        assert!(
            f.announce_due(3, t + ANNOUNCE_EVERY),
            "forgotten with the member"
        );
    }
}
