//! A node whose clock is more than a minute off: it cannot join, and must not admit the whole
//! limit beside the cluster.

use super::*;
use crate::limiter::{PartitionPolicy, Policy};

/// Three nodes, the third a minute and a half off: it cannot join, and every node must still
/// hold the limit with the others, under either partition policy.
fn a_node_a_minute_off(policy: PartitionPolicy) {
    let mut net = Net::new();
    net.limiter.policy = Policy::DemandShare(policy);
    net.boot(0, 1, &[]);
    net.boot(1, 2, &[0]);
    let far = net.params(2, 3, &[0]);
    net.boot_skewed(far, 90_000);
    net.run_ms(7_000);
    let stale = |net: &Net, i: usize| {
        let dropped = net.node(i).view().wire.snapshot().dropped;
        dropped.get("stale").copied().unwrap_or(0)
    };
    assert!(
        stale(&net, 0) > 0 && stale(&net, 2) > 0,
        "the fault took effect"
    );
    assert_eq!(
        net.members(2),
        0,
        "its datagrams are refused: it cannot join"
    );
    assert!(net.node(2).is_ready(), "its warm-up timed out");
    // It counts the other two in and itself out; they count it in, and all three run on the
    // strict scale.
    assert_eq!(net.node(2).limiter().member_counts(), (1, 3));
    for i in 0..3 {
        assert!(net.node(i).limiter().clock_fenced(), "node {i}");
    }
    for i in [0, 1] {
        assert_eq!(net.node(i).limiter().member_counts(), (2, 3), "node {i}");
    }
    let me = net.node(2).view().members();
    assert!(me.iter().any(|m| m.is_self && m.clock_fenced));
    // So, offered twice the limit everywhere, the three admit about the limit, not more.
    let item = [CheckItem {
        key: b"tenant",
        limit: limit(),
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    let mut admitted = [0; 3];
    for _ in 0..2_000 {
        for (i, n) in admitted.iter_mut().enumerate() {
            let now = net.now(i).cluster_ms;
            *n += usize::from(net.node(i).limiter().check(&req, now).unwrap().allowed);
        }
    }
    assert!(admitted[2] <= 340, "the far node admitted {admitted:?}");
    let total: usize = admitted.iter().sum();
    assert!(total <= 1_020, "admitted {admitted:?} of a limit of 1000");
}

#[test]
fn a_node_a_minute_off_is_counted_in_and_cuts_itself_off() {
    a_node_a_minute_off(PartitionPolicy::Strict);
}

#[test]
fn a_node_a_minute_off_is_counted_in_under_the_available_policy_too() {
    a_node_a_minute_off(PartitionPolicy::Available);
}
