//! Under the ledger, a member that leases nothing for its clock says so, and the others leave
//! it off their rings while its word holds, so that its windows' next owners lease them
//! (ALGORITHM.md, L3, *Clocks*).
//!
//! A member whose own clock is cut off leases nothing (`NodeCore::lease_part`): its books
//! would place the others' spends seconds off. Left on the rings, its windows, about one in
//! `N` of every key, would be leased by no one until its clock came back. Each node fences its
//! peers on its own estimates, at moments apart, so a node cannot leave a peer off its ring on
//! its own say: the peer may still lease, and its windows would have two owners. The member's
//! own word is safe where the node's estimate is not:
//!
//! - the member stops leasing before its first word (the round that says it installs a part
//!   of nothing first), so whoever leaves it off, and takes its windows a quiet period later,
//!   takes them from an owner that leases no more;
//! - it leases again only once every word it said has lapsed everywhere, and a quiet period
//!   after: [`NotLeasing::holds_back`] keeps its part at nothing until the last word's
//!   [`holds_ms`] and two rounds (its way, and the round a ring is rebuilt in) have passed, and
//!   `LedgerNode::part_at` holds that part a quiet period longer, by when every next owner
//!   has stopped leasing its windows (their rings have it back) and their leases have ended;
//! - a word counts only from the member's own address, and only if it is newer than the last
//!   word taken from it (`seq` rises with each): a copy replayed after the member leases again
//!   is never taken.
//!
//! The member leaves itself off its own ring too, so that its registers and asks go where
//! everyone else's do.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::core::NodeCore;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::LedgerEntry;
use crate::ledger::tuning::NOT_LEASING_SAID_EVERY_ROUNDS;

/// A word is said this many times before it lapses: four in a row may be lost.
const SAYINGS_HELD: u64 = 5;

/// How long a member's word that it leases nothing holds, at a summary round of `round_ms`.
pub fn holds_ms(round_ms: u64) -> u64 {
    SAYINGS_HELD * NOT_LEASING_SAID_EVERY_ROUNDS * round_ms
}

/// What members said of leasing nothing, and what this node says.
#[derive(Debug, Default)]
pub struct NotLeasing {
    /// Per member, the last word taken from it (`seq`) and when it came.
    heard: BTreeMap<u128, (u64, Instant)>,
    /// This node's words so far (the last one's `seq`).
    said: u64,
    /// This node leases nothing for its clock.
    saying: bool,
    /// When this node last said it (cluster ms), while it says it and after.
    last_said_ms: Option<u64>,
    /// Rounds since this node last said it, while it says it.
    rounds_since: u64,
}

impl NotLeasing {
    /// `member` said, in its word `seq`, that it leases nothing. Returns whether the word was
    /// taken: a word no newer than the last one taken from the member is a copy.
    pub fn heard(&mut self, member: u128, seq: u64, at: Instant) -> bool {
        match self.heard.get(&member) {
            Some((last, _)) if *last >= seq => false,
            _ => {
                self.heard.insert(member, (seq, at));
                true
            }
        }
    }

    /// The members whose word holds at `at` (they lease nothing): off the ledger's ring.
    pub fn off_ring(&self, at: Instant, holds: Duration) -> BTreeSet<u128> {
        self.heard
            .iter()
            .filter(|(_, (_, t))| at.saturating_duration_since(*t) < holds)
            .map(|(m, _)| *m)
            .collect()
    }

    /// Forgets whoever is no longer a member (a member back under the same id is not: ids
    /// are per boot).
    pub fn retain(&mut self, members: &BTreeSet<u128>) {
        self.heard.retain(|m, _| members.contains(m));
    }

    /// Whether this node leases nothing for its clock now (`saying`), at `now_ms`. Returns the
    /// word to say this round, if one is due: the first round, and every
    /// [`NOT_LEASING_SAID_EVERY_ROUNDS`] after.
    pub fn round(&mut self, saying: bool, now_ms: u64) -> Option<u64> {
        self.saying = saying;
        if !saying {
            // Said again at once when it next leases nothing.
            self.rounds_since = 0;
            return None;
        }
        let due = self.rounds_since == 0;
        self.rounds_since = (self.rounds_since + 1) % NOT_LEASING_SAID_EVERY_ROUNDS;
        if !due {
            return None;
        }
        self.said += 1;
        self.last_said_ms = Some(now_ms);
        Some(self.said)
    }

    /// Whether this node must still lease nothing at `now_ms`: it says so, or a word it said
    /// may still hold somewhere (`holds_ms` and two rounds after the last).
    pub fn holds_back(&self, now_ms: u64, round_ms: u64) -> bool {
        if self.saying {
            return true;
        }
        self.last_said_ms
            .is_some_and(|t| now_ms < t.saturating_add(holds_ms(round_ms) + 2 * round_ms))
    }
}

impl<T: TimeSource> NodeCore<T> {
    /// The start of a ledger round: whether this node leases nothing for its clock (its own is
    /// cut off: `lease_part`), and who is off the ring for it. Returns the word to say this
    /// round, if one is due, which goes out once the round's view (a part of nothing) is
    /// installed ([`NodeCore::say_not_leasing`]).
    ///
    /// A node that leases nothing because it hears more members a minute off than it sees live
    /// (`far_fenced`) says nothing: a starting node is so for a round or two, before the
    /// members it joins count live, and a word would hold its windows from it for as long as
    /// the word holds; while a member a minute off that the others cannot hear says nothing
    /// that reaches them.
    pub(super) fn not_leasing_round(&mut self, now: Now) -> Option<u64> {
        let saying = self.clock_sync.fences().own;
        let word = self.not_leasing.round(saying, now.cluster_ms);
        let holds = Duration::from_millis(holds_ms(self.round_ms()));
        let mut off = self.not_leasing.off_ring(now.at, holds);
        if saying {
            off.insert(self.params.node_id.as_u128());
        }
        if let Some(ownership) = self.ownership.as_mut()
            && ownership.off_ring != off
        {
            ownership.off_ring = off;
            ownership.stale = true;
        }
        word
    }

    /// Says to every member, in a datagram of its own, that this node leases nothing.
    pub(super) fn say_not_leasing(&mut self, now: Now, seq: u64) {
        for member in self.membership.members() {
            let to = super::core::destination(&member);
            if self.may_send_state(now, to) {
                self.send_ledger(now, to, Vec::new(), vec![LedgerEntry::NotLeasing { seq }]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUND: u64 = 200;

    #[test]
    fn a_word_holds_for_five_sayings_and_a_copy_is_never_taken_again() {
        let t0 = crate::clock::monotonic_now();
        let holds = Duration::from_millis(holds_ms(ROUND));
        let mut n = NotLeasing::default();
        assert!(n.heard(7, 3, t0));
        assert_eq!(n.off_ring(t0, holds), BTreeSet::from([7]));
        assert_eq!(
            n.off_ring(t0 + holds - Duration::from_millis(1), holds)
                .len(),
            1
        );
        assert!(n.off_ring(t0 + holds, holds).is_empty(), "lapsed");
        // A copy of the same word, or an older one, does not bring it back.
        assert!(!n.heard(7, 3, t0 + holds));
        assert!(!n.heard(7, 2, t0 + holds));
        assert!(n.off_ring(t0 + holds, holds).is_empty());
        // A newer word does.
        assert!(n.heard(7, 4, t0 + holds));
        assert_eq!(n.off_ring(t0 + holds, holds), BTreeSet::from([7]));
        n.retain(&BTreeSet::from([8]));
        assert!(
            n.off_ring(t0 + holds, holds).is_empty(),
            "gone with the member"
        );
    }

    #[test]
    fn a_node_says_it_every_few_rounds_and_holds_back_until_its_last_word_lapsed_everywhere() {
        let mut n = NotLeasing::default();
        assert!(!n.holds_back(0, ROUND), "never said");
        let mut words = Vec::new();
        for r in 0..11 {
            if let Some(seq) = n.round(true, r * ROUND) {
                words.push((r, seq));
            }
            assert!(n.holds_back(r * ROUND, ROUND));
        }
        let every = NOT_LEASING_SAID_EVERY_ROUNDS;
        let expected: Vec<(u64, u64)> = (0..11).step_by(every as usize).zip(1..).collect();
        assert_eq!(
            words, expected,
            "said at once and every {every} rounds, seq rising"
        );
        let last = words.last().expect("said").0 * ROUND;
        // Its clock is back: it says nothing more, and holds back until its last word lapsed.
        assert_eq!(n.round(false, 11 * ROUND), None);
        let lapsed = last + holds_ms(ROUND) + 2 * ROUND;
        assert!(n.holds_back(lapsed - 1, ROUND));
        assert!(!n.holds_back(lapsed, ROUND));
    }
}
