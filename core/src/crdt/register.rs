//! A register: one origin's whole contribution to one window, and the order that arbitrates
//! between two versions of it.

use std::cmp::Ordering;

use super::counts::Counts;
use crate::crdt::HlcTimestamp;
use crate::window::WindowSpec;

/// An origin's contribution to a window, as the origin last emitted it.
///
/// Only the origin writes its register, and it emits the whole register when it changes.
/// Counts may go down between versions (a refund, a reset): replacement is decided by
/// [`Arbitration`], never by comparing counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Register {
    /// The origin's emission counter; strictly increases with every emission of the origin.
    pub version: u64,
    /// When the origin emitted it, on the origin's hybrid logical clock.
    pub hlc: HlcTimestamp,
    /// Epoch of `admitted[0]`.
    pub newest_epoch: u64,
    /// Offered requests (admitted + rejected) over the window at emission: the origin's demand.
    pub demand: u32,
    /// Admitted per bucket, newest first: `admitted[i]` is epoch `newest_epoch - i`.
    pub admitted: Vec<u32>,
}

/// A register as stored inside a [`super::Replica`]: the same fields, counts borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterRef<'a> {
    pub version: u64,
    pub hlc: HlcTimestamp,
    pub newest_epoch: u64,
    pub demand: u32,
    pub admitted: Counts<'a>,
}

impl Register {
    pub fn as_ref(&self) -> RegisterRef<'_> {
        RegisterRef {
            version: self.version,
            hlc: self.hlc,
            newest_epoch: self.newest_epoch,
            demand: self.demand,
            admitted: Counts::Wide(&self.admitted),
        }
    }
}

impl<'a> RegisterRef<'a> {
    pub fn to_owned(&self) -> Register {
        Register {
            version: self.version,
            hlc: self.hlc,
            newest_epoch: self.newest_epoch,
            demand: self.demand,
            admitted: self.admitted.to_vec(),
        }
    }

    /// `(epoch, admitted)` for every non-empty bucket, newest first.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let newest = self.newest_epoch;
        self.admitted
            .iter()
            .enumerate()
            .filter(move |(age, c)| *c > 0 && (*age as u64) <= newest)
            .map(move |(age, c)| (newest - age as u64, u64::from(c)))
    }

    /// Whether every bucket of this register has left the window at `now_ms`.
    pub fn is_expired(&self, spec: &WindowSpec, now_ms: u64) -> bool {
        spec.expiry_ms(self.newest_epoch) <= now_ms
    }

    /// The demand this register still stands for at `now_ms`: the origin's offered load over
    /// the window it emitted, trusted for one window after emission and then forgotten. A busy
    /// origin re-emits every round, so only an origin that went quiet sees its demand lapse.
    pub fn live_demand(&self, spec: &WindowSpec, now_ms: u64) -> u32 {
        let emitted = self.hlc.physical_ms();
        if now_ms < emitted.saturating_add(spec.window_ms()) {
            self.demand
        } else {
            0
        }
    }
}

/// How two versions of one origin's register are ordered. The larger one wins a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arbitration {
    /// The higher version wins. Exact whatever the clocks do; relies on an origin never reusing
    /// a version, which holds because an origin is a single process boot.
    #[default]
    VectorDominance,
    /// The later hybrid-logical-clock stamp wins (then the higher version). Survives an origin
    /// whose version counter was reset; relies on bounded clock skew.
    MaxTimestamp,
}

impl Arbitration {
    /// A total order on register versions. Equal versions with different contents (which a
    /// correct origin never produces) are still ordered, by content, so that every replica
    /// picks the same one and merge stays commutative.
    pub fn compare(self, a: &RegisterRef<'_>, b: &RegisterRef<'_>) -> Ordering {
        let primary = match self {
            Arbitration::VectorDominance => (a.version, a.hlc).cmp(&(b.version, b.hlc)),
            Arbitration::MaxTimestamp => (a.hlc, a.version).cmp(&(b.hlc, b.version)),
        };
        primary.then_with(|| {
            (a.newest_epoch, a.demand, a.admitted).cmp(&(b.newest_epoch, b.demand, b.admitted))
        })
    }

    /// The clock this arbitration orders by, for cheap dominance checks.
    pub fn rank(self, version: u64, hlc: HlcTimestamp) -> (u64, u64) {
        match self {
            Arbitration::VectorDominance => (version, hlc.to_bits()),
            Arbitration::MaxTimestamp => (hlc.to_bits(), version),
        }
    }
}
