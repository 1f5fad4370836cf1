//! A lease on the wire. To a member that reads it (`KNOWN_LEASE`), the segments its user has
//! said it holds go by id alone; to another, every segment goes whole (`Wire::Lease`).

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::{LedgerEntry, MOST_PARTS, Wire, at, offset, shape_ok};
use crate::ledger::{Lease, Segment};
use crate::limiter::KeyId;

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct WireLease {
    pub key: [u8; 16],
    pub window_ms: u64,
    pub buckets: u16,
    pub seq: u32,
    /// `expires - sent`.
    pub expires: i64,
    /// Ids of the segments the user holds (the lease's first).
    pub known: Vec<u32>,
    /// `(id, count, valid_from - sent)` of the others.
    pub segments: Vec<(u32, u32, i64)>,
}

/// A lease with nothing known goes as a build without `KNOWN_LEASE` writes it (the caller
/// marks nothing known for a member that does not read it).
pub(super) fn lease_out(
    key: KeyId,
    window_ms: u64,
    buckets: u16,
    lease: &Lease,
    sent_ms: u64,
) -> Wire {
    let known = usize::try_from(lease.known)
        .unwrap_or(usize::MAX)
        .min(lease.segments.len());
    let whole = |s: &Segment| (s.id, s.count, offset(s.valid_from_ms, sent_ms));
    let expires = offset(lease.expires_ms, sent_ms);
    let key = key.0.to_le_bytes();
    if known == 0 {
        return Wire::Lease {
            key,
            window_ms,
            buckets,
            seq: lease.seq,
            expires,
            segments: lease.segments.iter().map(whole).collect(),
        };
    }
    Wire::KnownLease(WireLease {
        key,
        window_ms,
        buckets,
        seq: lease.seq,
        expires,
        known: lease.segments[..known].iter().map(|s| s.id).collect(),
        segments: lease.segments[known..].iter().map(whole).collect(),
    })
}

/// A lease from `sender`, or `None` if it is malformed: a window shape that is not one, a
/// message number of 0, more segments than a lease holds, ids out of order, or a time out of
/// range. A known segment's count and start are the user's own; it is read with zeros.
pub(super) fn lease_in(w: WireLease, sender: u128, sent_ms: u64) -> Option<LedgerEntry> {
    if !shape_ok(w.window_ms, w.buckets)
        || w.seq == 0
        || w.known.len().saturating_add(w.segments.len()) > MOST_PARTS
    {
        return None;
    }
    let known = w.known.iter().map(|id| {
        Some(Segment {
            id: *id,
            count: 0,
            valid_from_ms: 0,
        })
    });
    let whole = w.segments.iter().map(|(id, count, from)| {
        Some(Segment {
            id: *id,
            count: *count,
            valid_from_ms: at(*from, sent_ms).ok()?,
        })
    });
    let segments: SmallVec<[Segment; 2]> = known.chain(whole).collect::<Option<_>>()?;
    if !segments.windows(2).all(|p| p[0].id < p[1].id) {
        return None;
    }
    Some(LedgerEntry::Lease {
        key: KeyId(u128::from_le_bytes(w.key)),
        window_ms: w.window_ms,
        buckets: w.buckets,
        lease: Lease {
            owner: sender,
            seq: w.seq,
            expires_ms: at(w.expires, sent_ms).ok()?,
            segments,
            known: u32::try_from(w.known.len()).ok()?,
        },
    })
}
