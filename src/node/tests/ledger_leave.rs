//! An owner that leaves gracefully hands its windows to their next owners.

use super::ledger_ask::{ledger_nodes, send_to_first};
use super::*;
use crate::gossip::ledger_message::LedgerEntry;

/// A limit node 0's checks keep busy (far from its limit, a window is leased for longer).
fn busy() -> Limit {
    Limit {
        max: 60,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    }
}

/// Node 0 checks `key` under [`busy`] once, asking the owner where it lacks a token; returns
/// whether the check was admitted.
fn check_asking(net: &mut Net, key: &[u8]) -> bool {
    check_at(net, 0, key)
}

/// Node `i` checks `key` under [`busy`] once, asking the owner where it lacks a token.
fn check_at(net: &mut Net, i: usize, key: &[u8]) -> bool {
    check_with(net, i, key, busy())
}

/// Three ledger nodes; node 2 leases a window node 0 spends from, then leaves. The window's
/// next owner leases it once node 2's last lease there has ended and node 0 has reported,
/// well inside the quiet period a new owner waits out otherwise; and node 0 is admitted by a
/// lease of the new owner within that time.
#[test]
fn a_leaving_owners_windows_are_leased_by_their_next_owner_once_its_leases_end() {
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    assert_eq!(net.members(0), 2, "the three formed a cluster");
    let spec = busy().window;
    let owner_of = |net: &Net, key: &[u8]| {
        let id = net.node(0).limiter().key_id(key, &spec);
        net.node(0).limiter().owner_of(id).map(|o| o.owner)
    };
    // A window node 2 owns, node 1 next: node 0 is a user only, before and after.
    let key = window_of_2_then_1(&mut net, &spec);
    let id = net.node(0).limiter().key_id(&key, &spec);
    // Node 0 spends from node 2's leases for a second, and node 2 from its own.
    let (mut admitted, mut own) = (0, 0);
    for _ in 0..50 {
        admitted += usize::from(check_asking(&mut net, &key));
        own += usize::from(check_at(&mut net, 2, &key));
        net.run_ms(20);
    }
    assert!(
        admitted > 0 && own > 0,
        "node 0 and node 2 spend node 2's tokens"
    );
    let left_at = leave(&mut net, 2);
    // A round installs the ring without node 2.
    net.run_ms(300);
    assert_eq!(net.members(0), 1, "node 2 left");
    let next = owner_of(&net, &key).expect("an owner");
    assert_eq!(next, 2, "the window moved to node 1");
    // The new owner counts what both spent in the window: node 2 sent it its registers.
    let spent_by = |origin: u128| {
        let at = net.now(next as usize - 1).cluster_ms;
        let inspection = net
            .node(next as usize - 1)
            .limiter()
            .inspect(&key, &busy(), at);
        inspection.map_or(0.0, |ins| {
            ins.origins
                .iter()
                .filter(|o| o.origin == OriginId(origin))
                .map(|o| o.admitted)
                .sum()
        })
    };
    assert!(spent_by(3) > 0.0, "node 2's spends reached the new owner");
    assert!(spent_by(1) > 0.0, "node 0's spends reached the new owner");
    let new_owner = &net.node(next as usize - 1);
    let quiet_ms = new_owner.quiet_ms();
    let leasable = new_owner
        .limiter()
        .owner_of(id)
        .expect("an owner")
        .quiet_until_ms;
    let lease_ms = new_owner.limiter().config().ledger.lease_ms;
    assert!(
        leasable <= left_at + lease_ms + new_owner.reports_ms() + 100,
        "leasable at {leasable}, {} ms after the leave (quiet period {quiet_ms} ms)",
        leasable - left_at
    );
    // Node 0 holds a lease of the new owner, and is admitted by it, before a quiet period.
    let mut leased_at = None;
    while net.now(0).cluster_ms < left_at + quiet_ms {
        check_asking(&mut net, &key);
        let now = net.now(0).cluster_ms;
        if net.node(0).limiter().held_word(id, next, now).is_some() {
            leased_at = Some(now);
            break;
        }
        net.run_ms(20);
    }
    let leased_at = leased_at.expect("a lease of the new owner within the quiet period");
    assert!(check_asking(&mut net, &key), "admitted at {leased_at}");
    println!(
        "leasable {} ms and leased {} ms after the leave (quiet period {quiet_ms} ms)",
        leasable - left_at,
        leased_at - left_at
    );
}

/// Once a window's owner says it is leaving (before SWIM says it left), its users send the
/// window's next owner what they spent there before the word, and what they spend after it:
/// that owner leases the window once the leaving owner's leases end, and must count every
/// spend. Only those registers go: a window the leaver is second owner of stays with its
/// first owner alone.
#[test]
fn users_send_their_spends_to_the_next_owner_once_the_owner_says_it_leaves() {
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    let spec = limit().window;
    let key = window_of_2_then_1(&mut net, &spec);
    let other = (0..1_000)
        .map(|i| format!("other-{i}").into_bytes())
        .find(|k| {
            let id = net.node(0).limiter().key_id(k, &spec);
            let owners = net.nodes[0].as_mut().unwrap().owners_of(id);
            owners.map(|o| o.map(|u| u.as_u128())) == Some([2, 3])
        })
        .expect("a window of node 1's, node 2's next");
    let seen = |net: &Net, at_node: usize, key: &[u8]| {
        let at = net.now(at_node).cluster_ms;
        let inspection = net.node(at_node).limiter().inspect(key, &limit(), at);
        inspection.map_or(0.0, |ins| {
            let of_node_0 = ins.origins.iter().filter(|o| o.origin == OriginId(1));
            of_node_0.map(|o| o.admitted).sum()
        })
    };
    // Node 0 spends on both windows; its registers go to their first owners.
    for _ in 0..10 {
        check_with(&mut net, 0, &key, limit());
        check_with(&mut net, 0, &other, limit());
        net.run_ms(20);
    }
    // Its leases end unrenewed: nothing more of `key` goes from node 0 on its own.
    net.run_ms(1_500);
    assert_eq!(seen(&net, 1, &key), 0.0, "node 1 is not yet told of `key`");
    assert_eq!(seen(&net, 2, &other), 0.0, "node 2 is not told of `other`");
    // Node 2 says it leaves (and stays a member: SWIM has not heard of it); node 0 spends
    // nothing more.
    send_to_first(&mut net, 2, vec![LedgerEntry::Leaving]);
    net.run_ms(400);
    assert_eq!(net.members(0), 2, "node 2 is still a member");
    assert!(seen(&net, 1, &key) > 0.0, "node 1 counts node 0's spends");
    assert_eq!(
        seen(&net, 2, &other),
        0.0,
        "node 2 still is not told of `other`"
    );
    // What node 0 spends after the word goes to node 1 too.
    let before = seen(&net, 1, &key);
    let mut later = 0;
    for _ in 0..10 {
        later += usize::from(check_with(&mut net, 0, &key, limit()));
        net.run_ms(20);
    }
    assert!(
        seen(&net, 1, &key) > before,
        "node 1 counts node 0's later spends: {later} admitted, {before} seen before"
    );
}

/// A limit of `max` a window of `window_ms`.
pub(super) fn lim(max: u32, window_ms: u64) -> Limit {
    Limit {
        max,
        window: WindowSpec::with_default_buckets(window_ms).unwrap(),
    }
}

/// Node `i` checks `key` under `l` once, asking the owner where it lacks a token.
pub(super) fn check_with(net: &mut Net, i: usize, key: &[u8], l: Limit) -> bool {
    let item = [CheckItem {
        key,
        limit: l,
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    let now = net.now(i);
    let d = net.node(i).limiter().check(&req, now.cluster_ms).unwrap();
    if let Some(need) = d.needs.iter().find(|n| n.ask) {
        net.nodes[i]
            .as_mut()
            .unwrap()
            .on_command(now, Command::Ask(*need));
    }
    d.allowed
}

/// A key of a window of `spec` that node 2 owns, node 1 next.
fn window_of_2_then_1(net: &mut Net, spec: &WindowSpec) -> Vec<u8> {
    (0..1_000)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| {
            let id = net.node(0).limiter().key_id(k, spec);
            let owners = net.nodes[0].as_mut().unwrap().owners_of(id);
            owners.map(|o| o.map(|u| u.as_u128())) == Some([3, 2])
        })
        .expect("a window of node 2's, node 1's next")
}

/// Node `i` checks `key` under `l` `checks` times, `step_ms` apart: when it was admitted.
fn spend(
    net: &mut Net,
    i: usize,
    key: &[u8],
    l: Limit,
    (checks, step_ms): (usize, u64),
) -> Vec<u64> {
    let mut admitted = Vec::new();
    for _ in 0..checks {
        let at = net.now(i).cluster_ms;
        if check_with(net, i, key, l) {
            admitted.push(at);
        }
        net.run_ms(step_ms);
    }
    admitted
}

/// Each of `users` checks `key` under `l`, every `step_ms`, until node 1's cluster clock
/// reaches `until_ms`: the time of each admission goes to `admitted`. How many there were.
fn check_until(
    net: &mut Net,
    users: &[usize],
    key: &[u8],
    l: Limit,
    (until_ms, step_ms): (u64, u64),
    admitted: &mut Vec<u64>,
) -> usize {
    let before = admitted.len();
    while net.now(1).cluster_ms < until_ms {
        for &i in users {
            let at = net.now(i).cluster_ms;
            if check_with(net, i, key, l) {
                admitted.push(at);
            }
        }
        net.run_ms(step_ms);
    }
    admitted.len() - before
}

/// Node 2 takes node `i` (boot id `i + 1`) for a build that reads no books.
fn reads_no_books(net: &mut Net, i: usize) {
    let now = net.now(2);
    let flags = super::super::features::READS & !super::super::features::BOOKS;
    net.nodes[2]
        .as_mut()
        .unwrap()
        .features
        .heard(i as u128 + 1, flags, now.at);
}

/// Node `i` leaves gracefully, its last datagrams delivered: when, on its cluster clock.
fn leave(net: &mut Net, i: usize) -> u64 {
    let now = net.now(i);
    net.nodes[i].as_mut().unwrap().leave(now);
    net.deliver();
    net.nodes[i] = None;
    now.cluster_ms
}

/// The most of `times` in any window of `window_ms`.
pub(super) fn most_in_any_window(times: &[u64], window_ms: u64) -> usize {
    let mut t = times.to_vec();
    t.sort_unstable();
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..t.len() {
        while t[hi] - t[lo] >= window_ms {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// The owner spends its own window to the limit just before it leaves: its registers of the
/// window go to the next owner, whose leases then keep the window at its limit.
#[test]
fn a_leaving_owners_own_spends_to_its_limit_hold_the_next_owner_back() {
    let l = lim(60, 1_000);
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    let key = window_of_2_then_1(&mut net, &l.window);
    // Node 2 (the owner) spends its own window, up to its limit, over 300 ms.
    let mut admitted = spend(&mut net, 2, &key, l, (150, 2));
    let own = admitted.len();
    let left_at = leave(&mut net, 2);
    let after = check_until(
        &mut net,
        &[0, 1],
        &key,
        l,
        (left_at + 1_500, 2),
        &mut admitted,
    );
    let most = most_in_any_window(&admitted, 1_000);
    assert!(own >= 50, "the owner spent its window to the limit: {own}");
    assert!(after > 0, "the window is leased again after the leave");
    assert!(
        most <= 60 + 2,
        "{most} admitted in one window of 1 s (limit 60)"
    );
}

/// A window at its limit whose last lease ended a while before its owner leaves, with a user
/// that misses the owner's words (its Leaving datagrams and SWIM's) and hears of the leave
/// from the other member: the next owner leases only once the user has reported to it.
#[test]
fn a_window_whose_last_lease_ended_before_the_leave_holds_its_limit_at_the_next_owner() {
    let l = lim(20, 10_000);
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    let key = window_of_2_then_1(&mut net, &l.window);
    // Node 0 spends the whole limit from node 2's leases.
    let mut admitted = spend(&mut net, 0, &key, l, (200, 5));
    admitted.truncate(20);
    let first = admitted.len();
    // Node 2's leases end (the window is full: nothing is renewed).
    net.run_ms(1_400);
    // Node 0 misses node 2's own words (its Leaving datagrams and SWIM leave): it learns
    // of the leave from node 1's gossip.
    net.apart.push((0, 2));
    let left_at = leave(&mut net, 2);
    let after = check_until(&mut net, &[1], &key, l, (left_at + 3_000, 1), &mut admitted);
    let most = most_in_any_window(&admitted, 10_000);
    assert_eq!(first, 20, "node 0 spent the window to its limit");
    assert!(
        most <= 20 && after == 0,
        "{most} admitted in one window of 10 s (limit 20), {after} after the leave"
    );
}

/// What [`leave_at_limit`] saw: admissions in each second from the leave, the most in any
/// window, how many were admitted before the leave, and how long after it the next owner
/// could lease the window.
struct LeaveAtLimit {
    seconds: Vec<usize>,
    most: usize,
    before: usize,
    leasable_after_ms: u64,
}

/// Two users, `users`, each offered 100 checks a second of a window under `l` owned by node
/// 2 (node 1 next) for `for_ms`; then node 2 leaves, and nodes 0 and 1 go on so for
/// `for_ms`. Without `books`, node 2 takes node 1 for a build that reads no books.
fn leave_at_limit(l: Limit, users: [usize; 2], for_ms: u64, books: bool) -> LeaveAtLimit {
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    let key = window_of_2_then_1(&mut net, &l.window);
    let id = net.node(0).limiter().key_id(&key, &l.window);
    let mut admitted = Vec::new();
    let offer = |net: &mut Net, users: [usize; 2], admitted: &mut Vec<u64>| {
        for i in users {
            let at = net.now(i).cluster_ms;
            if check_with(net, i, &key, l) {
                admitted.push(at);
            }
        }
        net.run_ms(10);
    };
    let start = net.now(0).cluster_ms;
    while net.now(0).cluster_ms < start + for_ms {
        offer(&mut net, users, &mut admitted);
    }
    let before = admitted.len();
    if !books {
        reads_no_books(&mut net, 1);
    }
    let left_at = leave(&mut net, 2);
    // A round installs the ring without node 2 (its quiet period is then a view's to say).
    while net.now(0).cluster_ms < left_at + 300 {
        offer(&mut net, [0, 1], &mut admitted);
    }
    assert_eq!(net.members(1), 1, "node 2 left");
    let quiet_until = net.node(1).limiter().owner_of(id).unwrap().quiet_until_ms;
    while net.now(0).cluster_ms < left_at + for_ms {
        offer(&mut net, [0, 1], &mut admitted);
    }
    let in_second = |from: u64| {
        admitted
            .iter()
            .filter(|t| **t >= from && **t < from + 1_000)
            .count()
    };
    LeaveAtLimit {
        seconds: (0..for_ms / 1_000)
            .map(|s| in_second(left_at + s * 1_000))
            .collect(),
        most: most_in_any_window(&admitted, l.window.window_ms()),
        before,
        leasable_after_ms: quiet_until.saturating_sub(left_at),
    }
}

/// Two users keep a window at its limit across its owner's leave. The owner hands its books
/// to the next owner, which leases the window from the ring's change on, not once the leases
/// end and the users report: the users are admitted close to the limit in the second after
/// the leave, and no window holds more than the limit. So at 3× and 10× the limit, with the
/// owner a user or not, and over a window of 10 s.
#[test]
fn a_leaving_owners_books_let_its_next_owner_lease_at_once_within_the_limit() {
    let cases = [
        (lim(60, 1_000), [0, 2], 4_000),
        (lim(60, 1_000), [0, 1], 4_000),
        // Neither the leaver nor the next owner a user: the next owner makes the window.
        (lim(60, 1_000), [0, 0], 4_000),
        (lim(20, 1_000), [0, 2], 4_000),
        (lim(300, 10_000), [0, 2], 12_000),
    ];
    let mut first = None;
    for (l, users, for_ms) in cases {
        let run = leave_at_limit(l, users, for_ms, true);
        let max = l.max as usize;
        let case = format!(
            "limit {max} a {} ms window, users {users:?}",
            l.window.window_ms()
        );
        println!(
            "{case}: leasable {} ms after the leave; admitted by second after it {:?}; most in \
             a window {}; {} before",
            run.leasable_after_ms, run.seconds, run.most, run.before
        );
        assert!(
            run.before >= max,
            "{case}: the window ran at its limit before the leave: {}",
            run.before
        );
        assert!(
            run.leasable_after_ms <= 300,
            "{case}: leasable {} ms after the leave",
            run.leasable_after_ms
        );
        assert!(
            run.most <= max,
            "{case}: {} admitted in one window (limit {max})",
            run.most
        );
        first.get_or_insert(run.seconds);
    }
    // The window turns over as before the leave: no second idles while the leases end and
    // the users report, and the spends are not bunched for seconds after.
    let seconds = first.expect("a case");
    assert!(
        seconds[0] >= 48 && seconds[1..].iter().all(|n| *n >= 57),
        "admitted by second after the leave {seconds:?} (limit 60)"
    );
}

/// A next owner of a build that reads no books gets the end of the leaving owner's last lease
/// instead, and leases once those leases have ended and the users have reported: later than
/// with the books, and still within the limit.
#[test]
fn a_next_owner_that_reads_no_books_leases_once_the_leases_end_within_the_limit() {
    let run = leave_at_limit(lim(60, 1_000), [0, 2], 4_000, false);
    println!(
        "leasable {} ms after the leave; admitted by second after it {:?}; most {}",
        run.leasable_after_ms, run.seconds, run.most
    );
    assert!(
        run.before >= 60,
        "the window ran at its limit: {}",
        run.before
    );
    assert!(
        run.leasable_after_ms > 300 && run.leasable_after_ms < 1_600,
        "leasable {} ms after the leave",
        run.leasable_after_ms
    );
    assert!(
        run.most <= 60,
        "{} admitted in one window (limit 60)",
        run.most
    );
}

/// A user spends a window to its limit and leaves; then the window's owner leaves, before its
/// next round. The user reported only to the owner (it cannot reach the next owner), and is
/// gone: the owner relays its registers to the window's owners as its ring changes, and the
/// next owner takes them though its own round has not yet dropped the user from its member
/// list. So the next owner counts them, after the books (if it reads any) stop counting,
/// and admits nothing more in the window.
#[test]
fn a_departed_users_spends_reach_the_next_owner_when_the_owner_leaves() {
    for books in [true, false] {
        let l = lim(20, 10_000);
        let mut net = ledger_nodes(4, |_| 0);
        net.run_ms(6_000);
        let key = window_of_2_then_1(&mut net, &l.window);
        // Nothing node 0 spends reaches node 1 but through node 2.
        net.apart.push((0, 1));
        let mut admitted = spend(&mut net, 0, &key, l, (200, 5));
        let first = admitted.len();
        // Node 1 hears node 0 leave, and node 2 leaves before its next round.
        net.apart.clear();
        leave(&mut net, 0);
        if !books {
            reads_no_books(&mut net, 1);
        }
        let left_at = leave(&mut net, 2);
        assert_eq!(net.members(1), 1, "nodes 0 and 2 left");
        let after = check_until(&mut net, &[1], &key, l, (left_at + 3_000, 5), &mut admitted);
        let most = most_in_any_window(&admitted, 10_000);
        assert_eq!(first, 20, "node 0 spent the window to its limit");
        assert!(
            most <= 20 && after == 0,
            "books {books}: {most} admitted in one window of 10 s (limit 20), {after} after"
        );
    }
}
