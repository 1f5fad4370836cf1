//! The datagram envelope: every UDP datagram a node sends, membership and summaries alike.
//!
//! ```text
//! | header (48, 39 compact, or 43 timed) | ciphertext … | tag (16) |
//! ```
//!
//! The header (`envelope.rs`) names the cluster, the key, the send time, the sender and its
//! counters; its timed layout, also the sender's cluster time. The compact and timed layouts go
//! only to members that said they read them.
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
//! `envelope.rs` is the header and its associated data; `seal.rs` seals and opens;
//! `keyring.rs` holds the keys; `replay.rs` the replay windows.
//!
//! The nonce is the sender's boot id and its datagram counter (across all destinations): unique
//! for as long as that process lives, and a restart is a new id. `stream` numbers the datagrams
//! from this sender to one destination address, so a receiver sees consecutive numbers however
//! many peers the sender writes to in between. A receiver drops, and counts by reason, anything
//! that is short, oversized, of another cluster or protocol version, sealed with a key it does
//! not hold, forged or addressed to another node, too far from its own clock, or already seen.
//! Work and memory per datagram are bounded by the datagram, never by a length it claims.

mod envelope;
mod keyring;
mod replay;
mod seal;

#[cfg(test)]
mod tests;

use thiserror::Error;

pub use self::envelope::{Destination, Header, Layout, SenderCluster};
pub use self::keyring::Keyring;
pub use self::seal::{Opened, Opener, Sealer, Stale, stale_body};

pub const MAGIC: [u8; 2] = *b"LM";
pub const WIRE_VERSION: u8 = 2;
/// The compact header's version (`envelope.rs`): sent only to members that read it.
pub const COMPACT_VERSION: u8 = 3;
/// The timed header's version: the compact layout and its sender's cluster time
/// (`envelope.rs`), sent only to members that read it.
pub const TIMED_VERSION: u8 = 4;
pub const HEADER_LEN: usize = 48;
pub const COMPACT_HEADER_LEN: usize = 39;
pub const TIMED_HEADER_LEN: usize = COMPACT_HEADER_LEN + 4;
pub const TAG_LEN: usize = 16;
/// Bytes the envelope adds to a body: at most this (the full header).
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Bytes the envelope adds to a body under the compact header.
pub const COMPACT_OVERHEAD: usize = COMPACT_HEADER_LEN + TAG_LEN;

/// Datagrams further than this from the receiver's clock are refused: it bounds how long a
/// captured datagram stays replayable once its stream has left the replay table.
pub const MAX_CLOCK_DISTANCE_MS: u64 = 60_000;
/// Destinations a sealer keeps a stream number for.
pub(super) const MAX_STREAMS: usize = 4_096;
/// The kind byte's flag: the datagram is bound to its receiver's boot id.
pub(super) const ADDRESSED: u8 = 0x80;

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
    /// A window's owner's sums over the other origins it holds, for a node that uses the
    /// window (large clusters: `node/ownership.rs`).
    Aggregate = 5,
    /// In one datagram, what would otherwise be a summary and an aggregate to the same node:
    /// the sender's registers of windows the receiver owns, then the sender's sums of windows
    /// it owns and the receiver uses (large clusters: `node/ownership.rs`).
    Exchange = 6,
    /// The ledger (`crate::ledger`): registers with what their origin holds of each window,
    /// to the window's owner; an owner's leases; asks for tokens and their refusals.
    Ledger = 7,
}

impl Kind {
    pub(super) fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Kind::Membership),
            2 => Some(Kind::Summary),
            3 => Some(Kind::AntiEntropy),
            4 => Some(Kind::Heartbeat),
            5 => Some(Kind::Aggregate),
            6 => Some(Kind::Exchange),
            7 => Some(Kind::Ledger),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Membership => "membership",
            Kind::Summary => "summary",
            Kind::AntiEntropy => "anti_entropy",
            Kind::Heartbeat => "heartbeat",
            Kind::Aggregate => "aggregate",
            Kind::Exchange => "exchange",
            Kind::Ledger => "ledger",
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
    #[error("names as its sender a member that is at another address")]
    WrongAddress,
    #[error("body did not decode")]
    Malformed,
}

impl DropReason {
    pub const ALL: [DropReason; 12] = [
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
        DropReason::WrongAddress,
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
            DropReason::WrongAddress => "wrong_address",
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
    #[error("the datagram counter no longer fits a compact header")]
    CompactCounter,
}

/// A short tag of the cluster's name, checked before any cryptography: datagrams of a
/// neighbouring cluster are dropped cheaply and counted apart from forgeries.
pub fn cluster_tag(cluster_id: &str) -> u32 {
    let h = blake3::hash(cluster_id.as_bytes());
    let b = h.as_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}
