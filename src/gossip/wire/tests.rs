//! The envelope: sealing, opening, and every reason a datagram is dropped.

use std::net::SocketAddr;

use super::*;

const NOW: u64 = 1_700_000_000_000;

fn ring(secret: u8) -> Keyring {
    Keyring::new(&[[secret; 32]]).unwrap()
}

const TO_ADDR: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7946,
));
/// The receiver every test opener plays.
const RECEIVER: u128 = 0xB0B;
const TO: Destination = Destination {
    addr: TO_ADDR,
    node: Some(RECEIVER),
};

fn sealed(kind: Kind, body: &[u8], keyring: &Keyring, sealer: &mut Sealer) -> Vec<u8> {
    let mut out = Vec::new();
    sealer.seal(keyring, kind, NOW, body, TO, &mut out).unwrap();
    out
}

#[test]
fn round_trip_and_overhead() {
    let k = ring(1);
    let tag = cluster_tag("prod");
    let mut sealer = Sealer::new(tag, 7, 1400);
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    let mut d = sealed(Kind::Summary, b"hello", &k, &mut sealer);
    assert_eq!(d.len(), 5 + OVERHEAD);
    assert!(
        !d.windows(5).any(|w| w == b"hello"),
        "the body is encrypted"
    );
    let opened = opener.open(&k, &mut d, NOW + 5).unwrap();
    assert_eq!(opened.body, b"hello");
    assert_eq!(opened.header.kind, Kind::Summary);
    assert_eq!(opened.header.sender, 7);
    assert_eq!(opened.header.sent_ms, NOW);
}

#[test]
fn each_failure_is_dropped_with_its_reason() {
    let k = ring(1);
    let tag = cluster_tag("prod");
    let mut sealer = Sealer::new(tag, 7, 1400);
    let good = sealed(Kind::Summary, b"payload", &k, &mut sealer);
    let open = |bytes: &[u8], keyring: &Keyring, cluster: u32, now: u64| {
        let mut b = bytes.to_vec();
        Opener::new(cluster, 1400, RECEIVER)
            .open(keyring, &mut b, now)
            .map(|_| ())
    };
    assert_eq!(open(&good[..10], &k, tag, NOW), Err(DropReason::TooShort));
    assert_eq!(
        open(&vec![0; 1401], &k, tag, NOW),
        Err(DropReason::Oversized)
    );
    let mut bad = good.clone();
    bad[0] = b'X';
    assert_eq!(open(&bad, &k, tag, NOW), Err(DropReason::BadMagic));
    let mut bad = good.clone();
    bad[2] = 9;
    assert_eq!(
        open(&bad, &k, tag, NOW),
        Err(DropReason::UnsupportedVersion)
    );
    let mut bad = good.clone();
    bad[3] = 99;
    assert_eq!(open(&bad, &k, tag, NOW), Err(DropReason::UnknownKind));
    assert_eq!(
        open(&good, &k, cluster_tag("staging"), NOW),
        Err(DropReason::WrongCluster)
    );
    assert_eq!(open(&good, &ring(2), tag, NOW), Err(DropReason::UnknownKey));
    // Any flipped bit in header, body or tag fails authentication.
    for i in [4usize, 13, 25, 40, HEADER_LEN + 1, good.len() - 1] {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        let reason = open(&bad, &k, tag, NOW).unwrap_err();
        assert!(
            matches!(
                reason,
                DropReason::Forged | DropReason::WrongCluster | DropReason::UnknownKey
            ),
            "byte {i}: {reason:?}"
        );
    }
    assert_eq!(
        open(&good, &k, tag, NOW + MAX_CLOCK_DISTANCE_MS + 1),
        Err(DropReason::Stale)
    );
}

#[test]
fn replays_are_refused_and_reordering_is_not() {
    let k = ring(1);
    let tag = cluster_tag("prod");
    let mut sealer = Sealer::new(tag, 7, 1400);
    let d: Vec<Vec<u8>> = (0..70)
        .map(|_| sealed(Kind::Membership, b"x", &k, &mut sealer))
        .collect();
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    let mut open = |i: usize| opener.open(&k, &mut d[i].clone(), NOW).map(|_| ());
    assert_eq!(open(5), Ok(()));
    assert_eq!(open(5), Err(DropReason::Replayed));
    assert_eq!(open(3), Ok(()), "out of order but new");
    assert_eq!(open(69), Ok(()));
    assert_eq!(open(6), Ok(()), "63 behind: still inside the window");
    assert_eq!(
        open(3),
        Err(DropReason::Replayed),
        "64 behind: too old to tell"
    );
    assert_eq!(open(69), Err(DropReason::Replayed));
}

#[test]
fn rotation_old_keys_still_open_new_seals() {
    let old = [1u8; 32];
    let new = [2u8; 32];
    let before = Keyring::new(&[old]).unwrap();
    let during = Keyring::new(&[new, old]).unwrap();
    let tag = cluster_tag("prod");
    let mut a = Sealer::new(tag, 1, 1400);
    let mut b = Sealer::new(tag, 2, 1400);
    let from_old_node = sealed(Kind::Summary, b"a", &before, &mut a);
    let from_new_node = sealed(Kind::Summary, b"b", &during, &mut b);
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    assert!(
        opener
            .open(&during, &mut from_old_node.clone(), NOW)
            .is_ok()
    );
    assert_eq!(
        opener
            .open(&before, &mut from_new_node.clone(), NOW)
            .unwrap_err(),
        DropReason::UnknownKey,
        "a node that has not yet learned the new key cannot read it"
    );
    assert!(
        Opener::new(tag, 1400, RECEIVER)
            .open(&during, &mut from_new_node.clone(), NOW)
            .is_ok()
    );
    assert_eq!(Keyring::new(&[]).unwrap_err(), WireError::EmptyKeyring);
}

#[test]
fn bodies_that_do_not_fit_are_refused() {
    let mut sealer = Sealer::new(1, 1, 200);
    let mut out = Vec::new();
    let body = vec![0u8; 200 - OVERHEAD + 1];
    assert!(matches!(
        sealer.seal(&ring(1), Kind::Summary, NOW, &body, TO, &mut out),
        Err(WireError::TooLarge { .. })
    ));
}

#[test]
fn the_sender_table_is_bounded() {
    let k = ring(1);
    let tag = cluster_tag("prod");
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    let max = super::replay::MAX_TRACKED_STREAMS;
    for sender in 0..(max as u128 + 100) {
        let mut s = Sealer::new(tag, sender, 1400);
        let mut d = sealed(Kind::Summary, b"x", &k, &mut s);
        opener.open(&k, &mut d, NOW).unwrap();
    }
    assert_eq!(opener.replay.len(), max);
}

#[test]
fn a_datagram_captured_on_its_way_elsewhere_opens_only_at_its_receiver() {
    // S writes to X and to Y. An attacker replays S's datagram for X to Y, numbered far
    // ahead of S's stream towards Y: Y refuses it as forged, and S's genuine datagrams to
    // Y still open (the replay did not move Y's window for S).
    let k = ring(1);
    let tag = cluster_tag("prod");
    let (x, y) = (0xA, 0xB);
    let to = |node: u128, port: u16| Destination {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        node: Some(node),
    };
    let mut s = Sealer::new(tag, 7, 1400);
    let mut for_x = Vec::new();
    for _ in 0..500 {
        s.seal(&k, Kind::Summary, NOW, b"to x", to(x, 1), &mut for_x)
            .unwrap();
    }
    let mut at_y = Opener::new(tag, 1400, y);
    assert_eq!(
        at_y.open(&k, &mut for_x.clone(), NOW).unwrap_err(),
        DropReason::Forged
    );
    let mut for_y = Vec::new();
    s.seal(&k, Kind::Summary, NOW, b"to y", to(y, 2), &mut for_y)
        .unwrap();
    assert_eq!(at_y.open(&k, &mut for_y, NOW).unwrap().body, b"to y");
    // And X itself opens it once.
    let mut at_x = Opener::new(tag, 1400, x);
    assert!(at_x.open(&k, &mut for_x.clone(), NOW).is_ok());
    assert_eq!(
        at_x.open(&k, &mut for_x, NOW).unwrap_err(),
        DropReason::Replayed
    );
}

#[test]
fn replayed_announcements_cannot_block_addressed_traffic() {
    // Unaddressed datagrams (announcements to a seed known by address) open anywhere, so
    // they are numbered in a window of their own.
    let k = ring(1);
    let tag = cluster_tag("prod");
    let seed = Destination {
        addr: SocketAddr::from(([127, 0, 0, 1], 9)),
        node: None,
    };
    let mut s = Sealer::new(tag, 7, 1400);
    let mut announce = Vec::new();
    for _ in 0..2_000 {
        s.seal(&k, Kind::Membership, NOW, b"hi", seed, &mut announce)
            .unwrap();
    }
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    assert!(opener.open(&k, &mut announce.clone(), NOW).is_ok());
    assert_eq!(
        opener.open(&k, &mut announce, NOW).unwrap_err(),
        DropReason::Replayed
    );
    let mut addressed = Vec::new();
    s.seal(&k, Kind::Summary, NOW, b"x", TO, &mut addressed)
        .unwrap();
    assert!(opener.open(&k, &mut addressed, NOW).is_ok());
}

#[test]
fn the_sealer_forgets_the_least_recently_used_destination() {
    let k = ring(1);
    let mut s = Sealer::new(1, 7, 1400);
    let mut out = Vec::new();
    let dest = |port: u16| Destination {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        node: Some(1),
    };
    // Port 1 has the smallest address but is used last; port 2 is the least recent.
    for port in 1..=MAX_STREAMS as u16 {
        s.seal(&k, Kind::Summary, NOW, b"x", dest(port), &mut out)
            .unwrap();
    }
    s.seal(&k, Kind::Summary, NOW, b"x", dest(1), &mut out)
        .unwrap();
    s.seal(&k, Kind::Summary, NOW, b"x", dest(60_000), &mut out)
        .unwrap();
    assert!(s.streams.contains_key(&dest(1).addr));
    assert!(!s.streams.contains_key(&dest(2).addr));
    assert_eq!(s.streams[&dest(1).addr].number, 2);
}
