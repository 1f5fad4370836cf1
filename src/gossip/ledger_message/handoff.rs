//! The `Handoff` entry on the wire: windows by key, each with its last lease's end as its
//! distance from the send time.

use super::{LedgerEntry, Wire, at, offset};
use crate::limiter::KeyId;

/// At most this many windows are taken from one `Handoff` entry (about 1 KB on the wire): a
/// sender splits its windows into entries of this many.
pub const MOST_HANDED: usize = 48;

pub(super) fn handoff_out(ends: &[(KeyId, u64)], sent_ms: u64) -> Wire {
    Wire::Handoff {
        ends: ends
            .iter()
            .map(|(key, end)| (key.0.to_le_bytes(), offset(*end, sent_ms)))
            .collect(),
    }
}

/// A `Handoff` entry, or `None` if it names too many windows or a time out of range.
pub(super) fn handoff_in(ends: Vec<([u8; 16], i64)>, sent_ms: u64) -> Option<LedgerEntry> {
    if ends.len() > MOST_HANDED {
        return None;
    }
    let ends = ends
        .into_iter()
        .map(|(key, end)| Some((KeyId(u128::from_le_bytes(key)), at(end, sent_ms).ok()?)))
        .collect::<Option<Vec<_>>>()?;
    Some(LedgerEntry::Handoff { ends })
}
