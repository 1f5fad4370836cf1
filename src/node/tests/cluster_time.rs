//! The timed header: members say their cluster time to a node that reads it, and a warming
//! node waits for that word from every member before it serves (`clock_sync.rs`,
//! `update_readiness`).

use super::*;
use crate::gossip::wire::{COMPACT_HEADER_LEN, TIMED_HEADER_LEN, TIMED_VERSION};

/// The word on cluster time a datagram's clear header carries, if it is timed: `None` for
/// "not vouched for", `Some(cluster − sent)` otherwise.
fn word_of(datagram: &[u8]) -> Option<Option<i32>> {
    (datagram[2] == TIMED_VERSION).then(|| {
        let gap = i32::from_le_bytes(
            datagram[COMPACT_HEADER_LEN..TIMED_HEADER_LEN]
                .try_into()
                .expect("four bytes"),
        );
        (gap != i32::MIN).then_some(gap)
    })
}

#[test]
fn a_joining_node_hears_every_members_cluster_time_before_it_serves_and_vouches_only_then() {
    let mut net = formed();
    let from: Vec<usize> = (0..3).map(|i| net.sent[i].len()).collect();
    net.boot(3, 4, &[0]);
    let mut ready_after = None;
    for _ in 0..4_000 {
        // What it sent before the millisecond in which its warm-up ended.
        let sent = net.sent[3].len();
        net.run_ms(1);
        if net.node(3).is_ready() {
            ready_after = Some(sent);
            break;
        }
    }
    let ready_after = ready_after.expect("node 3 ends its warm-up");
    // Every member said its cluster time, vouched for (they serve), before node 3 served.
    assert_eq!(
        net.node(3)
            .clock_sync
            .cluster_words_of(net.node(3).membership.member_ids()),
        3
    );
    for (i, from) in from.iter().enumerate() {
        let words: Vec<Option<Option<i32>>> = net.sent[i][*from..]
            .iter()
            .filter(|o| o.to == addr(3))
            .map(|o| word_of(&o.datagram))
            .collect();
        assert!(
            words
                .iter()
                .any(|w| matches!(w, Some(Some(g)) if g.abs() <= 1)),
            "node {i} said its cluster time to node 3: {words:?}"
        );
    }
    // Node 3 said it vouches for nothing while it warmed up, and vouches once it serves.
    let before: Vec<Option<Option<i32>>> = net.sent[3][..ready_after]
        .iter()
        .map(|o| word_of(&o.datagram))
        .filter(Option::is_some)
        .collect();
    assert!(
        !before.is_empty() && before.iter().all(|w| *w == Some(None)),
        "{before:?}"
    );
    net.run_ms(1_000);
    // Its cluster time is theirs (datagrams here take no time).
    let lead = net
        .node(3)
        .view()
        .clock
        .cluster_lead_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(lead.abs() <= 1, "node 3 leads the members by {lead} ms");
    assert!(
        net.sent[3][ready_after..]
            .iter()
            .any(|o| matches!(word_of(&o.datagram), Some(Some(_)))),
        "node 3 vouches once it serves"
    );
}
