//! The tokens a user holds for one window, spent on the hot path without a lock.
//!
//! The leases are one copy-on-write list (`ArcSwapOption`): a check loads it and takes tokens
//! with one compare-and-swap on a lease's spent counter; grants and reports (the node loop,
//! under the limiter's replication lock) replace the list, sharing the counters, so that no
//! spend is lost to a replacement.
//!
//! **What a report may say.** A token is spent the moment its counter moves, and a spend is
//! added to the window's ring *before* that (`Limiter`'s check). A report reads the counters
//! *before* the emission reads the ring. So every spend is either in the ring the emission
//! reads, or still counted unspent in the report: the owner, which counts both, never misses
//! one (it may count a spend twice, which only holds the window back).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use arc_swap::{ArcSwapOption, Guard};
use smallvec::SmallVec;

use super::lease::{HeldLease, HoldingsReport, Lease};

#[derive(Debug)]
struct Held {
    lease: Lease,
    spent: AtomicU32,
}

impl Held {
    fn unspent(&self) -> u32 {
        self.lease
            .count
            .saturating_sub(self.spent.load(Ordering::Acquire))
    }
}

#[derive(Debug, Default)]
struct Book {
    /// Soonest to lapse first: a check spends what would lapse first.
    leases: Vec<Arc<Held>>,
    /// Per owner, the highest sequence number received.
    seen: SmallVec<[(u128, u32); 1]>,
    /// Handed back: nothing more is spent.
    closed: bool,
    /// The owner refused an ask: none is sent again before this time (ms).
    ask_again_at_ms: AtomicU64,
    /// When this node last reported the window to its owner (ms).
    reported_at_ms: AtomicU64,
}

impl Book {
    /// A book with `leases`, the rest carried over from `old`.
    fn next(old: Option<&Book>, leases: Vec<Arc<Held>>, closed: bool) -> Self {
        let carried = |f: fn(&Book) -> &AtomicU64| {
            AtomicU64::new(old.map_or(0, |b| f(b).load(Ordering::Relaxed)))
        };
        Self {
            leases,
            seen: old.map(|b| b.seen.clone()).unwrap_or_default(),
            closed,
            ask_again_at_ms: carried(|b| &b.ask_again_at_ms),
            reported_at_ms: carried(|b| &b.reported_at_ms),
        }
    }
}

/// The leases a user holds for one window. See the module documentation. One pointer: a
/// window that never held a lease costs nothing more.
#[derive(Debug, Default)]
pub struct Holdings {
    book: ArcSwapOption<Book>,
}

/// Tokens taken by [`Holdings::try_spend`], to give back if the request is not admitted after
/// all (another of its limits refused).
#[derive(Debug)]
pub struct Charge {
    book: Guard<Option<Arc<Book>>>,
    taken: SmallVec<[(usize, u32); 2]>,
}

impl Charge {
    /// Puts the tokens back, as if never taken.
    pub fn refund(self) {
        if let Some(book) = self.book.as_ref() {
            for (i, n) in self.taken {
                if let Some(h) = book.leases.get(i) {
                    h.spent.fetch_sub(n, Ordering::AcqRel);
                }
            }
        }
    }
}

impl Holdings {
    /// Takes `cost` tokens spendable at `now_ms` (those that lapse soonest first), or none.
    /// Lock-free.
    pub fn try_spend(&self, now_ms: u64, cost: u32, margin_ms: u64) -> Option<Charge> {
        let book = self.book.load();
        let leases = match book.as_ref() {
            Some(b) if !b.closed => &b.leases,
            _ => return None,
        };
        let mut taken: SmallVec<[(usize, u32); 2]> = SmallVec::new();
        let mut need = cost;
        for (i, h) in leases.iter().enumerate() {
            if need == 0 {
                break;
            }
            if !h.lease.spendable_at(now_ms, margin_ms) {
                continue;
            }
            let mut spent = h.spent.load(Ordering::Acquire);
            loop {
                let left = h.lease.count.saturating_sub(spent);
                if left == 0 {
                    break;
                }
                let take = left.min(need);
                match h.spent.compare_exchange_weak(
                    spent,
                    spent + take,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        taken.push((i, take));
                        need -= take;
                        break;
                    }
                    Err(now) => spent = now,
                }
            }
        }
        let charge = Charge { book, taken };
        if need > 0 {
            charge.refund();
            return None;
        }
        Some(charge)
    }

    /// Whether an ask may go to the owner at `now_ms` (it has not refused one lately).
    pub fn may_ask(&self, now_ms: u64) -> bool {
        self.book
            .load()
            .as_ref()
            .is_none_or(|b| now_ms >= b.ask_again_at_ms.load(Ordering::Relaxed))
    }

    /// The owner refused an ask: none until `at_ms`. (A book is made for a window that holds
    /// none; a writer replacing the book at the same moment may lose this, which only lets
    /// the next ask go sooner.)
    pub fn ask_again_at(&self, at_ms: u64) {
        if self.book.load().is_none() {
            self.book.rcu(|old| {
                old.clone()
                    .or_else(|| Some(Arc::new(Book::next(None, Vec::new(), false))))
            });
        }
        if let Some(b) = self.book.load().as_ref() {
            b.ask_again_at_ms.fetch_max(at_ms, Ordering::Relaxed);
        }
    }

    /// Tokens spendable at `now_ms`.
    pub fn available(&self, now_ms: u64, margin_ms: u64) -> u64 {
        self.book.load().as_ref().map_or(0, |b| {
            if b.closed {
                return 0;
            }
            b.leases
                .iter()
                .filter(|h| h.lease.spendable_at(now_ms, margin_ms))
                .map(|h| u64::from(h.unspent()))
                .sum()
        })
    }

    /// The earliest time after `now_ms` at which a token held now becomes spendable (a lease
    /// that is valid from later), if any.
    pub fn next_valid_after(&self, now_ms: u64) -> Option<u64> {
        self.book.load().as_ref().and_then(|b| {
            b.leases
                .iter()
                .filter(|h| h.lease.valid_from_ms > now_ms && h.unspent() > 0)
                .map(|h| h.lease.valid_from_ms)
                .min()
        })
    }

    /// When the next lease held lapses unreported (its end, less the margin), if any: a
    /// report then frees what it left unspent at the owner.
    pub fn next_lapse_ms(&self, margin_ms: u64) -> Option<u64> {
        self.book.load().as_ref().and_then(|b| {
            b.leases
                .iter()
                .filter(|h| h.unspent() > 0)
                .map(|h| h.lease.expires_ms.saturating_sub(margin_ms))
                .min()
        })
    }

    /// When this node last reported the window (0: never).
    pub fn reported_at_ms(&self) -> u64 {
        self.book
            .load()
            .as_ref()
            .map_or(0, |b| b.reported_at_ms.load(Ordering::Relaxed))
    }

    /// Whether anything is held (spendable now or later).
    pub fn is_empty(&self) -> bool {
        self.book
            .load()
            .as_ref()
            .is_none_or(|b| b.leases.iter().all(|h| h.unspent() == 0))
    }

    /// Takes `lease` unless it is no newer than one already received from its owner (a
    /// duplicate, or one overtaken by a later lease: its tokens are reported as not held, and
    /// so free at the owner). Writers must be serialised (the limiter's replication lock).
    /// Leases that can no longer be spent at `now_ms` are dropped on the way.
    pub fn accept(&self, lease: Lease, now_ms: u64, margin_ms: u64) -> bool {
        let current = self.book.load_full();
        let old = current.as_deref();
        let seen_before = old.map_or(0, |b| seen_from(&b.seen, lease.owner));
        if lease.seq <= seen_before || old.is_some_and(|b| b.closed) {
            return false;
        }
        let mut seen = old.map(|b| b.seen.clone()).unwrap_or_default();
        match seen.iter_mut().find(|(o, _)| *o == lease.owner) {
            Some(entry) => entry.1 = lease.seq,
            None => seen.push((lease.owner, lease.seq)),
        }
        let mut leases: Vec<Arc<Held>> = old
            .map(|b| {
                b.leases
                    .iter()
                    .filter(|h| live(h, now_ms, margin_ms))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if live_lease(&lease, now_ms, margin_ms) && lease.count > 0 {
            leases.push(Arc::new(Held {
                lease,
                spent: AtomicU32::new(0),
            }));
            leases.sort_by_key(|h| (h.lease.expires_ms, h.lease.owner, h.lease.seq));
        }
        let mut book = Book::next(old, leases, false);
        book.seen = seen;
        // A lease arrived: asking is open again.
        book.ask_again_at_ms = AtomicU64::new(0);
        self.book.store(Some(Arc::new(book)));
        true
    }

    /// What this user holds, for its next emission: leases that can no longer be spent or
    /// have nothing left are dropped (and so reported as not held). Writers must be
    /// serialised. Read before the ring (see the module documentation).
    pub fn report(&self, now_ms: u64, margin_ms: u64) -> HoldingsReport {
        let Some(current) = self.book.load_full() else {
            let book = Book::next(None, Vec::new(), false);
            book.reported_at_ms.store(now_ms, Ordering::Relaxed);
            self.book.store(Some(Arc::new(book)));
            return HoldingsReport::default();
        };
        current.reported_at_ms.store(now_ms, Ordering::Relaxed);
        if current.closed {
            return closed_report(&current, Vec::new());
        }
        let keep: Vec<Arc<Held>> = current
            .leases
            .iter()
            .filter(|h| live(h, now_ms, margin_ms))
            .cloned()
            .collect();
        let held = keep
            .iter()
            .filter_map(|h| held_of(h, h.unspent()))
            .collect();
        if keep.len() != current.leases.len() {
            self.book
                .store(Some(Arc::new(Book::next(Some(&current), keep, false))));
        }
        HoldingsReport {
            seen: current.seen.to_vec(),
            held,
            closed: false,
        }
    }

    /// Stops spending for good (the node is leaving) and reports what is handed back: every
    /// token not spent, which the owner may lease again at once. A check racing this either
    /// took its token before (and is in the ring) or finds none.
    pub fn close(&self) -> HoldingsReport {
        let Some(current) = self.book.load_full() else {
            let closed = Book::next(None, Vec::new(), true);
            let report = closed_report(&closed, Vec::new());
            self.book.store(Some(Arc::new(closed)));
            return report;
        };
        let mut returned = Vec::new();
        for h in &current.leases {
            let before = h.spent.swap(h.lease.count, Ordering::AcqRel);
            returned.extend(held_of(h, h.lease.count.saturating_sub(before)));
        }
        let closed = Book::next(Some(&current), Vec::new(), true);
        let report = closed_report(&closed, returned);
        self.book.store(Some(Arc::new(closed)));
        report
    }
}

fn seen_from(seen: &[(u128, u32)], owner: u128) -> u32 {
    seen.iter()
        .find(|(o, _)| *o == owner)
        .map_or(0, |(_, s)| *s)
}

/// Whether a lease can still be spent from `now_ms` on (now, or once it becomes valid).
fn live_lease(lease: &Lease, now_ms: u64, margin_ms: u64) -> bool {
    now_ms.saturating_add(margin_ms) < lease.expires_ms
}

fn live(h: &Held, now_ms: u64, margin_ms: u64) -> bool {
    live_lease(&h.lease, now_ms, margin_ms) && h.unspent() > 0
}

fn held_of(h: &Held, unspent: u32) -> Option<HeldLease> {
    (unspent > 0).then_some(HeldLease {
        owner: h.lease.owner,
        seq: h.lease.seq,
        unspent,
        expires_ms: h.lease.expires_ms,
    })
}

fn closed_report(book: &Book, returned: Vec<HeldLease>) -> HoldingsReport {
    HoldingsReport {
        seen: book.seen.to_vec(),
        held: returned,
        closed: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000;
    const MARGIN: u64 = 10;

    fn lease(seq: u32, count: u32, from: u64, until: u64) -> Lease {
        Lease {
            owner: 7,
            seq,
            count,
            valid_from_ms: T0 + from,
            expires_ms: T0 + until,
        }
    }

    #[test]
    fn tokens_are_spent_once_within_their_lease_and_never_past_it() {
        let h = Holdings::default();
        assert!(h.try_spend(T0, 1, MARGIN).is_none(), "nothing held");
        assert!(h.accept(lease(1, 3, 0, 400), T0, MARGIN));
        assert!(h.try_spend(T0, 2, MARGIN).is_some());
        assert!(h.try_spend(T0, 2, MARGIN).is_none(), "one left");
        assert_eq!(h.available(T0, MARGIN), 1);
        // Within the margin of the end: no more.
        assert!(h.try_spend(T0 + 400 - MARGIN, 1, MARGIN).is_none());
        assert!(h.try_spend(T0 + 100, 1, MARGIN).is_some());
        assert!(h.try_spend(T0 + 100, 1, MARGIN).is_none());
    }

    #[test]
    fn a_post_dated_lease_is_spent_only_from_its_start_and_a_cost_may_span_leases() {
        let h = Holdings::default();
        h.accept(lease(1, 1, 0, 400), T0, MARGIN);
        h.accept(lease(2, 2, 100, 500), T0, MARGIN);
        assert_eq!(h.next_valid_after(T0), Some(T0 + 100));
        assert!(
            h.try_spend(T0 + 50, 2, MARGIN).is_none(),
            "the second is not valid yet"
        );
        assert_eq!(
            h.available(T0 + 50, MARGIN),
            1,
            "a failed spend takes nothing"
        );
        let charge = h.try_spend(T0 + 100, 3, MARGIN).expect("1 + 2");
        assert_eq!(h.available(T0 + 100, MARGIN), 0);
        charge.refund();
        assert_eq!(h.available(T0 + 100, MARGIN), 3, "refunded whole");
    }

    #[test]
    fn a_lease_overtaken_by_a_later_one_is_never_spent_and_reports_say_so() {
        let h = Holdings::default();
        assert!(h.accept(lease(2, 5, 0, 400), T0, MARGIN));
        assert!(
            !h.accept(lease(1, 5, 0, 400), T0, MARGIN),
            "delayed behind seq 2"
        );
        assert!(!h.accept(lease(2, 5, 0, 400), T0, MARGIN), "a duplicate");
        assert_eq!(h.available(T0, MARGIN), 5);
        let report = h.report(T0, MARGIN);
        assert_eq!(report.seen_from(7), 2);
        assert_eq!(
            report.unspent_of(7, 1),
            Some(0),
            "seq 1 will never be spent"
        );
        assert_eq!(report.unspent_of(7, 2), Some(5));
        assert_eq!(report.unspent_of(7, 3), None, "not received when reported");
    }

    #[test]
    fn a_report_drops_what_lapsed_and_closing_hands_back_the_rest() {
        let h = Holdings::default();
        h.accept(lease(1, 4, 0, 200), T0, MARGIN);
        h.accept(lease(2, 6, 0, 600), T0, MARGIN);
        h.try_spend(T0, 1, MARGIN).unwrap();
        let at_300 = h.report(T0 + 300, MARGIN);
        assert_eq!(at_300.unspent_of(7, 1), Some(0), "lapsed: 3 tokens forfeit");
        assert_eq!(at_300.unspent_of(7, 2), Some(6));
        h.try_spend(T0 + 300, 2, MARGIN).unwrap();
        let closed = h.close();
        assert!(closed.closed);
        assert_eq!(closed.held.iter().map(|l| l.unspent).sum::<u32>(), 4);
        assert!(h.try_spend(T0 + 300, 1, MARGIN).is_none(), "closed");
        assert!(!h.accept(lease(3, 1, 0, 900), T0 + 300, MARGIN), "closed");
        assert_eq!(h.report(T0 + 300, MARGIN).unspent_of(7, 2), Some(0));
    }

    /// Threads spending while the lease list is replaced by grants: every token is spent at
    /// most once, and none is lost to a replacement.
    #[test]
    fn concurrent_spends_and_grants_never_spend_a_token_twice() {
        const THREADS: usize = 4;
        let h = Arc::new(Holdings::default());
        h.accept(lease(1, 1_000, 0, 100_000), T0, MARGIN);
        let spent: Vec<_> = (0..THREADS)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || {
                    let mut n = 0u32;
                    for _ in 0..2_000 {
                        if h.try_spend(T0 + 1, 1, MARGIN).is_some() {
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        for seq in 2..50 {
            h.accept(lease(seq, 10, 0, 100_000), T0, MARGIN);
        }
        let total: u32 = spent.into_iter().map(|t| t.join().unwrap()).sum();
        let left = h.available(T0 + 1, MARGIN) as u32;
        assert_eq!(total + left, 1_000 + 48 * 10, "spent + left = granted");
    }
}
