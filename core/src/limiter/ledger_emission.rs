//! A ledger user's emission: each changed register with what this node holds of the window,
//! for the window's owner.

use super::Limiter;
use super::ledger_owner::LedgerReport;
use super::replication::{Batch, RegisterUpdate, register_of};

impl Limiter {
    /// This node's registers changed since the last call (and the last call's once more, as
    /// [`Limiter::collect_changed`]), each with this node's report of its window's tokens, by
    /// the same index. Each report is read before its register's ring (see
    /// `ledger::holdings`). The reports of windows this node leases go to its own books at
    /// once. `None` when nothing changed.
    pub fn collect_with_reports(&self, now_ms: u64) -> Option<(Batch, Vec<Option<LedgerReport>>)> {
        let margin = self.config.ledger.margin_ms;
        let batch = {
            let mut sync = self.lock_sync();
            let mut all = self.dirty.take();
            all.sort_unstable();
            all.dedup();
            if all.is_empty() {
                return None;
            }
            let stamp = sync.next_emission(now_ms);
            let guard = self.table.guard();
            let _writer = self.lock_holdings();
            let mut updates = Vec::with_capacity(all.len());
            let mut reports = Vec::with_capacity(all.len());
            let mut again = Vec::new();
            for id in all {
                let Some(state) = self.table.get(&id, &guard) else {
                    continue;
                };
                if state.take_dirty() && state.requeue() {
                    again.push(id);
                }
                let holdings = state.holdings.report(now_ms, margin);
                let spec = state.spec();
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
            self.dirty.queue_again(&again);
            (
                Batch {
                    origin: self.origin,
                    updates,
                },
                reports,
            )
        };
        self.owner_heard(&batch.0, &batch.1, now_ms, |k| self.leases_here(k));
        Some(batch)
    }
}
