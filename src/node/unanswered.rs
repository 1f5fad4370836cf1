//! Windows whose registers go to an owner and get no sum back.
//!
//! In owner mode a node hears of a window's other users only through the sums of the member
//! it sends its registers to, and a member that counts itself the window's first owner answers
//! every register it keeps with a sum, empty or not, at its next round (the next calm round, a
//! second at most, for a window far from its limit). Registers that go unanswered mean that
//! member does not count itself the first owner (it is missing from the views of the others,
//! or they from its), or it is gone, or the registers never reach it. The node then knows
//! nothing of the window's other users, and would take the whole limit; the limiter holds
//! such a *blind* window to the onset share instead while it knows of no other user's demand
//! (`Limiter::set_blind`).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::limiter::KeyId;

/// A window is blind once its registers have gone out this many times, and for at least
/// [`BLIND_AFTER`], with no sum back. Three rounds for a window near its limit (an answer
/// takes a round and two latencies); three calm rounds, two seconds, for the others.
const BLIND_AFTER_SENDS: u32 = 3;

/// See [`BLIND_AFTER_SENDS`]. Longer than an owner takes to answer a window it takes for
/// calm (a second, its calm round, and two latencies), which a user near its limit sends
/// every round; at 20 % loss each way, seven round trips all fail for one window in 1 300.
const BLIND_AFTER: Duration = Duration::from_millis(1_500);

/// A window whose registers stopped going out this long ago is no longer tracked.
const FORGET_AFTER: Duration = Duration::from_secs(3);

/// How long a sum that said nobody else used a window keeps it from counting as blind: a
/// crashed or cut-off owner is suspected, and the ring moves its windows, within a few
/// seconds; an owner that stopped answering while alive (a member this node does not know
/// of took the window over) is not, and then other users may be on the window unseen.
const ALONE_FOR: Duration = Duration::from_secs(10);

/// At most this many windows are tracked (a node tracks only windows it sends registers
/// of, which its key table bounds; this bounds the table all the same).
const MOST_TRACKED: usize = 1 << 16;

#[derive(Debug, Clone, Copy)]
struct Tracked {
    /// The first send since the last sum.
    since: Instant,
    /// The last send.
    last: Instant,
    /// Sends since the last sum.
    sends: u32,
    /// When the last sum came, if it said the owner knows of no other user (nothing admitted,
    /// no demand).
    alone: Option<Instant>,
}

/// Per window this node sends registers of, the sends since the last sum came.
#[derive(Debug, Default)]
pub struct UnansweredRegisters {
    windows: BTreeMap<KeyId, Tracked>,
}

impl UnansweredRegisters {
    /// A register of `key` went to the member this node takes for its owner.
    pub fn sent(&mut self, key: KeyId, at: Instant) {
        if self.windows.len() >= MOST_TRACKED && !self.windows.contains_key(&key) {
            return;
        }
        let entry = self.windows.entry(key).or_insert(Tracked {
            since: at,
            last: at,
            sends: 0,
            alone: None,
        });
        if entry.sends == 0 {
            entry.since = at;
        }
        entry.last = at;
        entry.sends = entry.sends.saturating_add(1);
    }

    /// A sum of `key` came at `at`: a member acts as its owner. `alone`: the sum says it knows
    /// of no other user.
    pub fn answered(&mut self, key: KeyId, alone: bool, at: Instant) {
        if let Some(entry) = self.windows.get_mut(&key) {
            entry.sends = 0;
            entry.alone = alone.then_some(at);
        }
    }

    /// The windows that are blind at `at`; forgets those no longer sent.
    ///
    /// A window whose last sum said nobody else used it is not blind for [`ALONE_FOR`] after:
    /// it was this node's alone when it last heard, and a user that came since, cut off from
    /// this node's owner, cannot hear of this node either; under `strict` both are held to
    /// their side's part (a partition). Capped, a key used by one node was refused nearly
    /// whole from its owner's crash until SWIM suspected the owner, seconds later. A change of
    /// the ring does not clear it: in a partition the ring changes as the far side goes, and
    /// the window is then still this node's alone on its side. Pinned by
    /// `a_sum_that_said_the_window_was_alone_keeps_it_from_blind_for_ten_seconds_only`.
    pub fn blind(&mut self, at: Instant) -> Vec<KeyId> {
        self.windows
            .retain(|_, u| at.saturating_duration_since(u.last) < FORGET_AFTER);
        self.windows
            .iter()
            .filter(|(_, u)| {
                u.alone
                    .is_none_or(|said| at.saturating_duration_since(said) >= ALONE_FOR)
                    && u.sends >= BLIND_AFTER_SENDS
                    && at.saturating_duration_since(u.since) >= BLIND_AFTER
            })
            .map(|(k, _)| *k)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_window_is_blind_after_three_unanswered_sends_over_a_second_and_a_half_and_not_once_answered()
     {
        let (t0, k, other) = (crate::clock::monotonic_now(), KeyId(7), KeyId(8));
        let mut u = UnansweredRegisters::default();
        // Every round, never answered: not after two sends, nor after seven within 1.5 s.
        for round in 0..8 {
            u.sent(k, ms(t0, round * 200));
            assert!(u.blind(ms(t0, round * 200)).is_empty(), "round {round}");
        }
        u.sent(k, ms(t0, 1_500));
        assert_eq!(u.blind(ms(t0, 1_500)), vec![k]);
        // Answered sends never make a window blind, however long they go on.
        for round in 0..25 {
            u.sent(other, ms(t0, round * 200));
            u.answered(other, false, ms(t0, round * 200));
        }
        assert_eq!(
            u.blind(ms(t0, 4_500)),
            Vec::<KeyId>::new(),
            "k forgotten after 3 s"
        );
        // A sum ends it at once; the count starts over.
        u.sent(k, ms(t0, 5_000));
        u.sent(k, ms(t0, 5_200));
        u.sent(k, ms(t0, 6_500));
        assert_eq!(u.blind(ms(t0, 6_500)), vec![k]);
        u.answered(k, false, ms(t0, 6_500));
        assert!(u.blind(ms(t0, 6_500)).is_empty());
        // Two sends, however far apart, are not enough.
        u.sent(k, ms(t0, 7_000));
        u.sent(k, ms(t0, 9_000));
        assert!(u.blind(ms(t0, 9_000)).is_empty());
    }

    #[test]
    fn a_sum_that_said_the_window_was_alone_keeps_it_from_blind_for_ten_seconds_only() {
        let (t0, k) = (crate::clock::monotonic_now(), KeyId(3));
        let mut u = UnansweredRegisters::default();
        // Sends every round from `from` to `to` ms, unanswered; then whether k is blind.
        let unanswered = |u: &mut UnansweredRegisters, from: u64, to: u64| {
            for at in (from..=to).step_by(200) {
                u.sent(k, ms(t0, at));
            }
            u.blind(ms(t0, to)).contains(&k)
        };
        u.sent(k, t0);
        u.answered(k, true, t0);
        // Not blind while the alone sum is under ALONE_FOR old, blind once it is older.
        assert!(!unanswered(&mut u, 200, 9_800));
        assert!(unanswered(&mut u, 10_000, 10_000));
        // A sum that says others use it: blind again after 1.5 s.
        u.answered(k, false, ms(t0, 10_100));
        assert!(!unanswered(&mut u, 10_200, 11_600));
        assert!(unanswered(&mut u, 11_800, 11_800));
    }

    #[test]
    fn calm_sends_a_second_apart_are_blind_only_at_the_third() {
        let (t0, k) = (crate::clock::monotonic_now(), KeyId(1));
        let mut u = UnansweredRegisters::default();
        u.sent(k, t0);
        u.sent(k, ms(t0, 1_000));
        assert!(u.blind(ms(t0, 1_900)).is_empty());
        u.sent(k, ms(t0, 2_000));
        assert_eq!(u.blind(ms(t0, 2_000)), vec![k]);
    }

    #[test]
    fn the_table_stays_within_its_bound() {
        let t0 = crate::clock::monotonic_now();
        let mut u = UnansweredRegisters::default();
        for i in 0..(MOST_TRACKED as u128 + 100) {
            u.sent(KeyId(i), t0);
        }
        assert_eq!(u.windows.len(), MOST_TRACKED);
        // A tracked window still counts.
        u.sent(KeyId(0), t0);
        assert_eq!(u.windows[&KeyId(0)].sends, 2);
    }
}
