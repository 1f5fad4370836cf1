//! What merging a batch did, register by register: the outcomes a node counts
//! (`limitmesh_merges_total{outcome}`).

use crate::crdt::MergeOutcome;

/// What merging a batch did, by outcome.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MergeReport {
    pub inserted: u64,
    pub replaced: u64,
    pub duplicate: u64,
    pub stale: u64,
    /// Dropped before the replica is copied: the held register ranks at or above it.
    pub dominated: u64,
    /// Registers of this node, relayed back to it.
    pub own: u64,
    pub expired: u64,
    /// Newest bucket more than a window ahead of local time, or a clock stamp beyond the
    /// allowed drift: refused so that a bad clock cannot poison a window.
    pub future: u64,
    pub bad_shape: u64,
    pub table_full: u64,
    /// Aggregates of windows this node does not hold (it never asked for them).
    pub unsolicited: u64,
    /// A version further ahead of the held register of its window and origin than the origin
    /// could have emitted since (`crdt::succession::leads_too_far`): refused, so that no
    /// register can rank above everything its origin will send.
    pub version_jump: u64,
    /// Sent by its origin itself, ranked below the held register, which cannot be a later
    /// emission of that origin (`crdt::succession::genuinely_later`): the origin's word
    /// replaced a register it never emitted.
    pub superseded: u64,
    /// Registers of a live member relayed by another, or sums that name an owner other than
    /// their sender: refused, as only an origin speaks for itself while it is live (the node
    /// checks this, as it knows who is live).
    pub not_from_origin: u64,
}

impl MergeReport {
    pub(super) fn record(&mut self, outcome: MergeOutcome) {
        match outcome {
            MergeOutcome::Inserted => self.inserted += 1,
            MergeOutcome::Replaced => self.replaced += 1,
            MergeOutcome::Duplicate => self.duplicate += 1,
            MergeOutcome::Stale => self.stale += 1,
        }
    }

    /// Registers that changed local state.
    pub fn changed(&self) -> u64 {
        self.inserted + self.replaced + self.superseded
    }

    pub fn add(&mut self, other: &MergeReport) {
        self.inserted += other.inserted;
        self.replaced += other.replaced;
        self.duplicate += other.duplicate;
        self.stale += other.stale;
        self.dominated += other.dominated;
        self.own += other.own;
        self.expired += other.expired;
        self.future += other.future;
        self.bad_shape += other.bad_shape;
        self.table_full += other.table_full;
        self.unsolicited += other.unsolicited;
        self.version_jump += other.version_jump;
        self.superseded += other.superseded;
        self.not_from_origin += other.not_from_origin;
    }
}
