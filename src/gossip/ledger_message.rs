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

use crate::ledger::tuning::FINE_SLOTS;
use crate::ledger::{HandedBooks, HeldLease, Lease, SealedBucket, Segment};
use crate::limiter::{KeyId, LedgerReport};
use crate::window::{EstimateMode, WindowSpec};

mod handoff;
mod heard;
mod report;

pub use handoff::MOST_HANDED;
use handoff::{books_in, books_out, handoff_in, handoff_out};
#[cfg(test)]
use heard::HEARD_UNIT_MS;
pub use heard::MOST_HEARD;
use heard::{heard_in, heard_out};
use report::{held_out, report_in};

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
    /// before `deadline_ms` (cluster time, which members share within the clock margin; a
    /// wall clock's error would move it); `held` is what it has of that owner's lease.
    Ask {
        key: KeyId,
        window_ms: u64,
        buckets: u16,
        limit: u32,
        want: u32,
        deadline_ms: u64,
        held: Option<HeldLease>,
    },
    /// The owner refuses an ask: ask again no sooner than this.
    Refused { key: KeyId, retry_after_ms: u32 },
    /// The sender is leaving the cluster gracefully: it will not be back under its boot id, so
    /// the members staying need not keep room for it. Sent in a datagram of its own (a node
    /// that does not know this entry drops only that datagram).
    Leaving,
    /// Members the sender's side heard from, each by its short id (`node/liveness/relayed.rs`)
    /// with the cluster time it was last heard. Sent in a datagram of its own, as `Leaving`.
    Heard { members: Vec<(u32, u64)> },
    /// The sender, leaving gracefully, owned each window: its last lease there ends then
    /// (`limiter/ledger_handoff.rs`). Only to a member that reads it (`features.rs`).
    Handoff { ends: Vec<(KeyId, u64)> },
    /// The sender, leaving gracefully, owned the window: its books, as the slots they count
    /// taken from when it stopped leasing (`limiter/ledger_handoff.rs`). Only to a member
    /// that reads them (`features.rs`).
    Books {
        key: KeyId,
        window_ms: u64,
        buckets: u16,
        books: HandedBooks,
    },
    /// The sender leases nothing (its clock is cut off): members leave it off their rings for
    /// `holds_ms` from its sending (`node/not_leasing.rs`). `seq` rises with each word of the
    /// sender's boot, so that a copy is not taken again. Sent in a datagram of its own, as
    /// `Leaving`.
    NotLeasing { seq: u64, holds_ms: u32 },
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
        /// `deadline - sent`.
        deadline: i64,
        /// `(seq, [(segment, spent)])` of the receiver's lease.
        held: Option<(u32, Vec<(u32, u32)>)>,
    },
    Refused {
        key: [u8; 16],
        retry_after_ms: u32,
    },
    Leaving,
    Heard {
        /// The latest time, `- sent`.
        newest: i64,
        /// `(short id, (newest - heard) in 10 ms, rounded up)`.
        members: Vec<([u8; 4], u32)>,
    },
    /// A report with sealed buckets: only to a member that reads them (`node/features.rs`,
    /// `SEALED`); a build before it drops the whole section.
    SealedReport {
        index: u32,
        limit: u32,
        held: Vec<WireHeld>,
        closed: bool,
        /// `(epoch, [spends by fine slot])` of each bucket sealed.
        sealed: Vec<(u64, [u32; FINE_SLOTS])>,
    },
    /// `[(key, end - sent)]`.
    Handoff {
        ends: Vec<([u8; 16], i64)>,
    },
    NotLeasing {
        seq: u64,
        holds_ms: u32,
    },
    /// Only to a member that reads it (`node/features.rs`, `BOOKS`); a build before it drops
    /// the whole section.
    Books {
        key: [u8; 16],
        window_ms: u64,
        buckets: u16,
        /// `at - sent`.
        at: i64,
        /// `[(until - the step's start, count)]`.
        steps: Vec<(u64, u32)>,
    },
}

/// At most this many sealed buckets are taken from one report: a clock keeps 16 buckets.
const MOST_SEALED: usize = 16;

/// At most this many segments or held leases are taken from one entry: a lease holds a few.
const MOST_PARTS: usize = 64;

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
            LedgerEntry::Report { index, report } => {
                let held = report
                    .holdings
                    .held
                    .iter()
                    .map(|h| held_out(h, receiver, sent_ms))
                    .collect();
                let sealed = &report.holdings.sealed;
                if sealed.is_empty() {
                    Wire::Report {
                        index: *index,
                        limit: report.limit,
                        held,
                        closed: report.holdings.closed,
                    }
                } else {
                    Wire::SealedReport {
                        index: *index,
                        limit: report.limit,
                        held,
                        closed: report.holdings.closed,
                        sealed: sealed.iter().map(|b| (b.epoch, b.counts)).collect(),
                    }
                }
            }
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
                deadline_ms,
                held,
            } => Wire::Ask {
                key: key.0.to_le_bytes(),
                window_ms: *window_ms,
                buckets: *buckets,
                limit: *limit,
                want: *want,
                deadline: offset(*deadline_ms, sent_ms),
                held: held.as_ref().map(|h| (h.seq, h.spent.to_vec())),
            },
            LedgerEntry::Refused {
                key,
                retry_after_ms,
            } => Wire::Refused {
                key: key.0.to_le_bytes(),
                retry_after_ms: *retry_after_ms,
            },
            LedgerEntry::Leaving => Wire::Leaving,
            LedgerEntry::Heard { members } => heard_out(members, sent_ms),
            LedgerEntry::Handoff { ends } => handoff_out(ends, sent_ms),
            LedgerEntry::Books {
                key,
                window_ms,
                buckets,
                books,
            } => books_out(*key, (*window_ms, *buckets), books, sent_ms),
            LedgerEntry::NotLeasing { seq, holds_ms } => Wire::NotLeasing {
                seq: *seq,
                holds_ms: *holds_ms,
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
            } => match report_in(index, limit, held, closed, Vec::new(), receiver, sent_ms) {
                Some(entry) => entry,
                None => {
                    rejects.malformed += 1;
                    continue;
                }
            },
            Wire::SealedReport {
                index,
                limit,
                held,
                closed,
                sealed,
            } => {
                let sealed = sealed
                    .into_iter()
                    .map(|(epoch, counts)| SealedBucket { epoch, counts })
                    .collect();
                match report_in(index, limit, held, closed, sealed, receiver, sent_ms) {
                    Some(entry) => entry,
                    None => {
                        rejects.malformed += 1;
                        continue;
                    }
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
                deadline,
                held,
            } => {
                let deadline_ms = at(deadline, sent_ms).ok();
                let (true, false, Some(deadline_ms)) = (
                    shape_ok(window_ms, buckets) && want > 0,
                    held.as_ref().is_some_and(|(_, s)| s.len() > MOST_PARTS),
                    deadline_ms,
                ) else {
                    rejects.malformed += 1;
                    continue;
                };
                LedgerEntry::Ask {
                    key: KeyId(u128::from_le_bytes(key)),
                    window_ms,
                    buckets,
                    limit,
                    want,
                    deadline_ms,
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
            Wire::Leaving => LedgerEntry::Leaving,
            Wire::Heard { newest, members } => {
                let Some(entry) = heard_in(newest, members, sent_ms) else {
                    rejects.malformed += 1;
                    continue;
                };
                entry
            }
            Wire::Handoff { ends } => {
                let Some(entry) = handoff_in(ends, sent_ms) else {
                    rejects.malformed += 1;
                    continue;
                };
                entry
            }
            Wire::NotLeasing { seq, holds_ms } => LedgerEntry::NotLeasing { seq, holds_ms },
            books @ Wire::Books { .. } => {
                let Some(entry) = books_in(books, sent_ms) else {
                    rejects.malformed += 1;
                    continue;
                };
                entry
            }
        };
        out.push(entry);
    }
    Ok((out, rejects))
}

#[cfg(test)]
mod tests;
