//! A member that joins a ledger cluster.

use super::ledger_ask::ledger_nodes;
use super::ledger_leave::{check_with, lim, most_in_any_window};
use super::*;

/// `n` ledger nodes, two of them keeping twelve windows at their limit (60 a second each,
/// offered 200), when one more joins. The joiner takes some of the windows over; the others
/// keep their whole limit through the join: a member that came up counts on the side a
/// while (less than a quiet period), so that it is not taken for one across a cut before
/// it is heard, or its heard time relayed. No window passes its limit.
fn a_join_among(n: usize) {
    let l = lim(60, 1_000);
    let mut net = ledger_nodes(n, |_| 0);
    net.run_ms(6_000);
    assert_eq!(net.members(0), n - 1, "the {n} formed a cluster");
    let keys: Vec<Vec<u8>> = (0..12).map(|i| format!("key-{i}").into_bytes()).collect();
    let mut admitted: Vec<Vec<u64>> = vec![Vec::new(); keys.len()];
    let start = net.now(0).cluster_ms;
    let joiner = n as u128 + 1;
    let mut joined = false;
    while net.now(0).cluster_ms < start + 7_000 {
        if net.now(0).cluster_ms >= start + 3_000 && !joined {
            joined = true;
            let mut p = net.params(n, joiner, &[0]);
            p.dissemination = Dissemination::Owners;
            net.boot_with(p);
        }
        for (k, key) in keys.iter().enumerate() {
            for i in [0, 1] {
                let at = net.now(i).cluster_ms;
                if check_with(&mut net, i, key, l) {
                    admitted[k].push(at - start);
                }
            }
        }
        net.run_ms(10);
    }
    assert_eq!(net.members(0), n, "node {n} joined");
    let mut kept = 0;
    for (k, key) in keys.iter().enumerate() {
        let id = net.node(0).limiter().key_id(key, &l.window);
        let owner = net.node(0).limiter().owner_of(id).map(|o| o.owner);
        let by_second: Vec<usize> = (0..7)
            .map(|s| admitted[k].iter().filter(|t| **t / 1_000 == s).count())
            .collect();
        let most = most_in_any_window(&admitted[k], 1_000);
        println!(
            "{n} nodes, key {k}, owner {owner:?}: admitted by second {by_second:?}, most {most}"
        );
        assert!(
            most <= 60,
            "key {k}: {most} admitted in one window (limit 60)"
        );
        if owner != Some(joiner) {
            kept += 1;
            assert!(
                by_second.iter().all(|n| *n >= 57),
                "{n} nodes, key {k}, owner {owner:?}: admitted by second {by_second:?} (limit 60)"
            );
        }
    }
    assert!(kept > 0, "no window the joiner did not take over");
}

#[test]
fn a_member_that_joins_takes_no_room_from_the_windows_it_does_not_own() {
    a_join_among(3);
    a_join_among(12);
}

/// A member counts on the side as it comes up only as a process new to the node: one back
/// after a heal may hold tokens its side leased, and counting it before it is heard would
/// bring the rise of every part forward.
#[test]
fn only_a_process_new_to_the_node_counts_as_it_comes_up() {
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    assert_eq!(net.members(0), 2, "the three formed a cluster");
    let within = std::time::Duration::from_secs(3_600);
    let came_up = |net: &Net| net.node(0).liveness.came_up_within(3, within, net.at());
    assert!(came_up(&net), "a first join counts");
    // Node 2 is cut off until node 0 declares it down, then heals.
    net.cut[2] = true;
    net.run_until_members(0, 1, "node 0 never declared node 2 down");
    net.cut[2] = false;
    net.run_until_members(0, 2, "node 2 never came back at node 0");
    assert!(!came_up(&net), "a member back after a heal does not");
}

/// A joiner that holds a relay of a user it still lists (the user departed as it joined, and
/// the relaying member saw it first) does not take its state for whole: its warm-up ends on its
/// timeout (so its floor is the whole quiet period), and once SWIM drops the user here what the
/// user spent counts.
#[test]
fn a_joiner_holding_a_relay_of_a_user_it_still_lists_ends_its_warm_up_only_on_its_timeout() {
    use super::forged::{register_of, send_from_2};
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    assert_eq!(net.members(0), 2, "the three formed a cluster");
    let mut p = net.params(3, 4, &[0]);
    p.dissemination = Dissemination::Owners;
    let timeout = p.warmup_timeout;
    net.boot_with(p);
    let booted = net.at();
    net.run_ms(200);
    assert_eq!(net.members(3), 3, "the joiner lists the three");
    // Node 1 (boot id 2) spent 40 by its last register; node 2 relays it to the joiner.
    let last = register_of(&net, 2, 2, b"tenant", 2_000, 40);
    send_from_2(&mut net, 3, Kind::AntiEntropy, &last);
    let refused = net.node(3).view().wire.snapshot().merges.not_from_origin;
    assert_eq!(refused, 1, "the joiner refused it as node 1's own");
    // Every member pushes the joiner its state; the held relay keeps the warm-up on until
    // its timeout, with node 1 alive.
    let ms = std::time::Duration::from_millis;
    while net.at() < booted + timeout - ms(200) {
        net.run_ms(100);
        assert!(!net.node(3).is_ready(), "ready with node 1's relay held");
    }
    net.run_ms(600);
    assert!(net.node(3).is_ready(), "the warm-up timed out");
    assert_eq!(net.seen(3, b"tenant", 2), 0.0, "node 1 speaks for itself");
    // Node 1 crashes; the joiner's SWIM suspects, then drops it, and the relay counts.
    net.nodes[1] = None;
    net.run_until_members(3, 2, "the joiner never dropped node 1");
    net.run_ms(400);
    assert_eq!(net.seen(3, b"tenant", 2), 40.0, "the held relay counts");
}
