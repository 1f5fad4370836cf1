//! The `Heard` entry on the wire: members by short id, each time as its distance from the
//! newest in [`HEARD_UNIT_MS`] units, rounded up so that no time is read later than it was.

use super::{LedgerEntry, Wire, at, offset};

/// At most this many members are taken from one `Heard` entry: what one datagram holds.
pub const MOST_HEARD: usize = 128;

/// The unit of a relayed time's distance from the newest, in ms: under 2.5 s a distance is one
/// varint byte.
pub(super) const HEARD_UNIT_MS: u64 = 10;

pub(super) fn heard_out(members: &[(u32, u64)], sent_ms: u64) -> Wire {
    let newest = members.iter().map(|(_, t)| *t).max().unwrap_or(sent_ms);
    Wire::Heard {
        newest: offset(newest, sent_ms),
        // A time too far back for the wire is left out: written as the farthest, it would be
        // read later than it was.
        members: members
            .iter()
            .filter_map(|(short, t)| {
                let units = u32::try_from((newest - t).div_ceil(HEARD_UNIT_MS)).ok()?;
                Some((short.to_le_bytes(), units))
            })
            .collect(),
    }
}

/// A `Heard` entry, or `None` if it names too many members or a time out of range. A time is
/// never read later than it was written (distances were rounded up).
pub(super) fn heard_in(
    newest: i64,
    members: Vec<([u8; 4], u32)>,
    sent_ms: u64,
) -> Option<LedgerEntry> {
    if members.len() > MOST_HEARD {
        return None;
    }
    let newest = at(newest, sent_ms).ok()?;
    let members = members
        .into_iter()
        .map(|(short, units)| {
            let back = u64::from(units).checked_mul(HEARD_UNIT_MS)?;
            Some((u32::from_le_bytes(short), newest.checked_sub(back)?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(LedgerEntry::Heard { members })
}
