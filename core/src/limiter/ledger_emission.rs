//! A ledger user's emission: each changed register with what this node holds of the window,
//! for the window's owner, paced by how near the window is to its limit.

use super::ledger_owner::LedgerReport;
use super::replication::{Batch, RegisterUpdate, register_of};
use super::state::WindowState;
use super::{KeyId, Limiter};
use crate::crdt::HlcTimestamp;
use crate::ledger::tuning::CALM_ROUNDS;
use crate::ledger::{Holdings, HoldingsReport};
use crate::window::RingSnapshot;

impl Limiter {
    /// This node's registers to report this round, each with this node's report of its
    /// window's tokens, by the same index. Each report is read before its register's ring
    /// (see `ledger::holdings`). The reports of windows this node leases go to its own books
    /// at once. `None` when there is nothing to report.
    ///
    /// A changed window is reported now if it refused anything lately, if the tokens it holds
    /// would not last two rounds of its demand, or if it was last reported
    /// [`CALM_ROUNDS`] rounds ago or more; otherwise it waits, still marked changed. A window
    /// with a lease that lapsed since its last report is reported whether it changed or not,
    /// so that the owner frees what was left unspent. A window reported this round goes once
    /// more next round if it is still busy (against one lost datagram).
    pub fn collect_with_reports(&self, now_ms: u64) -> Option<(Batch, Vec<Option<LedgerReport>>)> {
        let margin = self.config.ledger.margin_ms;
        let round = self.config.gossip_interval_ms;
        let batch = {
            let mut sync = self.lock_sync();
            let mut candidates = self.dirty.take();
            candidates.extend(self.lapsed_holdings(now_ms));
            candidates.sort_unstable();
            candidates.dedup();
            if candidates.is_empty() {
                return None;
            }
            let guard = self.table.guard();
            let mut chosen = Vec::new();
            let mut again = Vec::new();
            for id in candidates {
                let Some(state) = self.table.get(&id, &guard) else {
                    continue;
                };
                let was_dirty = state.take_dirty();
                let spec = state.spec();
                let snap = state.ring.snapshot(&spec, now_ms);
                if !report_due(state, &snap, now_ms, round, margin) {
                    if was_dirty && state.mark_dirty() {
                        self.dirty.push(id);
                    }
                    continue;
                }
                if was_dirty && state.requeue() {
                    again.push(id);
                }
                // Where the window refuses, its owner's room is worth the spends' fine times.
                chosen.push((id, state, refused_in_window(&snap)));
            }
            self.dirty.queue_again(&again);
            if chosen.is_empty() {
                return None;
            }
            let stamp = sync.next_emission(now_ms);
            let _writer = self.lock_holdings();
            self.emission(chosen, stamp, now_ms, |h| h.report(now_ms, margin))
        };
        self.owner_heard(&batch.0, &batch.1, now_ms, |k| self.leases_here(k));
        Some(batch)
    }

    /// The node is leaving: every window that holds tokens stops spending them for good, and
    /// its register goes with a closed report of what is handed back, for the window's owner
    /// to lease again at once (rather than when the lease ends). The reports of windows this
    /// node leases go to its own books. `None` when nothing is held.
    pub fn close_holdings(&self, now_ms: u64) -> Option<(Batch, Vec<Option<LedgerReport>>)> {
        let batch = {
            let mut sync = self.lock_sync();
            let ids: Vec<_> = std::mem::take(&mut *self.lock_holding())
                .into_iter()
                .collect();
            if ids.is_empty() {
                return None;
            }
            let guard = self.table.guard();
            let stamp = sync.next_emission(now_ms);
            let _writer = self.lock_holdings();
            // Closing seals every bucket itself.
            let held = ids
                .into_iter()
                .filter_map(|id| Some((id, self.table.get(&id, &guard)?, false)));
            // Closed before the ring is read: a check racing this spent its token (and is in
            // the ring read next) or finds none.
            self.emission(held, stamp, now_ms, |h| h.close(now_ms))
        };
        self.owner_heard(&batch.0, &batch.1, now_ms, |k| self.leases_here(k));
        Some(batch)
    }

    /// The registers of `windows` at `stamp`, each with its report: what `holdings_of` says
    /// the window holds, read before its ring (see `ledger::holdings`), with the buckets it
    /// sealed where it is to seal them, sealed before the report is read (see
    /// `Holdings::try_spend`).
    fn emission<'g>(
        &self,
        windows: impl IntoIterator<Item = (KeyId, &'g WindowState, bool)>,
        stamp: (u64, HlcTimestamp),
        now_ms: u64,
        holdings_of: impl Fn(&Holdings) -> HoldingsReport,
    ) -> (Batch, Vec<Option<LedgerReport>>) {
        let mut updates = Vec::new();
        let mut reports = Vec::new();
        for (id, state, seal) in windows {
            let spec = state.spec();
            let sealed = seal.then(|| state.holdings.seal(now_ms));
            let mut holdings = holdings_of(&state.holdings);
            if let Some(sealed) = sealed {
                holdings.sealed = sealed;
            }
            let snap = state.ring.snapshot(&spec, now_ms);
            updates.push(RegisterUpdate {
                key: id,
                window_ms: spec.window_ms(),
                buckets: spec.buckets(),
                register: register_of(&snap, &spec, now_ms, stamp.0, stamp.1),
            });
            reports.push(Some(LedgerReport {
                limit: state.bound.last_limit(),
                holdings,
            }));
        }
        (
            Batch {
                origin: self.origin,
                updates,
            },
            reports,
        )
    }

    /// Windows holding a lease that lapsed since they were last reported (and forgets the
    /// windows that hold nothing any more).
    fn lapsed_holdings(&self, now_ms: u64) -> Vec<super::KeyId> {
        let margin = self.config.ledger.margin_ms;
        let guard = self.table.guard();
        let mut holding = self.lock_holding();
        let mut lapsed = Vec::new();
        holding.retain(|id| {
            let Some(state) = self.table.get(id, &guard) else {
                return false;
            };
            match state.holdings.next_lapse_ms(margin) {
                None => false,
                Some(at) => {
                    if at <= now_ms
                        && state.holdings.reported_at_ms() < at
                        && lapse_worth_reporting(state, self.config.gossip_interval_ms)
                    {
                        lapsed.push(*id);
                    }
                    true
                }
            }
        });
        lapsed
    }
}

/// Whether a lapsed lease is worth a report of its own: its unspent tokens are held at the
/// owner until the lease's end plus the window unless reported, and the window's next calm
/// report comes within [`CALM_ROUNDS`] rounds anyway. So only for windows longer than that.
fn lapse_worth_reporting(state: &WindowState, round_ms: u64) -> bool {
    state.spec().window_ms() > CALM_ROUNDS * round_ms
}

/// Whether the window refused anything of what it holds.
pub(super) fn refused_in_window(snap: &RingSnapshot) -> bool {
    let offered: u64 = snap.offered_buckets().map(|(_, c)| c).sum();
    let admitted: u64 = snap.admitted_buckets().map(|(_, c)| c).sum();
    offered > admitted
}

/// Whether a window is reported this round (see [`Limiter::collect_with_reports`]).
fn report_due(
    state: &WindowState,
    snap: &RingSnapshot,
    now_ms: u64,
    round_ms: u64,
    margin_ms: u64,
) -> bool {
    let reported = state.holdings.reported_at_ms();
    if now_ms.saturating_sub(reported) >= CALM_ROUNDS * round_ms {
        return true;
    }
    if lapse_worth_reporting(state, round_ms)
        && state
            .holdings
            .next_lapse_ms(margin_ms)
            .is_some_and(|at| at <= now_ms && reported < at)
    {
        return true;
    }
    // Refused in the current or the last bucket.
    let recent = snap.epoch.saturating_sub(1);
    let offered: u64 = snap
        .offered_buckets()
        .filter(|(e, _)| *e >= recent)
        .map(|(_, c)| c)
        .sum();
    let admitted: u64 = snap
        .admitted_buckets()
        .filter(|(e, _)| *e >= recent)
        .map(|(_, c)| c)
        .sum();
    if offered > admitted {
        return true;
    }
    // Tokens for less than two rounds of what the window is offered.
    let window_offered: u64 = snap.offered_buckets().map(|(_, c)| c).sum();
    let window_ms = state.spec().window_ms().max(1);
    let two_rounds = (window_offered * 2 * round_ms).div_ceil(window_ms);
    state.holdings.available(now_ms, margin_ms) < two_rounds.max(1)
}
