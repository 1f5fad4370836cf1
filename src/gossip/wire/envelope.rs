//! The clear part of a datagram, and what authenticates it.
//!
//! Three layouts. The full one (version 2) is what every build reads:
//!
//! ```text
//! 0      2    3     4            8            12           20            36         44       48
//! | "LM" | v2 | kind | cluster tag | key finger | sent ms    | sender       | counter  | stream |
//! ```
//!
//! The compact one (version 3) goes only to members that said they read it (`node/features.rs`),
//! and saves 9 of the 48 bytes, a tenth of a typical owner-mode datagram:
//!
//! ```text
//! 0      2    3     4         6          8            13           29          35       39
//! | "LM" | v3 | kind | tag low16 | finger low16 | sent ms low40 | sender | counter low48 | stream |
//! ```
//!
//! The timed one (version 4) is the compact layout followed by the sender's cluster time at
//! sending, as `cluster − sent` in an `i32` ([`SenderCluster`]; `i32::MIN`: the sender does not
//! vouch for it). It goes only to members that said they read it:
//!
//! ```text
//! 0     39                 43
//! | v3's | cluster − sent ms |
//! ```
//!
//! - The cluster tag and key fingerprint only steer a datagram cheaply (to "another cluster", or
//!   to the key to try); the AEAD decides. Sixteen bits of each do that: a neighbour's datagram
//!   that shares them fails as forged instead of as foreign, one time in 65 536.
//! - A send time is within [`super::MAX_CLOCK_DISTANCE_MS`] of the receiver's clock or the
//!   datagram is refused, so its low 40 bits (34 years) name it: the receiver takes the time
//!   with those bits nearest its own clock, and one further off than 17 years is still refused.
//! - The counter is the nonce's low half; a sender past 2⁴⁸ datagrams (nine years at a million
//!   a second) sends full headers ([`super::Sealer::compact_possible`]). The nonce is built from
//!   the full counter either way, so the two layouts never share a nonce.

use std::net::SocketAddr;

use chacha20poly1305::XNonce;

use super::{
    ADDRESSED, COMPACT_HEADER_LEN, COMPACT_VERSION, DropReason, HEADER_LEN, Kind, MAGIC,
    TIMED_HEADER_LEN, TIMED_VERSION, WIRE_VERSION,
};

/// Where a datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Destination {
    pub addr: SocketAddr,
    /// The receiver's boot id, when known: the datagram is then bound to that receiver. `None`
    /// only for a seed known by its address alone.
    pub node: Option<u128>,
}

/// What a timed header says of its sender's cluster time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderCluster {
    /// The sender does not vouch for its cluster time, which may not be the cluster's: it is
    /// warming up, it has served only on its own clock (no peer steered it), its wall clock is
    /// beyond the tolerance (its cluster time is left alone), or it hears senders a minute off.
    Unvouched,
    /// The sender's cluster time when it sent the datagram.
    At(u64),
}

/// The header a datagram goes under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Full,
    Compact,
    /// The compact layout with the sender's cluster time.
    Timed(SenderCluster),
}

impl Layout {
    /// Whether the layout sends the compact fields (a batch's stamps are laid out for it).
    pub fn is_compact(self) -> bool {
        !matches!(self, Layout::Full)
    }
}

/// `i32::MIN` on the wire: [`SenderCluster::Unvouched`].
const UNVOUCHED: i32 = i32::MIN;

/// The clear part of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// Bound to the receiver's boot id (see the module documentation).
    pub addressed: bool,
    /// In the compact layout, or the timed one (which extends it): only the low 16 bits of the
    /// tag and of the fingerprint were sent.
    pub compact: bool,
    pub cluster_tag: u32,
    pub key_fingerprint: u32,
    /// The sender's wall clock when it sent the datagram.
    pub sent_ms: u64,
    /// In the timed layout: the sender's word on its cluster time.
    pub cluster: Option<SenderCluster>,
    /// The sender's boot id (its origin).
    pub sender: u128,
    /// The sender's datagram counter, across destinations (the nonce).
    pub counter: u64,
    /// The sender's datagram number towards this destination address (the replay window).
    pub stream: u32,
}

/// Bits of the send time in the compact layout.
const SENT_BITS: u32 = 40;
/// Bits of the counter in the compact layout.
pub(super) const COUNTER_BITS: u32 = 48;
/// Of a 32-bit tag or fingerprint, what the compact layout sends.
pub(super) const SHORT_MASK: u32 = 0xFFFF;

fn low_bytes(v: u64, n: usize) -> [u8; 8] {
    let mut b = v.to_le_bytes();
    b[n..].fill(0);
    b
}

fn read_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// The time whose low [`SENT_BITS`] bits are `low` nearest to `now_ms`.
fn widen_sent_ms(low: u64, now_ms: u64) -> u64 {
    const SPAN: u64 = 1 << SENT_BITS;
    let at = (now_ms & !(SPAN - 1)) | low;
    [at.checked_sub(SPAN), Some(at), at.checked_add(SPAN)]
        .into_iter()
        .flatten()
        .min_by_key(|t| t.abs_diff(now_ms))
        .unwrap_or(at)
}

impl Header {
    /// The header's length in its layout.
    pub fn encoded_len(&self) -> usize {
        match self.layout() {
            Layout::Timed(_) => TIMED_HEADER_LEN,
            Layout::Compact => COMPACT_HEADER_LEN,
            Layout::Full => HEADER_LEN,
        }
    }

    /// The layout this header is written in.
    pub fn layout(&self) -> Layout {
        match (self.compact, self.cluster) {
            (true, Some(c)) => Layout::Timed(c),
            (true, None) => Layout::Compact,
            (false, _) => Layout::Full,
        }
    }

    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        let kind = self.kind as u8 | if self.addressed { ADDRESSED } else { 0 };
        if self.compact {
            out.push(match self.cluster {
                Some(_) => TIMED_VERSION,
                None => COMPACT_VERSION,
            });
            out.push(kind);
            out.extend_from_slice(&(self.cluster_tag as u16).to_le_bytes());
            out.extend_from_slice(&(self.key_fingerprint as u16).to_le_bytes());
            out.extend_from_slice(&low_bytes(self.sent_ms, 5)[..5]);
            out.extend_from_slice(&self.sender.to_le_bytes());
            out.extend_from_slice(&low_bytes(self.counter, 6)[..6]);
            out.extend_from_slice(&self.stream.to_le_bytes());
            if let Some(cluster) = self.cluster {
                out.extend_from_slice(&cluster_gap(cluster, self.sent_ms).to_le_bytes());
            }
            return;
        }
        out.push(WIRE_VERSION);
        out.push(kind);
        out.extend_from_slice(&self.cluster_tag.to_le_bytes());
        out.extend_from_slice(&self.key_fingerprint.to_le_bytes());
        out.extend_from_slice(&self.sent_ms.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(&self.stream.to_le_bytes());
    }

    /// Reads a header of either layout; a compact one's send time is the one nearest
    /// `now_ms` (the receiver's clock) with the bits sent.
    pub(super) fn parse(b: &[u8], now_ms: u64) -> Result<Self, DropReason> {
        if b.len() < COMPACT_HEADER_LEN.min(HEADER_LEN) {
            return Err(DropReason::TooShort);
        }
        if b[0..2] != MAGIC {
            return Err(DropReason::BadMagic);
        }
        let (compact, timed) = match b[2] {
            WIRE_VERSION => (false, false),
            COMPACT_VERSION => (true, false),
            TIMED_VERSION => (true, true),
            _ => return Err(DropReason::UnsupportedVersion),
        };
        let len = match (compact, timed) {
            (true, true) => TIMED_HEADER_LEN,
            (true, false) => COMPACT_HEADER_LEN,
            (false, _) => HEADER_LEN,
        };
        if b.len() < len {
            return Err(DropReason::TooShort);
        }
        let kind = Kind::from_byte(b[3] & !ADDRESSED).ok_or(DropReason::UnknownKind)?;
        let field = |from: usize, n: usize| read_le(&b[from..from + n]);
        // Offsets of the fields after the kind byte, by layout: tag, fingerprint, sent, sender,
        // counter, stream; and the widths of the tag, sent time and counter.
        let (at, tag_w, sent_w, counter_w) = if compact {
            ([4, 6, 8, 13, 29, 35], 2, 5, 6)
        } else {
            ([4, 8, 12, 20, 36, 44], 4, 8, 8)
        };
        let mut sender = [0u8; 16];
        sender.copy_from_slice(&b[at[3]..at[3] + 16]);
        let sent = field(at[2], sent_w);
        let sent_ms = if compact {
            widen_sent_ms(sent, now_ms)
        } else {
            sent
        };
        let cluster = timed.then(|| {
            let mut gap = [0u8; 4];
            gap.copy_from_slice(&b[COMPACT_HEADER_LEN..TIMED_HEADER_LEN]);
            sender_cluster(i32::from_le_bytes(gap), sent_ms)
        });
        Ok(Header {
            kind,
            addressed: b[3] & ADDRESSED != 0,
            compact,
            cluster_tag: field(at[0], tag_w) as u32,
            key_fingerprint: field(at[1], tag_w) as u32,
            sent_ms,
            cluster,
            sender: u128::from_le_bytes(sender),
            counter: field(at[4], counter_w),
            stream: field(at[5], 4) as u32,
        })
    }

    /// Whether this header names `cluster_tag` (as much of it as its layout sent).
    pub(super) fn names_cluster(&self, cluster_tag: u32) -> bool {
        if self.compact {
            self.cluster_tag == cluster_tag & SHORT_MASK
        } else {
            self.cluster_tag == cluster_tag
        }
    }

    pub(super) fn nonce(&self) -> XNonce {
        let mut n = [0u8; 24];
        n[..16].copy_from_slice(&self.sender.to_le_bytes());
        n[16..].copy_from_slice(&self.counter.to_le_bytes());
        *XNonce::from_slice(&n)
    }
}

// The associated data holds the longest header, a receiver and a whole cluster tag.
const _: () = assert!(TIMED_HEADER_LEN + 16 + 4 <= HEADER_LEN + 16);

/// `cluster − sent_ms` on the wire: [`UNVOUCHED`] for a cluster time not vouched for, or one
/// too far from the send time to write (such a clock is cut off: it does not vouch).
fn cluster_gap(cluster: SenderCluster, sent_ms: u64) -> i32 {
    match cluster {
        SenderCluster::Unvouched => UNVOUCHED,
        SenderCluster::At(t) => i32::try_from(i128::from(t) - i128::from(sent_ms))
            .ok()
            .filter(|g| *g != UNVOUCHED)
            .unwrap_or(UNVOUCHED),
    }
}

/// The word a gap read from the wire gives; one that would put cluster time outside `u64` is
/// not vouched for.
fn sender_cluster(gap: i32, sent_ms: u64) -> SenderCluster {
    if gap == UNVOUCHED {
        return SenderCluster::Unvouched;
    }
    sent_ms
        .checked_add_signed(i64::from(gap))
        .map_or(SenderCluster::Unvouched, SenderCluster::At)
}

/// The associated data of a datagram: its header bytes (`header_len` of them), the
/// receiver's id if addressed, and, under the compact header (which sends 16 bits of it), the
/// whole cluster tag: two clusters that share a secret stay apart by all 32 bits.
pub(super) fn associated_data(
    datagram: &[u8],
    header_len: usize,
    receiver: Option<u128>,
    compact_cluster_tag: Option<u32>,
) -> ([u8; HEADER_LEN + 16], usize) {
    let mut aad = [0u8; HEADER_LEN + 16];
    aad[..header_len].copy_from_slice(&datagram[..header_len]);
    let mut len = header_len;
    if let Some(id) = receiver {
        aad[len..len + 16].copy_from_slice(&id.to_le_bytes());
        len += 16;
    }
    if let Some(tag) = compact_cluster_tag {
        // 43 + 16 + 4 fits the 64 bytes of a full header and a receiver.
        aad[len..len + 4].copy_from_slice(&tag.to_le_bytes());
        len += 4;
    }
    (aad, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compact_send_time_is_the_one_nearest_the_receivers_clock() {
        const SPAN: u64 = 1 << SENT_BITS;
        let now = 1_764_000_000_000u64;
        for sent in [
            now,
            now - 60_001,
            now + 59_999,
            now - SPAN / 3,
            now + SPAN / 3,
        ] {
            assert_eq!(widen_sent_ms(sent & (SPAN - 1), now), sent, "sent {sent}");
        }
        // Near the start of time, nothing below zero.
        assert_eq!(widen_sent_ms(5, 3), 5);
        assert_eq!(widen_sent_ms(SPAN - 1, 3), SPAN - 1);
        // A clock more than half the span off reads as nearer: still refused as stale, since
        // the two are at least SPAN/2 apart.
        let far = now + SPAN / 2 + 1;
        assert!(widen_sent_ms(far & (SPAN - 1), now).abs_diff(now) >= SPAN / 2 - 1);
    }

    #[test]
    fn a_timed_header_carries_its_senders_cluster_time_or_says_it_is_not_vouched_for() {
        let now = 1_764_000_000_000u64;
        let header = |cluster| Header {
            kind: Kind::Summary,
            addressed: true,
            compact: true,
            cluster_tag: 0xAB,
            key_fingerprint: 0xCD,
            sent_ms: now,
            cluster,
            sender: 7,
            counter: 9,
            stream: 3,
        };
        let far = now + 1 + i32::MAX as u64;
        for (said, read) in [
            (SenderCluster::At(now), SenderCluster::At(now)),
            (
                SenderCluster::At(now - 5_000),
                SenderCluster::At(now - 5_000),
            ),
            (
                SenderCluster::At(now + 5_000),
                SenderCluster::At(now + 5_000),
            ),
            (SenderCluster::Unvouched, SenderCluster::Unvouched),
            // Too far from the send time to write: not vouched for.
            (SenderCluster::At(far), SenderCluster::Unvouched),
            (SenderCluster::At(0), SenderCluster::Unvouched),
        ] {
            let mut out = Vec::new();
            header(Some(said)).write(&mut out);
            assert_eq!(out.len(), TIMED_HEADER_LEN);
            assert_eq!(out[2], TIMED_VERSION);
            let parsed = Header::parse(&out, now + 3).expect("parses");
            assert_eq!(parsed.cluster, Some(read), "{said:?}");
            assert_eq!(parsed.layout(), Layout::Timed(read));
            assert_eq!(parsed.encoded_len(), TIMED_HEADER_LEN);
            assert_eq!(
                Header::parse(&out[..COMPACT_HEADER_LEN + 2], now),
                Err(DropReason::TooShort)
            );
        }
        // The compact layout says nothing of cluster time.
        let mut out = Vec::new();
        header(None).write(&mut out);
        assert_eq!(out.len(), COMPACT_HEADER_LEN);
        assert_eq!(Header::parse(&out, now).expect("parses").cluster, None);
    }
}
