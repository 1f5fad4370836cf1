//! Sealing outgoing datagrams and opening incoming ones.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use chacha20poly1305::Tag;
use chacha20poly1305::aead::AeadInPlace;

use super::envelope::{Destination, Header, Layout, associated_data};
use super::replay::ReplayTable;
use super::{
    COMPACT_OVERHEAD, DropReason, Keyring, Kind, MAX_CLOCK_DISTANCE_MS, MAX_STREAMS, OVERHEAD,
    TAG_LEN, WireError,
};

/// A destination's stream: its last number, and when it was last used (in sealer counter
/// order) so that the least recently used goes first when the table is full.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stream {
    pub(super) number: u32,
    last_used: u64,
}

/// Seals outgoing datagrams for one sender.
#[derive(Debug)]
pub struct Sealer {
    cluster_tag: u32,
    sender: u128,
    pub(super) counter: u64,
    pub(super) streams: BTreeMap<SocketAddr, Stream>,
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

    /// Whether the next datagram may go under the compact header: its counter fits one.
    pub fn compact_possible(&self) -> bool {
        self.counter.saturating_add(1) < 1 << super::envelope::COUNTER_BITS
    }

    /// Seals `body`, for `to`, into `out` (cleared first), under `layout`: a compact one only
    /// where the receiver reads it and [`Sealer::compact_possible`] (a body may be laid out for
    /// one header, so the header is never changed behind the caller's back).
    #[allow(clippy::too_many_arguments)]
    pub fn seal(
        &mut self,
        keyring: &Keyring,
        kind: Kind,
        sent_ms: u64,
        body: &[u8],
        to: Destination,
        layout: Layout,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let compact = layout.is_compact();
        if body.len() > self.max_body() {
            return Err(WireError::TooLarge {
                len: body.len(),
                max: self.max_body(),
            });
        }
        if compact && !self.compact_possible() {
            return Err(WireError::CompactCounter);
        }
        self.counter += 1;
        let stream = self.next_stream(to.addr);
        let (fingerprint, cipher) = keyring.primary();
        let header = Header {
            kind,
            addressed: to.node.is_some(),
            compact,
            cluster_tag: self.cluster_tag,
            key_fingerprint: *fingerprint,
            sent_ms,
            cluster: match layout {
                Layout::Timed(c) => Some(c),
                Layout::Full | Layout::Compact => None,
            },
            sender: self.sender,
            counter: self.counter,
            stream,
        };
        out.clear();
        header.write(out);
        out.extend_from_slice(body);
        let (aad, aad_len) = associated_data(
            out,
            header.encoded_len(),
            to.node,
            compact.then_some(self.cluster_tag),
        );
        let tag = cipher
            .encrypt_in_place_detached(
                &header.nonce(),
                &aad[..aad_len],
                &mut out[header.encoded_len()..],
            )
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
    pub(super) replay: ReplayTable,
    /// The last genuine datagram refused as stale (see [`Opener::take_stale`]).
    stale: Option<Stale>,
}

/// A genuine, new datagram addressed to this node, refused as stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    pub sender: u128,
    pub kind: Kind,
    /// Its send time, on its sender's clock.
    pub sent_ms: u64,
    /// Sealed for this node's boot (an announcement to a seed known by address is not).
    pub addressed: bool,
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
            stale: None,
        }
    }

    /// The last datagram refused as [`DropReason::Stale`] that was genuine (it
    /// authenticated) and new (its number passed the replay window): its sender is a member
    /// whose clock is more than [`MAX_CLOCK_DISTANCE_MS`] from this node's, or this node's
    /// clock is that far off. Its send time cannot correct anything; the node can only count
    /// the sender in, as a member it cannot hear. The body stays decrypted in the datagram,
    /// between the header and the tag ([`stale_body`]).
    ///
    /// Only one sealed for this boot ([`Stale::addressed`]) should be counted: a datagram
    /// captured before this boot does not open, and one replayed is refused by number, so an
    /// on-path recorder cannot conjure far members out of old traffic.
    pub fn take_stale(&mut self) -> Option<Stale> {
        self.stale.take()
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
        let anywhere = SocketAddr::from(([0, 0, 0, 0], 0));
        self.open_from(keyring, datagram, now_ms, anywhere, |_| None)
    }

    /// [`Opener::open`], for a datagram that came from `from`, where `sender_at` tells the
    /// address of a sender this node knows. Every member holds the cluster key, so the sender
    /// a datagram names is only as good as the address it comes from: a datagram naming a
    /// member known at another address is refused ([`DropReason::WrongAddress`]) before it
    /// touches that member's replay window, which a member holding the key could otherwise
    /// move past the member's numbers, so that everything the member sends is refused as a
    /// replay.
    pub fn open_from<'a>(
        &mut self,
        keyring: &Keyring,
        datagram: &'a mut [u8],
        now_ms: u64,
        from: SocketAddr,
        sender_at: impl FnOnce(u128) -> Option<SocketAddr>,
    ) -> Result<Opened<'a>, DropReason> {
        if datagram.len() > self.max_packet {
            return Err(DropReason::Oversized);
        }
        if datagram.len() < COMPACT_OVERHEAD.min(OVERHEAD) {
            return Err(DropReason::TooShort);
        }
        let header = Header::parse(datagram, now_ms)?;
        if datagram.len() < header.encoded_len() + TAG_LEN {
            return Err(DropReason::TooShort);
        }
        if !header.names_cluster(self.cluster_tag) {
            return Err(DropReason::WrongCluster);
        }
        let (aad, aad_len) = associated_data(
            datagram,
            header.encoded_len(),
            header.addressed.then_some(self.receiver),
            header.compact.then_some(self.cluster_tag),
        );
        let tag_at = datagram.len() - TAG_LEN;
        let (sealed, tag) = datagram.split_at_mut(tag_at);
        let tag = *Tag::from_slice(tag);
        let body = &mut sealed[header.encoded_len()..];
        // A compact header names the key by 16 bits, which two keys of the ring may share: each
        // is tried (a failed attempt leaves the body as it was).
        let mut keys = keyring
            .matching(header.key_fingerprint, header.compact)
            .peekable();
        if keys.peek().is_none() {
            return Err(DropReason::UnknownKey);
        }
        if !keys.any(|cipher| {
            cipher
                .decrypt_in_place_detached(&header.nonce(), &aad[..aad_len], body, &tag)
                .is_ok()
        }) {
            return Err(DropReason::Forged);
        }
        if sender_at(header.sender).is_some_and(|at| at != from) {
            return Err(DropReason::WrongAddress);
        }
        if header.sent_ms.abs_diff(now_ms) > MAX_CLOCK_DISTANCE_MS {
            let stream = (header.sender, header.addressed);
            if self.replay.accept(stream, u64::from(header.stream), now_ms) {
                self.stale = Some(Stale {
                    sender: header.sender,
                    kind: header.kind,
                    sent_ms: header.sent_ms,
                    addressed: header.addressed,
                });
            }
            return Err(DropReason::Stale);
        }
        let stream = (header.sender, header.addressed);
        if !self.replay.accept(stream, u64::from(header.stream), now_ms) {
            return Err(DropReason::Replayed);
        }
        Ok(Opened { header, body })
    }
}

/// The decrypted body of a datagram [`Opener::open`] refused as stale.
pub fn stale_body(datagram: &[u8]) -> &[u8] {
    let header_len = Header::parse(datagram, 0).map_or(datagram.len(), |h| h.encoded_len());
    datagram
        .get(header_len..datagram.len().saturating_sub(TAG_LEN))
        .unwrap_or(&[])
}
