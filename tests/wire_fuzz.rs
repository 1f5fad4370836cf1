//! Hostile input for every layer a datagram goes through: the envelope, the register bodies,
//! the SWIM decoder. Random bytes and mutations of genuine datagrams, on fixed seeds: nothing
//! may panic, and every rejection must be one of the counted reasons.

use limitmesh::crdt::HlcTimestamp;
use limitmesh::crdt::Register;
use limitmesh::gossip::message::{decode_batch, decode_batch_pair, encode_batch};
use limitmesh::gossip::wire::{
    Destination, DropReason, Keyring, Kind, Layout, Opener, Sealer, SenderCluster, cluster_tag,
};
use limitmesh::limiter::{Batch, KeyId, OriginId, RegisterUpdate};
use limitmesh::membership::{Membership, NodeId};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const NOW: u64 = 1_700_000_000_000;
const CASES: usize = 120_000;

fn genuine_bodies() -> Vec<Vec<u8>> {
    let updates: Vec<RegisterUpdate> = (0..40u128)
        .map(|k| RegisterUpdate {
            key: KeyId(k * 7919),
            window_ms: 1_000,
            buckets: 10,
            register: Register {
                version: 3 + (k as u64 % 2),
                hlc: HlcTimestamp::new(NOW, 1),
                newest_epoch: NOW / 100,
                demand: 400,
                admitted: vec![20; 11],
            },
        })
        .collect();
    encode_batch(
        &Batch {
            origin: OriginId(5),
            updates,
        },
        OriginId(5),
        1_340,
    )
    .expect("encodes")
}

fn mutate(rng: &mut StdRng, bytes: &mut Vec<u8>) {
    match rng.random_range(0..6) {
        0 => {
            let i = rng.random_range(0..bytes.len().max(1));
            if let Some(b) = bytes.get_mut(i) {
                *b ^= 1 << rng.random_range(0..8);
            }
        }
        1 => {
            let n = rng.random_range(0..bytes.len() + 1);
            bytes.truncate(n);
        }
        2 => {
            let n = rng.random_range(1..64);
            bytes.extend((0..n).map(|_| rng.random::<u8>()));
        }
        3 => {
            // A huge varint length where one was expected.
            let i = rng.random_range(0..bytes.len().max(1));
            bytes.splice(
                i.min(bytes.len())..i.min(bytes.len()),
                [0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F],
            );
        }
        4 => {
            let i = rng.random_range(0..bytes.len().max(1));
            let j = rng.random_range(0..bytes.len().max(1));
            if i < bytes.len() && j < bytes.len() {
                bytes.swap(i, j);
            }
        }
        _ => {
            for b in bytes.iter_mut() {
                if rng.random_range(0..16) == 0 {
                    *b = rng.random();
                }
            }
        }
    }
}

/// The boot id of the node the fuzzed datagrams are sealed for.
const RECEIVER: u128 = 0x5EC0;

#[test]
fn random_and_mutated_datagrams_never_panic() {
    let mut rng = StdRng::seed_from_u64(0xF022);
    let keyring = Keyring::new(&[[9u8; 32]]).unwrap();
    let tag = cluster_tag("fuzz");
    let mut sealer = Sealer::new(tag, 77, 1_400);
    let bodies = genuine_bodies();
    let mut genuine = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let mut d = Vec::new();
        let kind = if i % 2 == 0 {
            Kind::Summary
        } else {
            Kind::AntiEntropy
        };
        sealer
            .seal(
                &keyring,
                kind,
                NOW,
                body,
                Destination {
                    addr: "10.0.0.1:7946".parse().unwrap(),
                    node: Some(RECEIVER),
                },
                // Every header layout.
                match i % 3 {
                    0 => Layout::Compact,
                    1 => Layout::Timed(SenderCluster::At(NOW - 5_000)),
                    _ => Layout::Full,
                },
                &mut d,
            )
            .unwrap();
        genuine.push(d);
    }
    let mut opener = Opener::new(tag, 1_400, RECEIVER);
    let mut reasons = std::collections::BTreeMap::<DropReason, usize>::new();
    let mut opened = 0usize;
    for case in 0..CASES {
        let mut d = if case % 3 == 0 {
            let n = rng.random_range(0..1_500);
            (0..n).map(|_| rng.random::<u8>()).collect()
        } else {
            let mut d = genuine[case % genuine.len()].clone();
            mutate(&mut rng, &mut d);
            d
        };
        match opener.open(&keyring, &mut d, NOW) {
            Ok(o) => {
                opened += 1;
                let _ = decode_batch(o.body, OriginId(o.header.sender));
                let _ = decode_batch_pair(o.body, OriginId(o.header.sender));
            }
            Err(r) => *reasons.entry(r).or_default() += 1,
        }
    }
    // Mutations that change nothing (a swap of equal bytes) replay a genuine datagram; the
    // first delivery of each genuine datagram is accepted.
    assert!(opened <= genuine.len() + CASES / 50, "{opened} opened");
    for reason in [
        DropReason::TooShort,
        DropReason::Oversized,
        DropReason::BadMagic,
        DropReason::Forged,
    ] {
        assert!(
            reasons.get(&reason).copied().unwrap_or(0) > 0,
            "{reasons:?}"
        );
    }
}

#[test]
fn hostile_register_bodies_never_panic() {
    let mut rng = StdRng::seed_from_u64(0xB0D1);
    let bodies = genuine_bodies();
    let mut decoded = 0usize;
    for case in 0..CASES {
        let body = if case % 4 == 0 {
            let n = rng.random_range(0..1_400);
            (0..n).map(|_| rng.random::<u8>()).collect()
        } else {
            let mut b = bodies[case % bodies.len()].clone();
            mutate(&mut rng, &mut b);
            b
        };
        if decode_batch(&body, OriginId(1)).is_ok() {
            decoded += 1;
        }
    }
    // Most mutations of a varint body still decode to something; all of them ended cleanly.
    assert!(decoded > 0 && decoded < CASES);
}

#[tokio::test(start_paused = true)]
async fn hostile_membership_packets_never_panic() {
    let mut rng = StdRng::seed_from_u64(0x5717);
    let me = NodeId::new(
        uuid::Uuid::from_u128(1),
        "10.0.0.1:7946".parse().unwrap(),
        5,
    );
    let mut membership = Membership::new(me, 1_340, 1);
    // A genuine announce from a peer, to mutate.
    let mut peer = Membership::new(
        NodeId::new(
            uuid::Uuid::from_u128(2),
            "10.0.0.2:7946".parse().unwrap(),
            5,
        ),
        1_340,
        2,
    );
    let now = limitmesh::clock::monotonic_now();
    peer.announce("10.0.0.1:7946".parse().unwrap(), now);
    let announce = peer.take_outbox().remove(0).1.to_vec();
    let mut errors = 0usize;
    for case in 0..CASES {
        let packet = if case % 3 == 0 {
            let n = rng.random_range(0..1_400);
            (0..n).map(|_| rng.random::<u8>()).collect()
        } else {
            let mut p = announce.clone();
            mutate(&mut rng, &mut p);
            p
        };
        if membership.handle_data(&packet, now).is_err() {
            errors += 1;
        }
        membership.take_outbox();
        membership.take_events();
    }
    assert!(errors > CASES / 2, "{errors} of {CASES} refused");
}
