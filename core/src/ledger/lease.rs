//! What moves between a window's owner and its users: leases of tokens, and the users' word
//! on what they still hold.

/// `count` tokens of one window that `owner` hands one user: each may be spent once, at any
/// time from `valid_from_ms` until `expires_ms` (cluster time; the user stops a margin
/// before). A spent token occupies the window for `W` from when it was spent, so the last
/// moment a token of this lease can occupy the window is `expires_ms + W`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lease {
    /// The owner's boot id: sequence numbers count per owner.
    pub owner: u128,
    /// Per (owner, window, user), from 1 up: a user keeps only leases newer than any it has
    /// seen from that owner, so a lease delayed behind a later one is never spent.
    pub seq: u32,
    pub count: u32,
    pub valid_from_ms: u64,
    pub expires_ms: u64,
}

impl Lease {
    /// Whether a token of this lease may be spent at `now_ms`, stopping `margin_ms` before
    /// the lease ends (clocks agree only so far).
    pub fn spendable_at(&self, now_ms: u64, margin_ms: u64) -> bool {
        self.valid_from_ms <= now_ms && now_ms.saturating_add(margin_ms) < self.expires_ms
    }
}

/// One lease a user still holds, as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLease {
    pub owner: u128,
    pub seq: u32,
    /// Tokens of it not spent.
    pub unspent: u32,
    pub expires_ms: u64,
}

/// What a user holds of one window's leases, as of one of its emissions: what its register of
/// the same emission does not count as spent, it may still spend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HoldingsReport {
    /// Per owner, the highest sequence number it has received: a lease of that owner up to
    /// it that is not in `held` is spent, lapsed, or will never be taken.
    pub seen: Vec<(u128, u32)>,
    /// The leases with tokens left, that have not lapsed.
    pub held: Vec<HeldLease>,
    /// The user has stopped spending (it is leaving): what `held` lists is handed back.
    pub closed: bool,
}

impl HoldingsReport {
    /// The highest sequence number seen from `owner` (0: none).
    pub fn seen_from(&self, owner: u128) -> u32 {
        self.seen
            .iter()
            .find(|(o, _)| *o == owner)
            .map_or(0, |(_, s)| *s)
    }

    /// Tokens of `owner`'s lease `seq` the report says may still be spent: `None` if the report
    /// does not cover the lease (it was sent before the user received it).
    pub fn unspent_of(&self, owner: u128, seq: u32) -> Option<u32> {
        if seq > self.seen_from(owner) {
            return None;
        }
        if self.closed {
            return Some(0);
        }
        Some(
            self.held
                .iter()
                .find(|h| h.owner == owner && h.seq == seq)
                .map_or(0, |h| h.unspent),
        )
    }
}
