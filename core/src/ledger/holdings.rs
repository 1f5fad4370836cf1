//! The tokens a user holds for one window, spent on the hot path without a lock.
//!
//! The leases (one per owner, each a few segments) are one copy-on-write book
//! (`ArcSwapOption`): a check loads it and takes tokens with one compare-and-swap on a
//! segment's spent counter; messages of leases and reports (the node loop, under the limiter's
//! holdings lock) replace the book, sharing the counters of the segments they keep, so that no
//! spend is lost to a replacement.
//!
//! **What a report may say.** A token is spent the moment its counter moves, and a spend is
//! added to the window's ring *before* that (`Limiter`'s check). A report reads the counters
//! *before* the emission reads the ring. So every spend is either in the ring the emission
//! reads, or still counted unspent in the report: the owner, which counts both, never misses
//! one (it may count a spend twice, which only holds the window back).
//!
//! Each spend is also counted in the window's spend clock (`spend_clock.rs`) once its tokens
//! are taken; a spend whose clock slot is sealed takes none.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use arc_swap::{ArcSwapOption, Guard};
use smallvec::SmallVec;

use super::lease::{HeldLease, HoldingsReport, Lease};
use super::spend_clock::{ClockShape, SealedBucket, SpendClock};
use book::{Book, CLOSED, Entry, HeldSegment, held_of};

/// The leases a user holds for one window. See the module documentation. One pointer: a
/// window that never held a lease costs nothing more.
#[derive(Debug, Default)]
pub struct Holdings {
    book: ArcSwapOption<Book>,
}

impl Holdings {
    /// Takes `cost` tokens spendable at `now_ms` (of the lease that ends soonest first), or
    /// none. Lock-free. See [`HeldNow::try_spend`].
    pub fn try_spend(&self, now_ms: u64, cost: u32, margin_ms: u64) -> Option<Charge> {
        self.now().try_spend(now_ms, cost, margin_ms)
    }

    /// The window's book as it is now, for a check that reads it more than once: one load.
    pub fn now(&self) -> HeldNow {
        HeldNow {
            book: self.book.load(),
        }
    }

    /// Tokens spendable at `now_ms`.
    pub fn available(&self, now_ms: u64, margin_ms: u64) -> u64 {
        self.now().available(now_ms, margin_ms)
    }

    /// The earliest time after `now_ms` at which a token held now becomes spendable (a
    /// segment valid from later), if any.
    pub fn next_valid_after(&self, now_ms: u64, margin_ms: u64) -> Option<u64> {
        self.book.load().as_ref().and_then(|b| {
            b.entries
                .iter()
                .flat_map(|e| {
                    e.segments
                        .iter()
                        .filter(move |s| {
                            s.segment.valid_from_ms > now_ms
                                && s.unspent() > 0
                                && e.spendable(s.segment.valid_from_ms, margin_ms)
                        })
                        .map(|s| s.segment.valid_from_ms)
                })
                .min()
        })
    }

    /// When the next lease held with tokens left ends (less the margin), if any: a report
    /// then frees what it left unspent at the owner.
    pub fn next_lapse_ms(&self, margin_ms: u64) -> Option<u64> {
        self.book.load().as_ref().and_then(|b| {
            b.entries
                .iter()
                .filter(|e| e.unspent() > 0)
                .map(|e| e.expires_ms.saturating_sub(margin_ms))
                .min()
        })
    }

    /// The latest end of a lease this user holds segments of (`None`: it holds none). Until
    /// that end and the spend tail after it, a message of the lease may still come: the book
    /// must outlive it, or the message would make its segments afresh with nothing spent.
    pub fn lease_end_ms(&self) -> Option<u64> {
        self.book.load().as_ref().and_then(|b| {
            b.entries
                .iter()
                .filter(|e| !e.segments.is_empty())
                .map(|e| e.expires_ms)
                .max()
        })
    }

    /// Whether an ask may go to the owner at `now_ms` (it has not refused one lately).
    pub fn may_ask(&self, now_ms: u64) -> bool {
        self.now().may_ask(now_ms)
    }

    /// The owner refused an ask: no token comes from it before `until_ms`, and no ask goes.
    pub fn refused(&self, until_ms: u64) {
        self.ask_again_at(until_ms);
        if let Some(b) = self.book.load().as_ref() {
            b.refused_until_ms.fetch_max(until_ms, Ordering::Relaxed);
        }
    }

    /// Whether the owner refused an ask lately (a request need not wait for it).
    pub fn is_refused(&self, now_ms: u64) -> bool {
        self.book
            .load()
            .as_ref()
            .is_some_and(|b| now_ms < b.refused_until_ms.load(Ordering::Relaxed))
    }

    /// An ask is on its way (or the owner refused one): none until `at_ms`. (A book is made
    /// for a window that holds none; a writer replacing the book at the same moment may lose
    /// this, which only lets the next ask go sooner.)
    pub fn ask_again_at(&self, at_ms: u64) {
        self.with_book(|b| {
            b.ask_again_at_ms.fetch_max(at_ms, Ordering::Relaxed);
        });
    }

    /// A request that found no token of the window was refused in the end at `now_ms` (its
    /// wait is over, or it had nothing to wait for). A book is made as in
    /// [`Holdings::ask_again_at`].
    pub fn ran_dry(&self, now_ms: u64) {
        self.with_book(|b| {
            b.ran_dry_at_ms.fetch_max(now_ms, Ordering::Relaxed);
        });
    }

    /// Whether a request that found no token of the window was refused in the end at
    /// `since_ms` or later.
    pub fn ran_dry_since(&self, since_ms: u64) -> bool {
        self.book.load().as_ref().is_some_and(|b| {
            let at = b.ran_dry_at_ms.load(Ordering::Relaxed);
            at != 0 && at >= since_ms
        })
    }

    /// `f` on the current book, made first (empty) where the window holds none.
    fn with_book(&self, f: impl FnOnce(&Book)) {
        if self.book.load().is_none() {
            self.book.rcu(|old| {
                old.clone()
                    .or_else(|| Some(Arc::new(Book::next(None, SmallVec::new(), false))))
            });
        }
        if let Some(b) = self.book.load().as_ref() {
            f(b);
        }
    }

    /// Claims the window's ask ahead at `now_ms` until `until_ms`: true for the first caller
    /// once the last claim is over; false where no lease is held (an ask ahead follows one).
    pub fn claim_ahead(&self, now_ms: u64, until_ms: u64) -> bool {
        self.book.load().as_ref().is_some_and(|b| {
            let at = b.ahead_again_at_ms.load(Ordering::Relaxed);
            at <= now_ms
                && b.ahead_again_at_ms
                    .compare_exchange(at, until_ms, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
        })
    }

    /// When this node last reported the window (0: never).
    pub fn reported_at_ms(&self) -> u64 {
        self.book
            .load()
            .as_ref()
            .map_or(0, |b| b.reported_at_ms.load(Ordering::Relaxed))
    }

    /// What this user would report of `owner`'s lease now (without changing anything): an
    /// ask tells the owner, which sizes its answer from it.
    pub fn word_of(&self, owner: u128, now_ms: u64, margin_ms: u64) -> Option<HeldLease> {
        self.book.load().as_ref().and_then(|b| {
            b.entries
                .iter()
                .find(|e| e.owner == owner)
                .map(|e| held_of(e, !e.spendable(now_ms, margin_ms)))
        })
    }

    /// Takes a message of `lease` unless one as new has been taken from its owner (a
    /// duplicate, or one overtaken by a later message). Segments the user had keep what was
    /// spent of them; a segment the message leaves out is one its owner knows fully spent.
    /// Writers must be serialised (the limiter's holdings lock). Returns whether it was taken.
    /// The first lease taken makes the window's spend clock, of `shape`.
    pub fn accept(&self, lease: &Lease, shape: ClockShape) -> bool {
        let current = self.book.load_full();
        let old = current.as_deref();
        if old.is_some_and(|b| b.closed) {
            return false;
        }
        let before = old.and_then(|b| b.entries.iter().find(|e| e.owner == lease.owner));
        if before.is_some_and(|e| e.seq >= lease.seq) {
            return false;
        }
        let segments = lease
            .segments
            .iter()
            .map(|s| {
                before
                    .and_then(|e| e.segments.iter().find(|h| h.segment.id == s.id))
                    .filter(|h| h.segment == *s)
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(HeldSegment {
                            segment: *s,
                            spent: AtomicU32::new(0),
                        })
                    })
            })
            .collect();
        let entry = Arc::new(Entry {
            owner: lease.owner,
            seq: lease.seq,
            expires_ms: lease.expires_ms,
            segments,
        });
        let mut entries: SmallVec<[Arc<Entry>; 1]> = old
            .map(|b| {
                b.entries
                    .iter()
                    .filter(|e| e.owner != lease.owner)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        entries.push(entry);
        entries.sort_by_key(|e| (e.expires_ms, e.owner));
        let mut book = Book::next(old, entries, false);
        if book.clock.is_none() {
            book.clock = Some(Arc::new(SpendClock::new(shape)));
        }
        // A message came: asking is open again.
        book.ask_again_at_ms.store(0, Ordering::Relaxed);
        // The owner leased again: whatever it refused before no longer stands.
        book.refused_until_ms.store(0, Ordering::Relaxed);
        self.book.store(Some(Arc::new(book)));
        true
    }

    /// What this user holds, for its next emission. Read before the ring (see the module
    /// documentation). Nothing is dropped here: a segment spent whole, or of a lease that
    /// ended, keeps its count until a message of its lease leaves it out (its owner then knows
    /// it), since a message sent before the owner knew may still carry it, and must not find
    /// it spendable again. Writers must be serialised.
    pub fn report(&self, now_ms: u64, margin_ms: u64) -> HoldingsReport {
        let Some(current) = self.book.load_full() else {
            let book = Book::next(None, SmallVec::new(), false);
            book.reported_at_ms.store(now_ms, Ordering::Relaxed);
            self.book.store(Some(Arc::new(book)));
            return HoldingsReport::default();
        };
        current.reported_at_ms.store(now_ms, Ordering::Relaxed);
        HoldingsReport {
            held: current
                .entries
                .iter()
                .map(|e| held_of(e, !e.spendable(now_ms, margin_ms)))
                .collect(),
            closed: current.closed,
            sealed: Vec::new(),
        }
    }

    /// Stops spending for good (the node is leaving) and reports what is handed back: every
    /// token not spent, which the owner may lease again at once. A check racing this either
    /// took its token before (and is in the ring) or finds none.
    pub fn close(&self, now_ms: u64) -> HoldingsReport {
        let current = self.book.load_full();
        let mut held = Vec::new();
        for e in current.iter().flat_map(|b| b.entries.iter()) {
            let mut report = held_of(e, true);
            report.unspent = e
                .segments
                .iter()
                .map(|s| {
                    s.segment
                        .count
                        .saturating_sub(s.spent.swap(CLOSED, Ordering::AcqRel))
                })
                .sum();
            held.push(report);
        }
        let closed = Book::next(current.as_deref(), SmallVec::new(), true);
        self.book.store(Some(Arc::new(closed)));
        // No spend comes any more: every bucket is sealed, the current one too.
        let sealed = current
            .as_ref()
            .and_then(|b| b.clock.as_ref())
            .map_or_else(Vec::new, |c| c.seal(now_ms, true));
        HoldingsReport {
            held,
            closed: true,
            sealed,
        }
    }

    /// Seals the buckets of the spend clock that ended by `now_ms` (`spend_clock.rs`) and
    /// returns those newly sealed that hold spends, for the next report.
    pub fn seal(&self, now_ms: u64) -> Vec<SealedBucket> {
        self.book
            .load()
            .as_ref()
            .and_then(|b| b.clock.as_ref())
            .map_or_else(Vec::new, |c| c.seal(now_ms, false))
    }
}

mod book;
mod charge;

/// A window's book as one check loaded it ([`Holdings::now`]).
#[derive(Debug)]
pub struct HeldNow {
    book: Guard<Option<Arc<Book>>>,
}

impl HeldNow {
    /// Tokens spendable at `now_ms`.
    pub fn available(&self, now_ms: u64, margin_ms: u64) -> u64 {
        self.book
            .as_ref()
            .map_or(0, |b| b.available(now_ms, margin_ms))
    }

    /// Whether an ask may go: none is on its way, and the owner has not refused one lately.
    pub fn may_ask(&self, now_ms: u64) -> bool {
        self.book
            .as_ref()
            .is_none_or(|b| now_ms >= b.ask_again_at_ms.load(Ordering::Relaxed))
    }

    /// Takes `cost` tokens spendable at `now_ms` (of the lease that ends soonest first), or
    /// none. Lock-free.
    ///
    /// The spend is counted in the window's clock *before* any token is taken, and a token
    /// once taken is never given back ([`Charge::cancel`]): so a token a report can see spent
    /// is either in the clock's count of its slot (the emission seals before it reads the
    /// report), or spent by no one.
    pub fn try_spend(self, now_ms: u64, cost: u32, margin_ms: u64) -> Option<Charge> {
        let book = self.book;
        let entries = match book.as_ref() {
            Some(b) if !b.closed => &b.entries,
            _ => return None,
        };
        // Most refused checks find no token: they leave the clock alone. (Of the book this
        // check spends from: one a renewal replaced meanwhile may hold less.)
        let available = book.as_ref().map_or(0, |b| b.available(now_ms, margin_ms));
        if available < u64::from(cost) {
            return None;
        }
        let clock = book.as_ref().and_then(|b| b.clock.as_ref());
        if clock.is_some_and(|c| !c.spend(now_ms, cost)) {
            return None;
        }
        let mut need = cost;
        'entries: for entry in entries {
            if !entry.spendable(now_ms, margin_ms) {
                continue;
            }
            for seg in &entry.segments {
                if need == 0 {
                    break 'entries;
                }
                if seg.segment.valid_from_ms > now_ms {
                    continue;
                }
                let mut spent = seg.spent.load(Ordering::Acquire);
                loop {
                    let left = seg.segment.count.saturating_sub(spent);
                    if left == 0 {
                        break;
                    }
                    let take = left.min(need);
                    match seg.spent.compare_exchange_weak(
                        spent,
                        spent + take,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            need -= take;
                            break;
                        }
                        Err(now) => spent = now,
                    }
                }
            }
        }
        let charge = Charge {
            book,
            at_ms: now_ms,
            cost,
            left: available - u64::from(cost),
        };
        if need > 0 {
            // Another check took the tokens first: what this one took is not spent again.
            charge.cancel();
            return None;
        }
        Some(charge)
    }
}

#[cfg(test)]
mod tests;

pub use charge::Charge;
