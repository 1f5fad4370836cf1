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
    sealer
        .seal(keyring, kind, NOW, body, TO, Layout::Full, &mut out)
        .unwrap();
    out
}

fn sealed_compact(sent_ms: u64, body: &[u8], keyring: &Keyring, sealer: &mut Sealer) -> Vec<u8> {
    let mut out = Vec::new();
    sealer
        .seal(
            keyring,
            Kind::Summary,
            sent_ms,
            body,
            TO,
            Layout::Compact,
            &mut out,
        )
        .unwrap();
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
        sealer.seal(
            &ring(1),
            Kind::Summary,
            NOW,
            &body,
            TO,
            Layout::Full,
            &mut out
        ),
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
        s.seal(
            &k,
            Kind::Summary,
            NOW,
            b"to x",
            to(x, 1),
            Layout::Full,
            &mut for_x,
        )
        .unwrap();
    }
    let mut at_y = Opener::new(tag, 1400, y);
    assert_eq!(
        at_y.open(&k, &mut for_x.clone(), NOW).unwrap_err(),
        DropReason::Forged
    );
    let mut for_y = Vec::new();
    s.seal(
        &k,
        Kind::Summary,
        NOW,
        b"to y",
        to(y, 2),
        Layout::Full,
        &mut for_y,
    )
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
        s.seal(
            &k,
            Kind::Membership,
            NOW,
            b"hi",
            seed,
            Layout::Full,
            &mut announce,
        )
        .unwrap();
    }
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    assert!(opener.open(&k, &mut announce.clone(), NOW).is_ok());
    assert_eq!(
        opener.open(&k, &mut announce, NOW).unwrap_err(),
        DropReason::Replayed
    );
    let mut addressed = Vec::new();
    s.seal(
        &k,
        Kind::Summary,
        NOW,
        b"x",
        TO,
        Layout::Full,
        &mut addressed,
    )
    .unwrap();
    assert!(opener.open(&k, &mut addressed, NOW).is_ok());
}

#[test]
fn the_sealer_forgets_the_least_recently_used_destination() {
    let k = ring(1);
    let mut s = Sealer::new(1, 7, 1400);
    let mut out = Vec::new();
    let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let mut seal_to = |s: &mut Sealer, port: u16| {
        let to = Destination {
            addr: addr(port),
            node: Some(1),
        };
        s.seal(&k, Kind::Summary, NOW, b"x", to, Layout::Full, &mut out)
            .unwrap();
    };
    // Port 1 has the smallest address but is used last; port 2 is the least recent.
    for port in 1..=MAX_STREAMS as u16 {
        seal_to(&mut s, port);
    }
    seal_to(&mut s, 1);
    seal_to(&mut s, 60_000);
    assert!(s.streams.contains_key(&addr(1)));
    assert!(!s.streams.contains_key(&addr(2)));
    assert_eq!(s.streams[&addr(1)].number, 2);
}

#[test]
fn the_compact_header_round_trips_in_nine_bytes_less() {
    let k = ring(1);
    let tag = cluster_tag("prod");
    let mut sealer = Sealer::new(tag, 7, 1400);
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    let full = sealed(Kind::Summary, b"hello", &k, &mut sealer);
    // Sent 30 s behind the receiver's clock, and 30 s ahead: the time comes back whole.
    for sent in [NOW - 30_000, NOW + 30_000, NOW] {
        let mut d = sealed_compact(sent, b"hello", &k, &mut sealer);
        assert_eq!(d.len(), 5 + COMPACT_OVERHEAD);
        assert_eq!(full.len() - d.len(), 9);
        let opened = opener.open(&k, &mut d, NOW).unwrap();
        assert_eq!(opened.body, b"hello");
        assert!(opened.header.compact && opened.header.addressed);
        assert_eq!(
            (
                opened.header.kind,
                opened.header.sender,
                opened.header.sent_ms
            ),
            (Kind::Summary, 7, sent)
        );
    }
    // Full and compact datagrams of one sender share its stream: both open, neither twice.
    let mut full = full;
    assert!(opener.open(&k, &mut full.clone(), NOW).is_ok());
    assert_eq!(
        opener.open(&k, &mut full, NOW).unwrap_err(),
        DropReason::Replayed
    );
}

#[test]
fn every_byte_of_a_compact_datagram_is_authenticated() {
    let k = ring(1);
    let tag = cluster_tag("prod");
    let good = sealed_compact(NOW, b"payload", &k, &mut Sealer::new(tag, 7, 1400));
    let open = |bytes: &[u8], cluster: u32, now: u64| {
        let mut b = bytes.to_vec();
        Opener::new(cluster, 1400, RECEIVER)
            .open(&k, &mut b, now)
            .map(|_| ())
    };
    assert_eq!(open(&good, tag, NOW), Ok(()));
    for i in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[i] ^= bit;
            let reason = open(&bad, tag, NOW).unwrap_err();
            // Past the tag and fingerprint (which steer, and are refused before any
            // cryptography), every byte fails authentication itself.
            if i >= 8 {
                assert_eq!(reason, DropReason::Forged, "byte {i} bit {bit:#x}");
            }
        }
    }
    // And the tag and fingerprint are authenticated too: the associated data is the whole
    // header, the receiver's id and the whole cluster tag.
    let (aad, len) =
        super::envelope::associated_data(&good, COMPACT_HEADER_LEN, Some(RECEIVER), Some(tag));
    assert_eq!(len, COMPACT_HEADER_LEN + 16 + 4);
    assert_eq!(aad[..COMPACT_HEADER_LEN], good[..COMPACT_HEADER_LEN]);
    // A cluster whose tag shares the 16 bits sent, under the same secret, cannot open it.
    let twin = (0u32..)
        .map(|i| cluster_tag(&format!("twin-{i}")))
        .find(|t| *t != tag && t & 0xFFFF == tag & 0xFFFF)
        .unwrap();
    assert_eq!(open(&good, twin, NOW), Err(DropReason::Forged));
    // Read as the full layout (the version byte changed), it fails too.
    let mut as_full = good.clone();
    as_full[2] = WIRE_VERSION;
    assert!(open(&as_full, tag, NOW).is_err());
    for cut in 0..good.len() {
        assert!(open(&good[..cut], tag, NOW).is_err(), "cut at {cut}");
    }
    assert_eq!(
        open(&good[..COMPACT_OVERHEAD - 1], tag, NOW),
        Err(DropReason::TooShort)
    );
    let other = cluster_tag("staging");
    assert_ne!(
        other & 0xFFFF,
        tag & 0xFFFF,
        "the test needs tags apart in 16 bits"
    );
    assert_eq!(open(&good, other, NOW), Err(DropReason::WrongCluster));
    assert_eq!(
        open(&good, tag, NOW + MAX_CLOCK_DISTANCE_MS + 1),
        Err(DropReason::Stale)
    );
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    let mut far = sealed_compact(NOW - 90_000, b"far", &k, &mut Sealer::new(tag, 8, 1400));
    assert_eq!(
        opener.open(&k, &mut far, NOW).unwrap_err(),
        DropReason::Stale
    );
    let stale = opener.take_stale().unwrap();
    assert_eq!((stale.sender, stale.sent_ms), (8, NOW - 90_000));
    assert_eq!(stale_body(&far), b"far");
}

#[test]
fn two_keys_that_share_a_short_fingerprint_both_open_compact_datagrams() {
    // Secrets whose fingerprints agree in the 16 bits a compact header sends.
    let mut seen = std::collections::HashMap::new();
    let (a, b) = (0u32..)
        .find_map(|i| {
            let mut secret = [0u8; 32];
            secret[..4].copy_from_slice(&i.to_le_bytes());
            let fp = Keyring::new(&[secret]).unwrap().primary().0;
            seen.insert(fp & 0xFFFF, secret)
                .map(|earlier| (earlier, secret))
        })
        .unwrap();
    let ring_ab = Keyring::new(&[a, b]).unwrap();
    let (fa, fb) = (
        Keyring::new(&[a]).unwrap().primary().0,
        Keyring::new(&[b]).unwrap().primary().0,
    );
    assert!(fa != fb && fa & 0xFFFF == fb & 0xFFFF);
    let tag = cluster_tag("prod");
    // Sealed under the second key of the receiver's ring: the first is tried and fails.
    let mut d = sealed_compact(
        NOW,
        b"b",
        &Keyring::new(&[b]).unwrap(),
        &mut Sealer::new(tag, 7, 1400),
    );
    let mut opener = Opener::new(tag, 1400, RECEIVER);
    assert_eq!(opener.open(&ring_ab, &mut d, NOW).unwrap().body, b"b");
    let mut d = sealed_compact(
        NOW,
        b"a",
        &Keyring::new(&[a]).unwrap(),
        &mut Sealer::new(tag, 9, 1400),
    );
    assert_eq!(opener.open(&ring_ab, &mut d, NOW).unwrap().body, b"a");
    // A full header names the key whole: the other key is not tried.
    let mut d = sealed(
        Kind::Summary,
        b"c",
        &ring(3),
        &mut Sealer::new(tag, 10, 1400),
    );
    assert_eq!(
        opener.open(&ring_ab, &mut d, NOW).unwrap_err(),
        DropReason::UnknownKey
    );
}

#[test]
fn a_sender_past_the_compact_counter_may_send_only_full_headers() {
    let k = ring(1);
    let tag = cluster_tag("prod");
    let mut sealer = Sealer::new(tag, 7, 1400);
    sealer.counter = (1 << 48) - 2;
    assert!(sealer.compact_possible());
    let mut d = sealed_compact(NOW, b"x", &k, &mut sealer);
    assert_eq!(d.len(), 1 + COMPACT_OVERHEAD, "the last counter that fits");
    let opened = Opener::new(tag, 1400, RECEIVER)
        .open(&k, &mut d, NOW)
        .unwrap();
    assert_eq!(opened.header.counter, (1 << 48) - 1);
    assert!(!sealer.compact_possible());
    let mut out = Vec::new();
    assert_eq!(
        sealer.seal(&k, Kind::Summary, NOW, b"x", TO, Layout::Compact, &mut out),
        Err(WireError::CompactCounter),
        "refused, not quietly sent under a header its body was not laid out for"
    );
    let mut d = sealed(Kind::Summary, b"x", &k, &mut sealer);
    let opened = Opener::new(tag, 1400, RECEIVER)
        .open(&k, &mut d, NOW)
        .unwrap();
    assert!(!opened.header.compact);
    assert_eq!(opened.header.counter, 1 << 48);
}
