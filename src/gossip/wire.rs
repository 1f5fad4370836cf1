//! The datagram envelope: every UDP datagram a node sends, membership and summaries alike.
//!
//! ```text
//! 0      2    3     4            8            12           20            36         44       48
//! | "LM" | v2 | kind | cluster tag | key finger | sent ms    | sender       | counter  | stream | ciphertext … | tag (16) |
//! ```
//!
//! The body is sealed with XChaCha20-Poly1305 under a key of the cluster's keyring. The
//! associated data is the header and, when the kind byte's high bit says the datagram is
//! addressed, the receiver's boot id (16 bytes, not sent: the receiver supplies its own). So
//! nothing in the header can be altered, and an addressed datagram opens only at the node it
//! was sealed for: one captured on its way to another node and replayed here fails as forged,
//! and cannot move this node's replay window for its sender. Unaddressed datagrams are the
//! announcements a node sends to seeds it knows only by address; they have a replay window of
//! their own (`replay.rs`), so replaying them cannot block a sender's addressed traffic.
//!
//! The nonce is the sender's boot id and its datagram counter (across all destinations): unique
//! for as long as that process lives, and a restart is a new id. `stream` numbers the datagrams
//! from this sender to one destination address, so a receiver sees consecutive numbers however
//! many peers the sender writes to in between. A receiver drops, and counts by reason, anything
//! that is short, oversized, of another cluster or protocol version, sealed with a key it does
//! not hold, forged or addressed to another node, too far from its own clock, or already seen.
//! Work and memory per datagram are bounded by the datagram, never by a length it claims.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Tag, XNonce};
use thiserror::Error;

pub use super::keyring::Keyring;
use super::replay::ReplayTable;

pub const MAGIC: [u8; 2] = *b"LM";
pub const WIRE_VERSION: u8 = 2;
pub const HEADER_LEN: usize = 48;
pub const TAG_LEN: usize = 16;
/// Bytes the envelope adds to a body.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// Datagrams further than this from the receiver's clock are refused: it bounds how long a
/// captured datagram stays replayable once its stream has left the replay table.
pub const MAX_CLOCK_DISTANCE_MS: u64 = 60_000;
/// Destinations a sealer keeps a stream number for.
const MAX_STREAMS: usize = 4_096;
/// The kind byte's flag: the datagram is bound to its receiver's boot id.
const ADDRESSED: u8 = 0x80;

/// What a datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A SWIM packet for the membership layer.
    Membership = 1,
    /// A 200 ms round of changed registers.
    Summary = 2,
    /// Registers pushed to repair or bootstrap a peer.
    AntiEntropy = 3,
    /// "Still here": sent in a round with nothing else for that peer, so that silence means
    /// unreachable rather than idle.
    Heartbeat = 4,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Kind::Membership),
            2 => Some(Kind::Summary),
            3 => Some(Kind::AntiEntropy),
            4 => Some(Kind::Heartbeat),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Membership => "membership",
            Kind::Summary => "summary",
            Kind::AntiEntropy => "anti_entropy",
            Kind::Heartbeat => "heartbeat",
        }
    }
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Error)]
pub enum DropReason {
    #[error("shorter than the envelope")]
    TooShort,
    #[error("larger than the maximum packet size")]
    Oversized,
    #[error("not a limitmesh datagram (bad magic)")]
    BadMagic,
    #[error("unsupported protocol version")]
    UnsupportedVersion,
    #[error("unknown datagram kind")]
    UnknownKind,
    #[error("belongs to another cluster")]
    WrongCluster,
    #[error("sealed with a key this node does not hold")]
    UnknownKey,
    #[error("failed authentication")]
    Forged,
    #[error("sent too far from this node's clock")]
    Stale,
    #[error("already received (replay)")]
    Replayed,
    #[error("body did not decode")]
    Malformed,
}

impl DropReason {
    pub const ALL: [DropReason; 11] = [
        DropReason::TooShort,
        DropReason::Oversized,
        DropReason::BadMagic,
        DropReason::UnsupportedVersion,
        DropReason::UnknownKind,
        DropReason::WrongCluster,
        DropReason::UnknownKey,
        DropReason::Forged,
        DropReason::Stale,
        DropReason::Replayed,
        DropReason::Malformed,
    ];

    /// A label for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::TooShort => "too_short",
            DropReason::Oversized => "oversized",
            DropReason::BadMagic => "bad_magic",
            DropReason::UnsupportedVersion => "unsupported_version",
            DropReason::UnknownKind => "unknown_kind",
            DropReason::WrongCluster => "wrong_cluster",
            DropReason::UnknownKey => "unknown_key",
            DropReason::Forged => "forged",
            DropReason::Stale => "stale",
            DropReason::Replayed => "replayed",
            DropReason::Malformed => "malformed",
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum WireError {
    #[error("the keyring is empty")]
    EmptyKeyring,
    #[error("body of {len} bytes does not fit a {max}-byte datagram")]
    TooLarge { len: usize, max: usize },
    #[error("sealing failed")]
    Seal,
}

/// A short tag of the cluster's name, checked before any cryptography: datagrams of a
/// neighbouring cluster are dropped cheaply and counted apart from forgeries.
pub fn cluster_tag(cluster_id: &str) -> u32 {
    let h = blake3::hash(cluster_id.as_bytes());
    let b = h.as_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Where a datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Destination {
    pub addr: SocketAddr,
    /// The receiver's boot id, when known: the datagram is then bound to that receiver. `None`
    /// only for a seed known by its address alone.
    pub node: Option<u128>,
}

/// The clear part of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// Bound to the receiver's boot id (see the module documentation).
    pub addressed: bool,
    pub cluster_tag: u32,
    pub key_fingerprint: u32,
    /// The sender's wall clock when it sent the datagram.
    pub sent_ms: u64,
    /// The sender's boot id (its origin).
    pub sender: u128,
    /// The sender's datagram counter, across destinations (the nonce).
    pub counter: u64,
    /// The sender's datagram number towards this destination address (the replay window).
    pub stream: u32,
}

impl Header {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(WIRE_VERSION);
        out.push(self.kind as u8 | if self.addressed { ADDRESSED } else { 0 });
        out.extend_from_slice(&self.cluster_tag.to_le_bytes());
        out.extend_from_slice(&self.key_fingerprint.to_le_bytes());
        out.extend_from_slice(&self.sent_ms.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(&self.stream.to_le_bytes());
    }

    fn parse(b: &[u8]) -> Result<Self, DropReason> {
        if b.len() < HEADER_LEN {
            return Err(DropReason::TooShort);
        }
        if b[0..2] != MAGIC {
            return Err(DropReason::BadMagic);
        }
        if b[2] != WIRE_VERSION {
            return Err(DropReason::UnsupportedVersion);
        }
        let kind = Kind::from_byte(b[3] & !ADDRESSED).ok_or(DropReason::UnknownKind)?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let mut sender = [0u8; 16];
        sender.copy_from_slice(&b[20..36]);
        Ok(Header {
            kind,
            addressed: b[3] & ADDRESSED != 0,
            cluster_tag: u32_at(4),
            key_fingerprint: u32_at(8),
            sent_ms: u64_at(12),
            sender: u128::from_le_bytes(sender),
            counter: u64_at(36),
            stream: u32_at(44),
        })
    }

    fn nonce(&self) -> XNonce {
        let mut n = [0u8; 24];
        n[..16].copy_from_slice(&self.sender.to_le_bytes());
        n[16..].copy_from_slice(&self.counter.to_le_bytes());
        *XNonce::from_slice(&n)
    }
}

/// The associated data of a datagram: its header bytes and, if addressed, the receiver's id.
fn associated_data(header: &[u8], receiver: Option<u128>) -> ([u8; HEADER_LEN + 16], usize) {
    let mut aad = [0u8; HEADER_LEN + 16];
    aad[..HEADER_LEN].copy_from_slice(&header[..HEADER_LEN]);
    match receiver {
        Some(id) => {
            aad[HEADER_LEN..].copy_from_slice(&id.to_le_bytes());
            (aad, HEADER_LEN + 16)
        }
        None => (aad, HEADER_LEN),
    }
}

/// A destination's stream: its last number, and when it was last used (in sealer counter
/// order) so that the least recently used goes first when the table is full.
#[derive(Debug, Clone, Copy)]
struct Stream {
    number: u32,
    last_used: u64,
}

/// Seals outgoing datagrams for one sender.
#[derive(Debug)]
pub struct Sealer {
    cluster_tag: u32,
    sender: u128,
    counter: u64,
    streams: BTreeMap<SocketAddr, Stream>,
    max_packet: usize,
}

impl Sealer {
    pub fn new(cluster_tag: u32, sender: u128, max_packet: usize) -> Self {
        Self {
            cluster_tag,
            sender,
            counter: 0,
            streams: BTreeMap::new(),
            max_packet,
        }
    }

    /// The largest body that fits one datagram.
    pub fn max_body(&self) -> usize {
        self.max_packet.saturating_sub(OVERHEAD)
    }

    /// Seals `body`, for `to`, into `out` (cleared first).
    pub fn seal(
        &mut self,
        keyring: &Keyring,
        kind: Kind,
        sent_ms: u64,
        body: &[u8],
        to: Destination,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        if body.len() > self.max_body() {
            return Err(WireError::TooLarge {
                len: body.len(),
                max: self.max_body(),
            });
        }
        self.counter += 1;
        let stream = self.next_stream(to.addr);
        let (fingerprint, cipher) = keyring.primary();
        let header = Header {
            kind,
            addressed: to.node.is_some(),
            cluster_tag: self.cluster_tag,
            key_fingerprint: *fingerprint,
            sent_ms,
            sender: self.sender,
            counter: self.counter,
            stream,
        };
        out.clear();
        header.write(out);
        out.extend_from_slice(body);
        let (aad, aad_len) = associated_data(out, to.node);
        let tag = cipher
            .encrypt_in_place_detached(&header.nonce(), &aad[..aad_len], &mut out[HEADER_LEN..])
            .map_err(|_| WireError::Seal)?;
        out.extend_from_slice(&tag);
        Ok(())
    }

    /// The next number of the stream towards `to`.
    fn next_stream(&mut self, to: SocketAddr) -> u32 {
        if !self.streams.contains_key(&to)
            && self.streams.len() >= MAX_STREAMS
            && let Some(lru) = self
                .streams
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(a, _)| *a)
        {
            // The destination used least recently loses its number; the receiver, if it still
            // exists, sees its stream restart and accepts it once the numbers pass the old ones.
            self.streams.remove(&lru);
        }
        let stream = self.streams.entry(to).or_insert(Stream {
            number: 0,
            last_used: 0,
        });
        stream.number = stream.number.wrapping_add(1);
        stream.last_used = self.counter;
        stream.number
    }
}

/// Opens incoming datagrams for one receiver.
#[derive(Debug)]
pub struct Opener {
    cluster_tag: u32,
    max_packet: usize,
    /// This node's boot id: what addressed datagrams must have been sealed for.
    receiver: u128,
    replay: ReplayTable,
}

/// An authenticated datagram.
#[derive(Debug)]
pub struct Opened<'a> {
    pub header: Header,
    pub body: &'a [u8],
}

impl Opener {
    pub fn new(cluster_tag: u32, max_packet: usize, receiver: u128) -> Self {
        Self {
            cluster_tag,
            max_packet,
            receiver,
            replay: ReplayTable::default(),
        }
    }

    /// Authenticates and decrypts `datagram` in place. Checks run cheapest first; replay state
    /// is only touched once the datagram is known to be genuine and meant for this node, so
    /// forgeries and datagrams captured elsewhere cannot poison it.
    pub fn open<'a>(
        &mut self,
        keyring: &Keyring,
        datagram: &'a mut [u8],
        now_ms: u64,
    ) -> Result<Opened<'a>, DropReason> {
        if datagram.len() > self.max_packet {
            return Err(DropReason::Oversized);
        }
        if datagram.len() < OVERHEAD {
            return Err(DropReason::TooShort);
        }
        let header = Header::parse(datagram)?;
        if header.cluster_tag != self.cluster_tag {
            return Err(DropReason::WrongCluster);
        }
        let cipher = keyring
            .find(header.key_fingerprint)
            .ok_or(DropReason::UnknownKey)?;
        let (aad, aad_len) = associated_data(datagram, header.addressed.then_some(self.receiver));
        let tag_at = datagram.len() - TAG_LEN;
        let (sealed, tag) = datagram.split_at_mut(tag_at);
        let tag = *Tag::from_slice(tag);
        let body = &mut sealed[HEADER_LEN..];
        cipher
            .decrypt_in_place_detached(&header.nonce(), &aad[..aad_len], body, &tag)
            .map_err(|_| DropReason::Forged)?;
        if header.sent_ms.abs_diff(now_ms) > MAX_CLOCK_DISTANCE_MS {
            return Err(DropReason::Stale);
        }
        let stream = (header.sender, header.addressed);
        if !self.replay.accept(stream, u64::from(header.stream), now_ms) {
            return Err(DropReason::Replayed);
        }
        Ok(Opened { header, body })
    }
}

#[cfg(test)]
mod tests {
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
        let max = super::super::replay::MAX_TRACKED_STREAMS;
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
}
