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

/// [`check`] of a request decided again after waiting (`Limiter::check_again`).
fn check_again(l: &Limiter, key: &str, limits: &[Limit], cost: u32, now: u64) -> Decision {
    let items = items(key, limits, cost);
    l.check_again(
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

mod cache;
mod cluster;
mod forged;
mod ledger;
mod ledger_handed;
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
