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
mod tests {
    use super::*;

    #[test]
    fn two_batches_end_to_end_decode_as_a_pair_and_nothing_else_does() {
        let sender = OriginId(9);
        let batch = |key: u128, demand: u32| Batch {
            origin: sender,
            updates: vec![RegisterUpdate {
                key: KeyId(key),
                window_ms: 1_000,
                buckets: 10,
                register: Register {
                    version: 3,
                    hlc: HlcTimestamp::from_bits(1_700_000_000_000 << 16),
                    newest_epoch: 17_000_000_000,
                    demand,
                    admitted: vec![4, 0, 2],
                },
            }],
        };
        let (registers, sums) = (batch(1, 12), batch(2, 30));
        let one = |b: &Batch| encode_batch(b, sender, 1_400).unwrap().remove(0);
        let mut body = one(&registers);
        body.extend_from_slice(&one(&sums));
        let ([r, s], rejects) = decode_batch_pair(&body, sender).unwrap();
        assert_eq!(
            (r, s, rejects.bad_shape),
            (registers.clone(), sums.clone(), 0)
        );
        // A pair is not one batch, one batch is not a pair, and nothing may trail the second.
        assert_eq!(
            decode_batch(&body, sender).unwrap_err(),
            MessageError::Trailing(one(&sums).len())
        );
        assert!(decode_batch_pair(&one(&registers), sender).is_err());
        let mut trailing = body.clone();
        trailing.push(0);
        assert_eq!(
            decode_batch_pair(&trailing, sender).unwrap_err(),
            MessageError::Trailing(1)
        );
        // Cut anywhere, it fails whole.
        for cut in 0..body.len() {
            assert!(
                decode_batch_pair(&body[..cut], sender).is_err(),
                "cut at {cut}"
            );
        }
    }

    const T0: u64 = 1_700_000_000_000;

    fn update(
        key: u128,
        version: u64,
        hlc_ms: u64,
        lag: u64,
        admitted: Vec<u32>,
    ) -> RegisterUpdate {
        RegisterUpdate {
            key: KeyId(key),
            window_ms: 1_000,
            buckets: 10,
            register: Register {
                version,
                hlc: HlcTimestamp::new(hlc_ms, 3),
                newest_epoch: hlc_ms / 100 - lag,
                demand: 400,
                admitted,
            },
        }
    }

    #[test]
    fn batches_round_trip_across_datagrams() {
        let mut updates: Vec<_> = (0..200u128)
            .map(|k| {
                update(
                    k.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834),
                    9,
                    T0,
                    0,
                    vec![20; 11],
                )
            })
            .collect();
        // A relayed register with its own stamp and an older newest bucket.
        updates.push(update(5, 3, T0 - 250, 2, vec![1, 0, 7]));
        let batch = Batch {
            origin: OriginId(42),
            updates,
        };
        let bodies = encode_batch(&batch, OriginId(7), 1_340).unwrap();
        assert!(bodies.len() > 1);
        assert!(bodies.iter().all(|b| b.len() <= 1_340));
        let mut decoded = Vec::new();
        for b in &bodies {
            let (part, rejects) = decode_batch(b, OriginId(7)).unwrap();
            assert_eq!(
                part.origin,
                OriginId(42),
                "a relayed batch names its origin"
            );
            assert_eq!(rejects, EntryRejects::default());
            decoded.extend(part.updates);
        }
        assert_eq!(decoded, batch.updates);
    }

    #[test]
    fn a_typical_register_costs_under_forty_bytes() {
        let batch = Batch {
            origin: OriginId(1),
            updates: (0..30u128)
                .map(|k| update(k << 100 | k, 9, T0, 0, vec![20; 11]))
                .collect(),
        };
        let bodies = encode_batch(&batch, OriginId(1), 1_340).unwrap();
        assert_eq!(bodies.len(), 1);
        let (decoded, _) = decode_batch(&bodies[0], OriginId(1)).unwrap();
        assert_eq!(
            decoded, batch,
            "the sender's own batch leaves its origin implicit"
        );
        let per_entry = bodies[0].len() as f64 / 30.0;
        assert!(per_entry < 40.0, "{per_entry} bytes per register");
    }

    #[test]
    fn a_round_of_aggregates_states_its_stamp_once() {
        use crate::limiter::{CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig};
        // An owner's sums of 30 windows for one subscriber, as one round sends them.
        let owner = Limiter::new(
            LimiterConfig::default(),
            OriginId(1),
            KeyHasher::from_secret(b"test cluster"),
        );
        let limit = Limit {
            max: 1_000,
            window: WindowSpec::with_default_buckets(1_000).unwrap(),
        };
        let names: Vec<String> = (0..30).map(|i| format!("tenant={i}")).collect();
        for name in &names {
            let items = [CheckItem {
                key: name.as_bytes(),
                limit,
                cost: 1,
            }];
            let req = CheckRequest {
                items: &items,
                dry_run: false,
            };
            assert!(owner.check(&req, T0).unwrap().allowed);
        }
        let keys: Vec<KeyId> = names
            .iter()
            .map(|n| owner.key_id(n.as_bytes(), &limit.window))
            .collect();
        let stamp = owner.aggregate_stamp(T0);
        let one_stamp: Vec<RegisterUpdate> = keys
            .iter()
            .flat_map(|k| owner.aggregates_for(*k, &[OriginId(2)], stamp, T0))
            .collect();
        let stamp_each: Vec<RegisterUpdate> = keys
            .iter()
            .flat_map(|k| owner.aggregates_for(*k, &[OriginId(2)], owner.aggregate_stamp(T0), T0))
            .collect();
        assert_eq!((one_stamp.len(), stamp_each.len()), (30, 30));
        let bytes = |updates: Vec<RegisterUpdate>| -> usize {
            let batch = Batch {
                origin: OriginId(1),
                updates,
            };
            encode_batch(&batch, OriginId(1), 60_000)
                .unwrap()
                .iter()
                .map(Vec::len)
                .sum()
        };
        let (shared, separate) = (bytes(one_stamp), bytes(stamp_each));
        assert!(
            shared + 30 * 8 <= separate,
            "{shared} bytes with one stamp, {separate} with one each"
        );
    }

    #[test]
    fn impossible_shapes_are_counted_not_fatal() {
        let mut bad = update(1, 9, T0, 0, vec![1]);
        bad.buckets = 7; // 1000 ms does not divide into 7 buckets
        let mut long = update(2, 9, T0, 0, vec![1; 80]);
        long.register.version = 9;
        let good = update(3, 9, T0, 0, vec![1]);
        let body = encode_batch(
            &Batch {
                origin: OriginId(1),
                updates: vec![good.clone(), bad, long],
            },
            OriginId(1),
            60_000,
        )
        .unwrap();
        let (batch, rejects) = decode_batch(&body[0], OriginId(1)).unwrap();
        assert_eq!(batch.updates, vec![good]);
        assert_eq!(rejects.bad_shape, 2);
    }

    #[test]
    fn garbage_and_hostile_lengths_fail_cleanly() {
        let s = OriginId(1);
        assert!(decode_batch(&[], s).is_err());
        // No origin, version 1, stamp 1, then a claim of an enormous entry count.
        let hostile = [
            0u8, 1, 1, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F,
        ];
        assert!(matches!(
            decode_batch(&hostile, s),
            Err(MessageError::Decode(_))
        ));
        let good = encode_batch(
            &Batch {
                origin: OriginId(1),
                updates: vec![update(1, 1, T0, 0, vec![1])],
            },
            s,
            1_340,
        )
        .unwrap();
        let mut trailing = good[0].clone();
        trailing.push(0);
        assert_eq!(decode_batch(&trailing, s), Err(MessageError::Trailing(1)));
    }

    #[test]
    fn a_stamp_from_the_send_time_round_trips_and_saves_seven_bytes() {
        let batch = |hlc_ms: u64| Batch {
            origin: OriginId(1),
            updates: vec![
                update(1, 9, hlc_ms, 0, vec![3, 1]),
                // A relayed register keeps its own stamp whole.
                update(2, 4, T0 - 90_000, 1, vec![7]),
            ],
        };
        for (offset, saved) in [(0i64, 7usize), (-3, 7), (250, 5), (-40_000, 3), (90_000, 3)] {
            let sent = T0.checked_add_signed(-offset).unwrap();
            let b = batch(T0);
            let whole = encode_batch(&b, OriginId(1), 1_340).unwrap();
            let from = encode_batch_stamped(&b, OriginId(1), 1_340, Stamp::FromSent(sent)).unwrap();
            assert_eq!(whole[0].len() - from[0].len(), saved, "offset {offset}");
            let (decoded, rejects) =
                decode_batch_stamped(&from[0], OriginId(1), Stamp::FromSent(sent)).unwrap();
            assert_eq!((decoded, rejects.bad_shape), (b.clone(), 0));
            // The same body read against another send time names another stamp: the send
            // time it is read against is the authenticated one of its datagram.
            let (moved, _) =
                decode_batch_stamped(&from[0], OriginId(1), Stamp::FromSent(sent + 5)).unwrap();
            assert_eq!(moved.updates[0].register.hlc.physical_ms(), T0 + 5);
            assert_eq!(moved.updates[1].register.hlc, b.updates[1].register.hlc);
        }
        // A pair, and an empty body, in the same layout.
        let stamp = Stamp::FromSent(T0);
        let one = |b: &Batch| {
            encode_batch_stamped(b, OriginId(1), 1_340, stamp)
                .unwrap()
                .remove(0)
        };
        let (r, s) = (batch(T0), batch(T0 + 7));
        let mut body = one(&r);
        body.extend_from_slice(&one(&s));
        let ([dr, ds], _) = decode_batch_pair_stamped(&body, OriginId(1), stamp).unwrap();
        assert_eq!((dr, ds), (r, s));
        let (empty, _) =
            decode_batch_stamped(&empty_batch_body(stamp), OriginId(1), stamp).unwrap();
        assert!(empty.updates.is_empty());
        let (empty, _) =
            decode_batch_stamped(&empty_batch_body(Stamp::Whole), OriginId(1), Stamp::Whole)
                .unwrap();
        assert!(empty.updates.is_empty());
    }

    #[test]
    fn a_stamp_out_of_range_of_the_send_time_is_refused() {
        let head = |offset: i64| {
            let head: FromSentHead = (None, 1, offset, 0);
            let mut body = encode(&head);
            body.extend_from_slice(&encode(&Vec::<WireEntry>::new()));
            body
        };
        let at = |sent: u64, offset: i64| {
            decode_batch_stamped(&head(offset), OriginId(1), Stamp::FromSent(sent))
        };
        assert!(at(T0, 0).is_ok());
        assert_eq!(
            at(T0, -(T0 as i64) - 1).unwrap_err(),
            MessageError::StampOutOfRange
        );
        assert_eq!(at(T0, i64::MIN).unwrap_err(), MessageError::StampOutOfRange);
        assert_eq!(
            at(T0, (HLC_MAX_PHYSICAL_MS - T0) as i64 + 1).unwrap_err(),
            MessageError::StampOutOfRange
        );
        assert_eq!(
            at(u64::MAX, i64::MAX).unwrap_err(),
            MessageError::StampOutOfRange
        );
        // And an encoder never writes one: a stamp too far from the send time is refused.
        let far = Batch {
            origin: OriginId(1),
            updates: vec![update(1, 1, T0, 0, vec![1])],
        };
        assert_eq!(
            encode_batch_stamped(&far, OriginId(1), 1_340, Stamp::FromSent(u64::MAX)),
            Err(MessageError::StampOutOfRange)
        );
    }
}
