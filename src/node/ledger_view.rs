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

/// Windows handed over by leaving owners kept at once: more are not taken (their next owners
/// wait out the quiet period, as without a handoff).
const HANDED_KEPT: usize = 1 << 16;

/// A leaving owner's word on a window it handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HandedWord {
    /// The owner.
    from: u128,
    /// Its last lease there ended then (0: it said only its books).
    end: u64,
    /// The limiter keeps its books (`Limiter::take_handed_books`): the window leases at once.
    books: bool,
    /// Forgotten then.
    kept_until: u64,
}

/// Windows handed over by leaving owners, by window.
type Handed = BTreeMap<KeyId, HandedWord>;

/// The ledger's state in a node.
#[derive(Debug, Default)]
pub(super) struct LedgerNode {
    /// `(when the ring changed, the ring before it)`, newest last.
    before: VecDeque<(u64, Arc<Ring>)>,
    /// No window leases before this, but for a window handed over (see [`RingView::floor_of`]):
    /// a quiet period past this node's warm-up (L2's floor).
    floor_quiet_until_ms: u64,
    /// No window leases before this: a ring change fell out of `before`.
    dropped_quiet_until_ms: u64,
    /// The warm-up ended holding the cluster's state (every member it knew had pushed it theirs),
    /// not on its timeout (`warmup.rs`).
    held_state: bool,
    /// When the first view past such a warm-up was installed.
    warmed_ms: Option<u64>,
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
    /// Windows leaving owners handed over, and whether any changed since the view was made
    /// (the view takes a copy then).
    handed: Handed,
    handed_changed: bool,
    /// The copy the last view took.
    handed_view: Arc<Handed>,
    /// How long after a lease ends, or after users hear that its owner left, their reports of
    /// what they spent reach the next owner (ms).
    reports_ms: u64,
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

impl LedgerNode {
    /// What began before the clock stepped back (a starting node's clock stepped to the
    /// cluster's, seconds back; an NTP correction) began at the latest now: a lease part, a
    /// ring and the floor each hold a quiet period from now, not from a reading the step made
    /// seconds ahead (they would hold the windows that much longer, leasing them a small part
    /// or nothing).
    fn stepped_back(&mut self, now_ms: u64, quiet_ms: u64) {
        for (at, _) in self.parts.iter_mut() {
            *at = (*at).min(now_ms);
        }
        for (at, _) in self.before.iter_mut() {
            *at = (*at).min(now_ms);
        }
        self.floor_quiet_until_ms = self.floor_quiet_until_ms.min(now_ms + quiet_ms);
        self.dropped_quiet_until_ms = self.dropped_quiet_until_ms.min(now_ms + quiet_ms);
        if let Some(warmed) = &mut self.warmed_ms {
            *warmed = (*warmed).min(now_ms);
        }
    }
}

/// The limiter's view of the owners: see the module documentation.
#[derive(Debug)]
pub(super) struct RingView {
    ring: Arc<Ring>,
    before: Vec<(u64, Arc<Ring>)>,
    floor_quiet_until_ms: u64,
    dropped_quiet_until_ms: u64,
    warmed_ms: Option<u64>,
    quiet_ms: u64,
    part: (u64, u64),
    blind: Arc<BlindArcs>,
    handed: Arc<Handed>,
    reports_ms: u64,
}

impl RingView {
    /// A starting node's floor (L2) for window `key`. A window handed over by the member that
    /// owns it on this node's ring without this node (its second owner here), which leased it
    /// until its ring had this node: once its last lease there has ended and this node's
    /// warm-up is over (every member it knew then had it on its ring, and had sent it their
    /// registers), and both were reported. No later than the floor.
    fn floor_of(&self, key: KeyId, handed: Option<&HandedWord>) -> u64 {
        let floor = self.floor_quiet_until_ms;
        // Only a word with an end: books come from a member that left.
        let (Some(h), Some(warmed)) = (handed.filter(|h| h.end > 0), self.warmed_ms) else {
            return floor;
        };
        match self.ring.owners(key) {
            Some([first, second]) if second.id == h.from && first.id != h.from => {
                floor.min(h.end.max(warmed).saturating_add(self.reports_ms))
            }
            _ => floor,
        }
    }
}

impl OwnerView for RingView {
    fn owner_of(&self, key: KeyId) -> Option<OwnerOf> {
        let owner = self.ring.owner(key)?;
        let handed = self.handed.get(&key);
        let mut handed_by = None;
        let moved = self
            .before
            .iter()
            .filter_map(|(at, ring)| {
                let was = ring.owner(key).map(|o| o.id);
                let quiet = at + self.quiet_ms;
                // A handed window: with its books held, from the ring's change on; else once
                // its last lease has ended and its users have heard the owner left (about when
                // this node did: `at`), and both were reported.
                match handed {
                    _ if was == Some(owner.id) => None,
                    Some(h) if was == Some(h.from) && h.books => {
                        handed_by = Some(h.from);
                        Some(*at)
                    }
                    Some(h) if was == Some(h.from) => {
                        Some(quiet.min(h.end.max(*at).saturating_add(self.reports_ms)))
                    }
                    _ => Some(quiet),
                }
            })
            .max()
            .unwrap_or(0);
        Some(OwnerOf {
            owner: owner.id,
            quiet_until_ms: moved
                .max(self.dropped_quiet_until_ms)
                .max(self.floor_of(key, handed)),
            blind_since_ms: self.blind.blind_since(point_of_key(key)),
            handed_by,
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
    /// Member `from`, leaving, owned each window of `ends` until its last lease there ended
    /// then: the window's next owner may lease it once those leases have ended and its users
    /// have heard the owner left, and reported (`reports_ms` after the later), rather than a
    /// quiet period after the ring changed. The word counts only where `from` owned the window
    /// on a ring before the current one, and for a quiet period past the later of its end and
    /// `now_ms` (when it came, about when the ring changes). An end later than a quiet period
    /// from now (no owner's lease ends so late) is not taken.
    pub(super) fn handed(
        &mut self,
        from: u128,
        ends: &[(KeyId, u64)],
        now_ms: u64,
        timing: (u64, u64),
    ) {
        for (key, end) in ends {
            self.take_word(from, *key, *end, false, now_ms, timing);
        }
    }

    /// Member `from`, leaving, handed its books of window `key`, which the limiter keeps
    /// (`Limiter::take_handed_books`): as a handed window (see [`LedgerNode::handed`]) that its
    /// next owner may lease at once, counting those books (`OwnerOf::handed_by`).
    pub(super) fn handed_books(&mut self, from: u128, key: KeyId, now_ms: u64, timing: (u64, u64)) {
        self.take_word(from, key, 0, true, now_ms, timing);
    }

    fn take_word(
        &mut self,
        from: u128,
        key: KeyId,
        end: u64,
        books: bool,
        now_ms: u64,
        (quiet_ms, reports_ms): (u64, u64),
    ) {
        self.reports_ms = reports_ms;
        let handed = &mut self.handed;
        // An end no owner's lease reaches is not taken, and drops what the window was handed
        // before: the word on it is not to be trusted. Books the limiter kept were checked
        // against the window's own span.
        if !books && end > now_ms.saturating_add(quiet_ms) {
            self.handed_changed |= handed.remove(&key).is_some();
            return;
        }
        // A word of the same member that came out of order does not move its end back, nor
        // forget its books.
        let (end, books) = match handed.get(&key) {
            Some(was) if was.from == from => (end.max(was.end), books || was.books),
            _ => (end, books),
        };
        if handed.len() < HANDED_KEPT || handed.contains_key(&key) {
            let word = HandedWord {
                from,
                end,
                books,
                kept_until: end.max(now_ms) + quiet_ms + reports_ms,
            };
            handed.insert(key, word);
            self.handed_changed = true;
        }
    }

    /// The warm-up ended holding the cluster's state: handed windows may lease before the floor
    /// ([`RingView::floor_of`]) from the next view on.
    pub(super) fn held_state(&mut self) {
        self.held_state = true;
    }

    /// The ring of the view installed last, if any.
    pub(super) fn installed_ring(&self) -> Option<Arc<Ring>> {
        self.ring.clone()
    }

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
        // Read before the step back can lower them: a floor lowered makes a new view.
        let floors = (self.floor_quiet_until_ms, self.dropped_quiet_until_ms);
        self.stepped_back(now_ms, quiet_ms);
        let part = self.part_at(now_ms, side, quiet_ms);
        let blinded = self.went_down(ring, unsaid, now_ms.saturating_add(blind_after_ms));
        // A node's first rings say nothing of who leased its windows before it: every owner
        // before it may still be leasing them until it knows of this node.
        // The first view past the warm-up makes a new view: handed windows may lease sooner.
        let warmed_now =
            !starting && self.held_state && self.installed.is_some() && self.warmed_ms.is_none();
        if starting || self.installed.is_none() {
            self.floor_quiet_until_ms = self.floor_quiet_until_ms.max(now_ms + quiet_ms);
        } else if warmed_now {
            self.warmed_ms = Some(now_ms);
        }
        // A ring whose quiet period is over says nothing more (a quiet time in the past is
        // no wait): the view drops it, so that each owner lookup reads only the rings that
        // still matter.
        let quiet_over = self
            .before
            .front()
            .is_some_and(|(at, _)| at + quiet_ms <= now_ms);
        // A word past its time is forgotten: its window waits out the quiet period of a ring
        // change it came for, if any is still in the view.
        if self.handed.values().any(|h| h.kept_until <= now_ms) {
            self.handed.retain(|_, h| h.kept_until > now_ms);
            self.handed_changed = true;
        }
        if self.installed == Some((generation, part))
            && (self.floor_quiet_until_ms, self.dropped_quiet_until_ms) == floors
            && !blinded
            && !quiet_over
            && !self.handed_changed
            && !warmed_now
        {
            return None;
        }
        if std::mem::take(&mut self.handed_changed) {
            self.handed_view = Arc::new(self.handed.clone());
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
                self.dropped_quiet_until_ms = self.dropped_quiet_until_ms.max(at + quiet_ms);
            }
        }
        self.installed = Some((generation, part));
        Some(RingView {
            ring: Arc::clone(ring),
            before: self.before.iter().cloned().collect(),
            floor_quiet_until_ms: self.floor_quiet_until_ms,
            dropped_quiet_until_ms: self.dropped_quiet_until_ms,
            warmed_ms: self.warmed_ms,
            quiet_ms,
            part,
            blind: Arc::clone(&self.blind),
            handed: Arc::clone(&self.handed_view),
            reports_ms: self.reports_ms,
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
mod tests;
