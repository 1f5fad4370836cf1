//! A member that holds the cluster key sends registers in another origin's name: refused for
//! a live member, merged for one that is gone (relays of departed origins are how a newcomer
//! learns what they admitted).

use super::*;
use crate::crdt::{HlcTimestamp, Register};
use crate::gossip::wire::{Destination, Layout};
use crate::limiter::{Batch, RegisterUpdate};

/// `origin`'s register of `key`, stamped now on node `i`'s clock, `admitted` in the newest
/// bucket.
pub(super) fn register_of(
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
pub(super) fn send_from_2_to_0(net: &mut Net, kind: Kind, batch: &Batch) {
    send_from_2(net, 0, kind, batch);
}

/// Node 2 seals `batch` as a datagram of `kind` to node `i` (boot id `i + 1`).
pub(super) fn send_from_2(net: &mut Net, i: usize, kind: Kind, batch: &Batch) {
    let to = Destination {
        addr: addr(i),
        node: Some(i as u128 + 1),
    };
    let now = net.now(2);
    net.nodes[2]
        .as_mut()
        .unwrap()
        .send_batch(now, kind, batch, &[to]);
    net.deliver();
}

pub(super) fn not_from_origin(net: &Net) -> u64 {
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

/// Node 2 seals what it sends next in the name of boot id `as_sender`, as any member holding
/// the cluster key can (the key authenticates the cluster, not the member), from its own
/// address. Its numbers towards node 0 first pass any that `as_sender` used there, so that
/// node 0's replay window takes what it forges. Returns node 2's own outbox.
fn impersonate(net: &mut Net, as_sender: u128) -> super::super::outbox::Outbox {
    let now = net.now(2);
    let node = net.nodes[2].as_mut().unwrap();
    let tag = crate::gossip::wire::cluster_tag(&node.params.cluster_id);
    let sealer = crate::gossip::wire::Sealer::new(tag, as_sender, node.params.max_packet_size);
    let forger = super::super::outbox::Outbox::new(sealer, node.keyring.clone());
    let own = std::mem::replace(&mut node.outbox, forger);
    for _ in 0..4_096 {
        node.outbox.seal(
            Kind::Heartbeat,
            now.wall_ms,
            &[],
            unaddressed_to_0(),
            Layout::Full,
        );
    }
    drop(node.outbox.take());
    own
}

/// Node 0 by address alone: the datagram is not bound to its boot (a seed's announcement).
fn unaddressed_to_0() -> Destination {
    Destination {
        addr: addr(0),
        node: None,
    }
}

/// A member that names a live member as the sender of its datagrams speaks for nobody: an
/// older register of that member's with nothing admitted would replace the one held (an
/// origin's own register supersedes a forgery), and sums in its name would be taken as its.
#[test]
fn a_member_sealing_in_a_live_members_name_from_its_own_address_is_refused() {
    let mut net = formed();
    net.admit(1, b"tenant", 30);
    net.run_ms(400);
    assert_eq!(net.seen(0, b"tenant", 2), 30.0);
    // Node 1's register (boot id 2), stamped before the one node 0 holds and with an older
    // version: nothing admitted.
    let mut zero = register_of(&net, 2, 2, b"tenant", 1, 0);
    zero.updates[0].register.hlc = HlcTimestamp::new(net.now(2).cluster_ms - 2_000, 0);
    let own = impersonate(&mut net, 2);
    let now = net.now(2);
    for kind in [Kind::Summary, Kind::Aggregate] {
        net.nodes[2]
            .as_mut()
            .unwrap()
            .send_batch(now, kind, &zero, &[unaddressed_to_0()]);
        net.deliver();
    }
    net.nodes[2].as_mut().unwrap().outbox = own;
    assert_eq!(net.seen(0, b"tenant", 2), 30.0, "node 1's count stands");
    // Refused as they are opened: they name a member that is at another address.
    assert_eq!(
        dropped(&net, "wrong_address"),
        2,
        "its register and sums refused"
    );
    // Node 1's own registers, from its own address, still count.
    net.admit(1, b"tenant", 5);
    net.run_ms(400);
    assert_eq!(net.seen(0, b"tenant", 2), 35.0);
}

fn dropped(net: &Net, reason: &str) -> u64 {
    let dropped = net.node(0).view().wire.snapshot().dropped;
    dropped.get(reason).copied().unwrap_or(0)
}

/// Replay windows are kept per sender: a member sealing in a live member's name, bound to node
/// 0 and numbered far past that member's datagrams, must not move its window there, or every
/// datagram the member sends node 0 afterwards (registers, heartbeats, SWIM) is refused as a
/// replay and node 0 stops hearing it.
#[test]
fn a_member_sealing_in_a_live_members_name_cannot_move_its_replay_window() {
    let mut net = formed();
    net.admit(1, b"tenant", 30);
    net.run_ms(400);
    assert_eq!(net.seen(0, b"tenant", 2), 30.0);
    let own = impersonate(&mut net, 2);
    let to = Destination {
        addr: addr(0),
        node: Some(1),
    };
    let now = net.now(2);
    let node = net.nodes[2].as_mut().unwrap();
    node.outbox
        .seal(Kind::Heartbeat, now.wall_ms, &[], to, Layout::Full);
    let forged = node.outbox.take();
    node.outbox = own;
    for out in forged {
        net.hand_over(0, out.datagram, 2);
    }
    net.deliver();
    net.admit(1, b"tenant", 5);
    net.run_ms(3_000);
    assert_eq!(net.seen(0, b"tenant", 2), 35.0, "node 0 still hears node 1");
    assert_eq!(dropped(&net, "replayed"), 0);
    assert_eq!(net.members(0), 2);
    assert_eq!(dropped(&net, "wrong_address"), 1, "the forgery, counted");
}

/// A ledger datagram carries its sender's own registers alone: one naming a live member's
/// origin, with nothing admitted under a later version, is refused whole, as the same
/// registers in any other datagram are.
#[test]
fn a_ledger_datagram_naming_another_origin_is_refused() {
    let mut net = formed();
    net.admit(1, b"tenant", 30);
    net.run_ms(400);
    assert_eq!(net.seen(0, b"tenant", 2), 30.0);
    // Ahead of node 1's version, within the lead a register may take: merged, it would
    // replace node 1's.
    let zero = register_of(&net, 2, 2, b"tenant", 1_000, 0);
    let to = Destination {
        addr: addr(0),
        node: Some(1),
    };
    let now = net.now(2);
    let node = net.nodes[2].as_mut().unwrap();
    let stamp = crate::gossip::message::Stamp::for_header(false, now.wall_ms);
    let mut body = node.body_prefix(to);
    let mut batch =
        crate::gossip::message::encode_batch_stamped(&zero, OriginId(3), usize::MAX, stamp)
            .expect("encoded");
    body.append(&mut batch.remove(0));
    body.extend_from_slice(&crate::gossip::ledger_message::encode_ledger(
        &[],
        1,
        now.wall_ms,
    ));
    node.seal_as(now, Kind::Ledger, &body, to, false);
    net.deliver();
    assert_eq!(net.seen(0, b"tenant", 2), 30.0, "node 1's count stands");
    assert_eq!(not_from_origin(&net), 1, "refused as not its sender's");
}

/// A member that saw another depart relays that member's last registers to the windows'
/// owners; a node that still lists the departed member refuses them (a live member speaks for
/// itself), holds them, and counts them once SWIM drops the member here.
#[test]
fn a_relay_refused_while_its_origin_is_live_here_counts_once_the_origin_departs() {
    let mut net = formed();
    net.admit(1, b"tenant", 30);
    net.run_ms(400);
    assert_eq!(net.seen(0, b"tenant", 2), 30.0);
    // Node 1 (boot id 2) spent 40 by its last register, which node 0 never had from it; node
    // 2 relays it. A version ahead of any node 1 reached in its few seconds, within the lead
    // an origin can emit.
    let last = register_of(&net, 2, 2, b"tenant", 2_000, 40);
    send_from_2_to_0(&mut net, Kind::AntiEntropy, &last);
    net.run_ms(1_000);
    assert_eq!(net.seen(0, b"tenant", 2), 30.0, "node 1 is live here");
    assert_eq!(not_from_origin(&net), 1);
    // Node 1 crashes; node 0's SWIM drops it.
    net.nodes[1] = None;
    net.run_until_members(0, 1, "node 0 never dropped node 1");
    net.run_ms(400);
    assert_eq!(
        net.seen(0, b"tenant", 2),
        40.0,
        "the held relay counts once node 1 departed"
    );
}
