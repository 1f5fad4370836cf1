use super::*;

fn member(id: u128) -> Member {
    Member {
        id,
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7_000 + id as u16)),
    }
}

/// Node 1's ownership in a cluster of nodes 1-5, and a window whose first owner in its
/// view is neither node 1 nor node 5 (node 5 will claim it).
fn viewed_from_node_1() -> (Ownership, KeyId, Member) {
    let mut o = Ownership::new([3; 32]);
    std::sync::Arc::make_mut(&mut o.ring).update(&(1..=5).map(member).collect::<Vec<_>>());
    let key = (0u128..)
        .map(|i| KeyId(i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)))
        .find(|k| {
            o.owners(*k)
                .is_some_and(|[a, b]| a.id != 1 && a.id != 5 && b.id != 5)
        })
        .expect("some window is owned by others");
    let first = o.owners(key).unwrap()[0];
    (o, key, first)
}

#[test]
fn a_member_sending_sums_of_a_window_it_does_not_own_here_gets_the_registers_while_it_does() {
    let (mut o, key, first) = viewed_from_node_1();
    let t0 = crate::clock::monotonic_now();
    let to = |o: &mut Ownership, both| o.register_destinations(key, 1, both);
    assert_eq!(to(&mut o, false), vec![first.destination()]);
    // Node 5 counts itself the owner (its view differs) and sends node 1 its sums.
    let acting = member(5).destination();
    o.heard_sums((1, 5), acting, [key], |_| true, t0);
    assert_eq!(to(&mut o, false), vec![first.destination(), acting]);
    assert_eq!(to(&mut o, true).len(), 3, "both owners and node 5");
    // Its sums keep coming: still there after more than a subscription's time.
    o.heard_sums((1, 5), acting, [key], |_| true, t0 + SUBSCRIPTION / 2);
    o.forget_acting(t0 + SUBSCRIPTION);
    assert!(to(&mut o, false).contains(&acting));
    // They stop: a subscription's time after the last, node 5 gets nothing more.
    o.forget_acting(t0 + SUBSCRIPTION / 2 + SUBSCRIPTION);
    assert_eq!(to(&mut o, false), vec![first.destination()]);
    // The first owner's own sums, and this node's, do not add a destination; nor do
    // they end what another member's began (both may reach this node).
    o.heard_sums((1, first.id), first.destination(), [key], |_| true, t0);
    o.heard_sums((1, 1), member(1).destination(), [key], |_| true, t0);
    assert_eq!(to(&mut o, false), vec![first.destination()]);
    let t1 = t0 + SUBSCRIPTION * 2;
    o.heard_sums((1, 5), acting, [key], |_| true, t1);
    o.heard_sums((1, first.id), first.destination(), [key], |_| true, t1);
    o.forget_acting(t1 + SUBSCRIPTION / 2);
    assert_eq!(to(&mut o, false), vec![first.destination(), acting]);
}

#[test]
fn the_owners_cache_stays_within_its_bound_as_windows_come_and_go() {
    let (mut o, key, first) = viewed_from_node_1();
    for k in 0..MOST_CACHED_OWNERS as u128 + 10 {
        o.owners(KeyId(k));
    }
    assert!(o.cache.len() <= MOST_CACHED_OWNERS, "{}", o.cache.len());
    assert_eq!(
        o.owners(key).map(|[a, _]| a.id),
        Some(first.id),
        "still right"
    );
}

#[test]
fn sums_of_ever_more_windows_cannot_grow_the_table_past_its_bound() {
    let (mut o, _, _) = viewed_from_node_1();
    let t0 = crate::clock::monotonic_now();
    let keys: Vec<KeyId> = (0..MOST_ACTING as u128 * 2).map(KeyId).collect();
    o.heard_sums((1, 5), member(5).destination(), keys, |_| true, t0);
    assert!(o.acting.len() <= MOST_ACTING, "{} windows", o.acting.len());
    assert!(o.acting.len() >= MOST_ACTING / 2, "the bound is not zero");
}

/// The rounds, of `rounds`, in which `o` announces.
fn announcing(o: &mut Ownership, rounds: u32) -> Vec<u32> {
    (0..rounds).filter(|_| o.spread_due(false)).collect()
}

#[test]
fn announcements_slow_down_while_nothing_is_missing_and_resume_when_the_members_change() {
    let mut o = Ownership::new([3; 32]);
    // Gaps of 1, 2, 4, 8, then 16 rounds.
    assert_eq!(
        announcing(&mut o, 64),
        vec![0, 1, 3, 7, 15, 31, 47, 63],
        "rounds of the first 64 that announce"
    );
    assert_eq!(announcing(&mut o, 32).len(), 2, "one in 16 rounds at most");
    // A change, mid-wait: the next round announces, and the pace starts over.
    assert!(!o.spread_due(false));
    o.members_changed();
    assert_eq!(announcing(&mut o, 8), vec![0, 1, 3, 7]);
    // Behind another member's count: every round, for as long as it lasts.
    assert!((0..20).all(|_| o.spread_due(true)));
    // Then slowing again, from where the last of those left the gap (two rounds).
    assert_eq!(announcing(&mut o, 8), vec![0, 2, 6]);
}
