use super::*;
use crate::ledger::{ClockShape, Segment};

/// A spend clock of 100 ms buckets.
const SHAPE: ClockShape = ClockShape {
    bucket_ms: 100,
    buckets: 4,
};

const T0: u64 = 1_700_000_000_000;
const MARGIN: u64 = 10;

fn seg(id: u32, count: u32, from: u64) -> Segment {
    Segment {
        id,
        count,
        valid_from_ms: T0 + from,
    }
}

fn lease(seq: u32, until: u64, segments: &[Segment]) -> Lease {
    Lease {
        owner: 7,
        seq,
        expires_ms: T0 + until,
        segments: segments.iter().copied().collect(),
    }
}

#[test]
fn tokens_are_spent_once_within_their_lease_and_never_past_it() {
    let h = Holdings::default();
    assert!(h.try_spend(T0, 1, MARGIN).is_none(), "nothing held");
    assert!(h.accept(&lease(1, 400, &[seg(1, 3, 0)]), SHAPE));
    assert!(h.try_spend(T0, 2, MARGIN).is_some());
    assert!(h.try_spend(T0, 2, MARGIN).is_none(), "one left");
    assert_eq!(h.available(T0, MARGIN), 1);
    // Within the margin of the end: no more.
    assert!(h.try_spend(T0 + 400 - MARGIN, 1, MARGIN).is_none());
    assert!(h.try_spend(T0 + 100, 1, MARGIN).is_some());
    assert!(h.try_spend(T0 + 100, 1, MARGIN).is_none());
}

#[test]
fn a_post_dated_segment_is_spent_only_from_its_start_and_a_cost_may_span_segments() {
    let h = Holdings::default();
    h.accept(&lease(1, 500, &[seg(1, 1, 0), seg(2, 2, 100)]), SHAPE);
    assert_eq!(h.next_valid_after(T0, MARGIN), Some(T0 + 100));
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
    charge.cancel();
    assert_eq!(
        h.available(T0 + 100, MARGIN),
        0,
        "a cancelled charge's tokens are spent by no one"
    );
}

/// A renewal keeps what was left and what was spent: it moves the end and adds segments, and
/// never doubles what a user holds.
#[test]
fn a_renewal_keeps_what_was_spent_and_moves_the_end() {
    let h = Holdings::default();
    h.accept(&lease(1, 400, &[seg(1, 4, 0)]), SHAPE);
    h.try_spend(T0 + 10, 3, MARGIN).unwrap();
    // Renewed: segment 1 again (the owner does not know it is nearly spent), and segment 2.
    assert!(h.accept(&lease(2, 800, &[seg(1, 4, 0), seg(2, 2, 0)]), SHAPE));
    assert_eq!(
        h.available(T0 + 500, MARGIN),
        3,
        "1 left of segment 1, and 2 new"
    );
    assert!(
        !h.accept(&lease(2, 900, &[seg(3, 50, 0)]), SHAPE),
        "a duplicate"
    );
    assert!(
        !h.accept(&lease(1, 400, &[seg(1, 4, 0)]), SHAPE),
        "an older message"
    );
    let report = h.report(T0 + 500, MARGIN);
    let held = report.of(7).unwrap();
    assert_eq!(held.seq, 2);
    assert_eq!(held.unspent, 3);
    assert_eq!(held.spent.as_slice(), &[(1, 3), (2, 0)]);
    // A message that leaves a segment out: its owner knows it spent.
    h.try_spend(T0 + 500, 1, MARGIN).unwrap();
    assert!(h.accept(&lease(3, 900, &[seg(2, 2, 0)]), SHAPE));
    assert_eq!(h.available(T0 + 600, MARGIN), 2);
}

#[test]
fn a_report_says_when_a_lease_lapsed_and_closing_hands_back_the_rest() {
    let h = Holdings::default();
    h.accept(&lease(1, 200, &[seg(1, 4, 0)]), SHAPE);
    h.try_spend(T0, 1, MARGIN).unwrap();
    let at_300 = h.report(T0 + 300, MARGIN);
    let held = at_300.of(7).unwrap();
    assert!(held.lapsed, "ended: 3 tokens forfeit");
    assert_eq!(held.unspent, 0);
    assert_eq!(h.available(T0 + 300, MARGIN), 0);
    // Its sequence number is kept: an old message does not revive it.
    assert!(!h.accept(&lease(1, 900, &[seg(1, 4, 0)]), SHAPE));
    assert!(h.accept(&lease(2, 900, &[seg(2, 6, 0)]), SHAPE));
    h.try_spend(T0 + 300, 2, MARGIN).unwrap();
    let closed = h.close(0);
    assert!(closed.closed);
    assert_eq!(closed.of(7).unwrap().unspent, 4);
    assert!(h.try_spend(T0 + 300, 1, MARGIN).is_none(), "closed");
    assert!(!h.accept(&lease(3, 900, &[seg(3, 1, 0)]), SHAPE), "closed");
}

/// Threads spending while the book is replaced by renewals: every token is spent at most
/// once, and none is lost to a replacement.
#[test]
fn concurrent_spends_and_renewals_never_spend_a_token_twice() {
    const THREADS: usize = 4;
    let h = Arc::new(Holdings::default());
    h.accept(&lease(1, 100_000, &[seg(1, 1_000, 0)]), SHAPE);
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
    let mut segments: Vec<Segment> = vec![seg(1, 1_000, 0)];
    for seq in 2..50u32 {
        segments.push(seg(seq, 10, 0));
        h.accept(&lease(seq, 100_000, &segments), SHAPE);
    }
    let total: u32 = spent.into_iter().map(|t| t.join().unwrap()).sum();
    let left = h.available(T0 + 1, MARGIN) as u32;
    assert_eq!(total + left, 1_000 + 48 * 10, "spent + left = granted");
}

/// An owner's refusal stands until its time or until the owner leases again, whichever comes
/// first: a request must not be refused at once for a refusal a lease has overtaken.
#[test]
fn a_lease_clears_the_owners_refusal() {
    let h = Holdings::default();
    h.refused(T0 + 60_000);
    assert!(h.is_refused(T0) && !h.may_ask(T0));
    assert!(!h.is_refused(T0 + 60_000));
    assert!(h.accept(&lease(1, 400, &[seg(1, 1, 0)]), SHAPE));
    assert!(!h.is_refused(T0), "the lease overtook the refusal");
    assert!(h.may_ask(T0));
}

/// A charge taken before the holdings close and cancelled after (another item of its request
/// refused) leaves nothing spendable in the book a racing check may still hold.
#[test]
fn a_cancel_after_closing_revives_no_token() {
    let h = Holdings::default();
    assert!(h.accept(&lease(1, 400, &[seg(1, 2, 0)]), SHAPE));
    let old = h.book.load_full().expect("a book");
    let charge = h.try_spend(T0, 1, MARGIN).expect("a token");
    let closed = h.close(0);
    assert_eq!(closed.held[0].unspent, 1, "one handed back");
    charge.cancel();
    let left: u32 = old.entries.iter().map(|e| e.unspent()).sum();
    assert_eq!(left, 0, "the old book holds no token after the cancel");
}

/// A spend is counted in the window's clock; once its bucket is sealed, a check that read
/// the clock before the bucket ended takes no token, and a cancel after the seal leaves the
/// sealed count as it was told. Closing seals the current bucket too.
#[test]
fn spends_are_counted_by_fine_slot_and_none_lands_in_a_sealed_bucket() {
    let h = Holdings::default();
    h.accept(&lease(1, 900, &[seg(1, 10, 0)]), SHAPE);
    assert!(h.try_spend(T0 + 5, 2, MARGIN).is_some());
    let cancelled = h.try_spend(T0 + 99, 1, MARGIN).expect("a token");
    assert!(h.seal(T0 + 99).is_empty(), "the bucket has not ended");
    let sealed = h.seal(T0 + 100);
    assert_eq!(sealed.len(), 1);
    assert_eq!(sealed[0].counts[0], 2);
    assert_eq!(sealed[0].counts[crate::ledger::tuning::FINE_SLOTS - 1], 1);
    cancelled.cancel();
    assert_eq!(
        h.available(T0 + 99, MARGIN),
        7,
        "a cancelled spend's token is not spent again"
    );
    assert!(
        h.try_spend(T0 + 50, 1, MARGIN).is_none(),
        "late, in a sealed bucket"
    );
    assert_eq!(
        h.available(T0 + 99, MARGIN),
        7,
        "a late spend takes nothing"
    );
    assert!(h.try_spend(T0 + 150, 3, MARGIN).is_some());
    let closed = h.close(T0 + 160);
    assert_eq!(closed.sealed.len(), 1);
    assert_eq!(closed.sealed[0].epoch, (T0 + 150) / 100);
    assert_eq!(closed.sealed[0].counts.iter().sum::<u32>(), 3);
}

/// An emission seals before it reads the report, and a cancelled spend's tokens are spent by
/// no one: a token a report shows spent is in the sealed counts or never admitted, even when
/// its request is cancelled between the two (the sealed count then stays).
#[test]
fn a_token_a_report_shows_spent_is_in_the_sealed_counts() {
    let h = Holdings::default();
    h.accept(&lease(1, 900, &[seg(1, 10, 0)]), SHAPE);
    let charge = h.try_spend(T0 + 5, 2, MARGIN).expect("tokens");
    let sealed = h.seal(T0 + 100);
    let report = h.report(T0 + 100, MARGIN);
    charge.cancel();
    let spent: u32 = report.held[0].spent.iter().map(|(_, n)| n).sum();
    let counted: u32 = sealed.iter().flat_map(|b| b.counts).sum();
    assert_eq!((spent, counted), (2, 2));
    assert_eq!(h.available(T0 + 100, MARGIN), 8, "nor spent again");
}

/// An ask ahead is claimed by one caller a period, whatever leases come meanwhile (each
/// reopens an ask on the request path, not an ask ahead); a window that holds no lease has
/// none to claim.
#[test]
fn an_ask_ahead_is_claimed_once_a_period_and_a_lease_does_not_reopen_it() {
    let h = Holdings::default();
    assert!(!h.claim_ahead(T0, T0 + 200), "no lease held");
    assert!(h.accept(&lease(1, 400, &[seg(1, 3, 0)]), SHAPE));
    assert!(h.claim_ahead(T0, T0 + 200));
    assert!(!h.claim_ahead(T0, T0 + 200), "claimed");
    h.ask_again_at(T0 + 15);
    assert!(h.accept(&lease(2, 400, &[seg(1, 3, 0), seg(2, 2, 0)]), SHAPE));
    assert!(h.may_ask(T0 + 1), "a lease reopens asking");
    assert!(!h.claim_ahead(T0 + 199, T0 + 399), "but not an ask ahead");
    assert!(h.claim_ahead(T0 + 200, T0 + 400));
    assert!(!h.claim_ahead(T0 + 300, T0 + 500));
}

/// A window that holds nothing still keeps when it ran dry; a lease keeps it, a later time
/// moves it on and an earlier one does not.
#[test]
fn when_a_window_ran_dry_is_kept_across_leases() {
    let h = Holdings::default();
    assert!(!h.ran_dry_since(0), "never ran dry");
    h.ran_dry(T0 + 50);
    assert!(h.ran_dry_since(T0 + 50) && !h.ran_dry_since(T0 + 51));
    assert!(h.accept(&lease(1, 400, &[seg(1, 3, 0)]), SHAPE));
    assert!(h.ran_dry_since(T0 + 50), "a lease forgot it");
    h.ran_dry(T0 + 20);
    assert!(!h.ran_dry_since(T0 + 51));
    h.ran_dry(T0 + 90);
    assert!(h.ran_dry_since(T0 + 90));
}
