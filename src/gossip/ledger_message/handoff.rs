//! The entries of a leaving owner on the wire. `Handoff`: windows by key, each with its last
//! lease's end as its distance from the send time. `Books`: one window's handed books, from
//! their distance from the send time, each step by its length.

use super::{LedgerEntry, Wire, at, offset, shape_ok};
use crate::ledger::{HandedBooks, MOST_HANDED_STEPS};
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

pub(super) fn books_out(
    key: KeyId,
    (window_ms, buckets): (u64, u16),
    books: &HandedBooks,
    sent_ms: u64,
) -> Wire {
    let starts = std::iter::once(books.at_ms).chain(books.steps.iter().map(|(until, _)| *until));
    Wire::Books {
        key: key.0.to_le_bytes(),
        window_ms,
        buckets,
        at: offset(books.at_ms, sent_ms),
        steps: starts
            .zip(&books.steps)
            // A count past any limit (`u32`) holds the window full at `u32::MAX` too.
            .map(|(from, (until, count))| {
                let count = u32::try_from(*count).unwrap_or(u32::MAX);
                (until.saturating_sub(from), count)
            })
            .collect(),
    }
}

/// The `Books` entry of a `Wire::Books`, or `None` if it is none, names no window shape, has
/// a time out of range, or books that are not well formed (`HandedBooks::is_well_formed`: too
/// many steps, or a step of no length).
pub(super) fn books_in(books: Wire, sent_ms: u64) -> Option<LedgerEntry> {
    let Wire::Books {
        key,
        window_ms,
        buckets,
        at: at_offset,
        steps,
    } = books
    else {
        return None;
    };
    // Read no further than the most steps books may have.
    if steps.len() > MOST_HANDED_STEPS || !shape_ok(window_ms, buckets) {
        return None;
    }
    let at_ms = at(at_offset, sent_ms).ok()?;
    let mut until = at_ms;
    let steps = steps
        .into_iter()
        .map(|(length, count)| {
            until = until.checked_add(length)?;
            Some((until, u64::from(count)))
        })
        .collect::<Option<Vec<_>>>()?;
    let books = HandedBooks { at_ms, steps };
    books.is_well_formed().then(|| LedgerEntry::Books {
        key: KeyId(u128::from_le_bytes(key)),
        window_ms,
        buckets,
        books,
    })
}
