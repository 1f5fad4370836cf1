//! Tokens a check took, to give back if its request is refused after all.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arc_swap::Guard;
use smallvec::SmallVec;

use super::Book;

/// Tokens taken by [`Holdings::try_spend`], to give back if the request is not admitted after
/// all (another of its limits refused).
#[derive(Debug)]
pub struct Charge {
    pub(super) book: Guard<Option<Arc<Book>>>,
    /// `(entry, segment, tokens)`.
    pub(super) taken: SmallVec<[(usize, usize, u32); 2]>,
    /// When, and how many tokens in all, for the spend clock.
    pub(super) at_ms: u64,
    pub(super) cost: u32,
}

impl Charge {
    /// Puts the tokens back, as if never taken.
    pub fn refund(self) {
        if let Some(clock) = self.book.as_ref().and_then(|b| b.clock.as_ref()) {
            clock.refund(self.at_ms, self.cost);
        }
        self.give_back();
    }

    /// Puts the tokens back in their segments.
    pub(super) fn give_back(&self) {
        if let Some(book) = self.book.as_ref() {
            for (e, s, n) in &self.taken {
                if let Some(seg) = book.entries.get(*e).and_then(|e| e.segments.get(*s)) {
                    seg.spent.fetch_sub(*n, Ordering::AcqRel);
                }
            }
        }
    }
}
