//! A member that holds the cluster key sends registers in another origin's name: refused for
//! a live member, merged for one that is gone (relays of departed origins are how a newcomer
//! learns what they admitted).

use super::*;
use crate::crdt::{HlcTimestamp, Register};
use crate::gossip::wire::Destination;
use crate::limiter::{Batch, RegisterUpdate};

/// `origin`'s register of `key`, stamped now on node `i`'s clock, `admitted` in the newest
/// bucket.
fn register_of(
    net: &Net,
    i: usize,
    origin: u128,
    key: &[u8],
    version: u64,
    admitted: u32,
) -> Batch {
    let now = net.now(i).cluster_ms;
    let spec = limit().window;
    Batch {
        origin: OriginId(origin),
        updates: vec![RegisterUpdate {
            key: net.node(i).limiter().key_id(key, &spec),
            window_ms: spec.window_ms(),
            buckets: spec.buckets(),
            register: Register {
                version,
                hlc: HlcTimestamp::new(now, 0),
                newest_epoch: spec.epoch(now),
                demand: admitted,
                admitted: vec![admitted],
            },
        }],
    }
}

/// Node 2 seals `batch` as a datagram of `kind` to node 0, which opens it.
fn send_from_2_to_0(net: &mut Net, kind: Kind, batch: &Batch) {
    let to = Destination {
        addr: addr(0),
        node: Some(1),
    };
    let now = net.now(2);
    net.nodes[2]
        .as_mut()
        .unwrap()
        .send_batch(now, kind, batch, &[to]);
    net.deliver();
}

fn not_from_origin(net: &Net) -> u64 {
    net.node(0).view().wire.snapshot().merges.not_from_origin
}

#[test]
fn a_member_relaying_a_live_members_registers_is_refused_and_a_departed_ones_are_merged() {
    let mut net = formed();
    net.admit(1, b"tenant", 30);
    net.run_ms(400);
    assert_eq!(net.seen(0, b"tenant", 2), 30.0);
    // Node 2 (boot id 3) sends node 0 node 1's register (boot id 2, live): nothing admitted,
    // under a version node 1 would take years to reach.
    let zero = register_of(&net, 2, 2, b"tenant", u64::MAX / 2, 0);
    send_from_2_to_0(&mut net, Kind::Summary, &zero);
    assert_eq!(net.seen(0, b"tenant", 2), 30.0, "node 1's count stands");
    assert_eq!(not_from_origin(&net), 1);
    // Node 1's own registers still count.
    net.admit(1, b"tenant", 5);
    net.run_ms(400);
    assert_eq!(net.seen(0, b"tenant", 2), 35.0);
    // Sums in another owner's name: refused too (owners send only their own).
    send_from_2_to_0(&mut net, Kind::Aggregate, &zero);
    assert_eq!(not_from_origin(&net), 2);
    // An origin that is no member (boot id 99, gone): its registers come relayed.
    let departed = register_of(&net, 2, 99, b"tenant", 7, 12);
    send_from_2_to_0(&mut net, Kind::AntiEntropy, &departed);
    assert_eq!(net.seen(0, b"tenant", 99), 12.0);
    assert_eq!(not_from_origin(&net), 2);
}
