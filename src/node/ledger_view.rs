//! The ledger's view of the owners in a node: the ring the limiter leases by, the rings
//! before it within a quiet period (a member that became a window's owner leases nothing until
//! the previous owner's leases lapse and their users report), and the side's part of each
//! limit (`ledger.rs`, `lease_part`).

use std::collections::VecDeque;

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
    floor_quiet_until_ms: u64,
    quiet_ms: u64,
    part: (u64, u64),
}

impl OwnerView for RingView {
    fn owner_of(&self, key: KeyId) -> Option<OwnerOf> {
        let [owner, _] = self.ring.owners(key)?;
        let moved = self
            .before
            .iter()
            .filter(|(_, ring)| ring.owners(key).map(|[o, _]| o.id) != Some(owner.id))
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
        self.installed.is_some_and(|(_, (seen, _))| seen > 0)
    }

    /// The view to give the limiter for `ring` (of `generation`) and the side's part now, or
    /// `None` if the installed one still holds.
    pub(super) fn install(
        &mut self,
        now_ms: u64,
        ring: &Ring,
        generation: u64,
        side: (u64, u64),
        quiet_ms: u64,
    ) -> Option<RingView> {
        let part = self.part_at(now_ms, side, quiet_ms);
        if self.installed == Some((generation, part)) {
            return None;
        }
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
            floor_quiet_until_ms: self.floor_quiet_until_ms,
            quiet_ms,
            part,
        })
    }
}
