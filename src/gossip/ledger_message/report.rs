//! A user's report on the wire: each lease it holds, its owner left out where it is the
//! report's receiver.

use smallvec::SmallVec;

use super::{LedgerEntry, MOST_PARTS, MOST_SEALED, WireHeld, WireOwner, at, offset};
use crate::ledger::{HeldLease, HoldingsReport, SealedBucket};
use crate::limiter::LedgerReport;

pub(super) fn held_out(h: &HeldLease, receiver: u128, sent_ms: u64) -> WireHeld {
    (
        owner_out(h.owner, receiver),
        h.seq,
        offset(h.expires_ms, sent_ms),
        h.spent.to_vec(),
        h.unspent,
        h.lapsed,
    )
}

pub(super) fn owner_out(owner: u128, implied: u128) -> WireOwner {
    (owner != implied).then(|| owner.to_le_bytes())
}

fn owner_in(owner: WireOwner, implied: u128) -> u128 {
    owner.map_or(implied, u128::from_le_bytes)
}

/// A report from the wire: `None` if a list is longer than a report holds or a time is out
/// of range.
pub(super) fn report_in(
    index: u32,
    limit: u32,
    held: Vec<WireHeld>,
    closed: bool,
    sealed: Vec<SealedBucket>,
    receiver: u128,
    sent_ms: u64,
) -> Option<LedgerEntry> {
    if held.len() > MOST_PARTS || sealed.len() > MOST_SEALED {
        return None;
    }
    let held = held
        .into_iter()
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
        .collect::<Option<Vec<_>>>()?;
    Some(LedgerEntry::Report {
        index,
        report: LedgerReport {
            limit,
            holdings: HoldingsReport {
                held,
                closed,
                sealed,
            },
        },
    })
}
