//! The ledger's part of a datagram body (`Kind::Ledger`): users' reports of what they hold,
//! owners' leases, asks and refusals, after a batch of registers (the reports go with the
//! registers of the same emission, and name them by their place in it).
//!
//! Encoded with bincode 2 (varint integers) under a decode limit, as register bodies are.
//! Times are written as their distance from the datagram's (authenticated) send time, and an
//! owner that is the datagram's receiver (a report) or its sender (a lease) is not written.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::{Deserialize, Serialize};

use super::message::MessageError;
use smallvec::SmallVec;

use crate::ledger::{HeldLease, HoldingsReport, Lease, Segment};
use crate::limiter::{KeyId, LedgerReport};
use crate::window::{EstimateMode, WindowSpec};

const DECODE_LIMIT: usize = 64 * 1024;
const WIRE: Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT>> =
    bincode::config::standard().with_limit::<DECODE_LIMIT>();

/// One ledger message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerEntry {
    /// A user's report of its window whose register is the `index`-th of the datagram's batch.
    Report { index: u32, report: LedgerReport },
    /// A lease from the datagram's sender (the window's owner).
    Lease {
        key: KeyId,
        window_ms: u64,
        buckets: u16,
        lease: Lease,
    },
    /// A user with a request waiting asks the window's owner for `want` tokens, spendable
    /// within `wait_ms` of the send time; `held` is what it has of that owner's lease.
    Ask {
        key: KeyId,
        window_ms: u64,
        buckets: u16,
        limit: u32,
        want: u32,
        wait_ms: u32,
        held: Option<HeldLease>,
    },
    /// The owner refuses an ask: ask again no sooner than this.
    Refused { key: KeyId, retry_after_ms: u32 },
}

/// An owner id on the wire: `None` is the one the context says (the receiver of a report).
type WireOwner = Option<[u8; 16]>;

/// A report's word on one owner's lease: `(owner, seq, expires - sent, [(segment, spent)],
/// unspent, lapsed)`.
type WireHeld = (WireOwner, u32, i64, Vec<(u32, u32)>, u32, bool);

#[derive(Debug, Serialize, Deserialize)]
enum Wire {
    Report {
        index: u32,
        limit: u32,
        held: Vec<WireHeld>,
        closed: bool,
    },
    Lease {
        key: [u8; 16],
        window_ms: u64,
        buckets: u16,
        seq: u32,
        /// `expires - sent`.
        expires: i64,
        /// `(id, count, valid_from - sent)`.
        segments: Vec<(u32, u32, i64)>,
    },
    Ask {
        key: [u8; 16],
        window_ms: u64,
        buckets: u16,
        limit: u32,
        want: u32,
        wait_ms: u32,
        /// `(seq, [(segment, spent)])` of the receiver's lease.
        held: Option<(u32, Vec<(u32, u32)>)>,
    },
    Refused {
        key: [u8; 16],
        retry_after_ms: u32,
    },
}

/// At most this many segments or held leases are taken from one entry: a lease holds a few.
const MOST_PARTS: usize = 64;

fn held_out(h: &HeldLease, receiver: u128, sent_ms: u64) -> WireHeld {
    (
        owner_out(h.owner, receiver),
        h.seq,
        offset(h.expires_ms, sent_ms),
        h.spent.to_vec(),
        h.unspent,
        h.lapsed,
    )
}

fn owner_out(owner: u128, implied: u128) -> WireOwner {
    (owner != implied).then(|| owner.to_le_bytes())
}

fn owner_in(owner: WireOwner, implied: u128) -> u128 {
    owner.map_or(implied, u128::from_le_bytes)
}

fn offset(t_ms: u64, sent_ms: u64) -> i64 {
    i64::try_from(i128::from(t_ms) - i128::from(sent_ms)).unwrap_or(0)
}

fn at(offset: i64, sent_ms: u64) -> Result<u64, MessageError> {
    sent_ms
        .checked_add_signed(offset)
        .ok_or(MessageError::StampOutOfRange)
}

fn shape_ok(window_ms: u64, buckets: u16) -> bool {
    WindowSpec::new(window_ms, buckets, EstimateMode::Interpolated).is_ok()
}

/// Encodes `entries` for a datagram to `receiver` sent at `sent_ms`.
pub fn encode_ledger(entries: &[LedgerEntry], receiver: u128, sent_ms: u64) -> Vec<u8> {
    let wire: Vec<Wire> = entries
        .iter()
        .map(|e| match e {
            LedgerEntry::Report { index, report } => Wire::Report {
                index: *index,
                limit: report.limit,
                held: report
                    .holdings
                    .held
                    .iter()
                    .map(|h| held_out(h, receiver, sent_ms))
                    .collect(),
                closed: report.holdings.closed,
            },
            LedgerEntry::Lease {
                key,
                window_ms,
                buckets,
                lease,
            } => Wire::Lease {
                key: key.0.to_le_bytes(),
                window_ms: *window_ms,
                buckets: *buckets,
                seq: lease.seq,
                expires: offset(lease.expires_ms, sent_ms),
                segments: lease
                    .segments
                    .iter()
                    .map(|s| (s.id, s.count, offset(s.valid_from_ms, sent_ms)))
                    .collect(),
            },
            LedgerEntry::Ask {
                key,
                window_ms,
                buckets,
                limit,
                want,
                wait_ms,
                held,
            } => Wire::Ask {
                key: key.0.to_le_bytes(),
                window_ms: *window_ms,
                buckets: *buckets,
                limit: *limit,
                want: *want,
                wait_ms: *wait_ms,
                held: held.as_ref().map(|h| (h.seq, h.spent.to_vec())),
            },
            LedgerEntry::Refused {
                key,
                retry_after_ms,
            } => Wire::Refused {
                key: key.0.to_le_bytes(),
                retry_after_ms: *retry_after_ms,
            },
        })
        .collect();
    bincode::serde::encode_to_vec(&wire, WIRE).unwrap_or_default()
}

/// What decoding a ledger section dropped, entry by entry (the rest is kept).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LedgerRejects {
    /// A window shape that is not one, a time out of range, or a lease of nothing.
    pub malformed: u64,
}

/// Decodes the ledger section that makes up the whole of `body`, of a datagram from `sender`
/// to `receiver` sent at `sent_ms`. The section fails as a whole only if it does not decode;
/// an entry that is malformed is dropped and counted.
pub fn decode_ledger(
    body: &[u8],
    sender: u128,
    receiver: u128,
    sent_ms: u64,
) -> Result<(Vec<LedgerEntry>, LedgerRejects), MessageError> {
    let (wire, used): (Vec<Wire>, usize) = bincode::serde::decode_from_slice(body, WIRE)
        .map_err(|e| MessageError::Decode(e.to_string()))?;
    if used != body.len() {
        return Err(MessageError::Trailing(body.len() - used));
    }
    let mut rejects = LedgerRejects::default();
    let mut out = Vec::with_capacity(wire.len());
    for w in wire {
        let entry = match w {
            Wire::Report {
                index,
                limit,
                held,
                closed,
            } => {
                let held: Option<Vec<HeldLease>> = (held.len() <= MOST_PARTS)
                    .then(|| {
                        held.into_iter()
                            .map(|(owner, seq, expires, spent, unspent, lapsed)| {
                                Some(HeldLease {
                                    owner: owner_in(owner, receiver),
                                    seq,
                                    expires_ms: at(expires, sent_ms).ok()?,
                                    spent: (spent.len() <= MOST_PARTS)
                                        .then(|| spent.into_iter().collect::<SmallVec<_>>())?,
                                    unspent,
                                    lapsed,
                                })
                            })
                            .collect()
                    })
                    .flatten();
                let Some(held) = held else {
                    rejects.malformed += 1;
                    continue;
                };
                LedgerEntry::Report {
                    index,
                    report: LedgerReport {
                        limit,
                        holdings: HoldingsReport { held, closed },
                    },
                }
            }
            Wire::Lease {
                key,
                window_ms,
                buckets,
                seq,
                expires,
                segments,
            } => {
                let segments: Option<SmallVec<[Segment; 2]>> = segments
                    .into_iter()
                    .map(|(id, count, from)| {
                        Some(Segment {
                            id,
                            count,
                            valid_from_ms: at(from, sent_ms).ok()?,
                        })
                    })
                    .collect();
                let (Some(segments), Ok(expires_ms)) = (segments, at(expires, sent_ms)) else {
                    rejects.malformed += 1;
                    continue;
                };
                let ascending = segments.windows(2).all(|w| w[0].id < w[1].id);
                if !shape_ok(window_ms, buckets)
                    || seq == 0
                    || segments.len() > MOST_PARTS
                    || !ascending
                {
                    rejects.malformed += 1;
                    continue;
                }
                LedgerEntry::Lease {
                    key: KeyId(u128::from_le_bytes(key)),
                    window_ms,
                    buckets,
                    lease: Lease {
                        owner: sender,
                        seq,
                        expires_ms,
                        segments,
                    },
                }
            }
            Wire::Ask {
                key,
                window_ms,
                buckets,
                limit,
                want,
                wait_ms,
                held,
            } => {
                if !shape_ok(window_ms, buckets)
                    || want == 0
                    || held.as_ref().is_some_and(|(_, s)| s.len() > MOST_PARTS)
                {
                    rejects.malformed += 1;
                    continue;
                }
                LedgerEntry::Ask {
                    key: KeyId(u128::from_le_bytes(key)),
                    window_ms,
                    buckets,
                    limit,
                    want,
                    wait_ms,
                    held: held.map(|(seq, spent)| HeldLease {
                        owner: receiver,
                        seq,
                        expires_ms: 0,
                        spent: spent.into_iter().collect(),
                        unspent: 0,
                        lapsed: false,
                    }),
                }
            }
            Wire::Refused {
                key,
                retry_after_ms,
            } => LedgerEntry::Refused {
                key: KeyId(u128::from_le_bytes(key)),
                retry_after_ms,
            },
        };
        out.push(entry);
    }
    Ok((out, rejects))
}

#[cfg(test)]
mod tests {
    use smallvec::smallvec;

    use super::*;

    const SENT: u64 = 1_700_000_000_000;

    #[test]
    fn every_entry_round_trips_and_owners_implied_by_the_datagram_are_not_written() {
        let (owner, user) = (7u128, 9u128);
        let report = LedgerReport {
            limit: 100,
            holdings: HoldingsReport {
                held: vec![
                    HeldLease {
                        owner,
                        seq: 4,
                        expires_ms: SENT + 150,
                        spent: smallvec![(3, 2), (4, 0)],
                        unspent: 5,
                        lapsed: false,
                    },
                    HeldLease {
                        owner: 3,
                        seq: 1,
                        expires_ms: SENT - 10,
                        spent: smallvec![(1, 1)],
                        unspent: 0,
                        lapsed: true,
                    },
                ],
                closed: false,
            },
        };
        let entries = vec![
            LedgerEntry::Report { index: 0, report },
            LedgerEntry::Ask {
                key: KeyId(5),
                window_ms: 1_000,
                buckets: 10,
                limit: 100,
                want: 3,
                wait_ms: 15,
                held: Some(HeldLease {
                    owner,
                    seq: 4,
                    expires_ms: 0,
                    spent: smallvec![(3, 2)],
                    unspent: 0,
                    lapsed: false,
                }),
            },
        ];
        let body = encode_ledger(&entries, owner, SENT);
        let (back, rejects) = decode_ledger(&body, user, owner, SENT).unwrap();
        assert_eq!(back, entries);
        assert_eq!(rejects, LedgerRejects::default());

        let lease = Lease {
            owner,
            seq: 5,
            expires_ms: SENT + 440,
            segments: smallvec![
                Segment {
                    id: 3,
                    count: 12,
                    valid_from_ms: SENT,
                },
                Segment {
                    id: 4,
                    count: 2,
                    valid_from_ms: SENT + 40,
                },
            ],
        };
        let grants = vec![
            LedgerEntry::Lease {
                key: KeyId(5),
                window_ms: 1_000,
                buckets: 10,
                lease,
            },
            LedgerEntry::Refused {
                key: KeyId(6),
                retry_after_ms: 80,
            },
        ];
        let body = encode_ledger(&grants, user, SENT);
        // A lease is its window (key and shape, 20 bytes), a few numbers, and its segments.
        assert!(body.len() <= 56, "{} bytes", body.len());
        let (back, _) = decode_ledger(&body, owner, user, SENT).unwrap();
        assert_eq!(back, grants);
        // A lease always names its sender as the owner: a datagram cannot lease for another.
        let (forged, _) = decode_ledger(&body, 8, user, SENT).unwrap();
        assert!(matches!(&forged[0], LedgerEntry::Lease { lease, .. } if lease.owner == 8));
    }

    #[test]
    fn malformed_entries_are_dropped_alone_and_garbage_fails_whole() {
        let bad = vec![
            Wire::Lease {
                key: [0; 16],
                window_ms: 1_000,
                buckets: 7,
                seq: 1,
                expires: 400,
                segments: vec![(1, 1, 0)],
            },
            Wire::Lease {
                key: [0; 16],
                window_ms: 1_000,
                buckets: 10,
                seq: 1,
                expires: 400,
                segments: vec![(2, 1, 0), (1, 1, 0)],
            },
            Wire::Refused {
                key: [1; 16],
                retry_after_ms: 5,
            },
        ];
        let body = bincode::serde::encode_to_vec(&bad, WIRE).unwrap();
        let (entries, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(rejects.malformed, 2, "a bad shape, segments out of order");
        assert!(decode_ledger(&[0xFF; 9], 1, 2, SENT).is_err());
        let mut trailing = body.clone();
        trailing.push(0);
        assert!(matches!(
            decode_ledger(&trailing, 1, 2, SENT),
            Err(MessageError::Trailing(1))
        ));
    }
}
