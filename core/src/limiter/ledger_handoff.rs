//! What an owner that leaves gracefully hands the windows' next owners (ALGORITHM.md, L4):
//! its books, as the slots they count taken from when it stopped leasing
//! ([`HandedBooks`]), so that a next owner leases at once what they leave free; or, to a
//! member that does not read books, when the last lease of each window ends, so that it
//! leases once those leases have ended and their users have reported.

use super::ledger_owner::OwnedWindows;
use super::{KeyId, Limiter};
use crate::ledger::{HandedBooks, Span, spend_tail_ms, spends_after};
use crate::window::{EstimateMode, WindowSpec};

/// Windows whose handed books a node keeps at once: books for more are not taken (their next
/// owner waits for the users' reports, as without them).
const MOST_HANDED_WINDOWS: usize = 1 << 16;

/// Steps of all the handed books a node keeps at once (16 bytes each): a bound on their
/// memory whatever their windows' lengths.
const MOST_HANDED_STEPS_KEPT: usize = 1 << 20;

/// Handed books kept for one window: one from each leaving owner it passed through lately.
const MOST_HANDED_PER_WINDOW: usize = 2;

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

    /// The books of every window this node leases at `now_ms` with its side's whole part:
    /// the slots they count taken from then on, each spend its registers record, each token
    /// it leased and was not told spent, and the books handed to it that it counts. A window
    /// in its quiet period, or leased for a part of its limit, is left out: its books may miss
    /// spends (another owner's tokens, the far side's) that its registers do not hold yet.
    /// Read once this node leases nothing more (it is leaving): from then on it leases
    /// nothing, nor answers an ask with tokens.
    pub fn handed_books(&self, now_ms: u64) -> Vec<(KeyId, WindowSpec, HandedBooks)> {
        let guard = self.table.guard();
        let (seen, expected) = self.lease_part();
        let margin_ms = self.config.ledger.margin_ms;
        let mut owned = self.lock_owned();
        owned.sealed = true;
        if seen < expected {
            return Vec::new();
        }
        let OwnedWindows {
            windows, handed, ..
        } = &mut *owned;
        let mut out = Vec::with_capacity(windows.len());
        for (key, w) in windows.iter_mut() {
            let Some(owner) = self
                .leases_here(*key)
                .filter(|o| o.leases_from_ms(w.spec.window_ms(), margin_ms) <= now_ms)
            else {
                continue;
            };
            // A window gone from the table has no spends left in it: only tokens.
            let mut spends = match self.table.get(key, &guard) {
                Some(state) => self.spends_of(state, &w.spec, &w.marks, now_ms),
                None => Vec::new(),
            };
            self.add_handed(&mut spends, handed.get(key), &w.spec, owner.handed_by);
            let params = self.ledger_params(&w.spec, 0, &owner);
            let occupancy = w.books.occupancy(&spends, now_ms, &params);
            out.push((*key, w.spec, HandedBooks::of(&occupancy, now_ms)));
        }
        out
    }

    /// Member `from`, leaving, handed this node its books of window `key` (`window_ms` long,
    /// in `buckets`) at `now_ms`; the window is made here if this node holds none (it need be
    /// no user of it).
    /// Returns whether they are kept: they count, until their last slot frees, in the books
    /// of this node as the window's owner where its view says `from` handed the window to it
    /// (`OwnerOf::handed_by`). Books from later than now count from now (their cut only
    /// drops spends made before it). Not kept if malformed; if a slot in them frees later
    /// than any owner's token or spend could, which would pin the window: the window's span
    /// past the later of `quiet_ms` (the longest lease) and a bucket and two clock margins from
    /// now (a spend in a bucket its user has not sealed holds its slot from the bucket's end);
    /// if the window has another shape here, or the table is full; or if too many windows,
    /// steps, or leaving owners of this window, already handed theirs.
    pub fn take_handed_books(
        &self,
        (from, key): (u128, KeyId),
        (window_ms, buckets): (u64, u16),
        mut books: HandedBooks,
        now_ms: u64,
        quiet_ms: u64,
    ) -> bool {
        let Ok(spec) = WindowSpec::new(window_ms, buckets, EstimateMode::Interpolated) else {
            return false;
        };
        let guard = self.table.guard();
        if !matches!(
            self.table.get_or_insert_sent(key, &spec, now_ms, &guard),
            Ok(Some(_))
        ) {
            return false;
        }
        let margin_ms = self.config.ledger.margin_ms;
        let tail_ms = spend_tail_ms(window_ms, margin_ms);
        // A bucket's end on the spender's clock, which may be ahead of the leaver's, which
        // may be ahead of this node's, each by a margin.
        let bucket_end_ms = spec.bucket_ms().saturating_add(margin_ms.saturating_mul(2));
        let latest_ms = now_ms
            .saturating_add(quiet_ms.max(bucket_end_ms))
            .saturating_add(tail_ms);
        books.at_ms = books.at_ms.min(now_ms);
        if !books.is_well_formed() || books.until_ms() > latest_ms {
            return false;
        }
        let mut owned = self.lock_owned();
        let OwnedWindows {
            handed,
            handed_steps,
            ..
        } = &mut *owned;
        if !handed.contains_key(&key) && handed.len() >= MOST_HANDED_WINDOWS {
            return false;
        }
        let list = handed.entry(key).or_default();
        // A copy of the same member's word, or one out of order, changes nothing.
        let held = list.iter().position(|(f, _)| *f == from);
        if held.is_some_and(|i| list[i].1.at_ms >= books.at_ms) {
            return true;
        }
        let freed = held.map_or(0, |i| list[i].1.steps.len());
        if *handed_steps - freed + books.steps.len() > MOST_HANDED_STEPS_KEPT
            || (held.is_none() && list.len() >= MOST_HANDED_PER_WINDOW)
        {
            if list.is_empty() {
                handed.remove(&key);
            }
            return false;
        }
        *handed_steps = *handed_steps - freed + books.steps.len();
        match held {
            Some(i) => list[i].1 = books,
            None => list.push((from, books)),
        }
        true
    }

    /// Adds to `spends` (a window's, as [`Limiter::spends_of`] gives them) the slots held by
    /// the books member `by` handed this node, leaving out the spends those books counted
    /// already (made before they were read: `spends_after`). Books of any other member do
    /// not count: this node's view does not say that member handed it the window.
    pub(super) fn add_handed(
        &self,
        spends: &mut Vec<Span>,
        handed: Option<&Vec<(u128, HandedBooks)>>,
        spec: &WindowSpec,
        by: Option<u128>,
    ) {
        let Some(books) = handed
            .into_iter()
            .flatten()
            .find(|(from, _)| Some(*from) == by)
            .map(|(_, b)| b)
        else {
            return;
        };
        let margin_ms = self.config.ledger.margin_ms;
        spends_after(
            spends,
            books.at_ms,
            spend_tail_ms(spec.window_ms(), margin_ms),
            margin_ms,
        );
        spends.extend(books.spans());
    }
}
