//! The ledger's view of the owners in a node: the ring the limiter leases by, the rings
//! before it within a quiet period (a member that became a window's owner leases nothing until
//! the previous owner's leases lapse and their users report), and the side's part of each
//! limit (`ledger.rs`, `lease_part`). Under `strict`, a window whose owner went down without
//! saying it was leaving is blind to its next owner for a window's length (see
//! [`OwnerOf::blind_since_ms`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use super::blind_arcs::BlindArcs;
use super::placement::{Ring, point_of_key};
use crate::limiter::{KeyId, OwnerOf, OwnerView};

/// Rings before the last changes, kept for their quiet periods. More changes than this within
/// a quiet period make every window quiet until the oldest one dropped ends its period.
const RINGS_KEPT: usize = 8;

/// The ledger's state in a node.
#[derive(Debug, Default)]
pub(super) struct LedgerNode {
    /// `(when the ring changed, the ring before it)`, newest last.
    before: VecDeque<(u64, Arc<Ring>)>,
    /// No window leases before this: a change fell out of `before`.
    floor_quiet_until_ms: u64,
    /// The ring generation and lease part the limiter's view was made from.
    installed: Option<(u64, (u64, u64))>,
    /// The ring of the installed view.
    ring: Option<Arc<Ring>>,
    /// `(since when, part)` of the lease parts in force within the last quiet period, oldest
    /// first (`ledger.rs`, `lease_part`).
    parts: VecDeque<(u64, (u64, u64))>,
    /// The windows of members that went down without a word, blind from when.
    blind: Arc<BlindArcs>,
    /// The downs without a word whose windows are blind: each member, and when it went down.
    recorded: BTreeMap<u128, Instant>,
}

impl LedgerNode {
    /// The part to lease at `now_ms` given the side's part now: the least of those in force
    /// within the last `quiet_ms`. A part falls at once (members went out of sight); it rises
    /// only a quiet period after the members came back, once their registers have told the
    /// owner what their side spent while apart.
    pub(super) fn part_at(&mut self, now_ms: u64, part: (u64, u64), quiet_ms: u64) -> (u64, u64) {
        if self.parts.back().is_none_or(|(_, p)| *p != part) {
            self.parts.push_back((now_ms, part));
        }
        // A part stays while the one after it began within the quiet period.
        while self.parts.len() > 1 && self.parts[1].0 + quiet_ms <= now_ms {
            self.parts.pop_front();
        }
        self.parts
            .iter()
            .map(|(_, p)| *p)
            .min_by(|a, b| {
                (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
            })
            .unwrap_or(part)
    }
}

/// The limiter's view of the owners: see the module documentation.
#[derive(Debug)]
pub(super) struct RingView {
    ring: Arc<Ring>,
    before: Vec<(u64, Arc<Ring>)>,
    floor_quiet_until_ms: u64,
    quiet_ms: u64,
    part: (u64, u64),
    blind: Arc<BlindArcs>,
}

impl OwnerView for RingView {
    fn owner_of(&self, key: KeyId) -> Option<OwnerOf> {
        let owner = self.ring.owner(key)?;
        let moved = self
            .before
            .iter()
            .filter(|(_, ring)| ring.owner(key).map(|o| o.id) != Some(owner.id))
            .map(|(at, _)| at + self.quiet_ms)
            .max()
            .unwrap_or(0);
        Some(OwnerOf {
            owner: owner.id,
            quiet_until_ms: moved.max(self.floor_quiet_until_ms),
            blind_since_ms: self.blind.blind_since(point_of_key(key)),
        })
    }

    fn owner_id(&self, key: KeyId) -> Option<u128> {
        self.ring.owner(key).map(|o| o.id)
    }

    fn lease_part(&self) -> (u64, u64) {
        self.part
    }
}

impl LedgerNode {
    /// Whether the installed view lets this node lease at all.
    pub(super) fn may_lease(&self) -> bool {
        self.installed.is_some_and(|(_, (seen, _))| seen > 0)
    }

    /// The view to give the limiter for `ring` (of `generation`) and the side's part now, or
    /// `None` if the installed one still holds. `starting`: the node has not ended its
    /// warm-up (or this is its first ring): it leases nothing until a quiet period after.
    /// `unsaid`: the members that went down without a word, and when (none outside
    /// `strict`), whose windows are blind from `blind_after_ms` past now.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn install(
        &mut self,
        now_ms: u64,
        ring: &Arc<Ring>,
        generation: u64,
        side: (u64, u64),
        quiet_ms: u64,
        starting: bool,
        unsaid: &[(u128, Instant)],
        blind_after_ms: u64,
    ) -> Option<RingView> {
        let part = self.part_at(now_ms, side, quiet_ms);
        let blinded = self.went_down(ring, unsaid, now_ms.saturating_add(blind_after_ms));
        // A node's first rings say nothing of who leased its windows before it: every owner
        // before it may still be leasing them until it knows of this node.
        let floor = self.floor_quiet_until_ms;
        if starting || self.installed.is_none() {
            self.floor_quiet_until_ms = floor.max(now_ms + quiet_ms);
        }
        // A ring whose quiet period is over says nothing more (a quiet time in the past is
        // no wait): the view drops it, so that each owner lookup reads only the rings that
        // still matter.
        let quiet_over = self
            .before
            .front()
            .is_some_and(|(at, _)| at + quiet_ms <= now_ms);
        if self.installed == Some((generation, part))
            && self.floor_quiet_until_ms == floor
            && !blinded
            && !quiet_over
        {
            return None;
        }
        let old = self.ring.replace(Arc::clone(ring));
        if self.installed.is_some_and(|(g, _)| g != generation)
            && let Some(old) = old
        {
            self.before.push_back((now_ms, old));
        }
        self.before.retain(|(at, _)| at + quiet_ms > now_ms);
        while self.before.len() > RINGS_KEPT {
            if let Some((at, _)) = self.before.pop_front() {
                self.floor_quiet_until_ms = self.floor_quiet_until_ms.max(at + quiet_ms);
            }
        }
        self.installed = Some((generation, part));
        Some(RingView {
            ring: Arc::clone(ring),
            before: self.before.iter().cloned().collect(),
            floor_quiet_until_ms: self.floor_quiet_until_ms,
            quiet_ms,
            part,
            blind: Arc::clone(&self.blind),
        })
    }

    /// Makes blind, from `blind_since_ms`, the windows of each member of `unsaid` not on `ring`
    /// and not made blind for that down already: every window it would own beside the members
    /// on both `ring` and the ring installed before (it owned some of them, and a member that
    /// saw the members change in another order may have given it others). Returns whether any
    /// window became blind.
    fn went_down(&mut self, ring: &Ring, unsaid: &[(u128, Instant)], blind_since_ms: u64) -> bool {
        // The common round: no down without a word remembered, nothing to compare.
        if unsaid.is_empty() && self.recorded.is_empty() {
            return false;
        }
        let on_ring = ring.member_ids();
        let unsaid: BTreeMap<u128, Instant> = unsaid.iter().copied().collect();
        self.recorded
            .retain(|id, _| !on_ring.contains(id) && unsaid.contains_key(id));
        let fresh: Vec<(u128, Instant)> = unsaid
            .into_iter()
            .filter(|(id, at)| !on_ring.contains(id) && self.recorded.get(id) != Some(at))
            .collect();
        if fresh.is_empty() {
            return false;
        }
        let stayed = match &self.ring {
            Some(before) => {
                let before = before.member_ids();
                ring.retaining(|id| before.contains(&id))
            }
            None => ring.clone(),
        };
        let mut arcs = Vec::new();
        for (id, at) in fresh {
            arcs.extend(stayed.arcs_of(&stayed.points_of_member(id)));
            self.recorded.insert(id, at);
        }
        Arc::make_mut(&mut self.blind).add(arcs, blind_since_ms);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::placement::Member;

    fn ring(ids: &[u128]) -> Arc<Ring> {
        let members: Vec<Member> = ids
            .iter()
            .map(|&id| Member {
                id,
                addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + id as u16)),
            })
            .collect();
        Arc::new(Ring::of([7; 32], &members))
    }

    fn spread(k: u128) -> KeyId {
        KeyId(k.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835))
    }

    /// A node that starts alone owns every window in its first ring, and still owns some once
    /// it sees the others: it leases none of them before a quiet period past its warm-up, as
    /// the owners before it may lease them until they know of it.
    #[test]
    fn a_starting_node_leases_nothing_until_a_quiet_period_past_its_warm_up() {
        const QUIET: u64 = 1_600;
        let all = ring(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let quiet_at =
            |view: &RingView, k: KeyId| view.owner_of(k).expect("an owner").quiet_until_ms;
        let mut node = LedgerNode::default();
        let alone = node
            .install(10_000, &ring(&[1]), 1, (1, 1), QUIET, true, &[], 0)
            .expect("a first view");
        assert_eq!(alone.owner_of(spread(42)).map(|o| o.owner), Some(1));
        assert_eq!(quiet_at(&alone, spread(42)), 10_000 + QUIET);
        let seen = node
            .install(10_200, &all, 2, (8, 8), QUIET, true, &[], 0)
            .expect("a new ring");
        let owned: Vec<KeyId> = (0..256u128)
            .map(spread)
            .filter(|k| seen.owner_of(*k).is_some_and(|o| o.owner == 1))
            .collect();
        assert!(!owned.is_empty(), "the node owns some windows");
        assert!(owned.iter().all(|k| quiet_at(&seen, *k) >= 10_200 + QUIET));
        // The owner alone is the one `owner_of` names, with a ring from before kept.
        assert!((0..256u128).map(spread).all(|k| {
            seen.owner_id(k) == seen.owner_of(k).map(|o| o.owner) && alone.owner_id(k) == Some(1)
        }));
        // Still warming up a round later, with nothing else changed: quiet a period past it.
        let warming = node
            .install(10_400, &all, 2, (8, 8), QUIET, true, &[], 0)
            .expect("a later floor");
        assert!(
            owned
                .iter()
                .all(|k| quiet_at(&warming, *k) >= 10_400 + QUIET)
        );
        // Warmed up: the floor stays where the warm-up left it.
        assert!(
            node.install(10_600, &all, 2, (8, 8), QUIET, false, &[], 0)
                .is_none()
        );
        // A ring change later leaves the windows that stay with the node leasing.
        let later = node
            .install(
                20_000,
                &ring(&[1, 2, 3, 4, 5, 6, 7]),
                3,
                (7, 7),
                QUIET,
                false,
                &[],
                0,
            )
            .expect("a new ring");
        let kept = owned
            .iter()
            .find(|k| later.owner_of(**k).is_some_and(|o| o.owner == 1))
            .expect("a window the node keeps");
        assert!(quiet_at(&later, *kept) < 20_000);
    }

    /// A ring before a change stays in the view for the change's quiet period and no longer:
    /// its quiet time would be in the past, and every owner lookup would read it.
    #[test]
    fn a_ring_whose_quiet_period_ended_leaves_the_view() {
        const QUIET: u64 = 1_600;
        let mut node = LedgerNode::default();
        let three = ring(&[1, 2, 3]);
        let at = |node: &mut LedgerNode, now: u64| {
            node.install(now, &three, 2, (4, 4), QUIET, false, &[], 0)
        };
        node.install(1_000, &ring(&[1, 2, 3, 4]), 1, (4, 4), QUIET, false, &[], 0)
            .expect("a first view");
        let changed = at(&mut node, 10_000).expect("a new ring");
        assert_eq!(changed.before.len(), 1);
        let moved = (0..256u128)
            .map(spread)
            .find(|k| changed.owner_of(*k).expect("an owner").quiet_until_ms >= 10_000 + QUIET)
            .expect("a window that moved");
        assert!(
            at(&mut node, 10_000 + QUIET - 1).is_none(),
            "within the period"
        );
        let settled = at(&mut node, 10_000 + QUIET).expect("a view without the ring before");
        assert!(settled.before.is_empty());
        assert!(settled.owner_of(moved).expect("an owner").quiet_until_ms <= 10_000 + QUIET);
        assert!(
            at(&mut node, 10_000 + QUIET + 200).is_none(),
            "and it stays"
        );
    }

    /// Under `strict`, a window whose owner went down without a word is blind to its next
    /// owner: the member may be across a cut, where it leased its side the whole limit until
    /// its part there fell. A window whose owner left saying so, or that did not move, is not.
    #[test]
    fn a_window_whose_owner_went_down_without_a_word_is_blind_to_its_next_owner() {
        const QUIET: u64 = 1_600;
        const BLIND_AFTER: u64 = 3_000;
        let mut node = LedgerNode::default();
        node.install(1_000, &ring(&[1, 2, 3, 4]), 1, (4, 4), QUIET, false, &[], 0)
            .expect("a first view");
        let before = ring(&[1, 2, 3, 4]);
        // 3 crashed, 4 left saying so.
        let view = node
            .install(
                50_000,
                &ring(&[1, 2]),
                2,
                (2, 3),
                QUIET,
                false,
                &[(3, crate::clock::monotonic_now())],
                BLIND_AFTER,
            )
            .expect("a new ring");
        // A window is blind where 3 owned it, and where it would own it beside the members now
        // (a member that saw 4 leave before 3 went down gave 3 those of 4's).
        let with_3 = ring(&[1, 2, 3]);
        let (mut blind, mut moved, mut kept) = (Vec::new(), 0, 0);
        for k in (0..2_000u128).map(spread) {
            let was = before.owner(k).expect("an owner").id;
            let o = view.owner_of(k).expect("an owner");
            if was == 3 || with_3.owner(k).expect("an owner").id == 3 {
                blind.push(k);
                assert_eq!(o.blind_since_ms, 50_000 + BLIND_AFTER, "{k:?}");
                assert_eq!(o.leases_from_ms(60_000, 10), 50_000 + BLIND_AFTER + 60_010);
                assert_eq!(o.leases_from_ms(1_000, 10), 50_000 + BLIND_AFTER + 1_010);
            } else if was == 4 {
                moved += 1;
                assert_eq!(o.blind_since_ms, 0, "{k:?}");
                assert_eq!(o.leases_from_ms(60_000, 10), 50_000 + QUIET);
            } else {
                kept += 1;
                assert_eq!(o.blind_since_ms, 0, "{k:?}");
                assert!(o.leases_from_ms(60_000, 10) < 50_000);
            }
        }
        assert!(!blind.is_empty() && moved > 0 && kept > 0);
        // A member that joins (or a member that comes back) takes some of those windows: they
        // stay blind to whoever owns them, from the same time.
        let joined = node
            .install(51_000, &ring(&[1, 2, 9]), 3, (3, 4), QUIET, false, &[], 0)
            .expect("9 joined");
        let taken = blind
            .iter()
            .filter(|k| joined.owner_of(**k).is_some_and(|o| o.owner == 9))
            .count();
        assert!(taken > 0, "9 takes some of 3's windows");
        assert!(blind.iter().all(|k| {
            joined
                .owner_of(*k)
                .is_some_and(|o| o.blind_since_ms == 50_000 + BLIND_AFTER)
        }));
        // A member that came and went down without a word between two views (never on a ring
        // this node installed): the windows it would own beside the members are blind all the
        // same, from when this node learned of it.
        let with_5 = ring(&[1, 2, 5, 9]);
        let down_5 = [(5, crate::clock::monotonic_now())];
        let late = node
            .install(
                52_000,
                &ring(&[1, 2, 9]),
                3,
                (3, 5),
                QUIET,
                false,
                &down_5,
                BLIND_AFTER,
            )
            .expect("5's windows blind");
        let fives: Vec<KeyId> = (0..2_000u128)
            .map(spread)
            .filter(|k| with_5.owner(*k).is_some_and(|o| o.id == 5))
            .collect();
        assert!(!fives.is_empty());
        assert!(fives.iter().all(|k| {
            late.owner_of(*k)
                .is_some_and(|o| o.blind_since_ms >= 52_000 + BLIND_AFTER)
        }));
    }
}
