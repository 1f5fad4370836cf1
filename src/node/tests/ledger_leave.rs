//! An owner that leaves gracefully hands its windows to their next owners.

use super::ledger_ask::ledger_nodes;
use super::*;

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
    let item = [CheckItem {
        key,
        limit: busy(),
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    let now = net.now(0);
    let d = net.node(0).limiter().check(&req, now.cluster_ms).unwrap();
    if let Some(need) = d.needs.iter().find(|n| n.ask) {
        net.nodes[0]
            .as_mut()
            .unwrap()
            .on_command(now, Command::Ask(*need));
    }
    d.allowed
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
    let key = (0..1_000)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| owner_of(&net, k) == Some(3))
        .expect("node 2 owns some key");
    let id = net.node(0).limiter().key_id(&key, &spec);
    // Node 0 spends from node 2's leases for a second.
    let mut admitted = 0;
    for _ in 0..50 {
        admitted += usize::from(check_asking(&mut net, &key));
        net.run_ms(20);
    }
    assert!(admitted > 0, "node 0 spends node 2's tokens");
    let now = net.now(2);
    let left_at = now.cluster_ms;
    net.nodes[2].as_mut().unwrap().leave(now);
    net.deliver();
    net.nodes[2] = None;
    // A round installs the ring without node 2.
    net.run_ms(300);
    assert_eq!(net.members(0), 1, "node 2 left");
    let next = owner_of(&net, &key).expect("an owner");
    assert_ne!(next, 3, "the window moved");
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
