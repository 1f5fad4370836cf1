//! A request's ask of its window's owner under the ledger, between real node cores.

use super::*;
use crate::limiter::{PartitionPolicy, Policy};

/// Three ledger nodes, node 2's wall clock 8 s behind the others': the deadline of its ask
/// is read on cluster time, which the members share, so the owner grants the ask (a deadline
/// on the asker's wall clock would have passed 8 s before the owner got it).
#[test]
fn an_ask_from_a_node_whose_wall_clock_is_behind_is_granted() {
    let mut net = Net::new();
    net.limiter.policy = Policy::Ledger(PartitionPolicy::Strict);
    for i in 0..3 {
        let seeds: Vec<usize> = if i == 0 { vec![] } else { vec![0] };
        let mut p = net.params(i, i as u128 + 1, &seeds);
        p.dissemination = Dissemination::Owners;
        net.boot_skewed(p, if i == 2 { -8_000 } else { 0 });
    }
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
