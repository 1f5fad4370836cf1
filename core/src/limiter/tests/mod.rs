//! The limiter end to end, with time as a plain number.

use super::*;
use crate::crdt::HlcTimestamp;
use crate::crdt::Register;
use crate::window::EstimateMode;

const T0: u64 = 1_700_000_000_000;

fn second(limit: u32) -> Limit {
    Limit {
        max: limit,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    }
}

fn limiter_with(config: LimiterConfig, origin: u128) -> Limiter {
    Limiter::new(
        config,
        OriginId(origin),
        KeyHasher::from_secret(b"test cluster"),
    )
}

fn limiter() -> Limiter {
    limiter_with(LimiterConfig::default(), 1)
}

fn items<'a>(key: &'a str, limits: &[Limit], cost: u32) -> Vec<CheckItem<'a>> {
    limits
        .iter()
        .map(|limit| CheckItem {
            key: key.as_bytes(),
            limit: *limit,
            cost,
        })
        .collect()
}

fn check(l: &Limiter, key: &str, limits: &[Limit], cost: u32, now: u64) -> Decision {
    let items = items(key, limits, cost);
    l.check(
        &CheckRequest {
            items: &items,
            dry_run: false,
        },
        now,
    )
    .unwrap()
}

fn admitted_in(l: &Limiter, key: &str, limits: &[Limit], n: usize, now: u64) -> usize {
    (0..n)
        .filter(|_| check(l, key, limits, 1, now).allowed)
        .count()
}

#[test]
fn exactly_the_limit_then_refusals_with_reset_and_retry() {
    let l = limiter();
    let lim = [second(5)];
    for i in 0..5 {
        let d = check(&l, "k", &lim, 1, T0 + 10);
        assert!(d.allowed, "request {i}");
        assert_eq!(d.limits[0].remaining, 4 - i);
        assert_eq!(d.limits[0].limit, 5);
        // The bucket [T0, T0+100) stops counting at T0 + 1100.
        assert_eq!(d.limits[0].reset_after_ms, 1_090);
        assert_eq!(d.limits[0].retry_after_ms, 0);
    }
    let d = check(&l, "k", &lim, 1, T0 + 10);
    assert!(!d.allowed);
    assert!(!d.limits[0].allowed);
    assert_eq!(d.limits[0].remaining, 0);
    assert_eq!(d.limits[0].reset_after_ms, 1_090);
    // Interpolated: 5 · weight ≤ 4 once weight ≤ 0.8, i.e. 20 ms into the bucket at T0 + 1000.
    assert_eq!(d.limits[0].retry_after_ms, 1_020 - 10);
}

#[test]
fn the_window_slides() {
    let l = limiter();
    let lim = [second(10)];
    assert_eq!(admitted_in(&l, "k", &lim, 10, T0 + 50), 10);
    assert_eq!(
        admitted_in(&l, "k", &lim, 5, T0 + 999),
        0,
        "still inside the window"
    );
    // At T0 + 1050 the bucket straddles the window's start at half weight: 5 counted.
    assert_eq!(admitted_in(&l, "k", &lim, 10, T0 + 1_050), 5);
    // At T0 + 1099 the old bucket weighs 0.01: 5.1 counted, so 4 more fit.
    assert_eq!(admitted_in(&l, "k", &lim, 10, T0 + 1_099), 4);
    // At T0 + 2100 the requests made at T0 + 1050 have left as well.
    assert_eq!(admitted_in(&l, "k", &lim, 20, T0 + 2_100), 10);
}

#[test]
fn exact_mode_counts_whole_buckets_only() {
    let l = limiter();
    let lim = [Limit {
        max: 10,
        window: WindowSpec::new(1_000, 10, EstimateMode::Exact).unwrap(),
    }];
    assert_eq!(admitted_in(&l, "k", &lim, 10, T0 + 50), 10);
    assert_eq!(admitted_in(&l, "k", &lim, 5, T0 + 999), 0);
    assert_eq!(admitted_in(&l, "k", &lim, 20, T0 + 1_000), 10);
}

#[test]
fn keys_are_independent() {
    let l = limiter();
    let lim = [second(2)];
    assert_eq!(admitted_in(&l, "a", &lim, 5, T0), 2);
    assert_eq!(admitted_in(&l, "b", &lim, 5, T0), 2);
}

#[test]
fn several_limits_are_all_or_nothing() {
    let l = limiter();
    let per_second = second(3);
    let per_minute = Limit {
        max: 5,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    };
    let both = [per_minute, per_second];
    assert_eq!(admitted_in(&l, "k", &both, 10, T0), 3);
    let d = check(&l, "k", &both, 1, T0);
    assert!(!d.allowed);
    assert!(d.limits[0].allowed, "the minute limit had room");
    assert!(!d.limits[1].allowed, "the second limit refused");
    assert_eq!(d.limits[0].retry_after_ms, 0);
    // The refused requests did not use the minute limit: 2 more fit once the second passes.
    assert_eq!(admitted_in(&l, "k", &both, 10, T0 + 1_100), 2);
    // Now the minute limit refuses even though the second limit has room.
    let d = check(&l, "k", &both, 1, T0 + 2_200);
    assert!(!d.allowed);
    assert!(!d.limits[0].allowed);
    assert!(d.limits[1].allowed);
}

#[test]
fn dry_run_consumes_nothing() {
    let l = limiter();
    let lim = [second(1)];
    let items = items("k", &lim, 1);
    let req = CheckRequest {
        items: &items,
        dry_run: true,
    };
    for _ in 0..3 {
        assert!(l.check(&req, T0).unwrap().allowed);
    }
    assert!(l.collect_changed(T0).is_none(), "a dry run changes nothing");
    assert_eq!(admitted_in(&l, "k", &lim, 3, T0), 1);
}

#[test]
fn cost_counts_in_full() {
    let l = limiter();
    let lim = [second(10)];
    assert!(check(&l, "k", &lim, 7, T0).allowed);
    let d = check(&l, "k", &lim, 4, T0);
    assert!(!d.allowed);
    assert_eq!(d.limits[0].remaining, 3);
    assert!(check(&l, "k", &lim, 3, T0).allowed);
}

#[test]
fn bad_requests_are_refused_with_typed_errors_and_consume_nothing() {
    let l = limiter();
    let lim = second(5);
    let item = |key: &'static [u8], cost| CheckItem {
        key,
        limit: lim,
        cost,
    };
    let run = |items: &[CheckItem<'_>]| {
        l.check(
            &CheckRequest {
                items,
                dry_run: false,
            },
            T0,
        )
    };
    assert_eq!(run(&[]), Err(CheckError::NoItems));
    assert_eq!(run(&[item(b"", 1)]), Err(CheckError::EmptyKey { index: 0 }));
    assert_eq!(
        run(&[item(b"a", 1), item(b"b", 0)]),
        Err(CheckError::ZeroCost { index: 1 })
    );
    assert_eq!(
        run(&[item(b"k", 6)]),
        Err(CheckError::CostExceedsLimit {
            index: 0,
            cost: 6,
            limit: 5
        })
    );
    let long = vec![b'x'; MAX_KEY_BYTES + 1];
    assert_eq!(
        run(&[CheckItem {
            key: &long,
            limit: lim,
            cost: 1
        }]),
        Err(CheckError::KeyTooLong {
            index: 0,
            len: MAX_KEY_BYTES + 1,
            max: MAX_KEY_BYTES
        })
    );
    let many = vec![item(b"k", 1); MAX_ITEMS_PER_CHECK + 1];
    assert!(matches!(run(&many), Err(CheckError::TooManyItems { .. })));
    assert_eq!(l.stats().keys, 0, "no window was created");
    assert_eq!(admitted_in(&l, "k", &[lim], 10, T0), 5);
}

#[test]
fn several_keys_in_one_request_are_all_or_nothing() {
    let l = limiter();
    let (a, b) = (second(10), second(2));
    let both = [
        CheckItem {
            key: b"user=1",
            limit: a,
            cost: 3,
        },
        CheckItem {
            key: b"route=/x",
            limit: b,
            cost: 1,
        },
    ];
    let run = || {
        l.check(
            &CheckRequest {
                items: &both,
                dry_run: false,
            },
            T0,
        )
        .unwrap()
    };
    assert!(run().allowed);
    assert!(run().allowed);
    let d = run();
    assert!(!d.allowed, "route=/x allows 2");
    assert!(d.limits[0].allowed && !d.limits[1].allowed);
    // user=1 was charged 3 per admitted request only: 6 of 10 used.
    assert_eq!(admitted_in(&l, "user=1", &[a], 10, T0), 4);
}

#[test]
fn a_zero_limit_blocks_without_error() {
    let l = limiter();
    let d = check(&l, "k", &[second(0)], 1, T0);
    assert!(!d.allowed);
    assert_eq!(d.limits[0].remaining, 0);
}

fn naive() -> LimiterConfig {
    LimiterConfig {
        policy: Policy::GlobalCount,
        ..LimiterConfig::default()
    }
}

#[test]
fn peers_see_each_others_admissions_after_a_merge() {
    let a = limiter_with(naive(), 1);
    let b = limiter_with(naive(), 2);
    let lim = [second(10)];
    assert_eq!(admitted_in(&a, "k", &lim, 6, T0), 6);
    let batch = a.collect_changed(T0 + 1).expect("a changed");
    assert_eq!(batch.updates.len(), 1);
    assert_eq!(batch.updates[0].register.admitted, vec![6]);
    let report = b.merge(&batch, T0 + 2);
    assert_eq!(report.inserted, 1);
    assert_eq!(admitted_in(&b, "k", &lim, 10, T0 + 3), 4);
    // Merging the same batch again is dropped by the version check alone.
    assert_eq!(b.merge(&batch, T0 + 4).dominated, 1);
    // Its own registers relayed back are ignored.
    assert_eq!(a.merge(&batch, T0 + 4).own, 1);
    let insp = b.inspect(b"k", &lim[0], T0 + 5).unwrap();
    assert_eq!(insp.global_admitted, 10.0);
    assert_eq!(insp.origins.len(), 2);
    assert_eq!(insp.origins[1].origin, OriginId(1));
    assert_eq!(insp.origins[1].admitted, 6.0);
    assert_eq!(insp.origins[1].age_ms, 4);
}

#[test]
fn emission_sends_changes_and_the_previous_round_once_more() {
    let l = limiter();
    let lim = [second(10)];
    assert!(l.collect_changed(T0).is_none());
    check(&l, "a", &lim, 1, T0);
    let first = l.collect_changed(T0 + 200).unwrap();
    assert_eq!(first.updates.len(), 1);
    check(&l, "b", &lim, 1, T0 + 250);
    let second_round = l.collect_changed(T0 + 400).unwrap();
    assert_eq!(second_round.updates.len(), 2, "b changed, a resent once");
    let third = l.collect_changed(T0 + 600).unwrap();
    assert_eq!(third.updates.len(), 1, "b resent once");
    assert!(
        l.collect_changed(T0 + 800).is_none(),
        "quiet keys cost nothing"
    );
    let versions: Vec<u64> = [&first, &second_round, &third]
        .iter()
        .map(|b| b.updates[0].register.version)
        .collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
}

#[test]
fn demand_share_splits_a_limit_between_busy_nodes() {
    let a = limiter_with(LimiterConfig::default(), 1);
    let b = limiter_with(LimiterConfig::default(), 2);
    for l in [&a, &b] {
        l.set_members(2, T0);
    }
    let lim = [second(100)];
    // Both nodes offer 60 per 100 ms for a second; they exchange registers every 100 ms.
    let mut admitted = [0usize; 2];
    for step in 0..10u64 {
        let now = T0 + step * 100 + 1;
        for (i, l) in [&a, &b].iter().enumerate() {
            admitted[i] += admitted_in(l, "k", &lim, 60, now);
        }
        if let Some(batch) = a.collect_changed(now + 50) {
            b.merge(&batch, now + 50);
        }
        if let Some(batch) = b.collect_changed(now + 50) {
            a.merge(&batch, now + 50);
        }
    }
    let total = admitted[0] + admitted[1];
    assert!(
        total <= 100,
        "cluster admitted {total} of 100 in one window"
    );
    assert!(total >= 95, "cluster used only {total} of 100");
    assert!(admitted[0].abs_diff(admitted[1]) <= 10, "{admitted:?}");
}

#[test]
fn onset_takes_one_nth_until_peers_can_have_been_heard() {
    let l = limiter();
    l.set_members(5, T0);
    let lim = [second(100)];
    assert_eq!(admitted_in(&l, "k", &lim, 100, T0 + 30), 20);
    // Onset runs from the end of the first busy bucket (T0 + 100), so it covers 500 ms after
    // the first request at least.
    assert_eq!(admitted_in(&l, "k", &lim, 100, T0 + 599), 0);
    // After the onset period, with no peer demand heard, the whole limit is this node's.
    assert_eq!(admitted_in(&l, "k", &lim, 100, T0 + 600), 80);
}

#[test]
fn strict_partition_scales_the_side() {
    let l = limiter();
    l.set_members(5, T0);
    l.set_members(2, T0 + 1);
    assert_eq!(l.member_counts(), (2, 5));
    let lim = [second(100)];
    // Steady load (one request every 10 ms, so no surge): after onset, with no demand from the
    // other member of its side, this node gets 2/5 of the limit over the window.
    let steady = |l: &Limiter| {
        (0..100)
            .filter(|i| check(l, "k", &lim, 1, T0 + 2 + 10 * i).allowed)
            .count()
    };
    assert_eq!(steady(&l), 40);
    l.set_members(2, T0 + 60_001);
    assert_eq!(
        l.member_counts(),
        (2, 2),
        "after the hold period the expectation follows membership"
    );
    let available = limiter_with(
        LimiterConfig {
            policy: Policy::DemandShare(PartitionPolicy::Available),
            ..LimiterConfig::default()
        },
        3,
    );
    available.set_members(5, T0);
    available.set_members(2, T0 + 1);
    // The whole limit, after the onset: 50 of the first 60 (to T0 + 600, at 1/2), then all 40.
    assert_eq!(steady(&available), 90);
}

fn update(key: KeyId, newest_epoch: u64, version: u64, hlc_ms: u64) -> RegisterUpdate {
    RegisterUpdate {
        key,
        window_ms: 1_000,
        buckets: 10,
        register: Register {
            version,
            hlc: HlcTimestamp::new(hlc_ms, 0),
            newest_epoch,
            demand: 50,
            admitted: vec![50],
        },
    }
}

#[test]
fn far_future_registers_are_refused_and_do_not_poison_the_window() {
    let l = limiter_with(naive(), 1);
    let lim = [second(100)];
    let id = l.key_id(b"k", &lim[0].window);
    let e_now = lim[0].window.epoch(T0);
    let batch = Batch {
        origin: OriginId(9),
        updates: vec![
            update(id, e_now + 1_000_000, 1, T0),
            update(id, u64::MAX, 2, T0),
            update(id, e_now, 3, T0 + 3_600_000), // a clock an hour ahead
        ],
    };
    let report = l.merge(&batch, T0);
    assert_eq!(report.future, 3);
    assert_eq!(admitted_in(&l, "k", &lim, 200, T0), 100);
    // A register one bucket ahead (small skew) is accepted and counts as current.
    let ahead = Batch {
        origin: OriginId(9),
        updates: vec![update(id, e_now + 1, 4, T0 + 100)],
    };
    assert_eq!(l.merge(&ahead, T0).inserted, 1);
    let insp = l.inspect(b"k", &lim[0], T0).unwrap();
    assert_eq!(insp.global_admitted, 150.0);
}

#[test]
fn bad_shapes_and_expired_registers_are_counted_and_dropped() {
    let l = limiter();
    let id = KeyId(42);
    let mut bad = update(id, 0, 1, T0);
    bad.buckets = 0;
    let old = update(
        id,
        WindowSpec::with_default_buckets(1_000).unwrap().epoch(T0) - 20,
        1,
        T0,
    );
    let report = l.merge(
        &Batch {
            origin: OriginId(9),
            updates: vec![bad, old],
        },
        T0,
    );
    assert_eq!(report.bad_shape, 1);
    assert_eq!(report.expired, 1);
    assert_eq!(l.stats().keys, 0);
}

#[test]
fn gc_removes_idle_windows_through_the_delay_queue() {
    let l = limiter();
    let lim = [second(10)];
    check(&l, "a", &lim, 1, T0);
    check(&l, "b", &lim, 1, T0 + 900);
    // Nothing is due before the first key's window has passed.
    assert_eq!(l.gc(T0 + 500, 100).examined, 0);
    // Each key is due a window (plus a bucket) after its creation.
    let r = l.gc(T0 + 1_100, 100);
    assert_eq!((r.examined, r.removed), (1, 1), "a is idle");
    assert_eq!(l.stats().keys, 1);
    // b is due at T0 + 2000 but was touched again at T0 + 1500: pushed back, not removed.
    check(&l, "b", &lim, 1, T0 + 1_500);
    let r = l.gc(T0 + 2_000, 100);
    assert_eq!((r.examined, r.removed, r.rescheduled), (1, 0, 1));
    let r = l.gc(T0 + 2_600, 100);
    assert_eq!(r.removed, 1);
    assert_eq!(l.stats().keys, 0);
    assert_eq!(l.stats().expired_keys, 2);
}

#[test]
fn gc_expires_remote_registers_and_remote_only_windows() {
    let l = limiter();
    let spec = WindowSpec::with_default_buckets(1_000).unwrap();
    let e = spec.epoch(T0);
    let batch = Batch {
        origin: OriginId(9),
        updates: vec![update(KeyId(7), e, 1, T0)],
    };
    assert_eq!(l.merge(&batch, T0).inserted, 1);
    assert_eq!(l.stats().keys, 1);
    assert_eq!(l.gc(T0 + 1_099, 100).removed, 0);
    assert_eq!(l.gc(T0 + 1_100, 100).removed, 1);
}

#[test]
fn anti_entropy_snapshot_and_relay() {
    let a = limiter();
    let b = limiter_with(LimiterConfig::default(), 2);
    let lim = [second(10)];
    check(&a, "k", &lim, 3, T0);
    check(&a, "j", &lim, 2, T0);
    let snap = a.snapshot_local(T0 + 1);
    assert_eq!(snap.updates.len(), 2);
    b.merge(&snap, T0 + 2);
    // b relays a's registers to a third node when a is gone.
    let relayed = b.relay(T0 + 3, |o| o == OriginId(1));
    assert_eq!(relayed.len(), 1);
    assert_eq!(relayed[0].origin, OriginId(1));
    assert_eq!(relayed[0].updates.len(), 2);
    assert!(b.relay(T0 + 3, |_| false).is_empty());
    let digest = b.digest();
    assert!(digest.contains(&(OriginId(1), snap.updates[0].register.version)));
}

mod cache;
mod table_full;

#[test]
fn a_fast_peer_does_not_make_a_correct_node_look_fast() {
    // A runs 8 s fast, B is right, D runs 4 s slow. B hears A; D must still accept B's
    // registers (a minute window, so that only the clock stamps are in question).
    let minute = [Limit {
        max: 100,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    }];
    let (a, b, d) = (
        limiter(),
        limiter_with(LimiterConfig::default(), 2),
        limiter_with(LimiterConfig::default(), 3),
    );
    check(&a, "k", &minute, 1, T0 + 8_000);
    let from_a = a.collect_changed(T0 + 8_000).unwrap();
    assert_eq!(
        b.merge(&from_a, T0).inserted,
        1,
        "8 s is within the allowed drift"
    );
    check(&b, "k", &minute, 1, T0 + 1);
    let from_b = b.collect_changed(T0 + 1).unwrap();
    let own = from_b
        .updates
        .iter()
        .find(|u| u.key == b.key_id(b"k", &minute[0].window))
        .unwrap();
    assert!(
        own.register.hlc.physical_ms() <= T0 + 1,
        "B stamps with its own clock, not A's: {:?}",
        own.register.hlc
    );
    let report = d.merge(&from_b, T0 - 4_000);
    assert_eq!(report.future, 0, "{report:?}");
    assert_eq!(report.inserted, 1);
}
