//! The limiter among peers: merges, emission rounds, demand shares, partitions, refused and
//! expired registers, GC, anti-entropy.

use super::*;

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

/// Checks key `k` once every 20 ms from `from` to `to` ms after `T0` (not included); how many
/// were admitted.
fn every_20_ms(l: &Limiter, lim: &[Limit], from: u64, to: u64) -> usize {
    (from / 20..to / 20)
        .filter(|i| check(l, "k", lim, 1, T0 + 20 * i).allowed)
        .count()
}

#[test]
fn a_blind_window_takes_the_onset_share_until_it_is_not_and_a_cached_bound_follows() {
    let l = limiter();
    l.set_members(5, T0);
    let lim = [second(100)];
    let id = l.key_id(b"k", &lim[0].window);
    // A request every 20 ms: half the limit.
    let steady = |from: u64, to: u64| every_20_ms(&l, &lim, from, to);
    // Past its onset, hearing of nobody else: the whole limit is this node's, and all of
    // its load fits.
    steady(0, 1_000);
    assert_eq!(steady(1_000, 2_000), 50);
    steady(2_000, 2_060);
    // Blind (its registers go unanswered), in the middle of a bucket: a fifth, one member's
    // part in five. The window holds half the limit, so nothing until that drains under a
    // fifth (at 2 650 ms): the bound cached for the bucket before the call, which had room,
    // must not admit past it.
    l.set_blind(vec![id]);
    assert!(l.is_blind(id));
    assert_eq!(l.stats().blind_windows, 1);
    assert_eq!(steady(2_060, 2_600), 0);
    steady(2_600, 3_000);
    let blind = steady(3_000, 4_000);
    assert!((15..=25).contains(&blind), "{blind} of 100 while blind");
    // No longer blind: all of its load again.
    l.set_blind(Vec::new());
    assert_eq!(l.stats().blind_windows, 0);
    steady(4_000, 5_000);
    assert_eq!(steady(5_000, 6_000), 50);
    // Another window's blindness is not this one's.
    l.set_blind(vec![KeyId(id.0 ^ 1)]);
    assert!(!l.is_blind(id));
}

/// A window known only from the last stop admits nothing more, in every path (one item, the
/// cached bound, several items), until its owner's first sum lifts the hold; then it shares
/// the limit as before. Another window is not held.
#[test]
fn a_window_known_only_from_the_last_stop_admits_nothing_until_confirmed() {
    let l = limiter();
    l.set_members(5, T0);
    let lim = [second(100)];
    let id = l.key_id(b"k", &lim[0].window);
    let steady = |from: u64, to: u64| every_20_ms(&l, &lim, from, to);
    steady(0, 1_000);
    assert_eq!(steady(1_000, 2_000), 50, "past its onset, all of its load");
    // Held in the middle of a bucket, whose cached bound had room.
    steady(2_000, 2_040);
    l.set_unconfirmed(vec![id]);
    assert!(l.is_unconfirmed(id));
    assert_eq!(
        steady(2_040, 3_000),
        0,
        "held: nothing, the cached bound included"
    );
    let per_minute = Limit {
        max: 1_000,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    };
    let d = check(&l, "k", &[per_minute, lim[0]], 1, T0 + 3_000);
    assert!(
        !d.allowed && d.limits[0].allowed,
        "several items: the held one refuses"
    );
    assert!(
        check(&l, "other", &lim, 1, T0 + 3_000).allowed,
        "another window"
    );
    l.set_unconfirmed(Vec::new());
    assert!(!l.is_unconfirmed(id));
    steady(3_000, 4_000);
    assert_eq!(steady(4_000, 5_000), 50, "confirmed: all of its load again");
}

#[test]
fn a_blind_window_whose_other_users_are_known_keeps_its_demand_share() {
    let (a, b) = (
        limiter_with(LimiterConfig::default(), 1),
        limiter_with(LimiterConfig::default(), 2),
    );
    for l in [&a, &b] {
        l.set_members(5, T0);
    }
    let lim = [second(100)];
    // b used the window and told a: a knows one other user, whose demand lasts a window.
    assert_eq!(admitted_in(&b, "k", &lim, 40, T0), 20, "b's onset: a fifth");
    a.merge(&b.collect_changed(T0 + 1).expect("b changed"), T0 + 2);
    let id = a.key_id(b"k", &lim[0].window);
    a.set_blind(vec![id]);
    assert_eq!(
        admitted_in(&a, "k", &lim, 20, T0 + 30),
        20,
        "a's onset: a fifth"
    );
    // After a's onset, its demand share of the limit (120 of 160 asked, less what it holds),
    // not the fifth it already holds, nor the 80 that b left.
    let later = admitted_in(&a, "k", &lim, 100, T0 + 700);
    assert!(
        (40..=60).contains(&later),
        "a share beyond the onset's: {later}"
    );
}

#[test]
fn a_window_near_its_sides_part_is_contended_on_a_side_only() {
    let l = limiter();
    l.set_members(10, T0);
    let lim = [second(130)];
    let id = l.key_id(b"k", &lim[0].window);
    // A request every 20 ms, all admitted: nothing refused, and 50 of a limit of 130.
    let steady = |from: u64, to: u64| every_20_ms(&l, &lim, from, to);
    steady(0, 2_000);
    let at = T0 + 2_000;
    assert!(!l.contended(id, at), "50 of the whole limit is calm");
    assert_eq!(l.side_part(), None);
    // A member gone (a crash): still not a side.
    l.set_members(9, at);
    assert_eq!(l.side_part(), None);
    assert!(!l.contended(id, at));
    // Two of ten out of sight: a part of 104, and 50 of demand is not near it (under half).
    l.set_members(8, at);
    assert_eq!(l.side_part(), Some(0.8));
    assert!(!l.contended(id, at), "50 of a part of 104");
    // Three: a part of 91, and 50 is near it.
    l.set_members(7, at);
    assert!(l.contended(id, at), "50 of a part of 91");
    // Four of ten out of sight: the side's part is 78, and 50 of demand is near it, though
    // nothing was refused.
    l.set_members(6, at);
    assert_eq!(l.side_part(), Some(0.6));
    assert!(l.contended(id, at), "50 of a part of 78");
    // Seven out of sight: a part of 39, which the demand passes.
    l.set_members(3, at);
    assert!(l.contended(id, at));
    // A window never checked here (its limit unknown) is not near anything, though a peer's
    // register of it says 45 of demand (all admitted, under a limit of 1 000).
    let peer = limiter_with(LimiterConfig::default(), 2);
    peer.set_members(10, T0);
    let large = [second(1_000)];
    for i in 0..45 {
        assert!(check(&peer, "other", &large, 1, T0 + 1_000 + 20 * i).allowed);
    }
    l.merge(&peer.collect_changed(at).expect("the peer changed"), at);
    let other = l.key_id(b"other", &large[0].window);
    assert!(l.holds(&other));
    assert!(!l.contended(other, at));
    // With the cache off (nothing stored), the limit is noted all the same.
    let uncached = limiter_with(
        LimiterConfig {
            admission_cache: false,
            ..LimiterConfig::default()
        },
        4,
    );
    uncached.set_members(10, T0);
    every_20_ms(&uncached, &lim, 0, 2_000);
    uncached.set_members(6, at);
    assert!(uncached.contended(uncached.key_id(b"k", &lim[0].window), at));
    // Under `available` a side admits the whole limit: not near.
    let available = limiter_with(
        LimiterConfig {
            policy: Policy::DemandShare(PartitionPolicy::Available),
            ..LimiterConfig::default()
        },
        3,
    );
    available.set_members(10, T0);
    available.set_members(3, T0 + 1);
    assert_eq!(available.side_part(), None);
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

#[test]
fn an_owner_sums_every_other_origin_for_each_subscriber() {
    let owner = limiter_with(naive(), 1);
    let (b, c) = (limiter_with(naive(), 2), limiter_with(naive(), 3));
    let lim = [second(100)];
    assert_eq!(admitted_in(&owner, "k", &lim, 5, T0), 5);
    assert_eq!(admitted_in(&b, "k", &lim, 7, T0), 7);
    assert_eq!(admitted_in(&c, "k", &lim, 11, T0), 11);
    for user in [&b, &c] {
        let batch = user.collect_changed(T0 + 1).unwrap();
        assert_eq!(owner.merge(&batch, T0 + 2).inserted, 1);
    }
    let key = owner.key_id(b"k", &lim[0].window);
    let stamp = owner.aggregate_stamp(T0 + 3);
    let sums = owner.aggregates_for(key, &[OriginId(2), OriginId(3), OriginId(9)], stamp, T0 + 3);
    let admitted = |u: &RegisterUpdate| u.register.admitted.iter().sum::<u32>();
    // Each without its own register; an origin the owner never heard from gets the whole sum.
    assert_eq!(sums.iter().map(admitted).collect::<Vec<_>>(), [16, 12, 23]);
    assert!(
        sums.iter()
            .all(|u| u.register.demand >= u.register.admitted.iter().sum())
    );
    let versions: Vec<u64> = sums.iter().map(|u| u.register.version).collect();
    assert!(versions.windows(2).all(|v| v[0] == v[1]), "one emission");

    // b keeps the owner's sum as the owner's register of the window and adds its own ring.
    let report = b.merge_aggregates(
        &Batch {
            origin: OriginId(1),
            updates: vec![sums[0].clone()],
        },
        T0 + 4,
    );
    assert_eq!(report.inserted, 1);
    assert_eq!(
        b.inspect(b"k", &lim[0], T0 + 5).unwrap().global_admitted,
        23.0
    );
    assert_eq!(admitted_in(&b, "k", &lim, 100, T0 + 5), 100 - 23);
    // Holding c's own register as well (a node that is also an owner) counts nothing twice.
    let from_c = c.collect_changed(T0 + 6).unwrap();
    b.merge(&from_c, T0 + 7);
    assert_eq!(
        b.inspect(b"k", &lim[0], T0 + 8).unwrap().global_admitted,
        100.0
    );
    // An aggregate of a window b does not hold is not asked for and not kept.
    let other = owner.aggregates_for(
        owner.key_id(b"elsewhere", &lim[0].window),
        &[OriginId(2)],
        owner.aggregate_stamp(T0),
        T0,
    );
    assert!(other.is_empty(), "the owner holds no such window");
    let mut unsolicited = sums[0].clone();
    unsolicited.key = KeyId(12345);
    let report = b.merge_aggregates(
        &Batch {
            origin: OriginId(1),
            updates: vec![unsolicited],
        },
        T0 + 9,
    );
    assert_eq!(report.unsolicited, 1);
}

#[test]
fn a_held_origin_keeps_its_demand_and_its_register_until_released() {
    let a = limiter(); // origin 1, demand share policy
    let b = limiter_with(LimiterConfig::default(), 2);
    let lim = [second(100)];
    // b was busy: 60 requests, of which it admitted what its share allowed.
    admitted_in(&b, "k", &lim, 60, T0);
    let from_b = b.collect_changed(T0 + 1).unwrap();
    a.merge(&from_b, T0 + 2);
    a.set_members(2, T0 + 2);
    let demand_of_b = |now| {
        a.inspect(b"k", &lim[0], now)
            .and_then(|i| i.origins.into_iter().find(|o| o.origin == OriginId(2)))
            .map(|o| o.demand)
    };
    assert_eq!(demand_of_b(T0 + 500), Some(60));
    // One window later b's demand would lapse, and a would take the whole limit.
    let later = T0 + 1_500;
    assert_eq!(demand_of_b(later), Some(0));
    let alone = check(&a, "k", &lim, 1, later).limits[0].remaining;
    // Held (b went quiet but is not down), it keeps its demand and a its share.
    a.set_held(&[OriginId(2)], &[], later);
    assert_eq!(demand_of_b(later), Some(60));
    let held = check(&a, "k", &lim, 1, later).limits[0].remaining;
    assert!(held < alone, "held {held} vs alone {alone}");
    // GC keeps a held register (and its window) however old.
    a.gc(T0 + 10_000, 100);
    assert_eq!(demand_of_b(T0 + 10_000), Some(60));
    // Released (down), it lapses and goes.
    a.set_held(&[], &[], T0 + 10_000);
    a.gc(T0 + 12_000, 100);
    assert_eq!(demand_of_b(T0 + 12_000), None);
}

#[test]
fn a_departed_owners_sum_is_held_without_holding_its_own_register() {
    let owner = limiter_with(LimiterConfig::default(), 1);
    let (b, c) = (
        limiter_with(LimiterConfig::default(), 2),
        limiter_with(LimiterConfig::default(), 3),
    );
    let lim = [second(100)];
    admitted_in(&owner, "k", &lim, 30, T0);
    admitted_in(&c, "k", &lim, 40, T0);
    owner.merge(&c.collect_changed(T0 + 1).unwrap(), T0 + 2);
    let key = owner.key_id(b"k", &lim[0].window);
    let sums = owner.aggregates_for(key, &[OriginId(2)], owner.aggregate_stamp(T0 + 3), T0 + 3);
    let sums_for_d = sums.clone();
    admitted_in(&b, "k", &lim, 1, T0);
    b.merge_aggregates(
        &Batch {
            origin: OriginId(1),
            updates: sums,
        },
        T0 + 4,
    );
    // The owner's own register too, as a node that shares another window with it would have.
    b.merge(&owner.collect_changed(T0 + 5).unwrap(), T0 + 6);
    let demands = |now| {
        let i = b.inspect(b"k", &lim[0], now).unwrap();
        let of = |aggregate| {
            i.origins
                .iter()
                .find(|o| o.origin == OriginId(1) && o.aggregate == aggregate && !o.is_local)
                .map(|o| o.demand)
        };
        (of(true), of(false))
    };
    assert_eq!(demands(T0 + 500), (Some(70), Some(30)));
    // Two windows on, both would have lapsed: the sum is held, the owner's register is not.
    let later = T0 + 2_000;
    assert_eq!(demands(later), (Some(0), Some(0)));
    let alone = b.inspect(b"k", &lim[0], later).unwrap().allowance;
    b.set_held(&[], &[OriginId(1)], later);
    assert_eq!(demands(later), (Some(70), Some(0)));
    let held = b.inspect(b"k", &lim[0], later).unwrap().allowance;
    assert!(held < alone / 2.0, "held {held} vs alone {alone}");
    // A listed origin other than the owner holds nothing of the owner's.
    b.set_held(&[], &[OriginId(3)], later);
    assert_eq!(demands(later), (Some(0), Some(0)));
    // Held again, until a new owner's sum comes: newer, it alone counts (c's demand now
    // says 5: the held 70 no longer does).
    b.set_held(&[], &[OriginId(1)], later);
    let new_owner = limiter_with(LimiterConfig::default(), 4);
    admitted_in(&c, "k", &lim, 5, later);
    new_owner.merge(&c.collect_changed(later + 1).unwrap(), later + 2);
    let sums = new_owner.aggregates_for(
        key,
        &[OriginId(2)],
        new_owner.aggregate_stamp(later + 3),
        later + 3,
    );
    assert_eq!(sums.len(), 1);
    assert_eq!(demands(later + 4).0, Some(70), "held until then");
    b.merge_aggregates(
        &Batch {
            origin: OriginId(4),
            updates: sums,
        },
        later + 4,
    );
    let i = b.inspect(b"k", &lim[0], later + 5).unwrap();
    let new_sum = i.origins.iter().find(|o| o.origin == OriginId(4)).unwrap();
    assert!(new_sum.aggregate && new_sum.demand < 70, "{new_sum:?}");
    assert!(i.allowance > held * 2.0, "{} vs {held}", i.allowance);
    // And `inspect` shows the departed sum as it now counts: lapsed, as any old sum.
    assert_eq!(demands(later + 5).0, Some(0), "superseded");

    // A node that now owns the window gets no other owner's sum: it lets the old one go.
    let d = limiter_with(LimiterConfig::default(), 5);
    admitted_in(&d, "k", &lim, 1, T0 + 3);
    d.merge_aggregates(
        &Batch {
            origin: OriginId(1),
            updates: sums_for_d,
        },
        T0 + 4,
    );
    d.set_held(&[], &[OriginId(1)], later);
    let sums_of = |l: &Limiter| {
        l.inspect(b"k", &lim[0], later)
            .unwrap()
            .origins
            .iter()
            .filter(|o| o.aggregate)
            .count()
    };
    let dkey = d.key_id(b"k", &lim[0].window);
    // Not while what it counted is still in the window.
    d.release_departed_sums(dkey, T0 + 500);
    assert_eq!(sums_of(&d), 1);
    // Nor an owner held bare (quiet, not departed).
    d.set_held(&[OriginId(1)], &[], later);
    d.release_departed_sums(dkey, later);
    assert_eq!(sums_of(&d), 1);
    d.set_held(&[], &[OriginId(1)], later);
    d.release_departed_sums(dkey, later);
    assert_eq!(sums_of(&d), 0);
}

/// One of two members, after a steady request every 10 ms for a second on key `k` (no onset
/// left), limit 100 per second; and the time then.
fn steady_second() -> (Limiter, [Limit; 1], u64) {
    let l = limiter();
    l.set_members(2, T0);
    let lim = [second(100)];
    for i in 0..100 {
        check(&l, "k", &lim, 1, T0 + 10 * i);
    }
    (l, lim, T0 + 1_000)
}

/// A peer's register of `k` stamped `hlc_ms`: demand 300, 10 admitted in the current bucket.
fn busy_peer(l: &Limiter, lim: &Limit, version: u64, hlc_ms: u64) -> Batch {
    let id = l.key_id(b"k", &lim.window);
    let mut u = update(id, lim.window.epoch(T0 + 1_000), version, hlc_ms);
    u.register.demand = 300;
    u.register.admitted = vec![10];
    Batch {
        origin: OriginId(9),
        updates: vec![u],
    }
}

#[test]
fn a_share_follows_the_demand_this_node_published_not_a_rise_its_peers_have_not_heard_of() {
    let (l, lim, t) = steady_second();
    assert_eq!(l.merge(&busy_peer(&l, &lim[0], 1, t), t).inserted, 1);
    let published = l.collect_changed(t).expect("the window changed");
    let own = published.updates[0].register.demand;
    assert!((95..=101).contains(&own), "{own}");
    let allowance = |now| l.inspect(b"k", &lim[0], now).unwrap().allowance;
    let before = allowance(t);
    let share = 100.0 * f64::from(own) / f64::from(own + 300) + admission::WHOLE_REQUEST_CREDIT;
    assert!((before - share).abs() < 1e-9, "{before} vs {share}");
    // This node's load rises by 40 % (short of a surge, which counts as an onset); its peer
    // has not heard. Counting its own fresh demand would raise its share to about 32 while
    // the peer still counts it at about 25.
    let refused = (0..40)
        .filter(|_| !check(&l, "k", &lim, 1, t).allowed)
        .count();
    assert!(refused >= 38, "{refused}");
    assert_eq!(allowance(t), before);
    // Once it has told its peers, the share follows: a rise past chance is published whole.
    let told = l.collect_changed(t).expect("the window changed");
    assert!(told.updates[0].register.demand >= own + 38);
    assert!(allowance(t) > before + 5.0, "{}", allowance(t));
}

#[test]
fn the_whole_request_credit_needs_current_news_of_the_others() {
    let (l, lim, t) = steady_second();
    let peer = |version, hlc_ms| busy_peer(&l, &lim[0], version, hlc_ms);
    // The peer's last word is 300 ms old: more than a quarter of the window.
    assert_eq!(l.merge(&peer(1, t - 300), t).inserted, 1);
    l.collect_changed(t).expect("the window changed");
    let allowance = || l.inspect(b"k", &lim[0], t).unwrap().allowance;
    let stale = allowance();
    // The same counts, said just now.
    assert_eq!(l.merge(&peer(2, t), t).replaced, 1);
    let current = allowance();
    assert!(
        (current - stale - admission::WHOLE_REQUEST_CREDIT).abs() < 1e-9,
        "{stale} then {current}"
    );
}

#[test]
fn sparse_traffic_that_lasted_is_not_a_new_onset_after_a_gap() {
    let lim = [second(100)];
    let c = admission::WHOLE_REQUEST_CREDIT;
    // A peer of a 10-member cluster with a demand of 30 a window, said at `at`.
    let peer = |l: &Limiter, at: u64| {
        let id = l.key_id(b"k", &lim[0].window);
        let mut u = update(id, lim[0].window.epoch(at), 1, at);
        u.register.demand = 30;
        u.register.admitted = vec![3];
        Batch {
            origin: OriginId(9),
            updates: vec![u],
        }
    };
    let allowance = |l: &Limiter, at: u64| l.inspect(b"k", &lim[0], at).unwrap().allowance;
    let l = limiter();
    l.set_members(10, T0);
    // A request every 100 ms for two seconds, told to the peers.
    for i in 0..20 {
        check(&l, "k", &lim, 1, T0 + 100 * i);
    }
    let own = l.collect_changed(T0 + 1_950).expect("changed").updates[0]
        .register
        .demand;
    assert!((9..=11).contains(&own), "{own}");
    // Then nothing for 700 ms, and a request every 100 ms again: 400 ms on, the window holds
    // only those, as it would for traffic that just started.
    for i in 0..5 {
        check(&l, "k", &lim, 1, T0 + 2_700 + 100 * i);
    }
    let t = T0 + 3_100;
    l.merge(&peer(&l, t), t);
    let share = 100.0 * f64::from(own) / f64::from(own + 30) + c;
    assert!(
        (allowance(&l, t) - share).abs() < 1e-9,
        "{}",
        allowance(&l, t)
    );
    // Traffic that did start 400 ms ago gets the onset share, a tenth of the limit.
    let new = limiter_with(LimiterConfig::default(), 2);
    new.set_members(10, T0);
    for i in 0..5 {
        check(&new, "k", &lim, 1, T0 + 2_700 + 100 * i);
    }
    new.merge(&peer(&new, t), t);
    assert!((allowance(&new, t) - (10.0 + c)).abs() < 1e-9);
    // After a window without traffic, the first node's traffic is new again: four requests
    // and the one asked about would be a share of 5 / 35 by fresh demand, and onset holds it
    // to a tenth.
    for i in 0..4 {
        check(&l, "k", &lim, 1, T0 + 4_500 + i);
    }
    let later = T0 + 4_600;
    l.merge(&peer(&l, later), later);
    assert!(
        (allowance(&l, later) - (10.0 + c)).abs() < 1e-9,
        "{}",
        allowance(&l, later)
    );
}

#[test]
fn a_node_with_a_small_part_of_a_windows_demand_is_minor_and_one_with_a_large_part_is_not() {
    let lim = [second(10_000)];
    // This node offers 3; one peer offers `others` in the same window.
    let minor_with = |others: usize| {
        let me = limiter_with(LimiterConfig::default(), 1);
        let key = me.key_id(b"k", &lim[0].window);
        assert!(!me.minor(key, T0), "a window this node does not hold");
        assert_eq!(admitted_in(&me, "k", &lim, 3, T0), 3);
        if others > 0 {
            let peer = limiter_with(LimiterConfig::default(), 2);
            assert_eq!(admitted_in(&peer, "k", &lim, others, T0), others);
            me.merge(&peer.collect_changed(T0 + 1).expect("peer changed"), T0 + 1);
        }
        me.minor(key, T0 + 2)
    };
    assert!(!minor_with(0), "alone: the whole demand");
    assert!(!minor_with(30), "a tenth");
    assert!(!minor_with(90), "just over a thirty-second");
    assert!(minor_with(3 * 32), "a thirty-third");
    assert!(minor_with(3_000), "a thousandth");
}

/// A node cut off from a window's owner (its last sum more than a round and a quarter old)
/// while the window is past its limit and refuses much here publishes no more demand than it
/// did: its peers divide by the demand they last had of it. Heard from lately, or far from
/// the limit, its demand rises with its load.
#[test]
fn a_demand_does_not_rise_while_the_owners_sums_are_out_of_hearing() {
    let lim = [second(100)];
    // User 2 of a window whose owner (1) holds user 3's register: 3 offered `others`.
    let user_beside = |others: usize| {
        let owner = limiter_with(LimiterConfig::default(), 1);
        let c = limiter_with(LimiterConfig::default(), 3);
        admitted_in(&c, "k", &lim, others, T0);
        owner.merge(&c.collect_changed(T0 + 1).unwrap(), T0 + 2);
        let key = owner.key_id(b"k", &lim[0].window);
        let sums = owner.aggregates_for(key, &[OriginId(2)], owner.aggregate_stamp(T0 + 3), T0 + 3);
        let b = limiter_with(LimiterConfig::default(), 2);
        admitted_in(&b, "k", &lim, 1, T0 + 3);
        b.merge_aggregates(
            &Batch {
                origin: OriginId(1),
                updates: sums,
            },
            T0 + 3,
        );
        admitted_in(&b, "k", &lim, 39, T0 + 4);
        let first = b.collect_changed(T0 + 5).unwrap().updates[0]
            .register
            .demand;
        assert_eq!(first, 40);
        // Its load doubles; it emits again `at`.
        admitted_in(&b, "k", &lim, 40, T0 + 100);
        move |at| b.collect_changed(at).unwrap().updates[0].register.demand
    };
    // Past the limit (150 + 40 > 100), refusing, the sum 297 ms old: held.
    assert_eq!(user_beside(150)(T0 + 300), 40);
    // The sum 197 ms old (within half the onset period): current.
    assert_eq!(user_beside(150)(T0 + 200), 80);
    // Far from the limit (3 offered 5): nothing to hold.
    assert_eq!(user_beside(5)(T0 + 300), 80);
}

/// Out of hearing, a fall is held as a rise is (published, it would ratchet the other way);
/// a current sum lets the demand follow the load again.
#[test]
fn a_demand_out_of_hearing_is_held_both_ways_until_a_sum_comes() {
    let lim = [second(100)];
    let owner = limiter_with(LimiterConfig::default(), 1);
    let c = limiter_with(LimiterConfig::default(), 3);
    admitted_in(&c, "k", &lim, 150, T0);
    owner.merge(&c.collect_changed(T0 + 1).unwrap(), T0 + 2);
    let key = owner.key_id(b"k", &lim[0].window);
    let sum_at = |at| Batch {
        origin: OriginId(1),
        updates: owner.aggregates_for(key, &[OriginId(2)], owner.aggregate_stamp(at), at),
    };
    let b = limiter_with(LimiterConfig::default(), 2);
    admitted_in(&b, "k", &lim, 1, T0 + 3);
    b.merge_aggregates(&sum_at(T0 + 3), T0 + 3);
    admitted_in(&b, "k", &lim, 59, T0 + 4);
    let demand = |at| b.collect_changed(at).unwrap().updates[0].register.demand;
    assert_eq!(demand(T0 + 5), 60);
    // By 1.15 s the first 60 requests have left the window and 20 more came (a demand of
    // about 20 measured): out of hearing, 60 still.
    admitted_in(&b, "k", &lim, 20, T0 + 600);
    assert_eq!(demand(T0 + 1_150), 60);
    // A sum arrives (c is still busy): the demand follows the load.
    admitted_in(&c, "k", &lim, 150, T0 + 1_100);
    owner.merge(&c.collect_changed(T0 + 1_101).unwrap(), T0 + 1_102);
    b.merge_aggregates(&sum_at(T0 + 1_160), T0 + 1_160);
    admitted_in(&b, "k", &lim, 1, T0 + 1_170);
    let now = demand(T0 + 1_180);
    assert!(now != 60 && now < 80, "{now}");
}

#[test]
fn a_binding_share_divides_by_the_demand_the_owners_sum_was_made_with() {
    // One of two members offered twice a limit of 100 a second, steadily: its share binds.
    let l = limiter();
    l.set_members(2, T0);
    let lim = [second(100)];
    let id = l.key_id(b"k", &lim[0].window);
    // The owner's sum of the others: demand 300, 10 admitted, made at `made`.
    let sum = |version, made: u64| {
        let mut u = update(id, lim[0].window.epoch(made), version, made);
        u.register.demand = 300;
        u.register.admitted = vec![10];
        Batch {
            origin: OriginId(7),
            updates: vec![u],
        }
    };
    for i in 0..100 {
        check(&l, "k", &lim, 1, T0 + 10 * i);
        check(&l, "k", &lim, 1, T0 + 10 * i);
    }
    let t = T0 + 1_000;
    assert_eq!(l.merge_aggregates(&sum(1, t), t).inserted, 1);
    let first = l.collect_changed(t).expect("changed").updates[0]
        .register
        .demand;
    // The owner makes its next sum with that demand; then this node's load rises by half,
    // short of a surge, and its next emission publishes part of the rise.
    assert_eq!(l.merge_aggregates(&sum(2, t + 50), t + 50).replaced, 1);
    for i in 0..20 {
        for _ in 0..3 {
            check(&l, "k", &lim, 1, t + 10 * i);
        }
    }
    let second = l.collect_changed(t + 200).expect("changed").updates[0]
        .register
        .demand;
    assert!(second > first, "{first} then {second}");
    let allowance = |now| l.inspect(b"k", &lim[0], now).unwrap().allowance;
    let credit = admission::WHOLE_REQUEST_CREDIT_FROM_SUMS;
    let share_of = |own: u32| 100.0 * f64::from(own) / f64::from(own + 300) + credit;
    // The sum it holds was made before the rise was published: it divides by the demand the
    // owner had, as every other user of the window does.
    assert!(
        (allowance(t + 201) - share_of(first)).abs() < 1e-9,
        "{} vs {}",
        allowance(t + 201),
        share_of(first)
    );
    // A sum made since: the new demand.
    assert_eq!(l.merge_aggregates(&sum(3, t + 250), t + 250).replaced, 1);
    assert!(
        (allowance(t + 251) - share_of(second)).abs() < 1e-9,
        "{} vs {}",
        allowance(t + 251),
        share_of(second)
    );
}

/// After a heal, a window whose other users come in an owner's sum gets no whole-request
/// credit for two windows (`admission::credit_settled`); one whose other users come in
/// their own registers (the full mesh) keeps it, and so does a node that was never cut off.
#[test]
fn through_an_owner_the_credit_waits_two_windows_after_members_come_back_in_sight() {
    let lim = [second(100)];
    // User 2 beside user 3, at `at`: 3's register reaches 2 in owner 1's sum, or directly.
    let user = |past: Past, through_owner: bool, at: u64| {
        let owner = limiter_with(LimiterConfig::default(), 1);
        let c = limiter_with(LimiterConfig::default(), 3);
        let b = limiter_with(LimiterConfig::default(), 2);
        // Forming: ten members known, six of them still silent (in their join grace), then all
        // live. A size never seen whole before is no heal.
        let formed = match past {
            Past::Whole | Past::Cut => T0,
            Past::LongCut | Past::Regrown => T0 - 70_000,
        };
        let joining: Vec<OriginId> = (11..17).map(OriginId).collect();
        b.set_liveness(4, &joining, 0, formed - 100);
        b.set_members(10, formed);
        match past {
            Past::Whole => {}
            Past::Cut => {
                // Six of ten out of sight (a partition's side), then all back at T0 + 20.
                b.set_members(4, T0 + 10);
                b.set_members(10, T0 + 20);
            }
            Past::LongCut | Past::Regrown => {
                // Six of ten out of sight for longer than `expected_hold_ms`: the side then
                // counts as whole at four.
                b.set_members(4, formed + 10);
                b.set_members(4, T0 - 5_000);
                assert_eq!(b.member_counts(), (4, 4), "the hold lapsed");
                assert_eq!(
                    b.back_in_sight_ms
                        .load(std::sync::atomic::Ordering::Relaxed),
                    0,
                    "a lapse of the hold brings nobody back"
                );
                if past == Past::LongCut {
                    // As a node sees a heal: the six back, silent in their join grace, then
                    // live.
                    let back: Vec<OriginId> = (21..27).map(OriginId).collect();
                    b.set_liveness(4, &back, 0, T0 + 10);
                    b.set_members(10, T0 + 20);
                } else {
                    // One member at a time (a scale-out, a rolling deploy): no heal.
                    for live in 5..=10 {
                        b.set_members(live, T0 + 2 * live as u64);
                    }
                }
            }
        }
        assert_eq!(b.member_counts(), (10, 10));
        admitted_in(&c, "k", &lim, 30, at - 5);
        admitted_in(&b, "k", &lim, 5, at - 5);
        let changes = c.collect_changed(at - 4).expect("c changed");
        if through_owner {
            owner.merge(&changes, at - 3);
            let key = owner.key_id(b"k", &lim[0].window);
            let stamp = owner.aggregate_stamp(at - 2);
            let sums = owner.aggregates_for(key, &[OriginId(2)], stamp, at - 2);
            b.merge_aggregates(
                &Batch {
                    origin: OriginId(1),
                    updates: sums,
                },
                at - 2,
            );
        } else {
            b.merge(&changes, at - 3);
        }
        b
    };
    let allowance = |past, through_owner, at| {
        user(past, through_owner, at)
            .inspect(b"k", &lim[0], at)
            .unwrap()
            .allowance
    };
    let credit = admission::WHOLE_REQUEST_CREDIT_FROM_SUMS;
    for at in [T0 + 500, T0 + 1_500, T0 + 2_005] {
        let whole = allowance(Past::Whole, true, at);
        for past in [Past::Cut, Past::LongCut] {
            let healed = allowance(past, true, at);
            assert!(
                (whole - healed - credit).abs() < 1e-9,
                "at +{} ms: {whole} never cut off, {healed} healed after {past:?}",
                at - T0
            );
        }
        assert_eq!(
            allowance(Past::Regrown, true, at),
            whole,
            "members back one at a time are no heal"
        );
    }
    // In the bucket where the hold ends (T0 + 2 020), checks admit what the exact allowance
    // says, not what a bound stored for the rest of the bucket would.
    let at = T0 + 2_005;
    let b = user(Past::Cut, true, at);
    let exact = b.inspect(b"k", &lim[0], at).unwrap();
    let local = |i: &crate::limiter::inspection::Inspection| {
        i.origins
            .iter()
            .find(|o| o.is_local)
            .map_or(0.0, |o| o.admitted)
    };
    let admitted = local(&exact) + admitted_in(&b, "k", &lim, 50, at) as f64;
    assert!(
        admitted <= exact.allowance,
        "{admitted} admitted of an allowance of {}",
        exact.allowance
    );
    // Two windows after the heal, the credit is back.
    let at = T0 + 2_100;
    for past in [Past::Cut, Past::LongCut] {
        assert_eq!(allowance(past, true, at), allowance(Past::Whole, true, at));
    }
    // Registers straight from the other user (the full mesh): the credit stays.
    let at = T0 + 500;
    assert_eq!(
        allowance(Past::Cut, false, at),
        allowance(Past::Whole, false, at)
    );
}

/// What a user of `through_an_owner_the_credit_waits_two_windows_after_members_come_back_in_sight`
/// went through before its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Past {
    /// Formed, and never cut off since.
    Whole,
    /// Six of ten members out of sight briefly, then back at once.
    Cut,
    /// Out of sight for longer than `expected_hold_ms`, then back as a node sees it: silent
    /// in their join grace, then live.
    LongCut,
    /// Out of sight for longer than `expected_hold_ms`, then back one at a time.
    Regrown,
}
