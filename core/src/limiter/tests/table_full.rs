//! A full key table: no window that holds quota is ever evicted, and new keys meet the
//! configured policy.

use super::*;

fn minute(limit: u32) -> Limit {
    Limit {
        max: limit,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    }
}

fn small_table(max_keys: usize, when_full: TableFullPolicy) -> Limiter {
    limiter_with(
        LimiterConfig {
            max_keys,
            when_full,
            ..LimiterConfig::default()
        },
        1,
    )
}

#[test]
fn spraying_new_keys_does_not_reset_a_used_quota() {
    // 5 of a 5/min descriptor used, then ten other keys: the first still has nothing left.
    let l = small_table(3, TableFullPolicy::Deny);
    let lim = [minute(5)];
    assert_eq!(admitted_in(&l, "victim", &lim, 5, T0), 5);
    for i in 0..10 {
        check(&l, &format!("spray{i}"), &lim, 1, T0 + 100 + i);
    }
    assert_eq!(admitted_in(&l, "victim", &lim, 5, T0 + 1_000), 0);
    assert_eq!(l.stats().evicted_keys, 0);
    assert!(l.stats().keys <= 3);
}

#[test]
fn a_full_table_denies_new_keys_by_default_and_says_when_to_retry() {
    let l = small_table(2, TableFullPolicy::Deny);
    let lim = [second(10)];
    assert!(check(&l, "a", &lim, 1, T0).allowed);
    assert!(check(&l, "b", &lim, 1, T0 + 50).allowed);
    let d = check(&l, "c", &lim, 1, T0 + 60);
    assert!(!d.allowed);
    assert_eq!(d.limits[0].limit, 10);
    assert_eq!(d.limits[0].remaining, 0);
    // "a" holds its admission until T0 + 1100, when its bucket leaves the window.
    assert_eq!(d.limits[0].retry_after_ms, 1_100 - 60);
    assert_eq!(l.stats().refused_table_full, 1);
    // Once "a" has expired, "c" gets in.
    assert!(check(&l, "c", &lim, 1, T0 + 1_100).allowed);
    assert!(l.stats().keys <= 2);
}

#[test]
fn the_error_policy_reports_a_full_table() {
    let l = small_table(1, TableFullPolicy::Error);
    let lim = [second(10)];
    assert!(check(&l, "a", &lim, 1, T0).allowed);
    let items = items("b", &lim, 1);
    let err = l
        .check(
            &CheckRequest {
                items: &items,
                dry_run: false,
            },
            T0 + 1,
        )
        .unwrap_err();
    assert_eq!(err, CheckError::KeyTableFull { max_keys: 1 });
}

#[test]
fn windows_that_hold_nothing_make_room_least_recently_active_first() {
    let l = small_table(3, TableFullPolicy::Deny);
    let lim = [second(1)];
    // Dry runs create windows that count nothing; they are what may be evicted.
    for key in ["idle1", "idle2"] {
        let items = items(key, &lim, 1);
        l.check(
            &CheckRequest {
                items: &items,
                dry_run: true,
            },
            T0,
        )
        .unwrap();
    }
    assert!(check(&l, "used", &lim, 1, T0 + 10).allowed);
    assert!(check(&l, "new", &lim, 1, T0 + 20).allowed);
    assert_eq!(l.stats().evicted_keys, 1);
    let guard = l.table.guard();
    assert!(
        l.table
            .get(&l.key_id(b"idle1", &lim[0].window), &guard)
            .is_none()
    );
    assert!(
        l.table
            .get(&l.key_id(b"used", &lim[0].window), &guard)
            .is_some()
    );
}

#[test]
fn a_window_known_only_from_a_peer_is_not_evicted() {
    let l = small_table(1, TableFullPolicy::Deny);
    let peer = limiter_with(LimiterConfig::default(), 2);
    let lim = [minute(5)];
    assert_eq!(admitted_in(&peer, "k", &lim, 5, T0), 5);
    l.merge(&peer.collect_changed(T0).unwrap(), T0);
    assert!(!check(&l, "other", &lim, 1, T0 + 1).allowed);
    // The peer's five still count here.
    assert!(!check(&l, "k", &lim, 1, T0 + 2).allowed);
}

#[test]
fn a_full_table_knows_when_room_can_come() {
    // After one scan finds every window holding quota, new keys are refused until the earliest
    // window can have expired, and told so.
    let l = small_table(50, TableFullPolicy::Deny);
    let lim = [second(10)];
    for i in 0..50 {
        assert!(check(&l, &format!("k{i}"), &lim, 1, T0 + i).allowed);
    }
    for i in 0..1_000 {
        assert!(!check(&l, &format!("new{i}"), &lim, 1, T0 + 100).allowed);
    }
    assert_eq!(l.table.room_expected_at(T0 + 100), T0 + 1_100);
    assert_eq!(l.stats().refused_table_full, 1_000);
}
