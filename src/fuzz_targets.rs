//! Entry points for coverage-guided fuzzing (`fuzz/`, run with `cargo fuzz`) and for replaying
//! its corpus in `cargo test` (`tests/fuzz_corpus.rs`). Each takes arbitrary bytes, the way an
//! attacker or a broken peer would hand them to a node, and must return, whatever they are:
//! no panic, and no allocation in proportion to a length the bytes claim.

use crate::gossip::message::{
    Stamp, decode_batch_pair_stamped, decode_batch_stamped, members_count,
};
use crate::gossip::wire::{Keyring, Opener, cluster_tag};
use crate::limiter::OriginId;
use crate::membership::{Membership, NodeId};

/// The key every fuzzed datagram is sealed with (the seed corpus is made with it).
pub const FUZZ_KEY: [u8; 32] = [0x5A; 32];
/// The cluster name of the fuzzed datagrams.
pub const FUZZ_CLUSTER: &str = "fuzz";
/// The boot id of the node the fuzzed datagrams are addressed to.
pub const FUZZ_RECEIVER: u128 = 0xF022;
/// The wall time every fuzzed datagram is opened at.
pub const FUZZ_NOW_MS: u64 = 1_700_000_000_000;

/// A datagram as the node loop handles it: opened (authentication, clock, replay), then its
/// body decoded as the kind says.
pub fn datagram(data: &[u8]) {
    let Ok(keyring) = Keyring::new(&[FUZZ_KEY]) else {
        return;
    };
    let mut opener = Opener::new(cluster_tag(FUZZ_CLUSTER), 1_400, FUZZ_RECEIVER);
    let mut buf = data.to_vec();
    if let Ok(opened) = opener.open(&keyring, &mut buf, FUZZ_NOW_MS) {
        register_body(opened.body);
    }
}

/// A register or heartbeat body: the members count, then registers (or, in an exchange, two
/// batches of them).
pub fn register_body(data: &[u8]) {
    // Both layouts of the stamp; the send time at either end of its range too.
    let stamps = [
        Stamp::Whole,
        Stamp::FromSent(FUZZ_NOW_MS),
        Stamp::FromSent(0),
        Stamp::FromSent(u64::MAX),
    ];
    let rest = members_count::decode(data).map(|(_, rest)| rest);
    for body in rest.into_iter().chain([data]) {
        for stamp in stamps {
            let _ = decode_batch_stamped(body, OriginId(1), stamp);
            let _ = decode_batch_pair_stamped(body, OriginId(1), stamp);
        }
    }
}

/// A SWIM packet handed to membership (foca and the codec).
pub fn membership_packet(data: &[u8]) {
    let me = NodeId::new(
        uuid::Uuid::from_u128(1),
        std::net::SocketAddr::from(([10, 0, 0, 1], 7946)),
        5,
    );
    let mut membership = Membership::new(me, 1_340, 1);
    let _ = membership.handle_data(data, crate::clock::monotonic_now());
}

/// A rules file in envoyproxy/ratelimit's YAML.
pub fn rules_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::rules::RuleSet::parse("fuzz.yaml", text, Default::default());
    }
}

/// A node configuration file in TOML (no environment overrides).
pub fn config_toml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::config::Config::from_toml("fuzz.toml", text, std::iter::empty());
    }
}

/// The body of envoyproxy/ratelimit's `/json` check.
pub fn json_check(data: &[u8]) {
    let _ = crate::envoy_json::parse(data);
}

/// A fuzz target: arbitrary bytes in, nothing out.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets` file and corpus folder.
pub const TARGETS: [(&str, Target); 6] = [
    ("datagram", datagram),
    ("register_body", register_body),
    ("membership_packet", membership_packet),
    ("rules_yaml", rules_yaml),
    ("config_toml", config_toml),
    ("json_check", json_check),
];
