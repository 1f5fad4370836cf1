use super::*;

fn member(i: u128) -> NodeId {
    NodeId::new(
        uuid::Uuid::from_u128(i),
        format!("10.0.0.{i}:7946").parse().unwrap(),
        1,
    )
}

#[test]
fn heard_and_settled_members_are_live_others_are_silent() {
    let t0 = crate::clock::monotonic_now();
    let ms = Duration::from_millis;
    let mut live = Liveness::new(ms(800), ms(500));
    let members = [member(1), member(2), member(3)];
    live.set_members(&members, t0);
    live.joined(2, t0, true);
    live.heard(1, t0);
    live.heard(2, t0);
    let fences = Fences::default();
    // 3 was never heard from; 2 is in its join grace.
    assert_eq!(
        live.silent(&members, &fences, t0 + ms(100)),
        [OriginId(2), OriginId(3)]
    );
    assert_eq!(live.silent(&members, &fences, t0 + ms(500)), [OriginId(3)]);
    // Past the silence threshold, everyone not heard from again is silent.
    live.heard(3, t0 + ms(600));
    assert_eq!(
        live.silent(&members, &fences, t0 + ms(900)),
        [OriginId(1), OriginId(2)]
    );
    // A member cut off for its clock is silent however recently heard.
    let fenced = Fences {
        own: false,
        peers: [3].into(),
    };
    assert_eq!(
        live.silent(&members[2..], &fenced, t0 + ms(900)),
        [OriginId(3)]
    );
    let own = Fences {
        own: true,
        peers: BTreeSet::new(),
    };
    assert_eq!(
        live.silent(&members[2..], &own, t0 + ms(900)),
        [OriginId(3)]
    );
}

#[test]
fn a_member_that_leaves_is_forgotten() {
    let t0 = crate::clock::monotonic_now();
    let mut live = Liveness::new(Duration::from_millis(800), Duration::ZERO);
    live.set_members(&[member(1), member(2)], t0);
    live.counted(1, 7, t0);
    live.counted(2, 3, t0);
    assert_eq!(live.largest_count(), 7);
    assert_eq!(live.address_of(1), Some(member(1).addr));
    live.set_members(&[member(2)], t0);
    assert_eq!(live.address_of(1), None);
    // Member 2's count may have included member 1: it is heard again before it counts.
    assert_eq!(live.largest_count(), 0);
    live.counted(2, 2, t0);
    assert_eq!(live.largest_count(), 2);
}

#[test]
fn a_node_lacks_members_when_most_count_more_not_when_one_does() {
    let t0 = crate::clock::monotonic_now();
    let mut live = Liveness::new(Duration::from_millis(800), Duration::ZERO);
    let members: Vec<NodeId> = (1..=5).map(member).collect();
    live.set_members(&members, t0);
    assert!(!live.most_count_more_than(6, t0), "nothing heard");
    // One member still counts one that the others dropped.
    for (m, c) in [(1, 7), (2, 6), (3, 6), (4, 6)] {
        live.counted(m, c, t0);
    }
    assert!(!live.most_count_more_than(6, t0));
    assert!(
        live.largest_count() > 6,
        "the largest alone would say otherwise"
    );
    // Most of them know of a member this node does not.
    live.counted(2, 7, t0);
    live.counted(3, 7, t0);
    assert!(live.most_count_more_than(6, t0));
    // Two of five is not most.
    live.counted(5, 6, t0);
    live.counted(4, 6, t0);
    live.counted(3, 6, t0);
    assert!(!live.most_count_more_than(6, t0), "two of five");
    // Counts heard long ago (members this node no longer hears from) do not outvote the
    // fresh ones, whichever way they point.
    let fresh = count_fresh(Duration::from_millis(800));
    assert_eq!(fresh, Duration::from_secs(5));
    let later = t0 + fresh * 2;
    live.counted(1, 7, later);
    live.counted(2, 7, later);
    assert!(live.most_count_more_than(6, later), "two fresh, both more");
    // A stale majority that counts more does not outvote fresh counts that do not.
    let mut stale = Liveness::new(Duration::from_millis(800), Duration::ZERO);
    stale.set_members(&members, t0);
    for m in 1..=4 {
        stale.counted(m, 7, t0);
    }
    stale.counted(5, 6, later);
    assert!(
        stale.most_count_more_than(6, t0 + fresh),
        "fresh up to the limit"
    );
    assert!(
        !stale.most_count_more_than(6, later),
        "one fresh count, not more"
    );
    // Nothing fresh: nothing says this node lacks members.
    assert!(!stale.most_count_more_than(6, later + fresh + Duration::from_millis(1)));
    // Rounds of a second: counts stay fresh for 25 s.
    assert_eq!(count_fresh(Duration::from_secs(4)), Duration::from_secs(25));
}

#[test]
fn a_count_heard_before_a_departure_does_not_outlive_it_but_one_heard_before_a_join_does() {
    let t0 = crate::clock::monotonic_now();
    let mut live = Liveness::new(Duration::from_millis(800), Duration::ZERO);
    live.set_members(&[member(1), member(2), member(3)], t0);
    live.counted(1, 4, t0);
    live.counted(2, 4, t0);
    // A newcomer: what the others counted still stands (they may not know it yet, and
    // the smaller count is what makes this node announce it).
    live.set_members(&[member(1), member(2), member(3), member(5)], t0);
    assert_eq!(live.largest_count(), 4);
    // Member 3 crashes; member 2 is not heard again, member 1 is.
    live.set_members(&[member(1), member(2), member(5)], t0);
    assert_eq!(live.largest_count(), 0);
    live.counted(1, 4, t0);
    assert_eq!(live.largest_count(), 4);
}

#[test]
fn members_that_left_are_listed_for_a_while_and_one_that_returns_is_not() {
    let t0 = crate::clock::monotonic_now();
    let ms = Duration::from_millis;
    let mut live = Liveness::new(ms(800), Duration::ZERO);
    live.set_members(&[member(1), member(2), member(3)], t0);
    assert!(live.departed_within(ms(1_000), t0).is_empty());
    live.set_members(&[member(3)], t0 + ms(100));
    live.set_members(&[member(2), member(3)], t0 + ms(200));
    assert_eq!(live.departed_within(ms(1_000), t0 + ms(300)), [OriginId(1)]);
    assert_eq!(
        live.departed_within(ms(1_000), t0 + ms(1_100)),
        [OriginId(1)]
    );
    assert!(live.departed_within(ms(1_000), t0 + ms(1_101)).is_empty());
    // Whoever asks, a change of the members forgets departures older than `HOLD_FOR`.
    live.set_members(&[member(2), member(3)], t0 + ms(1_200));
    live.set_members(&[member(3)], t0 + ms(1_300));
    live.set_members(&[member(3)], t0 + HOLD_FOR + ms(1_301));
    assert!(live.departed.is_empty());
}

#[test]
fn relayed_times_land_on_the_one_member_with_the_short_id_and_never_in_the_future() {
    let t0 = crate::clock::monotonic_now();
    let ms = Duration::from_millis;
    let mut live = Liveness::new(ms(800), ms(500));
    // 1 and 1 + 2^32 share a short id; 2 is alone with its own.
    let twin = 1 + (1u128 << 32);
    let twin_member = NodeId::new(
        uuid::Uuid::from_u128(twin),
        "10.0.0.9:7946".parse().unwrap(),
        1,
    );
    live.set_members(&[member(1), twin_member, member(2)], t0);
    live.heard_any(2, 5_000);
    live.heard_relayed(2, 4_000, 10_000);
    assert_eq!(live.side_heard(2), Some(5_000), "its own later datagram");
    live.heard_relayed(2, 7_000, 10_000);
    live.heard_relayed(2, 6_000, 10_000);
    assert_eq!(live.side_heard(2), Some(7_000), "the latest relayed");
    live.heard_relayed(2, 99_000, 10_000);
    assert_eq!(live.side_heard(2), Some(10_000), "capped at now");
    live.heard_relayed(1, 9_000, 10_000);
    assert_eq!(live.side_heard(1), None, "a shared short id names neither");
    assert_eq!(live.side_heard(twin), None);
    live.heard_relayed(3, 9_000, 10_000);
    assert_eq!(live.side_heard_since(0), [(2, 10_000)], "not a member");
    assert_eq!(live.side_heard_since(10_001), []);
    // The twin gone, its short id names 1.
    live.set_members(&[member(1), member(2)], t0);
    live.heard_relayed(1, 9_000, 10_000);
    assert_eq!(live.side_heard_since(0), [(1, 9_000), (2, 10_000)]);
}

/// A sender a minute off counts while it keeps sending: a datagram replayed (the same send
/// time) renews nothing, so a replay every few seconds cannot keep a long-gone sender counted
/// (under the ledger, senders a minute off lower every part, and cut off the node that hears
/// more of them than it sees live).
#[test]
fn a_replayed_datagram_a_minute_off_does_not_keep_its_sender_counted() {
    let mut live = Liveness::new(Duration::from_millis(800), Duration::ZERO);
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    live.far_clock(9, 1_000, true, at(0));
    assert_eq!(live.far_clocks(&[], at(1)), [OriginId(9)]);
    // Replayed just before it would be forgotten: not renewed.
    live.far_clock(9, 1_000, true, at(4_900));
    assert!(live.far_clocks(&[], at(5_100)).is_empty(), "forgotten");
    // Nor once forgotten.
    live.far_clock(9, 1_000, true, at(5_150));
    assert!(live.far_clocks(&[], at(5_160)).is_empty(), "a replay after");
    // A later datagram of the sender counts it again, and renews it.
    live.far_clock(9, 7_000, true, at(5_200));
    live.far_clock(9, 9_000, true, at(9_000));
    assert_eq!(live.far_clocks(&[], at(12_000)), [OriginId(9)]);
}
