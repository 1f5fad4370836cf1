//! Tokens a check took, and what is undone if its request is refused after all.

use std::sync::Arc;

use super::Book;
use arc_swap::Guard;

/// Tokens taken by [`Holdings::try_spend`](super::Holdings::try_spend), to cancel if the
/// request is not admitted after all (another of its limits refused).
#[derive(Debug)]
pub struct Charge {
    pub(super) book: Guard<Option<Arc<Book>>>,
    /// When, and how many tokens in all, for the spend clock.
    pub(super) at_ms: u64,
    pub(super) cost: u32,
    /// Tokens spendable after this charge, as its spend read them.
    pub(super) left: u64,
}

impl Charge {
    /// Tokens spendable at the charge's moment once it is taken, as its spend read them (a
    /// concurrent spend may have taken some since).
    pub fn left(&self) -> u64 {
        self.left
    }

    /// The request was refused after all (another of its limits had no token): its count in
    /// the spend clock is taken back, and its tokens are *not* given back. A report may
    /// already show them spent while the ring the owner reads next no longer counts them (the
    /// caller takes them out of it): the owner then frees their slots, which is right only if
    /// nobody spends those tokens. They come back to the window at that report, by way of the
    /// owner.
    pub fn cancel(self) {
        if let Some(clock) = self.book.as_ref().and_then(|b| b.clock.as_ref()) {
            clock.refund(self.at_ms, self.cost);
        }
    }
}
