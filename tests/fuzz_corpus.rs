//! The fuzzing corpus (`fuzz/corpus/<target>/`), replayed through the same entry points the
//! fuzzer drives (`limitmesh::fuzz_targets`): every input the fuzzer kept, and every crash it
//! ever found, runs on every `cargo test`, without the fuzzer.
//!
//! `cargo test --test fuzz_corpus -- --ignored` writes the seed inputs: genuine datagrams,
//! bodies and SWIM packets, and the example rules, config and JSON.

use std::path::{Path, PathBuf};

use limitmesh::crdt::HlcTimestamp;
use limitmesh::crdt::Register;
use limitmesh::fuzz_targets::{FUZZ_CLUSTER, FUZZ_KEY, FUZZ_NOW_MS, FUZZ_RECEIVER, TARGETS};
use limitmesh::gossip::message::{Stamp, encode_batch, encode_batch_stamped, members_count};
use limitmesh::gossip::wire::{
    Destination, Keyring, Kind, Layout, Sealer, SenderCluster, cluster_tag,
};
use limitmesh::limiter::{Batch, KeyId, OriginId, RegisterUpdate};
use limitmesh::membership::{Membership, NodeId};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

#[test]
fn every_corpus_input_is_handled() {
    let mut total = 0;
    for (name, target) in TARGETS {
        let dir = corpus(name);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("entry").path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{name}: empty corpus");
        for input in &inputs {
            let data = std::fs::read(input).expect("readable");
            target(&data);
        }
        total += inputs.len();
        println!("{name}: {} inputs", inputs.len());
    }
    assert!(total >= TARGETS.len());
}

fn register_bodies() -> Vec<Vec<u8>> {
    let updates: Vec<RegisterUpdate> = (0..12u128)
        .map(|k| RegisterUpdate {
            key: KeyId(k * 7919 + 1),
            window_ms: if k % 3 == 0 { 60_000 } else { 1_000 },
            buckets: 10,
            register: Register {
                version: 3 + (k as u64 % 2),
                hlc: HlcTimestamp::new(FUZZ_NOW_MS, 1),
                newest_epoch: FUZZ_NOW_MS / if k % 3 == 0 { 6_000 } else { 100 },
                demand: 40 * k as u32,
                admitted: vec![3; (k % 11) as usize + 1],
            },
        })
        .collect();
    let batch = Batch {
        origin: OriginId(5),
        updates,
    };
    let mut bodies = Vec::new();
    for sender in [OriginId(5), OriginId(6)] {
        for body in encode_batch(&batch, sender, 1_000).expect("encodes") {
            let mut b = members_count::encode(5);
            b.extend_from_slice(&body);
            bodies.push(b);
        }
    }
    bodies.push(members_count::encode(3));
    // An exchange: registers, then sums, end to end.
    let mut pair = members_count::encode(5);
    for _ in 0..2 {
        let body = encode_batch(&batch, OriginId(5), 600).expect("encodes");
        pair.extend_from_slice(&body[0]);
    }
    bodies.push(pair);
    // The same under the compact header: stamps from the send time (the last body, which
    // the seed datagrams send as a compact exchange).
    let mut pair = members_count::encode(5);
    for _ in 0..2 {
        let stamp = Stamp::FromSent(FUZZ_NOW_MS);
        let body = encode_batch_stamped(&batch, OriginId(5), 600, stamp).expect("encodes");
        pair.extend_from_slice(&body[0]);
    }
    bodies.push(pair);
    bodies
}

/// Writes the seed corpus. Run it after a change of the formats, then fuzz.
#[test]
#[ignore = "writes fuzz/corpus; run by hand"]
fn write_seed_corpus() {
    let write = |target: &str, name: &str, data: &[u8]| {
        let dir = corpus(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        std::fs::write(dir.join(name), data).expect("write seed");
    };
    let bodies = register_bodies();
    for (i, b) in bodies.iter().enumerate() {
        write("register_body", &format!("seed-{i}"), b);
    }
    let keyring = Keyring::new(&[FUZZ_KEY]).expect("keyring");
    let mut sealer = Sealer::new(cluster_tag(FUZZ_CLUSTER), 77, 1_400);
    let to = |node| Destination {
        addr: "10.0.0.1:7946".parse().expect("addr"),
        node,
    };
    for (i, (kind, body)) in [
        (Kind::Summary, bodies[0].clone()),
        (Kind::AntiEntropy, bodies[1].clone()),
        (Kind::Heartbeat, members_count::encode(4)),
        (Kind::Membership, b"swim".to_vec()),
        (Kind::Exchange, bodies[bodies.len() - 1].clone()),
        // A full-layout exchange (whole stamps).
        (Kind::Exchange, bodies[bodies.len() - 2].clone()),
    ]
    .into_iter()
    .enumerate()
    {
        let mut out = Vec::new();
        let node = (i % 2 == 0).then_some(FUZZ_RECEIVER);
        // Input 3 (from 0) under the compact header, 4 under the timed one
        // (`gossip/wire/envelope.rs`).
        let layout = match i {
            3 => Layout::Compact,
            4 => Layout::Timed(SenderCluster::At(FUZZ_NOW_MS - 5_000)),
            _ => Layout::Full,
        };
        sealer
            .seal(
                &keyring,
                kind,
                FUZZ_NOW_MS,
                &body,
                to(node),
                layout,
                &mut out,
            )
            .expect("seals");
        write("datagram", &format!("seed-{i}"), &out);
    }
    // SWIM packets: an announce, and what answering it produces.
    let now = limitmesh::clock::monotonic_now();
    let mut peer = Membership::new(
        NodeId::new(
            uuid::Uuid::from_u128(2),
            "10.0.0.2:7946".parse().expect("addr"),
            5,
        ),
        1_340,
        2,
    );
    peer.announce("10.0.0.1:7946".parse().expect("addr"), now);
    let announce = peer.take_outbox().remove(0).1.to_vec();
    write("membership_packet", "seed-announce", &announce);
    let mut me = Membership::new(
        NodeId::new(
            uuid::Uuid::from_u128(1),
            "10.0.0.1:7946".parse().expect("addr"),
            5,
        ),
        1_340,
        1,
    );
    let _ = me.handle_data(&announce, now);
    for (i, (_, packet)) in me.take_outbox().into_iter().enumerate() {
        write("membership_packet", &format!("seed-reply-{i}"), &packet);
    }
    write(
        "rules_yaml",
        "seed-demo",
        limitmesh::config::demo::DEMO_RULES_YAML.as_bytes(),
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    write(
        "rules_yaml",
        "seed-example",
        &std::fs::read(root.join("deploy/examples/rules.yaml")).expect("example rules"),
    );
    write(
        "config_toml",
        "seed-demo",
        limitmesh::config::demo::DEMO_CONFIG_TOML.as_bytes(),
    );
    write(
        "config_toml",
        "seed-example",
        &std::fs::read(root.join("deploy/examples/limitmesh.toml")).expect("example config"),
    );
    write(
        "json_check",
        "seed-snake",
        br#"{"domain":"edge","hits_addend":2,"descriptors":[{"entries":[{"key":"client","value":"u1"}],"limit":{"requests_per_unit":5,"unit":"MINUTE"}}]}"#,
    );
    write(
        "json_check",
        "seed-camel",
        br#"{"domain":"edge","hitsAddend":1,"descriptors":[{"entries":[{"key":"remote_address","value":"10.1.2.3"},{"key":"path","value":"/a"}],"hitsAddend":3}]}"#,
    );
}
