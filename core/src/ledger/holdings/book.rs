//! One copy of a window's leases as a check sees it: the entries, each owner's segments with
//! their spent counters, and the window's ask and report times, carried from book to book.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use smallvec::SmallVec;

use super::super::lease::{HeldLease, Segment};
use super::super::spend_clock::SpendClock;

/// What `close` leaves in a segment's spent counter: above any count, so that no check still
/// holding the old book takes a handed-back token.
pub(super) const CLOSED: u32 = u32::MAX;

#[derive(Debug)]
pub(super) struct HeldSegment {
    pub(super) segment: Segment,
    pub(super) spent: AtomicU32,
}

impl HeldSegment {
    pub(super) fn unspent(&self) -> u32 {
        self.segment
            .count
            .saturating_sub(self.spent.load(Ordering::Acquire))
    }
}

/// What this user has of one owner's lease.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) owner: u128,
    pub(super) seq: u32,
    pub(super) expires_ms: u64,
    pub(super) segments: SmallVec<[Arc<HeldSegment>; 2]>,
}

impl Entry {
    pub(super) fn spendable(&self, now_ms: u64, margin_ms: u64) -> bool {
        now_ms.saturating_add(margin_ms) < self.expires_ms
    }

    pub(super) fn unspent(&self) -> u32 {
        self.segments.iter().map(|s| s.unspent()).sum()
    }
}

/// A window's leases, replaced whole by each writer (see `holdings.rs`).
#[derive(Debug)]
pub(super) struct Book {
    /// Soonest to end first: a check spends what would lapse first.
    pub(super) entries: SmallVec<[Arc<Entry>; 1]>,
    /// Handed back: nothing more is spent.
    pub(super) closed: bool,
    /// An ask is on its way, or the owner refused one: none is sent again before this time
    /// (ms).
    pub(super) ask_again_at_ms: AtomicU64,
    /// The owner refused an ask: it has no token for this node before this time (ms).
    pub(super) refused_until_ms: AtomicU64,
    /// No ask ahead goes before this (ms); a lease does not reopen it.
    pub(super) ahead_again_at_ms: AtomicU64,
    /// When this node last reported the window to its owner (ms).
    pub(super) reported_at_ms: AtomicU64,
    /// When a request that found no token of the window was last refused in the end: its
    /// wait over, or nothing to wait for (ms; 0: never).
    pub(super) ran_dry_at_ms: AtomicU64,
    /// Every spend by fine slot (`spend_clock.rs`): made with the first lease taken, and
    /// kept by every book after, so that no spend is counted in a clock that is not sealed.
    pub(super) clock: Option<Arc<SpendClock>>,
}

impl Book {
    /// Tokens spendable at `now_ms`.
    pub(super) fn available(&self, now_ms: u64, margin_ms: u64) -> u64 {
        if self.closed {
            return 0;
        }
        self.entries
            .iter()
            .filter(|e| e.spendable(now_ms, margin_ms))
            .flat_map(|e| e.segments.iter())
            .filter(|s| s.segment.valid_from_ms <= now_ms)
            .map(|s| u64::from(s.unspent()))
            .sum()
    }

    /// A book with `entries`, the rest carried over from `old`.
    pub(super) fn next(
        old: Option<&Book>,
        entries: SmallVec<[Arc<Entry>; 1]>,
        closed: bool,
    ) -> Self {
        let carried = |f: fn(&Book) -> &AtomicU64| {
            AtomicU64::new(old.map_or(0, |b| f(b).load(Ordering::Relaxed)))
        };
        Self {
            entries,
            closed,
            ask_again_at_ms: carried(|b| &b.ask_again_at_ms),
            refused_until_ms: carried(|b| &b.refused_until_ms),
            ahead_again_at_ms: carried(|b| &b.ahead_again_at_ms),
            reported_at_ms: carried(|b| &b.reported_at_ms),
            ran_dry_at_ms: carried(|b| &b.ran_dry_at_ms),
            clock: old.and_then(|b| b.clock.clone()),
        }
    }
}

pub(super) fn held_of(e: &Entry, lapsed: bool) -> HeldLease {
    HeldLease {
        owner: e.owner,
        seq: e.seq,
        expires_ms: e.expires_ms,
        spent: e
            .segments
            .iter()
            .map(|s| (s.segment.id, s.spent.load(Ordering::Acquire)))
            .collect(),
        unspent: if lapsed { 0 } else { e.unspent() },
        lapsed,
    }
}
