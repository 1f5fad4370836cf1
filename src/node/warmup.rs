//! What a starting node with peers waits for before it admits anything: the cluster's state.
//!
//! A restarted node that answered from an empty table would hand a used day quota out again.
//! So it waits until every member it knows has sent it its bootstrap push (each member pushes
//! its registers when it sees the node come up; see `NodeCore::on_datagram` for how a push is
//! told), every member's clock has been estimated and most of those that can say their cluster
//! time have said it (so that the node does not have to move cluster time once it serves;
//! `NodeCore::heard_cluster_times`), and no member has appeared for a settle time; or until the
//! warm-up timeout passes (the first node of a fleet, or one whose seeds are all down).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

/// How a warm-up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmupEnd {
    /// Every member's state and clock arrived.
    HoldsState { waited: Duration },
    /// The timeout passed first.
    TimedOut { waited: Duration },
}

#[derive(Debug)]
pub struct Warmup {
    started: Instant,
    heard_state: BTreeSet<u128>,
    last_member_change: Option<Instant>,
}

impl Warmup {
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            heard_state: BTreeSet::new(),
            last_member_change: None,
        }
    }

    /// `member`'s bootstrap push has arrived (or word that it has nothing to push).
    pub fn heard_state_of(&mut self, member: u128) {
        self.heard_state.insert(member);
    }

    /// A member appeared (up, or renamed).
    pub fn member_changed(&mut self, at: Instant) {
        self.last_member_change = Some(at);
    }

    /// Whether the warm-up is over at `at`, given the current `members` and whether the rest
    /// of the state is whole (each member's clock estimated, nothing held back). `settle` is
    /// how long the member set must have been still.
    pub fn end(
        &self,
        at: Instant,
        members: &[u128],
        rest_whole: bool,
        settle: Duration,
        timeout: Duration,
    ) -> Option<WarmupEnd> {
        let settled = self
            .last_member_change
            .is_some_and(|t| at.saturating_duration_since(t) >= settle);
        let heard_all = !members.is_empty()
            && members.iter().all(|m| self.heard_state.contains(m))
            && rest_whole;
        let waited = at.saturating_duration_since(self.started);
        if heard_all && settled {
            Some(WarmupEnd::HoldsState { waited })
        } else if waited >= timeout {
            Some(WarmupEnd::TimedOut { waited })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTLE: Duration = Duration::from_millis(500);
    const TIMEOUT: Duration = Duration::from_secs(5);

    #[test]
    fn ends_when_every_member_pushed_and_the_set_settled() {
        let t0 = crate::clock::monotonic_now();
        let ms = Duration::from_millis;
        let mut w = Warmup::new(t0);
        w.member_changed(t0 + ms(100));
        w.heard_state_of(1);
        let end = |w: &Warmup, at, clocks| w.end(at, &[1, 2], clocks, SETTLE, TIMEOUT);
        assert_eq!(end(&w, t0 + ms(700), true), None, "2 has not pushed");
        w.heard_state_of(2);
        assert_eq!(
            end(&w, t0 + ms(700), false),
            None,
            "a clock is not estimated"
        );
        assert_eq!(
            end(&w, t0 + ms(599), true),
            None,
            "the member set is not settled"
        );
        assert_eq!(
            end(&w, t0 + ms(700), true),
            Some(WarmupEnd::HoldsState { waited: ms(700) })
        );
    }

    #[test]
    fn times_out_without_members_or_their_state() {
        let t0 = crate::clock::monotonic_now();
        let w = Warmup::new(t0);
        assert_eq!(w.end(t0 + TIMEOUT / 2, &[], true, SETTLE, TIMEOUT), None);
        assert_eq!(
            w.end(t0 + TIMEOUT, &[], true, SETTLE, TIMEOUT),
            Some(WarmupEnd::TimedOut { waited: TIMEOUT })
        );
    }
}
