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

use super::core::NodeCore;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::LedgerEntry;
use crate::gossip::wire::MAX_CLOCK_DISTANCE_MS;
use crate::ledger::tuning::NOT_LEASING_SAID_EVERY_ROUNDS;

/// A word is said this many times before it lapses: four in a row may be lost.
const SAYINGS_HELD: u64 = 5;

/// The most a member's word may say it holds: a word cannot keep a member off a ring for long.
const LONGEST_HOLD_MS: u64 = 60_000;

/// How long a member's word that it leases nothing holds, at its summary round of `round_ms`.
pub fn holds_ms(round_ms: u64) -> u64 {
    SAYINGS_HELD * NOT_LEASING_SAID_EVERY_ROUNDS * round_ms
}

/// What members said of leasing nothing, and what this node says. Times are the monotonic
/// clock's, suspends included (`Now::mono_ms`), at both ends: cluster time may jump forward when
/// a clock is mended, and a machine suspended must not find a word still holding that lapsed
/// everywhere else while it slept.
#[derive(Debug, Default)]
pub struct NotLeasing {
    /// Per member, the last word taken from it (`seq`), and until when it holds here.
    heard: BTreeMap<u128, (u64, u64)>,
    /// This node's words so far (the last one's `seq`).
    said: u64,
    /// This node leases nothing for its clock.
    saying: bool,
    /// When this node last said it, while it says it and after.
    last_said_ms: Option<u64>,
    /// Rounds since this node began saying it, while it says it.
    rounds_saying: u64,
}

impl NotLeasing {
    /// `member` said, in its word `seq`, that it leases nothing; the word holds here until
    /// `until`. Returns whether the word was taken: a word no newer than the last one taken
    /// from the member is a copy.
    pub fn heard(&mut self, member: u128, seq: u64, until_ms: u64) -> bool {
        match self.heard.get(&member) {
            Some((last, _)) if *last >= seq => false,
            _ => {
                self.heard.insert(member, (seq, until_ms));
                true
            }
        }
    }

    /// The members whose word holds at `at_ms` (they lease nothing): off the ledger's ring.
    pub fn off_ring(&self, at_ms: u64) -> BTreeSet<u128> {
        self.heard
            .iter()
            .filter(|(_, (_, until))| *until > at_ms)
            .map(|(m, _)| *m)
            .collect()
    }

    /// Forgets the words that lapsed long enough ago that no copy of them can come: a
    /// datagram sent further back than [`MAX_CLOCK_DISTANCE_MS`] is refused as stale, and a
    /// word's hold is at most [`LONGEST_HOLD_MS`]. Until then the last `seq` stays, whether or
    /// not the member does (SWIM may declare it down and see it back under the same id).
    pub fn forget_lapsed(&mut self, at_ms: u64) {
        let keep = MAX_CLOCK_DISTANCE_MS + LONGEST_HOLD_MS;
        self.heard
            .retain(|_, (_, until)| at_ms.saturating_sub(*until) < keep);
    }

    /// Whether this node leases nothing for its clock now (`saying`), at `at`. Returns the word
    /// to say this round, if one is due, and how many copies: the first round (twice, so that
    /// one lost datagram does not leave a member routing to this node for a whole turn), and
    /// every [`NOT_LEASING_SAID_EVERY_ROUNDS`] after.
    pub fn round(&mut self, saying: bool, at_ms: u64) -> Option<(u64, usize)> {
        self.saying = saying;
        if !saying {
            // Said again at once when it next leases nothing.
            self.rounds_saying = 0;
            return None;
        }
        let first = self.rounds_saying == 0;
        let due = self
            .rounds_saying
            .is_multiple_of(NOT_LEASING_SAID_EVERY_ROUNDS);
        self.rounds_saying += 1;
        if !due {
            return None;
        }
        self.said += 1;
        self.last_said_ms = Some(at_ms);
        Some((self.said, if first { 2 } else { 1 }))
    }

    /// Whether this node must still lease nothing at `at_ms`: it says so, or a word it said
    /// may still hold somewhere. Each member rebuilds its ring with this node back by
    /// `holds_ms` after the word was said (it takes the word's hold less its own round and the
    /// word's lateness); `round_ms` more covers the error of that lateness and of the timers.
    pub fn holds_back(&self, at_ms: u64, holds_ms: u64, round_ms: u64) -> bool {
        self.saying
            || self
                .last_said_ms
                .is_some_and(|t| at_ms < t.saturating_add(holds_ms + round_ms))
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
    pub(super) fn not_leasing_round(&mut self, now: Now) -> Option<(u64, usize)> {
        let saying = self.clock_sync.fences().own;
        let word = self.not_leasing.round(saying, now.mono_ms);
        self.not_leasing.forget_lapsed(now.mono_ms);
        let mut off = self.not_leasing.off_ring(now.mono_ms);
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

    /// Whether this node leases nothing for its clock, or a word it said of it may still hold
    /// (`NotLeasing::holds_back`).
    pub(super) fn not_leasing_holds_back(&self, now: Now) -> bool {
        let round_ms = self.round_ms();
        self.not_leasing
            .holds_back(now.mono_ms, holds_ms(round_ms), round_ms)
    }

    /// Says to every member, in datagrams of their own, that this node leases nothing.
    pub(super) fn say_not_leasing(&mut self, now: Now, (seq, copies): (u64, usize)) {
        let holds_ms = u32::try_from(holds_ms(self.round_ms())).unwrap_or(u32::MAX);
        for member in self.membership.members() {
            let to = super::core::destination(&member);
            if self.may_send_state(now, to) {
                for _ in 0..copies {
                    let word = LedgerEntry::NotLeasing { seq, holds_ms };
                    self.send_ledger(now, to, Vec::new(), vec![word]);
                }
            }
        }
    }

    /// `sender` said, in its word `seq` sent at `sent_ms` (its wall clock), that it leases
    /// nothing for `holds_ms`. Each ring here has it back `holds_ms` after it said so, at the
    /// latest: the word holds that long from its sending, less this node's round (a ring is
    /// rebuilt at the next one). Its sending is told by how late it came against the sender's
    /// quickest datagram before it; a word whose lateness cannot be told (no datagram before
    /// it, or one that came a round sooner than any) is not taken.
    pub(super) fn heard_not_leasing(
        &mut self,
        now: Now,
        sender: u128,
        word: (u64, u32),
        sent_ms: u64,
    ) {
        let (seq, holds_ms) = word;
        let round_ms = self.round_ms();
        let Some(late_ms) = self
            .clock_sync
            .lateness_ms(sender, sent_ms, now.mono_ms, round_ms)
        else {
            return;
        };
        let holds_ms = u64::from(holds_ms).min(LONGEST_HOLD_MS);
        let left_ms = holds_ms.saturating_sub(late_ms + round_ms);
        if left_ms > 0 {
            self.not_leasing
                .heard(sender, seq, now.mono_ms.saturating_add(left_ms));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUND: u64 = 200;

    #[test]
    fn a_word_holds_until_its_time_and_a_copy_is_never_taken_again() {
        let t0 = 1_000_000;
        let mut n = NotLeasing::default();
        assert!(n.heard(7, 3, t0 + 4_000));
        assert_eq!(n.off_ring(t0), BTreeSet::from([7]));
        assert_eq!(n.off_ring(t0 + 3_999).len(), 1);
        assert!(n.off_ring(t0 + 4_000).is_empty(), "lapsed");
        // A copy of the same word, or an older one, does not bring it back.
        assert!(!n.heard(7, 3, t0 + 9_000));
        assert!(!n.heard(7, 2, t0 + 9_000));
        assert!(n.off_ring(t0 + 4_000).is_empty());
        // Nor once the member's word is long forgotten by the ring: the number stays until no
        // copy can come (the transport refuses one sent a minute before).
        n.forget_lapsed(t0 + 4_000 + 119_999);
        assert!(!n.heard(7, 3, t0 + 200_000), "still remembered");
        n.forget_lapsed(t0 + 4_000 + 120_000);
        assert!(n.heard.is_empty(), "forgotten");
        // A newer word is taken.
        assert!(n.heard(7, 4, t0 + 200_000));
        assert_eq!(n.off_ring(t0 + 199_999), BTreeSet::from([7]));
    }

    #[test]
    fn a_node_says_it_twice_at_once_then_every_few_rounds_and_holds_back_until_its_last_word_lapsed()
     {
        let t0 = 1_000_000;
        let holds = holds_ms(ROUND);
        let mut n = NotLeasing::default();
        assert!(!n.holds_back(t0, holds, ROUND), "never said");
        let mut words = Vec::new();
        for r in 0..11 {
            if let Some((seq, copies)) = n.round(true, t0 + ROUND * r) {
                words.push((r, seq, copies));
            }
            assert!(n.holds_back(t0 + ROUND * r, holds, ROUND));
        }
        let every = NOT_LEASING_SAID_EVERY_ROUNDS;
        assert_eq!(
            words,
            [(0, 1, 2), (every, 2, 1), (2 * every, 3, 1)],
            "said at once (twice) and every {every} rounds, seq rising"
        );
        let last = t0 + ROUND * words.last().expect("said").0;
        // Its clock is back: it says nothing more, and holds back until its last word lapsed
        // everywhere, and a round more.
        assert_eq!(n.round(false, t0 + ROUND * 11), None);
        let lapsed = last + holds + ROUND;
        assert!(n.holds_back(lapsed - 1, holds, ROUND));
        assert!(!n.holds_back(lapsed, holds, ROUND));
        // Cut off again: said at once, twice, with the next number.
        assert_eq!(n.round(true, lapsed), Some((4, 2)));
    }
}
