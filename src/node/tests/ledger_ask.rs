//! A request's ask of its window's owner under the ledger, between real node cores.

use super::*;
use crate::gossip::ledger_message::LedgerEntry;
use crate::gossip::wire::Destination;
use crate::limiter::{KeyId, PartitionPolicy, Policy, TokenNeed};

/// `n` ledger nodes (strict), seeded with node 0, node `i`'s wall clock `skew_ms(i)` off.
pub(super) fn ledger_nodes(n: usize, skew_ms: impl Fn(usize) -> i64) -> Net {
    let mut net = Net::new();
    net.limiter.policy = Policy::Ledger(PartitionPolicy::Strict);
    for i in 0..n {
        let seeds: Vec<usize> = if i == 0 { vec![] } else { vec![0] };
        let mut p = net.params(i, i as u128 + 1, &seeds);
        p.dissemination = Dissemination::Owners;
        net.boot_skewed(p, skew_ms(i));
    }
    net
}

/// Three ledger nodes, node 2's wall clock 8 s behind the others': the deadline of its ask
/// is read on cluster time, which the members share, so the owner grants the ask (a deadline
/// on the asker's wall clock would have passed 8 s before the owner got it).
#[test]
fn an_ask_from_a_node_whose_wall_clock_is_behind_is_granted() {
    let mut net = ledger_nodes(3, |i| if i == 2 { -8_000 } else { 0 });
    net.run_ms(10_000);
    assert_eq!(net.members(2), 2, "the skewed node joined");
    let (behind, ahead) = (net.now(2), net.now(0));
    assert!(
        ahead.wall_ms - behind.wall_ms >= 7_900,
        "the fault took effect: walls {} and {}",
        behind.wall_ms,
        ahead.wall_ms
    );
    assert!(
        behind.cluster_ms.abs_diff(ahead.cluster_ms) < 100,
        "cluster time is shared: {} and {}",
        behind.cluster_ms,
        ahead.cluster_ms
    );
    let spec = limit().window;
    let key = (0..1_000)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| {
            let id = net.node(2).limiter().key_id(k, &spec);
            net.node(2)
                .limiter()
                .owner_of(id)
                .is_some_and(|o| o.owner == 1)
        })
        .expect("node 0 owns some key");
    let item = [CheckItem {
        key: &key,
        limit: limit(),
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    let first = net
        .node(2)
        .limiter()
        .check(&req, net.now(2).cluster_ms)
        .unwrap();
    assert!(!first.allowed, "node 2 holds no token yet");
    let need = *first.needs.first().expect("it needs a token");
    assert!(need.ask, "it asks the owner");
    let now = net.now(2);
    net.nodes[2]
        .as_mut()
        .unwrap()
        .on_command(now, Command::Ask(need));
    net.deliver();
    let again = net
        .node(2)
        .limiter()
        .check(&req, net.now(2).cluster_ms)
        .unwrap();
    assert!(again.allowed, "the owner's answer was a lease");
}

/// A ledger entry of a lease from member 2 of one token of window `key` (of [`limit`]'s shape),
/// valid from `from_ms`.
fn lease_entry(key: KeyId, seq: u32, expires_ms: u64, from_ms: u64) -> LedgerEntry {
    let spec = limit().window;
    LedgerEntry::Lease {
        key,
        window_ms: spec.window_ms(),
        buckets: spec.buckets(),
        lease: crate::ledger::Lease {
            owner: 2,
            seq,
            expires_ms,
            segments: smallvec::smallvec![crate::ledger::Segment {
                id: 1,
                count: 1,
                valid_from_ms: from_ms,
            }],
        },
    }
}

/// Node `from` sends node 0 one ledger datagram of `entries`, delivered.
pub(super) fn send_to_first(net: &mut Net, from: usize, entries: Vec<LedgerEntry>) {
    let to = Destination {
        addr: addr(0),
        node: Some(1),
    };
    let now = net.now(from);
    net.nodes[from]
        .as_mut()
        .unwrap()
        .send_ledger(now, to, Vec::new(), entries);
    net.deliver();
}

/// Datagrams node 0 dropped as malformed.
fn malformed(net: &Net) -> u64 {
    let dropped = net.node(0).view().wire.snapshot().dropped;
    dropped.get("malformed").copied().unwrap_or(0)
}

/// Of a datagram's leases, one that claims to end later than any owner's lease can (its
/// longest, a quiet period from now) and one numbered 0 are dropped alone, each counted as a
/// malformed entry; the datagram is taken and not counted dropped. Taken, the far one would
/// hold its window in the receiver's table that long, and a member could pin windows until
/// the table is full (cut short, its window could be collected while its owner still counts
/// it).
#[test]
fn a_far_or_malformed_lease_is_dropped_alone_and_counted() {
    let mut net = ledger_nodes(2, |_| 0);
    net.run_ms(3_000);
    assert_eq!(net.members(0), 1, "the two formed a cluster");
    let spec = limit().window;
    let key = |net: &Net, key: &[u8]| net.node(0).limiter().key_id(key, &spec);
    let [pinned, zero, leased] = [&b"pinned"[..], b"zero", b"leased"].map(|k| key(&net, k));
    let now = net.now(1).cluster_ms;
    let counted = |net: &Net| net.node(0).view().wire.snapshot().malformed_ledger_entries;
    let (entries_before, datagrams_before) = (counted(&net), malformed(&net));
    send_to_first(
        &mut net,
        1,
        vec![
            lease_entry(pinned, 1, now + 3_600_000, now),
            lease_entry(zero, 0, now + 400, now),
            lease_entry(leased, 1, now + 400, now),
        ],
    );
    assert_eq!(
        counted(&net),
        entries_before + 2,
        "both bad entries counted"
    );
    assert_eq!(malformed(&net), datagrams_before, "the datagram taken");
    let at = net.now(0).cluster_ms;
    let held = |k| net.node(0).limiter().held_word(k, 2, at).is_some();
    assert!(held(leased), "the good lease is held");
    assert!(!held(pinned) && !held(zero), "the bad ones are not");
}

/// A node whose own clock is cut off leases nothing, says so, and is off every ring, its own
/// included; and it takes no lease, so its ask gets no answer that counts: the node refuses it
/// itself, for a round, and the requests that would have waited for it find waiting in vain at
/// once.
#[test]
fn an_ask_no_one_can_answer_is_refused_at_once() {
    let mut net = ledger_nodes(3, |i| if i == 2 { 15_000 } else { 0 });
    net.run_ms(7_000);
    assert!(
        net.node(2)
            .view()
            .clock
            .fenced
            .load(std::sync::atomic::Ordering::Relaxed),
        "the fault took effect: node 2's clock is cut off"
    );
    let spec = limit().window;
    let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("own-{i}").into_bytes()).collect();
    let owner = |net: &Net, node: usize, k: &[u8]| {
        let id = net.node(node).limiter().key_id(k, &spec);
        net.node(node).limiter().owner_of(id).map(|o| o.owner)
    };
    for node in 0..3 {
        assert!(
            keys.iter()
                .all(|k| owner(&net, node, k).is_some_and(|o| o != 3)),
            "node 2 is off node {node}'s ring"
        );
    }
    let key = keys[0].clone();
    let item = [CheckItem {
        key: &key,
        limit: limit(),
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    let now = net.now(2);
    let first = net.node(2).limiter().check(&req, now.cluster_ms).unwrap();
    assert!(!first.allowed, "a node cut off leases nothing");
    let need = *first.needs.iter().find(|n| n.ask).expect("an ask to make");
    assert!(!need.in_vain(), "waiting looks worthwhile before the ask");
    net.nodes[2]
        .as_mut()
        .unwrap()
        .on_command(now, Command::Ask(need));
    let again = net
        .node(2)
        .limiter()
        .check_again(&req, net.now(2).cluster_ms)
        .unwrap();
    assert!(
        again.needs.iter().all(crate::limiter::TokenNeed::in_vain),
        "refused at once: {:?}",
        again.needs
    );
}

/// An ask whose window this node owns when it is made (the ring gave the window to this node
/// after the check that made the need, or this node's part is 0 and the limiter asks for
/// want of a lease of its own) has no member to go to: the node refuses it itself, for a
/// round, rather than leave asking open for requests that would wait for no answer.
#[test]
fn an_ask_for_a_window_this_node_owns_is_refused_here_for_a_round() {
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(6_000);
    assert_eq!(net.members(0), 2, "the three formed a cluster");
    let spec = limit().window;
    let key = (0..1_000)
        .map(|i| format!("mine-{i}").into_bytes())
        .find(|k| {
            let id = net.node(0).limiter().key_id(k, &spec);
            net.node(0).limiter().owner_of(id).map(|o| o.owner) == Some(1)
        })
        .expect("a window node 0 owns");
    let id = net.node(0).limiter().key_id(&key, &spec);
    // The window exists at node 0: a check made it.
    net.admit(0, &key, 1);
    let now = net.now(0);
    assert!(
        net.node(0).limiter().may_ask(id, now.cluster_ms),
        "asking is open"
    );
    let need = TokenNeed {
        index: 0,
        key: id,
        window_ms: spec.window_ms(),
        buckets: spec.buckets(),
        limit: limit().max,
        want: 1,
        valid_at_ms: None,
        ask: true,
        refused: false,
        ahead: false,
    };
    net.nodes[0]
        .as_mut()
        .unwrap()
        .on_command(now, Command::Ask(need));
    let round_ms = net.node(0).round_ms();
    let limiter = net.node(0).limiter();
    assert!(!limiter.may_ask(id, now.cluster_ms), "refused here");
    assert!(
        !limiter.may_ask(id, now.cluster_ms + round_ms - 1),
        "for a round"
    );
    assert!(
        limiter.may_ask(id, now.cluster_ms + round_ms),
        "and no longer"
    );
}

/// What fits one datagram goes in one; what does not is cut into datagrams that each fit,
/// none lost.
#[test]
fn ledger_entries_go_in_as_few_datagrams_as_fit() {
    let mut net = ledger_nodes(2, |_| 0);
    net.run_ms(6_000);
    assert_eq!(net.members(1), 1, "the two formed a cluster");
    let refusals = |n: u64| -> Vec<LedgerEntry> {
        (0..n)
            .map(|i| LedgerEntry::Refused {
                key: KeyId(u128::from(i) << 64 | 0x5eed),
                retry_after_ms: 100,
            })
            .collect()
    };
    let send_errors = |net: &Net| {
        net.node(1)
            .view()
            .wire
            .send_errors
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let ledger_sent_since = |net: &Net, before: usize| -> Vec<usize> {
        net.sent[1][before..]
            .iter()
            .filter(|o| o.kind == Kind::Ledger)
            .map(|o| o.datagram.len())
            .collect()
    };
    let before = net.sent[1].len();
    send_to_first(&mut net, 1, refusals(3));
    assert_eq!(
        ledger_sent_since(&net, before).len(),
        1,
        "three refusals in one datagram"
    );
    let (before, errors) = (net.sent[1].len(), send_errors(&net));
    let many = 600;
    send_to_first(&mut net, 1, refusals(many));
    let datagrams = ledger_sent_since(&net, before);
    let max = datagrams.iter().copied().max().unwrap_or(0);
    let total: usize = datagrams.iter().sum();
    assert!(
        datagrams.len() > 1 && max <= net.node(1).params.max_packet_size,
        "{many} refusals in {} datagrams of at most {max} bytes",
        datagrams.len()
    );
    // Nothing was left out as too large (`send_ledger` counts what it drops), and each
    // refusal takes 18 bytes on the wire (its tag, key and retry).
    assert_eq!(send_errors(&net), errors, "nothing dropped");
    assert!(
        total >= 18 * many as usize,
        "{total} bytes for {many} refusals"
    );
    assert_eq!(malformed(&net), 0, "node 0 read every datagram");
}
