//! Merging peers' registers and owners' sums into the replica state of each window, and
//! forgetting departed owners' sums once they no longer count.

use std::sync::Arc;

use super::super::state::{aggregate_of, is_aggregate, is_held_as_sum_alone};
use super::super::{KeyId, Limiter, OriginId};
use super::{Batch, MergeReport};
use crate::crdt::{Arbitration, Replica, succession};
use crate::window::{EstimateMode, WindowSpec};

/// Where a merged register goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// An origin's own register.
    Registers,
    /// An owner's sum over the origins it holds.
    Aggregates,
}

impl Limiter {
    /// Forgets the sums of departed owners this node holds for window `key` (held until
    /// another owner's sum is newer, [`Limiter::set_held`]) once their admissions have left
    /// the window. For a window this node now owns first, as its users' registers arrive: no
    /// other owner's sum comes to it, and the registers say more than the old sum (in a
    /// partition, the old sum also holds the far side's demand, and this node would take too
    /// little for as long as the sum was held).
    pub fn release_departed_sums(&self, key: KeyId, now_ms: u64) {
        let held = self.held_origins.load();
        let Some(held) = held.as_deref() else {
            return;
        };
        // Sums held alone are marked, and sort after every bare origin.
        let first_sum = held.partition_point(|idx| !is_aggregate(*idx));
        if first_sum == held.len() {
            return;
        }
        let _merges = self.lock_sync();
        let guard = self.table.guard();
        let Some(state) = self.table.get(&key, &guard) else {
            return;
        };
        let Some(current) = state.remote.load_full() else {
            return;
        };
        let weigher = state.spec().weigher(now_ms);
        // Only sums whose admissions have left the window: what they counted still counts
        // against the limit until then (the users count it too), only their demand goes.
        let departed: Vec<_> = held[first_sum..]
            .iter()
            .copied()
            .filter(|idx| is_held_as_sum_alone(held, *idx))
            .filter(|idx| {
                current
                    .get(*idx)
                    .is_some_and(|reg| reg.buckets().all(|(epoch, _)| weigher.weight(epoch) <= 0.0))
            })
            .collect();
        if departed.is_empty() {
            return;
        }
        let mut next = (*current).clone();
        for idx in departed {
            next.remove(idx);
        }
        state
            .remote
            .store((!next.is_empty()).then(|| Arc::new(next)));
        state.bound.invalidate();
    }

    /// Merges a peer's batch into the replica state of each window it names, as registers
    /// relayed by a node other than their origin (see [`Limiter::merge_sent_by`]).
    pub fn merge(&self, batch: &Batch, now_ms: u64) -> MergeReport {
        self.merge_into(batch, now_ms, Held::Registers, false)
    }

    /// Merges a batch that arrived from `sender` (the datagram's authenticated sender). When
    /// the sender is the batch's origin, its registers speak for it: one that ranks below the
    /// held register of its window replaces it, unless that one can be a later emission of the
    /// origin that overtook it on the way (`crdt::succession`).
    pub fn merge_sent_by(&self, batch: &Batch, sender: OriginId, now_ms: u64) -> MergeReport {
        self.merge_into(batch, now_ms, Held::Registers, batch.origin == sender)
    }

    /// Merges an owner's batch of aggregates (see [`Limiter::aggregates_for`]): each is kept
    /// as that owner's register of the window, beside the registers held (see
    /// `WindowState::aggregates`). Only windows this node holds take one: it asked for them by
    /// sending its own register.
    pub fn merge_aggregates(&self, batch: &Batch, now_ms: u64) -> MergeReport {
        self.merge_into(batch, now_ms, Held::Aggregates, false)
    }

    fn merge_into(&self, batch: &Batch, now_ms: u64, into: Held, from_origin: bool) -> MergeReport {
        let mut report = MergeReport::default();
        if batch.origin == self.origin {
            report.own = batch.updates.len() as u64;
            return report;
        }
        let mut sync = self.lock_sync();
        let idx = sync.origins.intern(batch.origin, now_ms);
        let guard = self.table.guard();
        let arbitration = self.config.arbitration;
        for update in &batch.updates {
            let reg = &update.register;
            let Ok(spec) =
                WindowSpec::new(update.window_ms, update.buckets, EstimateMode::Interpolated)
            else {
                report.bad_shape += 1;
                continue;
            };
            let max_epoch = spec.epoch(now_ms).saturating_add(u64::from(spec.buckets()));
            if reg.newest_epoch > max_epoch || sync.hlc.check_remote(reg.hlc, now_ms).is_err() {
                report.future += 1;
                continue;
            }
            if reg.as_ref().is_expired(&spec, now_ms) {
                report.expired += 1;
                continue;
            }
            let found = match into {
                Held::Registers => self
                    .table
                    .get_or_insert_sent(update.key, &spec, now_ms, &guard),
                // Only a window this node holds takes an owner's sum.
                Held::Aggregates => match self.table.get(&update.key, &guard) {
                    Some(state) => Ok(state.has_shape(&spec).then_some(state)),
                    None => {
                        report.unsolicited += 1;
                        continue;
                    }
                },
            };
            let state = match found {
                Ok(Some(state)) => state,
                // A faulty peer's: its register is dropped rather than replacing a window.
                Ok(None) => {
                    report.bad_shape += 1;
                    continue;
                }
                Err(_) => {
                    report.table_full += 1;
                    continue;
                }
            };
            let (idx, arbitration) = match into {
                Held::Registers => (idx, arbitration),
                // An owner's aggregates of a window are ordered by its emissions.
                Held::Aggregates => (aggregate_of(idx), Arbitration::VectorDominance),
            };
            let slot = &state.remote;
            let current = slot.load_full();
            let stamp = (reg.version, reg.hlc);
            let held = current
                .as_ref()
                .and_then(|c| c.get(idx))
                .map(|h| (h.version, h.hlc));
            if let Some(held) = held
                && succession::leads_too_far(held, stamp)
            {
                report.version_jump += 1;
                continue;
            }
            if into == Held::Registers {
                sync.origins.observe_version(idx, reg.version);
            }
            // The origin's own register below one it cannot have emitted after it.
            let supersede = from_origin
                && held.is_some_and(|held| {
                    arbitration.rank(stamp.0, stamp.1) < arbitration.rank(held.0, held.1)
                        && !succession::genuinely_later(held, stamp)
                });
            if !supersede
                && let Some(cur) = &current
                && cur.dominates([(idx, reg.version, reg.hlc)], arbitration)
            {
                report.dominated += 1;
                continue;
            }
            let mut next = current
                .map(|c| (*c).clone())
                .unwrap_or_else(|| Replica::new(&state.spec()));
            if supersede {
                next.supersede(idx, reg.as_ref());
                report.superseded += 1;
            } else {
                report.record(next.merge_register(idx, reg.as_ref(), arbitration));
            }
            next.expire_except(&state.spec(), now_ms, |o| self.is_held(o));
            slot.store(Some(Arc::new(next)));
            // Remote counts may have grown: the cached bound may no longer hold.
            state.bound.invalidate();
        }
        report
    }
}
