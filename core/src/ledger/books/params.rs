//! The timing of a window's ledger at its owner, and where post-dated segments may start.

/// The owner's side of a window's ledger: the window's shape and limit, and the timing of
/// leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerParams {
    pub limit: u64,
    pub window_ms: u64,
    /// How long a lease lasts from a renewal.
    pub lease_ms: u64,
    /// The summary round: a user is leased again this long after its last renewal.
    pub round_ms: u64,
    /// Users stop spending this long before a lease ends, and a spend counts this long past
    /// its bucket: how far cluster clocks may disagree.
    pub margin_ms: u64,
    /// Post-dated segments start on a grid of this step (see `round_up`), so that a round
    /// grants each user a few segments rather than one per freed slot.
    pub start_step_ms: u64,
    /// How far ahead a round looks for slots that free.
    pub horizon_ms: u64,
    /// Nothing is leased before this: an owner that took the window over from another (or
    /// that is starting) waits until every lease that owner may have granted has ended and
    /// the users have reported what they spent and hold. The owner's view of the window now
    /// (`OwnerOf::quiet_until_ms`).
    pub quiet_until_ms: u64,
}

impl LedgerParams {
    /// The last moment a token of a lease ending at `expires_ms` may occupy the window: `W`
    /// past the lease's end, plus the margin.
    pub fn tail_of(&self, expires_ms: u64) -> u64 {
        expires_ms
            .saturating_add(self.window_ms)
            .saturating_add(self.margin_ms)
    }

    /// See [`spend_tail_ms`].
    pub fn spend_tail_ms(&self) -> u64 {
        spend_tail_ms(self.window_ms, self.margin_ms)
    }

    /// The first start of a post-dated segment at or after `t_ms`. Starts lie on a grid of
    /// `start_step_ms` laid where spends free their slots (slot ends are whole steps apart
    /// in the common shapes, shifted by the spend tail), so that a slot freed on the grid
    /// starts a segment at once rather than idling until the next multiple of the step.
    pub(super) fn round_up(&self, t_ms: u64) -> u64 {
        let step = self.start_step_ms.max(1);
        let phase = self.spend_tail_ms() % step;
        match t_ms.checked_sub(phase) {
            Some(past) => phase.saturating_add(past.div_ceil(step).saturating_mul(step)),
            None => phase,
        }
    }
}

/// How long past its slot's end a spend may occupy a sliding window, as an owner counts it:
/// the window, and a clock margin for the spender's clock and one for the next spender's (each
/// may be off the owner's the other way).
pub fn spend_tail_ms(window_ms: u64, margin_ms: u64) -> u64 {
    window_ms.saturating_add(margin_ms.saturating_mul(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::slot_end_ms;

    fn params(window_ms: u64, margin_ms: u64) -> LedgerParams {
        LedgerParams {
            limit: 10,
            window_ms,
            lease_ms: 400,
            round_ms: 200,
            margin_ms,
            start_step_ms: 25,
            horizon_ms: 400,
            quiet_until_ms: 0,
        }
    }

    /// Where a fine slot's spends free their slots on the grid, a segment starts right then;
    /// any other moment waits less than a step; and no start comes before the moment asked.
    #[test]
    fn starts_lie_where_slots_free() {
        for (window_ms, bucket_ms, margin_ms) in [
            (1_000, 100, 10),
            (10_000, 1_000, 10),
            (1_000, 100, 0),
            (60_000, 6_000, 7),
        ] {
            let p = params(window_ms, margin_ms);
            let mut on_grid = 0;
            for epoch in 40..60 {
                for j in 0..crate::ledger::tuning::FINE_SLOTS {
                    let free = slot_end_ms(epoch, j, bucket_ms) + p.spend_tail_ms();
                    let start = p.round_up(free);
                    assert!(
                        start >= free && start < free + p.start_step_ms,
                        "{free} -> {start}"
                    );
                    on_grid += usize::from(start == free);
                }
            }
            // Every second slot of a bucket ends a whole step after the bucket's start.
            assert!(
                on_grid >= 20 * 4,
                "{window_ms} ms: {on_grid} of 160 on the grid"
            );
        }
        let p = params(1_000, 10);
        for t in [0, 1, 19, 20, 21, 44, 45, 46, 1_000_001] {
            let start = p.round_up(t);
            assert!(start >= t && start < t + 25, "{t} -> {start}");
        }
    }
}
