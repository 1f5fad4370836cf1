//! Members that enforce other rules say so in their heartbeats, and each node counts them.

use super::*;

fn mismatched(net: &Net, i: usize) -> u64 {
    net.node(i)
        .view()
        .rules_mismatched_members
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn a_member_with_other_rules_is_counted_by_every_node_until_it_reloads_the_same() {
    let mut net = Net::new();
    let digests: Vec<RulesDigest> = [0xA, 0xA, 0xB].into_iter().map(RulesDigest::new).collect();
    for (i, digest) in digests.iter().enumerate() {
        let seeds: &[usize] = if i == 0 { &[] } else { &[0] };
        let mut p = net.params(i, i as u128 + 1, seeds);
        p.rules_digest = digest.clone();
        net.boot_with(p);
    }
    net.run_ms(3_000);
    assert_eq!(net.members(0), 2);
    assert_eq!(
        [
            mismatched(&net, 0),
            mismatched(&net, 1),
            mismatched(&net, 2)
        ],
        [1, 1, 2],
        "node 2 differs from both, and they from it"
    );
    // Node 2 reloads the others' rules: said at its next round, counted at theirs.
    digests[2].set(0xA);
    net.run_ms(600);
    assert_eq!(
        [
            mismatched(&net, 0),
            mismatched(&net, 1),
            mismatched(&net, 2)
        ],
        [0, 0, 0]
    );
    // Node 0 reloads rules of its own.
    digests[0].set(0xC);
    net.run_ms(600);
    assert_eq!(
        [
            mismatched(&net, 0),
            mismatched(&net, 1),
            mismatched(&net, 2)
        ],
        [2, 1, 1]
    );
    // A member that leaves is no longer counted.
    let now = net.now(0);
    net.nodes[0].as_mut().unwrap().leave(now);
    net.deliver();
    net.nodes[0] = None;
    net.run_ms(600);
    assert_eq!([mismatched(&net, 1), mismatched(&net, 2)], [0, 0]);
}
