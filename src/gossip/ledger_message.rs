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
use crate::ledger::{HeldLease, HoldingsReport, Lease};
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
    /// within `wait_ms` of the send time.
    Ask {
        key: KeyId,
        window_ms: u64,
        buckets: u16,
        limit: u32,
        want: u32,
        wait_ms: u32,
    },
    /// The owner refuses an ask: ask again no sooner than this.
    Refused { key: KeyId, retry_after_ms: u32 },
}

/// An owner id on the wire: `None` is the one the context says (the receiver of a report).
type WireOwner = Option<[u8; 16]>;

#[derive(Debug, Serialize, Deserialize)]
enum Wire {
    Report {
        index: u32,
        limit: u32,
        seen: Vec<(WireOwner, u32)>,
        /// `(owner, seq, unspent, expires - sent)`.
        held: Vec<(WireOwner, u32, u32, i64)>,
        closed: bool,
    },
    Lease {
        key: [u8; 16],
        window_ms: u64,
        buckets: u16,
        seq: u32,
        count: u32,
        /// `valid_from - sent`.
        from: i64,
        lasts_ms: u64,
    },
    Ask {
        key: [u8; 16],
        window_ms: u64,
        buckets: u16,
        limit: u32,
        want: u32,
        wait_ms: u32,
    },
    Refused {
        key: [u8; 16],
        retry_after_ms: u32,
    },
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
                seen: report
                    .holdings
                    .seen
                    .iter()
                    .map(|(o, s)| (owner_out(*o, receiver), *s))
                    .collect(),
                held: report
                    .holdings
                    .held
                    .iter()
                    .map(|h| {
                        (
                            owner_out(h.owner, receiver),
                            h.seq,
                            h.unspent,
                            offset(h.expires_ms, sent_ms),
                        )
                    })
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
                count: lease.count,
                from: offset(lease.valid_from_ms, sent_ms),
                lasts_ms: lease.expires_ms.saturating_sub(lease.valid_from_ms),
            },
            LedgerEntry::Ask {
                key,
                window_ms,
                buckets,
                limit,
                want,
                wait_ms,
            } => Wire::Ask {
                key: key.0.to_le_bytes(),
                window_ms: *window_ms,
                buckets: *buckets,
                limit: *limit,
                want: *want,
                wait_ms: *wait_ms,
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
                seen,
                held,
                closed,
            } => {
                let held: Result<Vec<HeldLease>, MessageError> = held
                    .into_iter()
                    .map(|(owner, seq, unspent, expires)| {
                        Ok(HeldLease {
                            owner: owner_in(owner, receiver),
                            seq,
                            unspent,
                            expires_ms: at(expires, sent_ms)?,
                        })
                    })
                    .collect();
                let Ok(held) = held else {
                    rejects.malformed += 1;
                    continue;
                };
                LedgerEntry::Report {
                    index,
                    report: LedgerReport {
                        limit,
                        holdings: HoldingsReport {
                            seen: seen
                                .into_iter()
                                .map(|(o, s)| (owner_in(o, receiver), s))
                                .collect(),
                            held,
                            closed,
                        },
                    },
                }
            }
            Wire::Lease {
                key,
                window_ms,
                buckets,
                seq,
                count,
                from,
                lasts_ms,
            } => {
                let Ok(valid_from_ms) = at(from, sent_ms) else {
                    rejects.malformed += 1;
                    continue;
                };
                if !shape_ok(window_ms, buckets) || count == 0 || seq == 0 {
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
                        count,
                        valid_from_ms,
                        expires_ms: valid_from_ms.saturating_add(lasts_ms),
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
            } => {
                if !shape_ok(window_ms, buckets) || want == 0 {
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
    use super::*;

    const SENT: u64 = 1_700_000_000_000;

    #[test]
    fn every_entry_round_trips_and_owners_implied_by_the_datagram_are_not_written() {
        let (owner, user) = (7u128, 9u128);
        let report = LedgerReport {
            limit: 100,
            holdings: HoldingsReport {
                seen: vec![(owner, 4), (3, 1)],
                held: vec![HeldLease {
                    owner,
                    seq: 4,
                    unspent: 2,
                    expires_ms: SENT + 150,
                }],
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
            },
        ];
        let body = encode_ledger(&entries, owner, SENT);
        let (back, rejects) = decode_ledger(&body, user, owner, SENT).unwrap();
        assert_eq!(back, entries);
        assert_eq!(rejects, LedgerRejects::default());

        let lease = Lease {
            owner,
            seq: 5,
            count: 12,
            valid_from_ms: SENT + 40,
            expires_ms: SENT + 440,
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
        // A lease is its window (key and shape, 20 bytes) and six small numbers.
        assert!(body.len() <= 48, "{} bytes", body.len());
        let (back, _) = decode_ledger(&body, owner, user, SENT).unwrap();
        assert_eq!(back, grants);
        // A lease always names its sender as the owner: a datagram cannot lease for another.
        let (forged, _) = decode_ledger(&body, 8, user, SENT).unwrap();
        assert!(matches!(forged[0], LedgerEntry::Lease { lease, .. } if lease.owner == 8));
    }

    #[test]
    fn malformed_entries_are_dropped_alone_and_garbage_fails_whole() {
        let bad = vec![
            Wire::Lease {
                key: [0; 16],
                window_ms: 1_000,
                buckets: 7,
                seq: 1,
                count: 1,
                from: 0,
                lasts_ms: 400,
            },
            Wire::Refused {
                key: [1; 16],
                retry_after_ms: 5,
            },
        ];
        let body = bincode::serde::encode_to_vec(&bad, WIRE).unwrap();
        let (entries, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(rejects.malformed, 1);
        assert!(decode_ledger(&[0xFF; 9], 1, 2, SENT).is_err());
        let mut trailing = body.clone();
        trailing.push(0);
        assert!(matches!(
            decode_ledger(&trailing, 1, 2, SENT),
            Err(MessageError::Trailing(1))
        ));
    }
}
