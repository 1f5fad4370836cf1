//! The ledger's view of the owners in a node: the ring the limiter leases by, the rings
//! before it within a quiet period (a member that became a window's owner leases nothing until
//! the previous owner's leases lapse and their users report), and the side's part of each
//! limit (`ledger.rs`, `lease_part`).

use std::collections::{BTreeMap, VecDeque};

use super::placement::Ring;
use crate::limiter::{KeyId, OwnerOf, OwnerView};

/// Rings before the last changes, kept for their quiet periods. More changes than this within
/// a quiet period make every window quiet until the oldest one dropped ends its period.
const RINGS_KEPT: usize = 8;

/// The ledger's state in a node.
#[derive(Debug, Default)]
pub(super) struct LedgerNode {
    /// `(when the ring changed, the ring before it)`, newest last.
    before: VecDeque<(u64, Ring)>,
    /// No window leases before this: a change fell out of `before`.
    floor_quiet_until_ms: u64,
    /// The ring generation and lease part the limiter's view was made from.
    installed: Option<(u64, (u64, u64))>,
    /// The ring of the installed view.
    ring: Option<Ring>,
    /// `(since when, part)` of the lease parts in force within the last quiet period, oldest
    /// first (`ledger.rs`, `lease_part`).
    parts: VecDeque<(u64, (u64, u64))>,
    /// Windows handed to this node: `(the member that handed it, when)`, kept for a quiet
    /// period. A window's change of owner from that member asks for no quiet period: the
    /// limiter counts the slots it handed over (`Limiter::take_over`).
    handed: BTreeMap<KeyId, (u128, u64)>,
    /// A window was handed over since the view was installed.
    handed_since_install: bool,
    /// The node is leaving: it leases nothing more (what it leased is handed over).
    leaving: bool,
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
    ring: Ring,
    before: Vec<(u64, Ring)>,
    handed: BTreeMap<KeyId, u128>,
    floor_quiet_until_ms: u64,
    quiet_ms: u64,
    part: (u64, u64),
}

impl OwnerView for RingView {
    fn owner_of(&self, key: KeyId) -> Option<OwnerOf> {
        let owner = self.ring.owner(key)?;
        let handed_by = self.handed.get(&key).copied();
        let moved = self
            .before
            .iter()
            .filter(|(_, ring)| {
                let before = ring.owner(key).map(|o| o.id);
                before != Some(owner.id) && (before.is_none() || before != handed_by)
            })
            .map(|(at, _)| at + self.quiet_ms)
            .max()
            .unwrap_or(0);
        Some(OwnerOf {
            owner: owner.id,
            quiet_until_ms: moved.max(self.floor_quiet_until_ms),
        })
    }

    fn lease_part(&self) -> (u64, u64) {
        self.part
    }
}

impl LedgerNode {
    /// Whether the installed view lets this node lease at all.
    pub(super) fn may_lease(&self) -> bool {
        !self.leaving && self.installed.is_some_and(|(_, (seen, _))| seen > 0)
    }

    /// The node is leaving: it leases nothing from now.
    pub(super) fn stop_leasing(&mut self) {
        self.leaving = true;
    }

    /// `from` handed this node window `key` at `now_ms`.
    pub(super) fn took_over(&mut self, key: KeyId, from: u128, now_ms: u64) {
        self.handed.insert(key, (from, now_ms));
        self.handed_since_install = true;
    }

    /// The view to give the limiter for `ring` (of `generation`) and the side's part now, or
    /// `None` if the installed one still holds. `starting`: the node has not ended its
    /// warm-up (or this is its first ring): it leases nothing until a quiet period after.
    pub(super) fn install(
        &mut self,
        now_ms: u64,
        ring: &Ring,
        generation: u64,
        side: (u64, u64),
        quiet_ms: u64,
        starting: bool,
    ) -> Option<RingView> {
        let part = self.part_at(now_ms, side, quiet_ms);
        // A node's first rings say nothing of who leased its windows before it: every owner
        // before it may still be leasing them until it knows of this node.
        let floor = self.floor_quiet_until_ms;
        if starting || self.installed.is_none() {
            self.floor_quiet_until_ms = floor.max(now_ms + quiet_ms);
        }
        if self.installed == Some((generation, part))
            && self.floor_quiet_until_ms == floor
            && !self.handed_since_install
        {
            return None;
        }
        self.handed_since_install = false;
        self.handed.retain(|_, (_, at)| *at + quiet_ms > now_ms);
        let old = self.ring.replace(ring.clone());
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
            ring: ring.clone(),
            before: self.before.iter().cloned().collect(),
            handed: self
                .handed
                .iter()
                .map(|(k, (from, _))| (*k, *from))
                .collect(),
            floor_quiet_until_ms: self.floor_quiet_until_ms,
            quiet_ms,
            part,
        })
    }
}

#[cfg(test)]
mod tests_support {
    use super::*;
    use crate::node::placement::Member;

    pub(super) fn ring(ids: &[u128]) -> Ring {
        let members: Vec<Member> = ids
            .iter()
            .map(|&id| Member {
                id,
                addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + id as u16)),
            })
            .collect();
        Ring::of([7; 32], &members)
    }

    pub(super) fn spread(k: u128) -> KeyId {
        KeyId(k.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835))
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;

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
            .install(10_000, &ring(&[1]), 1, (1, 1), QUIET, true)
            .expect("a first view");
        assert_eq!(alone.owner_of(spread(42)).map(|o| o.owner), Some(1));
        assert_eq!(quiet_at(&alone, spread(42)), 10_000 + QUIET);
        let seen = node
            .install(10_200, &all, 2, (8, 8), QUIET, true)
            .expect("a new ring");
        let owned: Vec<KeyId> = (0..256u128)
            .map(spread)
            .filter(|k| seen.owner_of(*k).is_some_and(|o| o.owner == 1))
            .collect();
        assert!(!owned.is_empty(), "the node owns some windows");
        assert!(owned.iter().all(|k| quiet_at(&seen, *k) >= 10_200 + QUIET));
        // Still warming up a round later, with nothing else changed: quiet a period past it.
        let warming = node
            .install(10_400, &all, 2, (8, 8), QUIET, true)
            .expect("a later floor");
        assert!(
            owned
                .iter()
                .all(|k| quiet_at(&warming, *k) >= 10_400 + QUIET)
        );
        // Warmed up: the floor stays where the warm-up left it.
        assert!(
            node.install(10_600, &all, 2, (8, 8), QUIET, false)
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
            )
            .expect("a new ring");
        let kept = owned
            .iter()
            .find(|k| later.owner_of(**k).is_some_and(|o| o.owner == 1))
            .expect("a window the node keeps");
        assert!(quiet_at(&later, *kept) < 20_000);
    }
}

#[cfg(test)]
mod handoff_tests {
    use super::tests_support::*;
    use super::*;

    /// Windows that come to this node when their owner leaves: those that owner handed over
    /// are leased at once; one handed over by a member that did not own it, or not handed
    /// over, waits a quiet period.
    #[test]
    fn a_window_handed_over_by_its_owner_before_needs_no_quiet_period() {
        const QUIET: u64 = 1_600;
        let mut node = LedgerNode::default();
        let all = ring(&[1, 2, 3, 4]);
        node.install(10_000, &all, 1, (4, 4), QUIET, false);
        let without_4 = ring(&[1, 2, 3]);
        let moved: Vec<KeyId> = (0..512u128)
            .map(spread)
            .filter(|k| {
                all.owner(*k).is_some_and(|o| o.id == 4)
                    && without_4.owner(*k).is_some_and(|o| o.id == 1)
            })
            .take(3)
            .collect();
        assert_eq!(moved.len(), 3, "windows that move from 4 to 1");
        node.took_over(moved[0], 4, 20_000);
        node.took_over(moved[1], 3, 20_000);
        let view = node
            .install(20_010, &without_4, 2, (3, 3), QUIET, false)
            .expect("a new ring");
        let quiet_at = |k: KeyId| view.owner_of(k).expect("an owner").quiet_until_ms;
        assert!(quiet_at(moved[0]) < 20_010, "handed over by its owner");
        assert_eq!(quiet_at(moved[1]), 20_010 + QUIET, "handed over by another");
        assert_eq!(quiet_at(moved[2]), 20_010 + QUIET, "not handed over");
        // A handoff that arrives after the ring changed lifts the quiet period then.
        node.took_over(moved[2], 4, 20_100);
        let view = node
            .install(20_100, &without_4, 2, (3, 3), QUIET, false)
            .expect("reinstalled for the handoff");
        assert!(view.owner_of(moved[2]).expect("an owner").quiet_until_ms < 20_100);
    }
}
