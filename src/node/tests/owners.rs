//! Owner mode: registers through each window's owners instead of to every member.

use super::*;

/// `n` nodes on owner mode whatever their number, formed.
fn owners_cluster(n: usize) -> Net {
    owners_cluster_with(n, Setup::default())
}

/// How an owner-mode cluster forms.
#[derive(Debug, Default, Clone, Copy)]
struct Setup {
    /// Check return routability (an insecure cluster).
    verify: bool,
    /// This node's address answers nothing but SWIM, from the start.
    mute: Option<usize>,
    /// Datagrams of this kind are lost while the cluster forms (and after, until changed).
    lose: Option<Kind>,
}

/// As [`owners_cluster`], formed as `setup` says.
fn owners_cluster_with(n: usize, setup: Setup) -> Net {
    let mut net = Net::new();
    net.mute = (0..n).map(|i| Some(i) == setup.mute).collect();
    net.lose = setup.lose;
    for i in 0..n {
        let seeds: Vec<usize> = if i == 0 { vec![] } else { vec![0] };
        let mut p = net.params(i, i as u128 + 1, &seeds);
        p.dissemination = Dissemination::Owners;
        p.verify_return_route = setup.verify;
        net.boot_with(p);
    }
    net.run_ms(4_000);
    for i in 0..n {
        assert_eq!(net.members(i), n - 1, "node {i} sees every other");
    }
    net
}

/// What node `i` estimates the cluster admitted on `key`.
fn global(net: &Net, i: usize, key: &[u8]) -> f64 {
    net.node(i)
        .limiter()
        .inspect(key, &limit(), net.now(i).cluster_ms)
        .map_or(0.0, |ins| ins.global_admitted)
}

#[test]
fn admissions_reach_every_user_through_the_owner() {
    let mut net = owners_cluster(6);
    // Nodes 0, 2 and 4 use the window; the others never hear of it unless they own it.
    net.admit(0, b"k", 20);
    net.admit(2, b"k", 5);
    net.admit(4, b"k", 1);
    let (summaries, aggregates) = (net.sent[0].len(), sums_sent(&net));
    // Far from its limit, the window goes out on calm rounds: once a second from each user to
    // the first owner, and its sums once a second back.
    net.run_ms(2_500);
    for i in [0, 2, 4] {
        assert_eq!(global(&net, i, b"k"), 26.0, "node {i}");
    }
    assert!(sums_sent(&net) > aggregates, "owners sent sums");
    // Node 0 sent its register to the window's owners only, not to every member.
    let id = net.node(0).limiter().key_id(b"k", &limit().window);
    let owners: Vec<SocketAddr> = {
        let core = net.nodes[0].as_mut().unwrap();
        let [a, b] = core.owners_of(id).unwrap();
        [a, b]
            .iter()
            .map(|o| addr(o.as_u128() as usize - 1))
            .collect()
    };
    // Registers go out as summaries, or with sums to the same node as exchanges.
    let to: std::collections::BTreeSet<SocketAddr> = net.sent[0][summaries..]
        .iter()
        .filter(|o| matches!(o.kind, Kind::Summary | Kind::Exchange))
        .map(|o| o.to)
        .collect();
    assert!(!to.is_empty());
    assert!(
        to.iter().all(|a| owners.contains(a)),
        "{to:?} beyond the owners {owners:?}"
    );
    // No heartbeats to every member any more.
    let heartbeats = total(&net, Kind::Heartbeat);
    net.run_ms(1_000);
    assert_eq!(total(&net, Kind::Heartbeat), heartbeats);
}

#[test]
fn when_an_owner_crashes_the_second_takes_over_with_the_registers() {
    let mut net = owners_cluster(6);
    let id = net.node(1).limiter().key_id(b"k", &limit().window);
    let [first, second] = net.nodes[1].as_mut().unwrap().owners_of(id).unwrap();
    let (first, second) = (first.as_u128() as usize - 1, second.as_u128() as usize - 1);
    let users: Vec<usize> = (0..6)
        .filter(|i| *i != first && *i != second)
        .take(3)
        .collect();
    for (n, &u) in users.iter().enumerate() {
        net.admit(u, b"k", 10 * (n + 1));
    }
    // Anti-entropy (5 s) hands every register to the second owner as well.
    net.run_ms(6_000);
    let held: Vec<OriginId> = net
        .node(second)
        .limiter()
        .inspect(b"k", &limit(), net.now(second).cluster_ms)
        .map(|ins| {
            ins.origins
                .iter()
                .filter(|o| !o.is_local && !o.aggregate)
                .map(|o| o.origin)
                .collect()
        })
        .unwrap_or_default();
    for &u in &users {
        assert!(
            held.contains(&OriginId(u as u128 + 1)),
            "{held:?} lacks node {u}"
        );
    }
    net.nodes[first] = None;
    net.cut[first] = true;
    // SWIM counts it out; the ring moves the window to the second owner, which holds the
    // registers and starts summing them for the users.
    net.run_ms(8_000);
    for &u in &users {
        assert_eq!(global(&net, u, b"k"), 60.0, "node {u}");
        let [now_first, _] = net.nodes[u].as_mut().unwrap().owners_of(id).unwrap();
        assert_ne!(now_first.as_u128() as usize - 1, first);
    }
}

fn total(net: &Net, kind: Kind) -> usize {
    (0..net.sent.len()).map(|i| net.sent_kind(i, kind)).sum()
}

/// Datagrams that carried an owner's sums, alone or with registers.
fn sums_sent(net: &Net) -> usize {
    total(net, Kind::Aggregate) + total(net, Kind::Exchange)
}

/// A key whose first owner, in node `viewer`'s view, is node `owner`.
fn key_owned_by(net: &mut Net, viewer: usize, owner: usize) -> Vec<u8> {
    key_owned_by_in(net, viewer, owner, &limit().window)
}

/// A key whose window `spec`'s first owner, in node `viewer`'s view, is node `owner`.
fn key_owned_by_in(net: &mut Net, viewer: usize, owner: usize, spec: &WindowSpec) -> Vec<u8> {
    (0..1_000)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| {
            let id = net.node(viewer).limiter().key_id(k, spec);
            let core = net.nodes[viewer].as_mut().unwrap();
            core.owners_of(id).unwrap()[0].as_u128() as usize - 1 == owner
        })
        .expect("some key is owned by every node")
}

/// Nodes 0 and 1 of a 6-node cluster, each the first owner of a window the other uses (`a`,
/// owned by 1; `b`, owned by 0), with node 2 using both so that each owner has something of
/// the others to sum. Returns the two keys and where node 0's datagrams start.
fn crossed_owners(net: &mut Net) -> (Vec<u8>, Vec<u8>, usize) {
    let a = key_owned_by(net, 0, 1);
    let b = key_owned_by(net, 1, 0);
    net.admit(0, &a, 7);
    net.admit(2, &a, 11);
    net.admit(1, &b, 3);
    net.admit(2, &b, 13);
    (a, b, net.sent[0].len())
}

/// Whether node `i` holds an owner's sum of `key`.
fn holds_a_sum(net: &Net, i: usize, key: &[u8]) -> bool {
    net.node(i)
        .limiter()
        .inspect(key, &limit(), net.now(i).cluster_ms)
        .is_some_and(|ins| ins.origins.iter().any(|o| o.aggregate))
}

#[test]
fn registers_and_sums_for_the_same_node_share_a_datagram() {
    let mut net = owners_cluster(6);
    let (a, b, from) = crossed_owners(&mut net);
    // Past the 3 s a subscription lasts without registers: what went in exchanges keeps it.
    net.run_ms(3_500);
    let to_1: Vec<Kind> = net.sent[0][from..]
        .iter()
        .filter(|o| o.to == addr(1))
        .map(|o| o.kind)
        .collect();
    assert!(
        to_1.contains(&Kind::Exchange),
        "node 0 sent node 1 {to_1:?}"
    );
    // Node 1 said it reads the compact header and the timed one, which says the sender's
    // cluster time: what node 0 sent it lately has the timed one.
    let versions: Vec<u8> = net.sent[0][from..]
        .iter()
        .filter(|o| o.to == addr(1))
        .map(|o| o.datagram[2])
        .collect();
    assert_eq!(
        versions.last(),
        Some(&crate::gossip::wire::TIMED_VERSION),
        "{versions:?}"
    );
    net.admit(2, &a, 5);
    net.admit(2, &b, 2);
    net.run_ms(1_500);
    // Whatever went in one datagram arrived: each owner holds the other's register, and each
    // user the other owner's sum, as a sum.
    assert_eq!(global(&net, 1, &a), 23.0);
    assert_eq!(global(&net, 0, &a), 23.0);
    assert_eq!(global(&net, 0, &b), 18.0);
    assert_eq!(global(&net, 1, &b), 18.0);
    assert_eq!(
        net.seen(1, &a, 1),
        7.0,
        "node 0's register of `a` at its owner"
    );
    assert!(holds_a_sum(&net, 0, &a) && holds_a_sum(&net, 1, &b));
}

#[test]
fn a_member_that_never_said_what_it_reads_gets_no_exchange_and_no_compact_header() {
    // An older build reads a heartbeat no further than its prefix, so it never announces:
    // as if every announcement were lost.
    let mut net = owners_cluster(6);
    net.lose = Some(Kind::Heartbeat);
    let (a, b, _) = crossed_owners(&mut net);
    net.run_ms(3_500);
    assert_eq!(total(&net, Kind::Exchange), 0);
    // Nor a compact header: every datagram is of the full layout.
    let versions: std::collections::BTreeSet<u8> =
        net.sent.iter().flatten().map(|o| o.datagram[2]).collect();
    assert_eq!(
        versions,
        std::collections::BTreeSet::from([crate::gossip::wire::WIRE_VERSION])
    );
    assert_eq!(global(&net, 0, &a), 18.0);
    assert_eq!(global(&net, 1, &b), 16.0);
    assert!(holds_a_sum(&net, 0, &a) && holds_a_sum(&net, 1, &b));
}

/// Node 1's announcements (heartbeats) to node 0 so far.
fn announcements_from_1_to_0(net: &Net) -> Vec<Outgoing> {
    net.sent[1]
        .iter()
        .filter(|o| o.kind == Kind::Heartbeat && o.to == addr(0))
        .cloned()
        .collect()
}

#[test]
fn a_members_flags_count_only_from_its_own_address() {
    let mut net = owners_cluster(6);
    net.lose = Some(Kind::Heartbeat);
    crossed_owners(&mut net);
    net.run_ms(1_500);
    // Node 1's announcements to node 0 (ids are slot + 1), lost on the way.
    let first = announcements_from_1_to_0(&net);
    assert_eq!(first.len(), 1, "one announcement, then none for 30 s");
    let deliver = |net: &mut Net, out: &Outgoing, from: usize| {
        net.hand_over(0, out.datagram.clone(), from);
        net.node(0).features.reads_exchange(2, net.now(0).at)
    };
    // Genuine, but from another member's address: not taken.
    assert!(!deliver(&mut net, &first[0], 5));
    // The next one, 30 s on, from node 1's own address.
    net.run_ms(30_000);
    let next = announcements_from_1_to_0(&net);
    assert_eq!(next.len(), 2);
    assert!(deliver(&mut net, &next[1], 1));
}

#[test]
fn a_members_count_is_taken_only_from_its_own_address() {
    let mut net = owners_cluster(6);
    net.lose = Some(Kind::Heartbeat);
    crossed_owners(&mut net);
    net.run_ms(1_500);
    // Node 1's announcements to node 0 (ids are slot + 1), lost on the way; each carries the
    // members node 1 counts.
    let counted_at = |net: &Net| net.node(0).liveness.count_of(2).map(|(_, at)| at);
    let first = announcements_from_1_to_0(&net);
    assert_eq!(first.len(), 1);
    // Nothing else from node 1 reaches node 0 from now on but what is handed over.
    net.cut[1] = true;
    net.run_ms(10);
    let before = counted_at(&net);
    // Genuine, but from another member's address: not counted.
    net.hand_over(0, first[0].datagram.clone(), 5);
    assert_eq!(counted_at(&net), before);
    // The next one, 30 s on, from node 1's own address: counted.
    net.cut[1] = false;
    net.run_ms(30_000);
    net.cut[1] = true;
    net.run_ms(10);
    let before = counted_at(&net);
    let next = announcements_from_1_to_0(&net);
    assert_eq!(next.len(), 2);
    net.hand_over(0, next[1].datagram.clone(), 1);
    assert_ne!(counted_at(&net), before);
    assert_eq!(net.node(0).liveness.count_of(2).map(|(n, _)| n), Some(6));
}

#[test]
fn in_an_insecure_cluster_a_members_count_is_taken_only_from_a_datagram_that_echoes() {
    let mut net = owners_cluster_with(
        3,
        Setup {
            verify: true,
            ..Setup::default()
        },
    );
    net.run_ms(2_000);
    let key = key_owned_by(&mut net, 1, 0);
    net.admit(1, &key, 1);
    net.run_ms(1_000);
    let counted = |net: &Net| net.node(0).liveness.count_of(2);
    let (count, at) = counted(&net).expect("node 1's count was taken");
    assert_eq!(count, 3);
    // Node 1 sends with the wrong echo of node 0's cookie: what anyone who can send from node
    // 1's (verified) address, but not receive there, would send. It is cut off meanwhile, so
    // that nothing from node 0 puts the right echo back.
    net.cut[1] = true;
    let first = net.sent[1].len();
    net.nodes[1]
        .as_mut()
        .unwrap()
        .return_route
        .as_mut()
        .expect("an insecure cluster checks return routes")
        .forget_echo(1);
    net.admit(1, &key, 2);
    net.run_ms(1_200);
    let forged = net.sent[1][first..]
        .iter()
        .find(|o| o.to == addr(0) && matches!(o.kind, Kind::Summary | Kind::Exchange))
        .expect("node 1 sent its registers to node 0")
        .clone();
    net.hand_over(0, forged.datagram, 1);
    assert_eq!(global(&net, 0, &key), 3.0, "the datagram was read");
    assert_eq!(
        counted(&net),
        Some((count, at)),
        "counted from a datagram that does not show its sender receives"
    );
}

#[test]
fn in_an_insecure_cluster_state_goes_only_to_addresses_that_answered() {
    // Node 5's address never answers anything but SWIM (a victim's address a forged member
    // claims): whatever it owns or uses, it gets no register and no sum.
    let mut net = owners_cluster_with(
        6,
        Setup {
            verify: true,
            mute: Some(5),
            ..Setup::default()
        },
    );
    // The others wait for node 5's word until their warm-up times out.
    net.run_ms(2_000);
    let a = key_owned_by(&mut net, 0, 1);
    let b = key_owned_by(&mut net, 0, 5);
    for (i, key) in [(0, &a), (2, &a), (3, &b), (4, &b)] {
        net.admit(i, key, 4 + i);
    }
    net.run_ms(6_000);
    // The others verified each other and share through the owners as in a secure cluster.
    assert_eq!(global(&net, 2, &a), 4.0 + 6.0);
    assert_eq!(global(&net, 0, &a), 4.0 + 6.0);
    let to_5: Vec<Kind> = (0..5)
        .flat_map(|i| net.sent[i].iter())
        .filter(|o| o.to == addr(5))
        .map(|o| o.kind)
        .collect();
    assert!(
        to_5.iter()
            .all(|k| matches!(k, Kind::Heartbeat | Kind::Membership)),
        "state sent to an address that never answered: {to_5:?}"
    );
    let heartbeats = to_5.iter().filter(|k| **k == Kind::Heartbeat).count();
    assert!(heartbeats > 0, "asked for an echo");
    assert!(
        heartbeats <= 5 * 10,
        "{heartbeats} heartbeats to a silent address"
    );
}

#[test]
fn a_request_for_an_echo_is_answered_with_one() {
    // Every heartbeat lost while the cluster forms: nobody has verified anybody.
    let mut net = owners_cluster_with(
        3,
        Setup {
            verify: true,
            lose: Some(Kind::Heartbeat),
            ..Setup::default()
        },
    );
    let verified = |net: &Net, i: usize, j: usize| {
        net.node(i)
            .return_route
            .as_ref()
            .is_some_and(|r| r.is_verified(addr(j)))
    };
    assert!(!verified(&net, 1, 0));
    // Node 1 asked node 0 for its echo (a newcomer's probe); it arrives now, and node 0's
    // answer, from its own address, lets node 1 send it state.
    let probe = net.sent[1]
        .iter()
        .rev()
        .find(|o| o.kind == Kind::Heartbeat && o.to == addr(0))
        .expect("node 1 asked node 0")
        .clone();
    net.lose = None;
    net.hand_over(0, probe.datagram, 1);
    let (before_0, before_1) = (net.sent[0].len(), net.sent[1].len());
    net.deliver();
    let heartbeats = |sent: &[Outgoing], to: usize| {
        sent.iter()
            .filter(|o| o.kind == Kind::Heartbeat && o.to == addr(to))
            .count()
    };
    assert_eq!(heartbeats(&net.sent[0][before_0..], 1), 1, "one answer");
    assert!(verified(&net, 1, 0));
    // The answer asks for nothing: node 1 sends nothing back.
    assert_eq!(heartbeats(&net.sent[1][before_1..], 0), 0);
}

/// Nodes 0 and 1 each offer 200 requests a second on `key` (a limit of 100 a second) for
/// five seconds. Returns what each admitted in the last two seconds, and whether node 0 took
/// the window for blind at the end.
fn two_users_overloading(net: &mut Net, key: &[u8]) -> ([usize; 2], bool) {
    let second = Limit {
        max: 100,
        window: one_second(),
    };
    let item = [CheckItem {
        key,
        limit: second,
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    let mut last_two_seconds = [0; 2];
    for step in 0..50 {
        for (user, admitted) in last_two_seconds.iter_mut().enumerate() {
            for _ in 0..20 {
                let limiter = net.node(user).limiter();
                let allowed = limiter
                    .check(&req, net.now(user).cluster_ms)
                    .unwrap()
                    .allowed;
                if allowed && step >= 30 {
                    *admitted += 1;
                }
            }
        }
        net.run_ms(100);
    }
    let id = net.node(0).limiter().key_id(key, &second.window);
    (last_two_seconds, net.node(0).limiter().is_blind(id))
}

fn one_second() -> WindowSpec {
    WindowSpec::with_default_buckets(1_000).unwrap()
}

#[test]
fn users_whose_owner_never_answers_take_no_more_than_equal_parts() {
    // Node 5 answers nothing but SWIM: it stays on the ring, takes registers and sends no
    // sums. Each user of a window it owns hears of no other, and would take the whole limit.
    let mut net = owners_cluster_with(
        6,
        Setup {
            mute: Some(5),
            ..Setup::default()
        },
    );
    let key = key_owned_by_in(&mut net, 0, 5, &one_second());
    assert_eq!(
        key_owned_by_in(&mut net, 1, 5, &one_second()),
        key,
        "both users name node 5"
    );
    let ([a, b], blind) = two_users_overloading(&mut net, &key);
    assert!(blind, "the window is taken for blind");
    // At most a sixth of the limit each (one member in six) and a request of credit, a
    // second; the whole limit each without the cap.
    assert!(a + b <= 2 * 40, "admitted {a} + {b} in two seconds");
    assert!(a > 0 && b > 0, "neither starves: {a}, {b}");

    // The same with an owner that answers: not blind, and the two share the limit.
    let key = key_owned_by_in(&mut net, 0, 4, &one_second());
    let ([a, b], blind) = two_users_overloading(&mut net, &key);
    assert!(!blind);
    // (Requests come twenty at a time, so the window refills in steps: about two thirds.)
    assert!(
        (2 * 40 + 20..=2 * 105).contains(&(a + b)),
        "admitted {a} + {b} in two seconds"
    );
}

#[test]
fn on_a_side_a_user_near_its_part_gets_its_sums_every_round() {
    let mut net = owners_cluster(6);
    // Nodes 3-5 drop out of sight: nodes 0-2 are a side with half of every limit.
    for i in 3..6 {
        net.cut[i] = true;
    }
    net.run_ms(8_000);
    for i in 0..3 {
        let (live, expected) = net.node(i).limiter().member_counts();
        assert_eq!((live, expected), (3, 6), "node {i}");
    }
    let key = key_owned_by_in(&mut net, 0, 2, &one_second());
    let item = [CheckItem {
        key: &key,
        limit: Limit {
            max: 100,
            window: one_second(),
        },
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    // Node 0 offers a request every 22 ms: 45 a second of the side's 50, near it and within
    // it, so that the owner (which counts refusals) takes the window for calm once the onset's
    // refusals have left it.
    let sums_to_0 = |net: &Net| {
        net.sent[2]
            .iter()
            .filter(|o| o.to == addr(0) && matches!(o.kind, Kind::Aggregate | Kind::Exchange))
            .count()
    };
    let mut before = 0;
    for step in 0..(4_000 / 22) {
        if step == 2_000 / 22 {
            before = sums_to_0(&net);
        }
        let limiter = net.node(0).limiter();
        let allowed = limiter.check(&req, net.now(0).cluster_ms).unwrap().allowed;
        // Its onset (a sixth of the limit, the first half second) refuses; after it, none.
        assert!(
            allowed || step < 1_000 / 22,
            "refused at {step} within the side's part"
        );
        net.run_ms(22);
    }
    let id = net.node(2).limiter().key_id(&key, &one_second());
    let owner_calm = !net.node(2).limiter().contended(id, net.now(2).cluster_ms);
    assert!(owner_calm, "the owner counts the window calm");
    assert!(net.node(0).limiter().contended(id, net.now(0).cluster_ms));
    // Two seconds, ten rounds: a sum each (a sum a second, calm).
    let sums = sums_to_0(&net) - before;
    assert!(sums >= 8, "{sums} sums to node 0 in two seconds");
}
