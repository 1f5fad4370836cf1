//! What an owner that leaves gracefully hands the windows' next owners (ALGORITHM.md, L4):
//! its books, as the slots they count taken from when it stopped leasing
//! ([`HandedBooks`]), so that a next owner leases at once what they leave free; or, to a
//! member that does not read books, when the last lease of each window ends, so that it
//! leases once those leases have ended and their users have reported.

use super::ledger_owner::OwnedWindows;
use super::{KeyId, Limiter, OwnerOf};
use crate::ledger::{HandedBooks, Span, spend_tail_ms, spends_after};
use crate::window::WindowSpec;

/// Windows whose handed books a node keeps at once: books for more are not taken (their next
/// owner waits for the users' reports, as without them).
const MOST_HANDED_WINDOWS: usize = 1 << 16;

/// Handed books kept for one window: one from each leaving owner it passed through lately.
const MOST_HANDED_PER_WINDOW: usize = 4;

impl Limiter {
    /// Every window this node holds books for, with the end of the last lease it granted
    /// there (windows that granted none are left out): no token this node leased is spent
    /// after it. Read once this node leases nothing more (it is leaving).
    pub fn lease_ends(&self) -> Vec<(KeyId, u64)> {
        self.lock_owned()
            .windows
            .iter()
            .map(|(key, owned)| (*key, owned.books.last_lease_end()))
            .filter(|(_, end)| *end > 0)
            .collect()
    }

    /// Every window this node holds books for, with the slots they count taken from `now_ms`
    /// on: each spend its registers record, each token it leased and was not told spent, and
    /// the books handed to it. Read once this node leases nothing more (it is leaving).
    pub fn handed_books(&self, now_ms: u64) -> Vec<(KeyId, HandedBooks)> {
        let guard = self.table.guard();
        let mut owned = self.lock_owned();
        let OwnedWindows { windows, handed } = &mut *owned;
        let mut out = Vec::with_capacity(windows.len());
        for (key, w) in windows.iter_mut() {
            // A window gone from the table has no spends left in it: only tokens.
            let mut spends = match self.table.get(key, &guard) {
                Some(state) => self.spends_of(state, &w.spec, &w.marks, now_ms),
                None => Vec::new(),
            };
            self.add_handed(&mut spends, handed.get(key), &w.spec);
            // Only the window's shape and the margin count here.
            let params = self.ledger_params(&w.spec, 0, &OwnerOf::quiet_until(self.origin.0, 0));
            let occupancy = w.books.occupancy(&spends, now_ms, &params);
            out.push((*key, HandedBooks::of(&occupancy, now_ms)));
        }
        out
    }

    /// Member `from`, leaving, handed this node its books of window `key` at `now_ms`.
    /// Returns whether they are kept: then every owner's count of the window here holds them
    /// until their last slot frees. Not kept if malformed; if a slot in them frees later than
    /// any owner's token could (`quiet_ms`, the longest lease, past now, and then the
    /// window's span), which would pin the window; if the window is not in the table (its
    /// shape says that span); or if too many windows, or leaving owners of this one, already
    /// handed theirs.
    pub fn take_handed_books(
        &self,
        from: u128,
        key: KeyId,
        books: HandedBooks,
        now_ms: u64,
        quiet_ms: u64,
    ) -> bool {
        let guard = self.table.guard();
        let Some(state) = self.table.get(&key, &guard) else {
            return false;
        };
        let tail_ms = spend_tail_ms(state.spec().window_ms(), self.config.ledger.margin_ms);
        let latest_ms = now_ms.saturating_add(quiet_ms).saturating_add(tail_ms);
        if !books.is_well_formed() || books.until_ms() > latest_ms {
            return false;
        }
        let mut owned = self.lock_owned();
        let handed = &mut owned.handed;
        if !handed.contains_key(&key) && handed.len() >= MOST_HANDED_WINDOWS {
            return false;
        }
        let list = handed.entry(key).or_default();
        // A copy of the same member's word, or one out of order, changes nothing.
        if let Some((_, held)) = list.iter_mut().find(|(f, _)| *f == from) {
            if held.at_ms < books.at_ms {
                *held = books;
            }
            return true;
        }
        if list.len() >= MOST_HANDED_PER_WINDOW {
            return false;
        }
        list.push((from, books));
        true
    }

    /// Adds to `spends` (a window's, as [`Limiter::spends_of`] gives them) the slots books
    /// handed to this node hold, leaving out the spends those books counted already (made
    /// before the earliest of them was read: `spends_after`).
    pub(super) fn add_handed(
        &self,
        spends: &mut Vec<Span>,
        handed: Option<&Vec<(u128, HandedBooks)>>,
        spec: &WindowSpec,
    ) {
        let Some(earliest) = handed.and_then(|h| h.iter().map(|(_, b)| b.at_ms).min()) else {
            return;
        };
        let margin_ms = self.config.ledger.margin_ms;
        spends_after(
            spends,
            earliest,
            spend_tail_ms(spec.window_ms(), margin_ms),
            margin_ms,
        );
        spends.extend(handed.into_iter().flatten().flat_map(|(_, b)| b.spans()));
    }
}
