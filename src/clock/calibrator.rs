//! Where cluster time comes from: the median of the members' wall clocks, estimated from the
//! send times their datagrams carry, and how fast a node may move towards it.
//!
//! Everything is measured against this node's monotonic clock, which never steps, so that a
//! step of this node's own wall clock is just one more sample (outvoted by its peers) and the
//! estimates do not move when this node corrects itself: there is no feedback loop through
//! which the fleet could drift together. A quantity "wall − mono" is a clock's offset from this
//! node's monotonic clock; cluster time is `mono + base`, and the calibrator says what `base`
//! should be. Pure: it is handed every reading and reads no clock.

use std::collections::HashMap;

use crate::limiter::IdHashBuilder;

/// Samples kept per peer. The estimate is the largest (see [`Calibrator::observe`]).
const SAMPLES: usize = 16;
// A ring position fits in a byte (`PeerSamples`).
const _: () = assert!(SAMPLES <= u8::MAX as usize);

/// Corrections this small are not made: they are within what the estimate can tell (a sample
/// is short by one network latency, by as much as each peer's quickest latency differs) and
/// moving for them would only move clocks by those latencies. It is wider than the ledger's
/// clock margin (`CLOCK_MARGIN_MS`, 10 ms) because links' latencies spread wider than that: a
/// band inside their spread moves each node by its own peers' latencies, and nodes that agree
/// drift apart by the differences. Nodes that start in agreement stay where they are; a
/// round-trip estimate would remove the bias.
pub const DEAD_BAND_MS: i64 = 20;

/// How fast a serving node's cluster time may be pulled forward, as a share of elapsed time
/// (per mille). Meanwhile its windows pass 0.5 % faster than they should, and it admits up to
/// 0.5 % more: within the design's 1 % mean even when the whole cluster follows a move of the
/// median (two nodes, one of whose clocks stepped), which takes 200 s per second. Nodes that
/// start in agreement slew together and stay in agreement while they do. A node that is still
/// warming up admits nothing, so it jumps.
pub const SLEW_FORWARD_PER_MILLE: i64 = 5;

/// How fast it may be pulled back: windows then pass slower, and it admits less, not more.
pub const SLEW_BACK_PER_MILLE: i64 = 10;

/// A clock further than this share (per mille) of `max_clock_drift_ms` from cluster time is
/// cut off for admission, on both sides: by the node itself (which then counts every peer as
/// cut off) and by its peers, from the same estimates (theirs short by their latencies). The
/// node still corrects its clock up to the whole tolerance, so a clock just inside it is both
/// corrected and fenced; beyond it, the clock is left alone.
pub const FENCE_PER_MILLE: u64 = 900;

/// A clock cut off is let back once it is within this share (per mille) of the tolerance, so
/// that an estimate hovering at the threshold does not flap.
pub const UNFENCE_PER_MILLE: u64 = 850;

/// Estimates of the members' wall clocks, each as "its wall − this node's mono".
#[derive(Debug, Default)]
pub struct Calibrator {
    /// Per peer, the last samples and their maximum. Hashed (a large cluster's node looks up
    /// every member's each round); never iterated in an order that matters.
    samples: HashMap<u128, PeerSamples, IdHashBuilder>,
}

/// A peer's last [`SAMPLES`] samples, in place (every datagram adds one: a separate buffer
/// would cost a second cache miss per datagram in a large cluster), and their maximum, kept
/// as it is read far more often than a sample arrives.
#[derive(Debug, Clone)]
struct PeerSamples {
    ring: [i64; SAMPLES],
    /// Where the next sample goes.
    next: u8,
    len: u8,
    max: i64,
}

impl PeerSamples {
    fn new() -> Self {
        Self {
            ring: [0; SAMPLES],
            next: 0,
            len: 0,
            max: i64::MIN,
        }
    }

    /// The largest sample but the newest, if there is one.
    fn max_before_newest(&self) -> Option<i64> {
        let len = usize::from(self.len);
        let newest = (usize::from(self.next) + SAMPLES - 1) % SAMPLES;
        (0..len)
            .filter(|i| *i != newest)
            .map(|i| self.ring[i])
            .max()
    }

    fn push(&mut self, sample: i64) {
        let at = usize::from(self.next);
        let dropped = (usize::from(self.len) == SAMPLES).then_some(self.ring[at]);
        self.ring[at] = sample;
        self.next = ((at + 1) % SAMPLES) as u8;
        self.len = (usize::from(self.len) + 1).min(SAMPLES) as u8;
        self.max = if dropped == Some(self.max) {
            self.ring[..usize::from(self.len)]
                .iter()
                .copied()
                .max()
                .unwrap_or(sample)
        } else {
            self.max.max(sample)
        };
    }
}

impl Calibrator {
    /// Records that a datagram `peer` sent at its wall time `sent_wall_ms` arrived at this
    /// node's monotonic time `mono_ms`. The sample `sent − received` is the peer's offset less
    /// the one-way latency, so the largest recent sample is the tightest estimate; a replayed
    /// or delayed datagram can only make a sample smaller, which the maximum ignores.
    pub fn observe(&mut self, peer: u128, sent_wall_ms: u64, mono_ms: u64) {
        let sample = signed_diff(sent_wall_ms, mono_ms);
        self.samples
            .entry(peer)
            .or_insert_with(PeerSamples::new)
            .push(sample);
    }

    /// The peer's wall clock minus this node's monotonic clock, if it has sent anything.
    pub fn estimate(&self, peer: u128) -> Option<i64> {
        self.samples.get(&peer).map(|p| p.max)
    }

    /// How much longer than the peer's quickest datagram of late its newest one, sent at
    /// `sent_wall_ms` (its wall clock) and arrived at `mono_ms`, took: measured against the
    /// samples before it, so that a datagram cannot vouch for itself. `None` if there are none,
    /// or if the datagram came more than `within_ms` sooner than any of them did (its sender's
    /// clock stepped forward, or its send time is not what it says): its lateness cannot be
    /// told.
    pub fn lateness_ms(
        &self,
        peer: u128,
        sent_wall_ms: u64,
        mono_ms: u64,
        within_ms: u64,
    ) -> Option<u64> {
        let sample = signed_diff(sent_wall_ms, mono_ms);
        let before = self.samples.get(&peer)?.max_before_newest()?;
        let within = i64::try_from(within_ms).unwrap_or(i64::MAX);
        if sample > before.saturating_add(within) {
            return None;
        }
        Some(before.saturating_sub(sample).max(0).unsigned_abs())
    }

    /// Forgets `peer`'s samples.
    pub fn forget(&mut self, peer: u128) {
        self.samples.remove(&peer);
    }

    /// Forgets peers that are no longer members.
    pub fn retain(&mut self, keep: impl Fn(u128) -> bool) {
        self.samples.retain(|p, _| keep(*p));
    }

    /// The cluster's reference, as "wall − mono": the median of this node's own clock (`own`,
    /// exact) and the estimates of `peers` that have sent something. With an even count it is
    /// the midpoint of the middle two, so two nodes meet halfway.
    pub fn reference(&self, own: i64, peers: impl IntoIterator<Item = u128>) -> i64 {
        let mut all: Vec<i64> = peers
            .into_iter()
            .filter_map(|p| self.estimate(p))
            .chain([own])
            .collect();
        median(&mut all)
    }
}

/// The median; for an even count, the midpoint of the middle two (rounded down).
pub fn median(values: &mut [i64]) -> i64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        let (a, b) = (values[n / 2 - 1], values[n / 2]);
        a.div_euclid(2) + b.div_euclid(2) + (a.rem_euclid(2) + b.rem_euclid(2)) / 2
    }
}

fn signed_diff(a: u64, b: u64) -> i64 {
    if a >= b {
        i64::try_from(a - b).unwrap_or(i64::MAX)
    } else {
        i64::try_from(b - a).map_or(i64::MIN, |d| -d)
    }
}

/// How a node may move its cluster time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// At once: the node admits nothing yet (warm-up), or it is the first time it has peers to
    /// steer by (it served alone, on its own clock, until now).
    Jump,
    /// At once, as [`Steer::Jump`], but to this base: the cluster time the members that serve
    /// keep, which may not have reached the reference yet (they slew towards it). A node that
    /// took the reference instead would be seconds from them while they slew.
    JumpTo(i64),
    /// By at most [`SLEW_FORWARD_PER_MILLE`] (or [`SLEW_BACK_PER_MILLE`]) of the monotonic
    /// time since the last steer.
    Slew { elapsed_ms: u64 },
}

/// What a node should do with its cluster time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steering {
    /// The new `base` (cluster time = mono + base).
    pub base: i64,
    /// This node's wall clock minus cluster time (positive: ahead).
    pub offset_ms: i64,
    /// This node's clock is far enough from the cluster's for it to be cut off for admission
    /// (ALGORITHM.md §1, fences).
    pub fenced: bool,
    /// Its clock is beyond the tolerance: cluster time is left where it is.
    pub uncorrected: bool,
}

/// Whether a clock `distance` ms from cluster time is cut off, given whether it was.
pub fn fenced(distance: u64, max_drift_ms: u64, was_fenced: bool) -> bool {
    let per_mille = if was_fenced {
        UNFENCE_PER_MILLE
    } else {
        FENCE_PER_MILLE
    };
    distance > max_drift_ms.saturating_mul(per_mille) / 1_000
}

/// One steering decision. `own` is this node's "wall − mono" now, `reference` the cluster's
/// ([`Calibrator::reference`]), `base` the current base, `was_fenced` whether the node was cut
/// off until now.
pub fn steer(
    base: i64,
    own: i64,
    reference: i64,
    max_drift_ms: u64,
    was_fenced: bool,
    how: Steer,
) -> Steering {
    let offset_ms = own.saturating_sub(reference);
    let distance = offset_ms.unsigned_abs();
    if distance > max_drift_ms {
        return Steering {
            base,
            offset_ms,
            fenced: fenced(distance, max_drift_ms, was_fenced),
            uncorrected: true,
        };
    }
    // A jump lands no further than the tolerance from the reference, whatever it was given.
    let tolerance = i64::try_from(max_drift_ms).unwrap_or(i64::MAX);
    let target = match how {
        Steer::JumpTo(to) => to.clamp(
            reference.saturating_sub(tolerance),
            reference.saturating_add(tolerance),
        ),
        Steer::Jump | Steer::Slew { .. } => reference,
    };
    let wanted = target.saturating_sub(base);
    // A jump to the serving members' time is made however small: the node admits nothing,
    // and the band would leave it up to the band from them.
    let step = if wanted.abs() <= DEAD_BAND_MS && !matches!(how, Steer::JumpTo(_)) {
        0
    } else {
        match how {
            Steer::Jump | Steer::JumpTo(_) => wanted,
            Steer::Slew { elapsed_ms } => {
                let elapsed = i64::try_from(elapsed_ms).unwrap_or(i64::MAX);
                let forward = elapsed.saturating_mul(SLEW_FORWARD_PER_MILLE) / 1_000;
                let back = elapsed.saturating_mul(SLEW_BACK_PER_MILLE) / 1_000;
                wanted.clamp(-back, forward)
            }
        }
    };
    let base = base.saturating_add(step);
    // Cut off on the wall clock's distance, or on cluster time's if that is still further
    // (a clock that was beyond the tolerance and has been fixed, while cluster time slews).
    let residual = reference.saturating_sub(base).unsigned_abs();
    Steering {
        base,
        offset_ms,
        fenced: fenced(distance.max(residual), max_drift_ms, was_fenced),
        uncorrected: false,
    }
}

/// Whether this node should cut off a peer whose "wall − mono" estimate is `estimate`.
pub fn peer_fenced(estimate: i64, reference: i64, max_drift_ms: u64, was_fenced: bool) -> bool {
    fenced(
        estimate.saturating_sub(reference).unsigned_abs(),
        max_drift_ms,
        was_fenced,
    )
}

#[cfg(test)]
mod tests;
