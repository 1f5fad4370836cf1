//! The clear part of a datagram, and what authenticates it.

use std::net::SocketAddr;

use chacha20poly1305::XNonce;

use super::{ADDRESSED, DropReason, HEADER_LEN, Kind, MAGIC, WIRE_VERSION};

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
    pub(super) fn write(&self, out: &mut Vec<u8>) {
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

    pub(super) fn parse(b: &[u8]) -> Result<Self, DropReason> {
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

    pub(super) fn nonce(&self) -> XNonce {
        let mut n = [0u8; 24];
        n[..16].copy_from_slice(&self.sender.to_le_bytes());
        n[16..].copy_from_slice(&self.counter.to_le_bytes());
        *XNonce::from_slice(&n)
    }
}

/// The associated data of a datagram: its header bytes and, if addressed, the receiver's id.
pub(super) fn associated_data(
    header: &[u8],
    receiver: Option<u128>,
) -> ([u8; HEADER_LEN + 16], usize) {
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
