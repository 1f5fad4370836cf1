//! The ring: one CAS per add, lazy resets that lose nothing, stale writers that write nothing.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use super::*;
use crate::window::EstimateMode;

const T0: u64 = 1_700_000_000_000;

fn spec() -> WindowSpec {
    WindowSpec::new(1_000, 10, EstimateMode::Interpolated).unwrap()
}

#[test]
fn counts_land_in_their_bucket_and_expire_lazily() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    assert!(matches!(
        ring.admit(e0, 3, u64::MAX),
        Admit::Admitted { .. }
    ));
    ring.reject(e0, 2);
    assert!(matches!(
        ring.admit(e0 + 4, 5, u64::MAX),
        Admit::Admitted { .. }
    ));

    let snap = ring.snapshot(&s, T0 + 450);
    assert_eq!(snap.admitted.by_age()[0], 5);
    assert_eq!(snap.admitted.by_age()[4], 3);
    assert_eq!(snap.offered.by_age()[4], 5);
    assert_eq!(
        snap.offered_buckets().collect::<Vec<_>>(),
        vec![(e0 + 4, 5), (e0, 5)]
    );

    // e0 shares a slot with e0 + 11; writing there resets the stale count first.
    assert!(matches!(
        ring.admit(e0 + 11, 1, u64::MAX),
        Admit::Admitted { .. }
    ));
    let snap = ring.snapshot(&s, T0 + 1_100);
    assert_eq!(
        snap.admitted_buckets().collect::<Vec<_>>(),
        vec![(e0 + 11, 1), (e0 + 4, 5)]
    );
}

#[test]
fn admit_respects_the_allowance_for_the_current_bucket() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    assert_eq!(ring.admit(e0, 4, 5), Admit::Admitted { now_holds: 4 });
    assert_eq!(ring.admit(e0, 2, 5), Admit::Refused { current: 4 });
    assert_eq!(ring.admit(e0, 1, 5), Admit::Admitted { now_holds: 5 });
    assert_eq!(ring.admit(e0, 1, 5), Admit::Refused { current: 5 });
    ring.refund(e0, 2);
    assert_eq!(ring.snapshot(&s, T0).admitted.by_age()[0], 3);
}

#[test]
fn a_writer_a_whole_ring_behind_cannot_reset_a_newer_bucket() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    assert!(matches!(
        ring.admit(e0 + 11, 7, u64::MAX),
        Admit::Admitted { .. }
    ));
    assert_eq!(ring.admit(e0, 1, u64::MAX), Admit::Refused { current: 0 });
    ring.reject(e0, 1);
    ring.refund(e0, 1);
    let snap = ring.snapshot(&s, T0 + 1_100);
    assert_eq!(snap.admitted.by_age()[0], 7);
    assert_eq!(snap.offered.by_age()[0], 7);
}

#[test]
fn a_writer_already_in_the_next_bucket_is_counted_as_current() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    ring.admit(e0 + 1, 2, u64::MAX);
    let snap = ring.snapshot(&s, T0 + 99);
    assert_eq!(snap.admitted.by_age()[0], 2);
}

#[test]
fn refund_after_the_bucket_moved_on_is_a_no_op() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    ring.admit(e0, 2, u64::MAX);
    ring.admit(e0 + 11, 2, u64::MAX);
    ring.refund(e0, 2);
    assert_eq!(ring.snapshot(&s, T0 + 1_100).admitted.by_age()[0], 2);
}

/// Many threads add to the same buckets while the epoch rolls over under them: no add is
/// lost, and conditional adds never pass their allowance.
#[test]
fn concurrent_adds_are_exact() {
    const THREADS: usize = 8;
    const PER_THREAD: u32 = 8_000;
    let s = spec();
    let ring = Arc::new(LocalRing::new(&s));
    let e0 = s.epoch(T0);
    let admitted = Arc::new(AtomicU32::new(0));
    let allowance = 20_000u64;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let ring = ring.clone();
            let admitted = admitted.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    // Half the threads write one bucket, half the next; all race on resets
                    // of the rejected word, which starts out stale.
                    let epoch = e0 + (t % 2) as u64;
                    ring.reject(epoch, 1);
                    if matches!(ring.admit(epoch, 1, allowance), Admit::Admitted { .. }) {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    if i % 1000 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let snap = ring.snapshot(&s, s.epoch_start_ms(e0 + 1));
    let total_offered: u64 = snap.offered.by_age().iter().sum();
    let total_admitted: u64 = snap.admitted.by_age().iter().sum();
    assert_eq!(
        total_offered - total_admitted,
        THREADS as u64 * u64::from(PER_THREAD)
    );
    assert_eq!(total_admitted, u64::from(admitted.load(Ordering::Relaxed)));
    // Each bucket got 32 000 attempts against an allowance of 20 000.
    assert_eq!(snap.admitted.by_age()[0], 20_000);
    assert_eq!(snap.admitted.by_age()[1], 20_000);
}

/// Threads race to be first into a stale slot: the CAS reset keeps every add.
#[test]
fn concurrent_resets_keep_every_add() {
    let s = spec();
    for round in 0..200u64 {
        let ring = Arc::new(LocalRing::new(&s));
        let e_old = s.epoch(T0);
        ring.reject(e_old, 1_000);
        ring.admit(e_old, 5, u64::MAX);
        let e_new = e_old + 11 * (round + 1); // same slot, later ring turn
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let ring = ring.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..50 {
                        ring.reject(e_new, 1);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let snap = ring.snapshot(&s, s.epoch_start_ms(e_new));
        assert_eq!(snap.offered.by_age()[0], 200, "round {round}");
    }
}

#[test]
fn rejected_counts_saturate_without_touching_admissions() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    ring.admit(e0, 123_456, u64::MAX);
    ring.reject(e0, 60_000);
    ring.reject(e0, 60_000);
    let snap = ring.snapshot(&s, T0);
    assert_eq!(snap.admitted.by_age()[0], 123_456);
    assert_eq!(snap.offered.by_age()[0], 123_456 + 65_535);
    // Admissions use all 32 bits.
    assert!(matches!(
        ring.admit(e0 + 1, u32::MAX, u64::MAX),
        Admit::Admitted { .. }
    ));
    assert_eq!(
        ring.admit(e0 + 1, 1, u64::MAX),
        Admit::Refused { current: u32::MAX }
    );
}

#[test]
fn clear_stale_forgets_idle_slots_and_keeps_live_ones() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    ring.admit(e0, 3, u64::MAX);
    ring.admit(e0 + 5, 4, u64::MAX);
    // At e0 + 12, e0 has left the window and e0 + 5 is still in it.
    let now = s.epoch_start_ms(e0 + 12);
    ring.clear_stale(&s, now);
    // e0 + 65536 * 11 shares e0's slot and tag: without clearing, its count would alias.
    let alias = e0 + 65_536 * 11;
    let snap = ring.snapshot(&s, s.epoch_start_ms(alias));
    assert!(
        snap.is_empty(),
        "a cleared slot must not alias a much later epoch"
    );
    assert_eq!(ring.snapshot(&s, now).admitted.by_age()[7], 4);
}

#[test]
fn usage_agrees_with_snapshot() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    for (i, e) in [e0, e0 + 2, e0 + 7, e0 + 10, e0 + 11].iter().enumerate() {
        ring.admit(*e, 3 + i as u32, u64::MAX);
        ring.reject(*e, 2);
    }
    for dt in (900..2_300).step_by(37) {
        let now = T0 + dt;
        let u = ring.usage(&s, now, 3);
        let snap = ring.snapshot(&s, now);
        assert!(
            (u.admitted - snap.admitted.sum(&s, now)).abs() < 1e-9,
            "+{dt}"
        );
        assert!(
            (u.offered - snap.offered.sum(&s, now)).abs() < 1e-9,
            "+{dt}"
        );
        assert_eq!(u64::from(u.current), snap.admitted.by_age()[0], "+{dt}");
        let by_age = snap.offered.by_age();
        assert_eq!(u.current_offered, by_age[0], "+{dt}");
        assert_eq!(u.recent_offered, by_age[1..3].iter().sum::<u64>(), "+{dt}");
        assert_eq!(
            u.older_offered,
            by_age[3..s.buckets() as usize].iter().sum::<u64>(),
            "+{dt}"
        );
        assert_eq!(u.active, !snap.is_empty());
        let newest = snap
            .admitted
            .by_age()
            .iter()
            .position(|c| *c > 0)
            .map(|a| a as u64);
        assert_eq!(u.newest_admitted_age, newest, "+{dt}");
    }
}

/// The ledger's check reads the offered load without building the snapshot: the same newest
/// epoch and the same total, a writer already in the next bucket included.
#[test]
fn offered_totals_agree_with_snapshot() {
    let s = spec();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    for (i, e) in [e0, e0 + 2, e0 + 7, e0 + 10, e0 + 11, e0 + 13]
        .iter()
        .enumerate()
    {
        ring.admit(*e, 3 + i as u32, u64::MAX);
        ring.reject(*e, 1 + i as u32);
    }
    let mut ahead = 0;
    for dt in (0..2_600).step_by(23) {
        let now = T0 + dt;
        let totals = ring.offered_totals(&s, now);
        let snap = ring.snapshot(&s, now);
        assert_eq!(totals.newest_epoch, snap.newest_active_epoch(), "+{dt}");
        let total: u64 = snap.offered_buckets().map(|(_, c)| c).sum();
        assert_eq!(totals.total, total, "+{dt}");
        ahead += usize::from(totals.newest_epoch.is_some_and(|e| e > s.epoch(now)));
    }
    assert_eq!(ahead, 0, "a bucket ahead is counted as the current one");
    // A writer whose clock already reads the next bucket, seen from the current one.
    let now = T0 + 2_000;
    ring.admit(s.epoch(now) + 1, 4, u64::MAX);
    let totals = ring.offered_totals(&s, now);
    assert_eq!(totals.newest_epoch, Some(s.epoch(now)));
    let total: u64 = ring
        .snapshot(&s, now)
        .offered_buckets()
        .map(|(_, c)| c)
        .sum();
    assert_eq!(totals.total, total);
}

#[test]
fn rings_longer_than_the_inline_slots_live_on_the_heap() {
    let s = WindowSpec::new(60_000, 60, EstimateMode::Interpolated).unwrap();
    let ring = LocalRing::new(&s);
    let e0 = s.epoch(T0);
    for k in 0..61 {
        ring.admit(e0 + k, 1, u64::MAX);
    }
    let snap = ring.snapshot(&s, s.epoch_start_ms(e0 + 60));
    assert_eq!(snap.admitted.by_age().iter().sum::<u64>(), 61);
    assert!(
        std::mem::size_of::<LocalRing>() <= 96,
        "inline slots stay small"
    );
}
