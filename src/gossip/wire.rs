//! The datagram envelope: every UDP datagram a node sends, membership and summaries alike.
//!
//! ```text
//! 0      2    3     4            8            12           20            36         44       48
//! | "LM" | v1 | kind | cluster tag | key finger | sent ms    | sender       | counter  | stream | ciphertext … | tag (16) |
//! ```
//!
//! The body is sealed with XChaCha20-Poly1305 under a key of the cluster's keyring; the header is
//! the associated data, so nothing in it can be altered either. The nonce is the sender's boot id
//! and its datagram counter (across all destinations): unique for as long as that process lives,
//! and a restart is a new id. `stream` numbers the datagrams from this sender to this receiver,
//! so a receiver sees consecutive numbers however many peers the sender writes to in between.
//! A receiver drops, and counts by reason, anything that is short, oversized, of another
//! cluster or protocol version, sealed with a key it does not hold, forged, too far from its own
//! clock, or already seen (a per-sender sliding window over its stream, like IPsec's). Work and
//! memory per datagram are bounded by the datagram, never by a length it claims.

use std::collections::BTreeMap;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Key, KeyInit, Tag, XChaCha20Poly1305, XNonce};
use thiserror::Error;

pub const MAGIC: [u8; 2] = *b"LM";
pub const WIRE_VERSION: u8 = 1;
pub const HEADER_LEN: usize = 48;
pub const TAG_LEN: usize = 16;
/// Bytes the envelope adds to a body.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// Datagrams further than this from the receiver's clock are refused: it bounds how long a
/// captured datagram stays replayable once its sender has left the replay table.
pub const MAX_CLOCK_DISTANCE_MS: u64 = 60_000;
/// Senders whose replay windows are remembered.
const MAX_TRACKED_SENDERS: usize = 4_096;
/// Width of the per-sender replay window, in datagrams: how far out of order a datagram may
/// arrive (a bootstrap push can be hundreds of datagrams sent at once).
const REPLAY_WINDOW: u64 = 1024;
const REPLAY_WORDS: usize = (REPLAY_WINDOW / 64) as usize;
/// Destinations a sealer keeps a stream number for.
const MAX_STREAMS: usize = 4_096;

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

/// The cluster's keys. The first seals; all open, so a key can be rotated in before it is
/// used and kept for a while after it stops being used.
pub struct Keyring {
    keys: Vec<(u32, XChaCha20Poly1305)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fps: Vec<String> = self
            .keys
            .iter()
            .map(|(fp, _)| format!("{fp:08x}"))
            .collect();
        f.debug_struct("Keyring")
            .field("fingerprints", &fps)
            .finish()
    }
}

const AEAD_CONTEXT: &str = "limitmesh 2026-11 datagram aead v1";
const FINGERPRINT_CONTEXT: &str = "limitmesh 2026-11 key fingerprint v1";

impl Keyring {
    /// Builds a keyring from secrets, primary first. Keys are derived (domain-separated), so
    /// the same secret never serves two purposes.
    pub fn new(secrets: &[[u8; 32]]) -> Result<Self, WireError> {
        if secrets.is_empty() {
            return Err(WireError::EmptyKeyring);
        }
        let keys = secrets
            .iter()
            .map(|s| {
                let aead = blake3::derive_key(AEAD_CONTEXT, s);
                let fp = blake3::derive_key(FINGERPRINT_CONTEXT, s);
                let fingerprint = u32::from_le_bytes([fp[0], fp[1], fp[2], fp[3]]);
                (fingerprint, XChaCha20Poly1305::new(Key::from_slice(&aead)))
            })
            .collect();
        Ok(Self { keys })
    }

    fn primary(&self) -> &(u32, XChaCha20Poly1305) {
        &self.keys[0]
    }

    fn find(&self, fingerprint: u32) -> Option<&XChaCha20Poly1305> {
        self.keys
            .iter()
            .find(|(fp, _)| *fp == fingerprint)
            .map(|(_, k)| k)
    }

    pub fn fingerprints(&self) -> Vec<u32> {
        self.keys.iter().map(|(fp, _)| *fp).collect()
    }
}

/// A short tag of the cluster's name, checked before any cryptography: datagrams of a
/// neighbouring cluster are dropped cheaply and counted apart from forgeries.
pub fn cluster_tag(cluster_id: &str) -> u32 {
    let h = blake3::hash(cluster_id.as_bytes());
    let b = h.as_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// The clear part of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub cluster_tag: u32,
    pub key_fingerprint: u32,
    /// The sender's wall clock when it sent the datagram.
    pub sent_ms: u64,
    /// The sender's boot id (its origin).
    pub sender: u128,
    /// The sender's datagram counter, across destinations (the nonce).
    pub counter: u64,
    /// The sender's datagram number towards this receiver (the replay window).
    pub stream: u32,
}

impl Header {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(WIRE_VERSION);
        out.push(self.kind as u8);
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
        let kind = Kind::from_byte(b[3]).ok_or(DropReason::UnknownKind)?;
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

/// Seals outgoing datagrams for one sender.
#[derive(Debug)]
pub struct Sealer {
    cluster_tag: u32,
    sender: u128,
    counter: u64,
    streams: BTreeMap<std::net::SocketAddr, u32>,
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

    /// Seals `body`, for the receiver at `to`, into `out` (cleared first).
    pub fn seal(
        &mut self,
        keyring: &Keyring,
        kind: Kind,
        sent_ms: u64,
        body: &[u8],
        to: std::net::SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        if body.len() > self.max_body() {
            return Err(WireError::TooLarge {
                len: body.len(),
                max: self.max_body(),
            });
        }
        self.counter += 1;
        if !self.streams.contains_key(&to) && self.streams.len() >= MAX_STREAMS {
            // A destination seen least recently in counter order loses its number; the
            // receiver, if it still exists, sees a restart of the stream and accepts it only
            // after its window has moved past (it refuses nothing genuine for long).
            self.streams.pop_first();
        }
        let stream = self.streams.entry(to).or_insert(0);
        *stream = stream.wrapping_add(1);
        let stream = *stream;
        let (fingerprint, cipher) = keyring.primary();
        let header = Header {
            kind,
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
        let (head, rest) = out.split_at_mut(HEADER_LEN);
        let tag = cipher
            .encrypt_in_place_detached(&header.nonce(), head, rest)
            .map_err(|_| WireError::Seal)?;
        out.extend_from_slice(&tag);
        Ok(())
    }
}

/// A sender's recent stream numbers.
#[derive(Debug, Clone)]
struct ReplayWindow {
    highest: u64,
    /// Bit `i` set: number `highest - i` was seen.
    seen: [u64; REPLAY_WORDS],
    last_seen_ms: u64,
}

impl ReplayWindow {
    fn bit(&self, back: u64) -> bool {
        self.seen[(back / 64) as usize] & (1 << (back % 64)) != 0
    }

    fn set(&mut self, back: u64) {
        self.seen[(back / 64) as usize] |= 1 << (back % 64);
    }

    /// Moves the window up by `shift` numbers.
    fn slide(&mut self, shift: u64) {
        if shift >= REPLAY_WINDOW {
            self.seen = [0; REPLAY_WORDS];
            return;
        }
        let (words, bits) = ((shift / 64) as usize, (shift % 64) as u32);
        for i in (0..REPLAY_WORDS).rev() {
            let from = i.checked_sub(words);
            let hi = from.map_or(0, |f| self.seen[f] << bits);
            let lo = match from.and_then(|f| f.checked_sub(1)) {
                Some(g) if bits > 0 => self.seen[g] >> (64 - bits),
                _ => 0,
            };
            self.seen[i] = hi | lo;
        }
    }

    /// Records `number`; false if it was seen or is too old to tell.
    fn accept(&mut self, number: u64) -> bool {
        if number > self.highest {
            self.slide(number - self.highest);
            self.highest = number;
            self.set(0);
            return true;
        }
        let back = self.highest - number;
        if back >= REPLAY_WINDOW || self.bit(back) {
            return false;
        }
        self.set(back);
        true
    }
}

/// Opens incoming datagrams.
#[derive(Debug)]
pub struct Opener {
    cluster_tag: u32,
    max_packet: usize,
    senders: BTreeMap<u128, ReplayWindow>,
}

/// An authenticated datagram.
#[derive(Debug)]
pub struct Opened<'a> {
    pub header: Header,
    pub body: &'a [u8],
}

impl Opener {
    pub fn new(cluster_tag: u32, max_packet: usize) -> Self {
        Self {
            cluster_tag,
            max_packet,
            senders: BTreeMap::new(),
        }
    }

    /// Authenticates and decrypts `datagram` in place. Checks run cheapest first; replay state
    /// is only touched once the datagram is known to be genuine, so forgeries cannot poison it.
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
        let tag_at = datagram.len() - TAG_LEN;
        let (sealed, tag) = datagram.split_at_mut(tag_at);
        let tag = *Tag::from_slice(tag);
        let (head, body) = sealed.split_at_mut(HEADER_LEN);
        cipher
            .decrypt_in_place_detached(&header.nonce(), head, body, &tag)
            .map_err(|_| DropReason::Forged)?;
        if header.sent_ms.abs_diff(now_ms) > MAX_CLOCK_DISTANCE_MS {
            return Err(DropReason::Stale);
        }
        self.check_replay(header.sender, u64::from(header.stream), now_ms)?;
        Ok(Opened { header, body })
    }

    fn check_replay(&mut self, sender: u128, counter: u64, now_ms: u64) -> Result<(), DropReason> {
        if !self.senders.contains_key(&sender) && self.senders.len() >= MAX_TRACKED_SENDERS {
            // Forget the sender heard from least recently. A datagram of its replayed later is
            // still refused by the clock check once it is a minute old.
            if let Some(oldest) = self
                .senders
                .iter()
                .min_by_key(|(_, w)| w.last_seen_ms)
                .map(|(s, _)| *s)
            {
                self.senders.remove(&oldest);
            }
        }
        let window = self.senders.entry(sender).or_insert(ReplayWindow {
            highest: 0,
            seen: [0; REPLAY_WORDS],
            last_seen_ms: now_ms,
        });
        if !window.accept(counter) {
            return Err(DropReason::Replayed);
        }
        window.last_seen_ms = now_ms;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn ring(secret: u8) -> Keyring {
        Keyring::new(&[[secret; 32]]).unwrap()
    }

    const TO: std::net::SocketAddr = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        7946,
    ));

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
        let mut opener = Opener::new(tag, 1400);
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
            Opener::new(cluster, 1400)
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
        let mut opener = Opener::new(tag, 1400);
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
        let mut opener = Opener::new(tag, 1400);
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
            Opener::new(tag, 1400)
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
        let mut opener = Opener::new(tag, 1400);
        for sender in 0..(MAX_TRACKED_SENDERS as u128 + 100) {
            let mut s = Sealer::new(tag, sender, 1400);
            let mut d = sealed(Kind::Summary, b"x", &k, &mut s);
            opener.open(&k, &mut d, NOW).unwrap();
        }
        assert_eq!(opener.senders.len(), MAX_TRACKED_SENDERS);
    }
}
