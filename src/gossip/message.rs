//! Datagram bodies that carry registers, and how a batch is cut to fit datagrams.
//!
//! Encoded with bincode 2 (varint integers), always decoded under a size limit. Most registers
//! in a batch share the batch's version and clock stamp (one emission), so an entry only carries
//! its own when it differs (relayed registers). An entry's newest epoch is sent as its lag behind
//! the epoch of the stamp, which is almost always 0: one byte instead of nine.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::crdt::Register;
use crate::crdt::{HLC_MAX_PHYSICAL_MS, HlcTimestamp};
use crate::limiter::{Batch, KeyId, OriginId, RegisterUpdate};
use crate::window::{EstimateMode, MAX_BUCKETS, WindowSpec};

/// Decoding may claim at most this much memory. It bounds the allocation a hostile datagram can
/// cause, with room for a full 1400-byte datagram of registers (bincode counts every decoded
/// integer at its in-memory size).
const DECODE_LIMIT: usize = 64 * 1024;
type WireConfig = Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT>>;
const WIRE: WireConfig = bincode::config::standard().with_limit::<DECODE_LIMIT>();

/// How a batch's stamp is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// Whole: nine bytes (a clock stamp is a 64-bit integer past `u32::MAX`).
    Whole,
    /// As its distance from the datagram's send time (a datagram under the compact header,
    /// which every build that reads one also reads): the stamp of a round's emission is the
    /// round's time, so this is two bytes, or four on a node whose clock is being steered.
    FromSent(u64),
}

impl Stamp {
    /// The layout of a datagram's batches: from its send time `sent_ms` under the compact
    /// header, whole otherwise. The sender and the receiver both ask this, so the two agree.
    pub fn for_header(compact: bool, sent_ms: u64) -> Self {
        if compact {
            Stamp::FromSent(sent_ms)
        } else {
            Stamp::Whole
        }
    }
}

// A batch is its head and then its entries (bincode writes a struct, a tuple and a `Vec`
// as their parts one after the other, so the whole layout is the older `WireBatch` of
// `origin, version, hlc, entries`):
/// The head with its stamp whole: the registers' origin when it is not the datagram's
/// (authenticated) sender, the version, the clock stamp's bits.
type WholeHead = (Option<[u8; 16]>, u64, u64);
/// The head with its stamp from the send time: origin, version, the stamp's milliseconds
/// less the send time's, its logical counter.
type FromSentHead = (Option<[u8; 16]>, u64, i64, u16);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct WireEntry {
    key: [u8; 16],
    window_ms: u64,
    buckets: u16,
    /// `(version, hlc)` when they differ from the batch's.
    own_stamp: Option<(u64, u64)>,
    /// `epoch(stamp) - newest_epoch`.
    epoch_lag: i64,
    demand: u32,
    admitted: Vec<u32>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MessageError {
    #[error("body did not decode: {0}")]
    Decode(String),
    #[error("body has {0} trailing bytes")]
    Trailing(usize),
    #[error("a single register does not fit in {0} bytes")]
    EntryTooLarge(usize),
    #[error("clock stamp out of range of the send time")]
    StampOutOfRange,
}

/// What decoding a register body found wrong with individual entries (the rest is kept).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EntryRejects {
    /// Shape that is not a valid window, or more buckets than the shape holds.
    pub bad_shape: u64,
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Encoding into a Vec cannot fail for these plain types.
    bincode::serde::encode_to_vec(v, WIRE).unwrap_or_default()
}

fn bucket_ms(window_ms: u64, buckets: u16) -> Option<u64> {
    WindowSpec::new(window_ms, buckets, EstimateMode::Interpolated)
        .ok()
        .map(|s| s.bucket_ms())
}

fn entry_of(update: &RegisterUpdate, version: u64, hlc: HlcTimestamp) -> WireEntry {
    let r = &update.register;
    let stamp_epoch =
        bucket_ms(update.window_ms, update.buckets).map_or(0, |w| r.hlc.physical_ms() / w);
    WireEntry {
        key: update.key.0.to_le_bytes(),
        window_ms: update.window_ms,
        buckets: update.buckets,
        own_stamp: (r.version != version || r.hlc != hlc).then_some((r.version, r.hlc.to_bits())),
        epoch_lag: stamp_epoch as i64 - r.newest_epoch as i64,
        demand: r.demand,
        admitted: r.admitted.clone(),
    }
}

/// Cuts a batch into bodies of at most `max_body` bytes each, for datagrams sent by `sender`,
/// with the stamp whole.
pub fn encode_batch(
    batch: &Batch,
    sender: OriginId,
    max_body: usize,
) -> Result<Vec<Vec<u8>>, MessageError> {
    encode_batch_stamped(batch, sender, max_body, Stamp::Whole)
}

/// [`encode_batch`], with the stamp written as `stamp` says.
pub fn encode_batch_stamped(
    batch: &Batch,
    sender: OriginId,
    max_body: usize,
    stamp: Stamp,
) -> Result<Vec<Vec<u8>>, MessageError> {
    let Some(first) = batch.updates.first() else {
        return Ok(Vec::new());
    };
    // The batch stamp is the one most entries share: that of the first, for an emission.
    let (version, hlc) = (first.register.version, first.register.hlc);
    let origin = (batch.origin != sender).then(|| batch.origin.0.to_le_bytes());
    let head = match stamp {
        Stamp::Whole => {
            let head: WholeHead = (origin, version, hlc.to_bits());
            encode(&head)
        }
        Stamp::FromSent(sent_ms) => {
            let offset = i64::try_from(i128::from(hlc.physical_ms()) - i128::from(sent_ms))
                .map_err(|_| MessageError::StampOutOfRange)?;
            let head: FromSentHead = (origin, version, offset, hlc.logical());
            encode(&head)
        }
    };
    // With an entry count of up to 3 varint bytes.
    let head_len = head.len() + 3;
    let mut parts: Vec<Vec<WireEntry>> = vec![Vec::new()];
    let mut part_len = head_len;
    for update in &batch.updates {
        let entry = entry_of(update, version, hlc);
        let len = encode(&entry).len();
        if head_len + len > max_body {
            return Err(MessageError::EntryTooLarge(max_body));
        }
        if part_len + len > max_body {
            parts.push(Vec::new());
            part_len = head_len;
        }
        if let Some(part) = parts.last_mut() {
            part.push(entry);
        }
        part_len += len;
    }
    Ok(parts
        .iter()
        .map(|entries| {
            let mut body = head.clone();
            body.extend_from_slice(&encode(entries));
            body
        })
        .collect())
}

/// A body that carries no register: a bootstrap push with nothing to push.
pub fn empty_batch_body(stamp: Stamp) -> Vec<u8> {
    let mut body = match stamp {
        Stamp::Whole => {
            let head: WholeHead = (None, 0, 0);
            encode(&head)
        }
        Stamp::FromSent(_) => {
            let head: FromSentHead = (None, 0, 0, 0);
            encode(&head)
        }
    };
    body.extend_from_slice(&encode(&Vec::<WireEntry>::new()));
    body
}

/// Decodes one body from a datagram of `sender`, its stamp written whole. Entries with an
/// impossible shape are dropped and counted; the body as a whole fails only if it does not
/// decode.
pub fn decode_batch(body: &[u8], sender: OriginId) -> Result<(Batch, EntryRejects), MessageError> {
    decode_batch_stamped(body, sender, Stamp::Whole)
}

/// [`decode_batch`], with the stamp written as `stamp` says.
pub fn decode_batch_stamped(
    body: &[u8],
    sender: OriginId,
    stamp: Stamp,
) -> Result<(Batch, EntryRejects), MessageError> {
    let (batch, used, rejects) = decode_leading_batch(body, sender, stamp)?;
    if used != body.len() {
        return Err(MessageError::Trailing(body.len() - used));
    }
    Ok((batch, rejects))
}

/// Decodes a body of two batches one after the other (`Kind::Exchange`: two bodies of
/// [`encode_batch`] put end to end), as [`decode_batch`] does one.
pub fn decode_batch_pair(
    body: &[u8],
    sender: OriginId,
) -> Result<([Batch; 2], EntryRejects), MessageError> {
    decode_batch_pair_stamped(body, sender, Stamp::Whole)
}

/// [`decode_batch_pair`], with the stamps written as `stamp` says.
pub fn decode_batch_pair_stamped(
    body: &[u8],
    sender: OriginId,
    stamp: Stamp,
) -> Result<([Batch; 2], EntryRejects), MessageError> {
    let (first, used, mut rejects) = decode_leading_batch(body, sender, stamp)?;
    let (second, more) = decode_batch_stamped(&body[used..], sender, stamp)?;
    rejects.bad_shape += more.bad_shape;
    Ok(([first, second], rejects))
}

/// Decodes the batch at the start of `body` (a ledger body carries more after it); returns
/// how many bytes it took.
pub fn decode_leading_batch_stamped(
    body: &[u8],
    sender: OriginId,
    stamp: Stamp,
) -> Result<(Batch, usize, EntryRejects), MessageError> {
    decode_leading_batch(body, sender, stamp)
}

fn decode_err(e: bincode::error::DecodeError) -> MessageError {
    MessageError::Decode(e.to_string())
}

/// Decodes the batch at the start of `body`; returns how many bytes it took.
fn decode_leading_batch(
    body: &[u8],
    sender: OriginId,
    stamp: Stamp,
) -> Result<(Batch, usize, EntryRejects), MessageError> {
    let ((origin, batch_version, batch_hlc), head_len) = match stamp {
        Stamp::Whole => {
            let (head, used): (WholeHead, usize) =
                bincode::serde::decode_from_slice(body, WIRE).map_err(decode_err)?;
            (head, used)
        }
        Stamp::FromSent(sent_ms) => {
            let ((origin, version, offset, logical), used): (FromSentHead, usize) =
                bincode::serde::decode_from_slice(body, WIRE).map_err(decode_err)?;
            let physical = sent_ms
                .checked_add_signed(offset)
                .filter(|ms| *ms <= HLC_MAX_PHYSICAL_MS)
                .ok_or(MessageError::StampOutOfRange)?;
            let hlc = HlcTimestamp::new(physical, logical).to_bits();
            ((origin, version, hlc), used)
        }
    };
    let (entries, entries_len): (Vec<WireEntry>, usize) =
        bincode::serde::decode_from_slice(&body[head_len..], WIRE).map_err(decode_err)?;
    let used = head_len + entries_len;
    let mut rejects = EntryRejects::default();
    let mut updates = Vec::with_capacity(entries.len());
    for e in entries {
        let Some(w) = bucket_ms(e.window_ms, e.buckets) else {
            rejects.bad_shape += 1;
            continue;
        };
        if e.admitted.len() > usize::from(MAX_BUCKETS) + 1 {
            rejects.bad_shape += 1;
            continue;
        }
        let (version, hlc) = e.own_stamp.unwrap_or((batch_version, batch_hlc));
        let hlc = HlcTimestamp::from_bits(hlc);
        let stamp_epoch = (hlc.physical_ms() / w) as i64;
        let Some(newest) = stamp_epoch.checked_sub(e.epoch_lag).filter(|n| *n >= 0) else {
            rejects.bad_shape += 1;
            continue;
        };
        updates.push(RegisterUpdate {
            key: KeyId(u128::from_le_bytes(e.key)),
            window_ms: e.window_ms,
            buckets: e.buckets,
            register: Register {
                version,
                hlc,
                newest_epoch: newest as u64,
                demand: e.demand,
                admitted: e.admitted,
            },
        });
    }
    Ok((
        Batch {
            origin: origin.map_or(sender, |o| OriginId(u128::from_le_bytes(o))),
            updates,
        },
        used,
        rejects,
    ))
}

/// The prefix of every register and heartbeat body: how many members the sender counts,
/// itself included, as a bincode varint.
pub mod members_count {
    use bincode::config::{Configuration, Limit, LittleEndian, Varint};

    const CONFIG: Configuration<LittleEndian, Varint, Limit<16>> =
        bincode::config::standard().with_limit::<16>();
    /// Longest encoding of a count (a varint u32).
    pub const MAX_LEN: usize = 5;

    pub fn encode(count: usize) -> Vec<u8> {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        bincode::encode_to_vec(count, CONFIG).unwrap_or_default()
    }

    /// The count and the rest of the body; `None` if the body does not start with one.
    pub fn decode(body: &[u8]) -> Option<(usize, &[u8])> {
        let (count, used): (u32, usize) = bincode::decode_from_slice(body, CONFIG).ok()?;
        Some((count as usize, &body[used..]))
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn counts_round_trip_and_garbage_is_refused() {
            for n in [0usize, 1, 5, 250, 251, 1_000, 70_000] {
                let mut body = super::encode(n);
                assert!(body.len() <= super::MAX_LEN);
                body.extend_from_slice(b"rest");
                assert_eq!(super::decode(&body), Some((n, &b"rest"[..])));
            }
            assert_eq!(super::decode(&[]), None);
            assert_eq!(super::decode(&[0xFF]), None);
        }
    }
}

#[cfg(test)]
mod tests;
