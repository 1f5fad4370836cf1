//! What moves between a window's owner and its users: the lease an owner holds open for a
//! user, and the user's word on what it spent of it.
//!
//! An owner keeps one lease per user and window. The lease is a set of *segments* (tokens that
//! become spendable at one moment) sharing one end, and every message of it (a renewal) says
//! the whole of it: the segments that may still hold tokens, and the end, which a renewal
//! moves forward. So a renewal never doubles what a user holds (the tokens it had left are
//! kept, their end moved), and a lost message is repaired by the next.

use smallvec::SmallVec;

use super::spend_clock::SealedBucket;

/// Tokens of one lease that become spendable together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Segment {
    /// Per lease, from 1 up.
    pub id: u32,
    pub count: u32,
    pub valid_from_ms: u64,
}

/// One message of the lease `owner` holds open for a user for one window: every segment that
/// may still hold tokens, and when the lease ends (cluster time; the user stops a margin
/// before). A spent token occupies the window for `W` from when it was spent, so the last
/// moment a token of the lease can occupy it is `expires_ms + W`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The owner's boot id.
    pub owner: u128,
    /// Per (owner, window, user), from 1 up: a user takes only a message newer than any it
    /// has seen, so a message delayed behind a later one changes nothing.
    pub seq: u32,
    pub expires_ms: u64,
    /// Ascending ids.
    pub segments: SmallVec<[Segment; 2]>,
}

impl Lease {
    /// Tokens in all the segments.
    pub fn count(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.count)).sum()
    }
}

/// What a user holds of one owner's lease, as it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    pub owner: u128,
    /// The newest message of the lease the user has.
    pub seq: u32,
    pub expires_ms: u64,
    /// `(segment id, tokens spent)` of every segment it holds.
    pub spent: SmallVec<[(u32, u32); 2]>,
    /// Tokens not spent, in all its segments.
    pub unspent: u32,
    /// The lease ended (less the margin) before the report was made: nothing of it will be
    /// spent any more until a renewal.
    pub lapsed: bool,
}

/// What a user holds of one window's leases, as of one of its emissions: what its register of
/// the same emission does not count as spent, it may still spend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HoldingsReport {
    /// One per owner whose lease the user has a message of.
    pub held: Vec<HeldLease>,
    /// The user has stopped spending (it is leaving): what it had left is handed back.
    pub closed: bool,
    /// Buckets of the window sealed since the last report, with their spends by fine slot
    /// (`spend_clock.rs`).
    pub sealed: Vec<SealedBucket>,
}

impl HoldingsReport {
    /// The user's word on `owner`'s lease, if it has a message of it.
    pub fn of(&self, owner: u128) -> Option<&HeldLease> {
        self.held.iter().find(|h| h.owner == owner)
    }
}
