use super::*;

#[test]
fn the_swim_config_follows_the_cluster_size_without_foca_refusing_it() {
    // foca refuses a new probe period or probe RTT on a running instance: every size must
    // keep those of the first config, or the cluster would stay sized for its first
    // members (few retransmissions, a small cluster's time to down).
    let mut m = node(1);
    for n in [2, 5, 16, 17, 50, 100, 1_000, 5_000] {
        assert!(
            m.foca.set_config(config_for(n, 1_340)).is_ok(),
            "config for {n} members refused"
        );
    }
    assert_eq!(config_for(5, 1_340).suspect_to_down_after, PROBE_PERIOD * 3);
    assert!(config_for(100, 1_340).suspect_to_down_after >= Duration::from_secs(8));
    assert_eq!(config_for(1_000, 1_340).probe_period, PROBE_PERIOD);
}

fn node(i: u128) -> Membership {
    let addr: SocketAddr = format!("10.0.0.{i}:7946").parse().unwrap();
    Membership::new(
        NodeId::new(uuid::Uuid::from_u128(i), addr, 1_000),
        1_340,
        i as u64,
    )
}

/// Delivers every queued packet among the given members until the network is quiet.
fn settle(nodes: &mut [Membership], now: Instant) {
    for _ in 0..50 {
        let mut sent = false;
        for i in 0..nodes.len() {
            for (to, data) in nodes[i].take_outbox() {
                if let Some(j) = nodes.iter().position(|n| n.identity().addr == to.addr) {
                    let _ = nodes[j].handle_data(&data, now);
                    sent = true;
                }
            }
        }
        if !sent {
            return;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn three_nodes_form_and_see_a_leave() {
    let mut nodes = vec![node(1), node(2), node(3)];
    let seed = nodes[0].identity().addr;
    let now = crate::clock::monotonic_now();
    for n in &mut nodes[1..] {
        assert_eq!(n.announce_to_absent(&[seed], |_| true, now), 1);
    }
    settle(&mut nodes, now);
    // A few protocol periods for the gossip to spread.
    let mut t = now;
    for _ in 0..20 {
        t += Duration::from_millis(200);
        for n in &mut nodes {
            n.fire_due(t);
        }
        settle(&mut nodes, t);
    }
    for n in &nodes {
        assert_eq!(n.num_members(), 2, "{n:?}");
    }
    let events = nodes[1].take_events();
    assert!(events.contains(&MemberEvent::Active));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, MemberEvent::Up(id) if id.addr == seed))
    );
    assert_eq!(
        nodes[1].announce_to_absent(&[seed], |_| true, t),
        0,
        "the seed is a member now"
    );

    nodes[2].leave(t);
    settle(&mut nodes, t);
    let events = nodes[0].take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, MemberEvent::Down(id) if id.addr.to_string() == "10.0.0.3:7946")),
        "{events:?}"
    );
    assert_eq!(nodes[0].num_members(), 1);
}

/// Runs `rounds` of 200 ms: every node's timers, then delivery within each group (packets
/// across groups are lost).
fn run(nodes: &mut [Membership], groups: &[std::ops::Range<usize>], t: &mut Instant, rounds: u32) {
    for _ in 0..rounds {
        *t += Duration::from_millis(200);
        for n in nodes.iter_mut() {
            n.fire_due(*t);
        }
        for g in groups {
            settle(&mut nodes[g.clone()], *t);
        }
    }
}

fn recipients(n: &mut Membership) -> std::collections::BTreeSet<SocketAddr> {
    n.take_outbox().into_iter().map(|(to, _)| to.addr).collect()
}

#[tokio::test(start_paused = true)]
async fn members_held_down_get_a_few_announces_at_a_time_until_one_answers_then_all() {
    let mut nodes: Vec<Membership> = (1..=14).map(node).collect();
    let seed = nodes[0].identity().addr;
    let mut t = crate::clock::monotonic_now();
    for n in &mut nodes[1..] {
        n.announce_to_absent(&[seed], |_| true, t);
    }
    settle(&mut nodes, t);
    run(&mut nodes, std::slice::from_ref(&(0..14)), &mut t, 30);
    assert!(nodes.iter().all(|n| n.num_members() == 13), "{nodes:?}");

    // Cut {0, 1} off from the other twelve until each side holds the other down.
    run(&mut nodes, &[0..2, 2..14], &mut t, 100);
    assert_eq!(nodes[0].num_members(), 1, "the cut did not happen");
    let far: std::collections::BTreeSet<SocketAddr> =
        nodes[2..].iter().map(|n| n.identity().addr).collect();

    // While nothing answers, eight at a time, in turn: two rounds reach all twelve.
    let _ = nodes[0].take_outbox();
    assert_eq!(
        nodes[0].announce_to_absent(&[], |_| true, t),
        ANNOUNCE_AT_A_TIME
    );
    let first = recipients(&mut nodes[0]);
    assert_eq!(first.len(), ANNOUNCE_AT_A_TIME);
    assert_eq!(
        nodes[0].announce_to_absent(&[], |_| true, t),
        ANNOUNCE_AT_A_TIME
    );
    let second = recipients(&mut nodes[0]);
    assert!(first.is_subset(&far) && second.is_subset(&far));
    assert_eq!(&first | &second, far, "a capped round skipped a member");

    // Node 2's address comes back with a new process that never heard of node 0: only its
    // coming up can tell node 0 (nobody there declared node 0 down). Once it does, the
    // next round goes to every member still absent, and the round after to a few again.
    nodes[2] = Membership::new(
        NodeId::new(uuid::Uuid::from_u128(99), nodes[2].identity().addr, 2_000),
        1_340,
        99,
    );
    let _ = nodes[0].take_events();
    // Returns the events, and whether the sign of the heal came within FULL_ROUND_EVERY
    // of the last full round (and so had to wait for it).
    let all_once_heard = |nodes: &mut [Membership], t: &mut Instant, group: usize| {
        let mut rounds = 0;
        while !nodes[0].heal_seen {
            rounds += 1;
            assert!(rounds < 20, "node 0 never heard back");
            nodes[0].announce_to_absent(&[], |_| true, *t);
            run(nodes, &[0..group, group..14], t, 1);
        }
        let waited = nodes[0]
            .last_full_round
            .filter(|last| t.saturating_duration_since(*last) < FULL_ROUND_EVERY);
        if let Some(last) = waited {
            assert!(
                nodes[0].announce_to_absent(&[], |_| true, *t) <= ANNOUNCE_AT_A_TIME,
                "a sign within FULL_ROUND_EVERY of the last full round waits"
            );
            assert!(nodes[0].heal_seen, "and is kept for the round after it");
            *t = last + FULL_ROUND_EVERY;
        }
        let _ = nodes[0].take_outbox();
        let sent = nodes[0].announce_to_absent(&[], |_| true, *t);
        let absent = nodes[0].absent.clone();
        assert!(absent.len() > ANNOUNCE_AT_A_TIME, "{absent:?}");
        assert_eq!(sent, absent.len());
        assert_eq!(recipients(&mut nodes[0]), absent);
        assert!(nodes[0].announce_to_absent(&[], |_| true, *t) <= ANNOUNCE_AT_A_TIME);
        (nodes[0].take_events(), waited.is_some())
    };
    let (events, waited) = all_once_heard(&mut nodes, &mut t, 3);
    assert!(!waited, "the first sign of a heal is acted on at once");
    assert!(
        !events.iter().any(|e| matches!(e, MemberEvent::Rejoined(_))),
        "{events:?}"
    );
    // Node 3, which holds node 0 down, answers by telling it so: node 0 renews its
    // identity, and that is a heal too; it comes within a few rounds of the first, and
    // its full round waits until FULL_ROUND_EVERY has passed.
    let (events, waited) = all_once_heard(&mut nodes, &mut t, 4);
    assert!(
        events.iter().any(|e| matches!(e, MemberEvent::Rejoined(_))),
        "{events:?}"
    );
    assert!(
        waited,
        "the second sign came within FULL_ROUND_EVERY of the first round"
    );
}

/// foca tells a rename before a member comes back up, and a rename may be of one down
/// identity by another (a member renewed its identity on the far side of a partition and
/// was declared down there again): that is no sign of a heal. Its coming up is.
#[tokio::test(start_paused = true)]
async fn a_down_member_renamed_by_another_down_identity_is_no_heal() {
    use foca::Identity;
    let mut m = node(1);
    let t = crate::clock::monotonic_now();
    let addr: SocketAddr = "10.0.0.2:7946".parse().unwrap();
    let first = NodeId::new(uuid::Uuid::from_u128(2), addr, 1_000);
    let apply = |m: &mut Membership, member: foca::Member<NodeId>| {
        m.foca
            .apply_many(std::iter::once(member), true, &mut m.runtime)
            .expect("foca takes the update");
        m.drain(t);
    };
    apply(&mut m, foca::Member::alive(first.clone()));
    apply(&mut m, foca::Member::down(first.clone()));
    assert_eq!(m.num_members(), 0, "the member went down");
    assert_eq!(m.announce_to_absent(&[], |_| true, t), 1, "and is absent");
    let _ = m.take_events();
    let _ = m.take_outbox();

    let renewed = first.renew().expect("a renewal");
    apply(&mut m, foca::Member::down(renewed.clone()));
    let events = m.take_events();
    assert!(
        events.iter().any(
            |e| matches!(e, MemberEvent::Renamed { old, new } if *old == first && *new == renewed)
        ),
        "the rename happened: {events:?}"
    );
    assert!(
        !m.heal_seen,
        "a rename from down to down is no heal: {events:?}"
    );

    // The same address up under a newer identity is.
    apply(
        &mut m,
        foca::Member::alive(renewed.renew().expect("a renewal")),
    );
    assert!(m.heal_seen, "{:?}", m.take_events());
}
