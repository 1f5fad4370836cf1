//! Rules → keys → decisions: the limiter a node consults for every request.
//!
//! A check names a key and one or more limits. Each (key, limit window) is one window state
//! in the key table, found by [`KeyId`]. The decision reads the local ring and the remote
//! registers of each window without taking a lock, computes this node's allowance
//! ([`allowance`]), and consumes with one CAS per limit: all limits or none.
//!
//! Most checks are far from their limit. For those, each window caches the most its current
//! bucket may hold until the bucket ends (`WindowState::bound`), and a check is one load and
//! one CAS. A check the cached bound cannot admit takes the exact path, so the cache never
//! changes a decision.
//!
//! The cluster side ([`Limiter::collect_changed`], [`Limiter::merge`], …) lives in
//! `replication.rs`; it is the only writer of remote state and takes one lock, never on the
//! check path. `inspection.rs` explains a window. The invariants are in `ALGORITHM.md` (§2–§6).

mod admission;
mod aggregation;
mod blind;
mod bound_cache;
mod check;
mod config;
mod decision;
mod dirty;
mod expected_size;
mod inspection;
mod key;
mod ledger_answer;
mod ledger_asks;
mod ledger_emission;
mod ledger_handoff;
mod ledger_owner;
mod ledger_user;
mod liveness;
mod merge_report;
mod origin;
mod own_demand;
mod owner_view;
mod replication;
mod state;
mod table;

#[cfg(test)]
mod tests;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

pub use admission::{
    Inputs as AdmissionInputs, MAX_CREDIT_FROM_SUMS, PartitionPolicy, Policy, RecentLoad,
    allowance, lasting_allowance,
};
pub use aggregation::AggregateStamp;
pub use config::{LedgerTiming, LimiterConfig, LimiterStats, TableFullPolicy};
pub use decision::{
    CheckError, CheckItem, CheckRequest, Decision, LimitStatus, MAX_ITEMS_PER_CHECK, MAX_KEY_BYTES,
};
pub use expected_size::ExpectedSize;
pub use inspection::{Inspection, OriginUsage};
pub use key::{IdHashBuilder, KeyHasher, KeyId, KeyIdHashBuilder, Limit, seed_id_hashes};
pub use ledger_owner::{LeaseGrant, LedgerReport};
pub use ledger_user::TokenNeed;
pub use origin::OriginId;
pub use owner_view::{OwnerOf, OwnerView};
pub use replication::{Batch, MergeReport, RegisterUpdate};
pub use table::GcReport;

use self::replication::ReplicationState;
use self::table::KeyTable;
use crate::crdt::Hlc;
use crate::window::WindowSpec;

/// The longest `retry_after_ms` a node that is warming up gives (it cannot tell exactly when
/// its peers' state will have arrived).
const WARMING_RETRY_MS: u64 = 1_000;

/// The largest cluster size a peer's count is believed up to.
const MAX_PEERS_COUNT: usize = 1 << 16;

/// The per-node limiter. Cheap to share: every method takes `&self`.
#[derive(Debug)]
pub struct Limiter {
    config: LimiterConfig,
    origin: OriginId,
    hasher: KeyHasher,
    table: KeyTable,
    live: AtomicUsize,
    expected: AtomicUsize,
    /// Members that have gone silent (sorted): their demand is left out of shares.
    silent_origins: arc_swap::ArcSwapOption<Vec<state::OriginIdx>>,
    /// Members no longer heard from but not down (sorted): their demand is held, their
    /// registers kept (see [`Limiter::set_held`]).
    held_origins: arc_swap::ArcSwapOption<Vec<state::OriginIdx>>,
    /// A clock beyond the tolerance cuts a member (or this node) off: the strict policy's
    /// scale then applies whatever the partition policy (see [`Limiter::set_clock_fenced`]).
    clock_fenced: AtomicBool,
    /// Windows this node uses and hears nothing of (sorted; see [`Limiter::set_blind`]).
    blind_windows: arc_swap::ArcSwapOption<Vec<KeyId>>,
    /// Windows known only from the last stop, sorted: see [`Limiter::set_unconfirmed`].
    unconfirmed_windows: arc_swap::ArcSwapOption<Vec<KeyId>>,
    /// Bumped after every change of the liveness; part of every cached bound.
    liveness_generation: AtomicU32,
    /// When members last came back in sight (ms; 0: never out of sight): a heal. For a window
    /// after it no whole-request credit is given (see [`admission::credit_settled`]).
    back_in_sight_ms: AtomicU64,
    /// The largest `N_e` at which this node has seen every expected member live: coming back
    /// in sight at a size seen whole before is a heal; reaching a new size is a cluster
    /// forming or growing, where nobody held a side's part.
    whole_expected: AtomicUsize,
    /// Until this time (ms) the node does not hold the cluster's state yet and admits nothing;
    /// 0 once it does (see [`Limiter::set_warming_until`]).
    warming_until_ms: AtomicU64,
    /// Since when this process has counted what it is offered (ms; 0: since ever). A window
    /// younger than that here saw only part of its span (see [`Limiter::start_observing`]).
    observing_since_ms: AtomicU64,
    dirty: dirty::DirtyQueue,
    sync: Mutex<ReplicationState>,
    /// Under the ledger: the books of the windows this node leases.
    owned: Mutex<ledger_owner::OwnedWindows>,
    /// Under the ledger: who owns which window, in the node's view (none: this node alone).
    owner_view: arc_swap::ArcSwapOption<owner_view::OwnerViewBox>,
    /// Serialises the writers of every window's holdings (grants, reports, asks answered here).
    holdings_write: Mutex<()>,
    /// Windows that hold leases, so that one that lapses is reported though nothing changed.
    holding: Mutex<std::collections::BTreeSet<KeyId>>,
}

impl Limiter {
    /// A limiter for the node process `origin`, naming windows with `hasher`.
    ///
    /// [`Limiter::collect_changed`] must be called periodically (the gossip loop does): it
    /// drains the queue of windows changed since the last emission.
    pub fn new(config: LimiterConfig, origin: OriginId, hasher: KeyHasher) -> Self {
        let sync = ReplicationState::new(
            Hlc::new(config.max_clock_drift_ms),
            ExpectedSize::new(config.expected_hold_ms),
        );
        Self {
            table: KeyTable::new(config.max_keys, config.ledger.margin_ms),
            config,
            origin,
            hasher,
            live: AtomicUsize::new(1),
            expected: AtomicUsize::new(1),
            silent_origins: arc_swap::ArcSwapOption::empty(),
            held_origins: arc_swap::ArcSwapOption::empty(),
            clock_fenced: AtomicBool::new(false),
            blind_windows: arc_swap::ArcSwapOption::empty(),
            unconfirmed_windows: arc_swap::ArcSwapOption::empty(),
            liveness_generation: AtomicU32::new(0),
            back_in_sight_ms: AtomicU64::new(0),
            whole_expected: AtomicUsize::new(1),
            warming_until_ms: AtomicU64::new(0),
            observing_since_ms: AtomicU64::new(0),
            dirty: dirty::DirtyQueue::default(),
            sync: Mutex::new(sync),
            owned: Mutex::default(),
            owner_view: arc_swap::ArcSwapOption::empty(),
            holdings_write: Mutex::new(()),
            holding: Mutex::default(),
        }
    }

    pub fn origin(&self) -> OriginId {
        self.origin
    }

    pub fn config(&self) -> &LimiterConfig {
        &self.config
    }

    /// How long a window's remote information may go unheard before its senders count as out
    /// of hearing, where an owner's sum comes every round and where only registers come: one
    /// round and a quarter, and two and a quarter (at an owner, a minor part of the demand
    /// comes every other round); never less than half the onset period (a round and a
    /// latency, as configured).
    pub(crate) fn hearing_bounds_ms(&self) -> (u64, u64) {
        let round = self.config.gossip_interval_ms;
        let floor = self.config.onset_ms / 2;
        (
            (round + round / 4).max(floor),
            (2 * round + round / 4).max(floor),
        )
    }

    pub fn key_id(&self, key: &[u8], spec: &WindowSpec) -> KeyId {
        self.hasher.key_id(key, spec)
    }

    pub fn stats(&self) -> LimiterStats {
        let t = &self.table.stats;
        LimiterStats {
            keys: self.table.len(),
            max_keys: self.table.max_keys(),
            expired_keys: t.expired.load(Ordering::Relaxed),
            evicted_keys: t.evicted.load(Ordering::Relaxed),
            refused_table_full: t.refused_full.load(Ordering::Relaxed),
            blind_windows: self.blind_windows.load().as_deref().map_or(0, Vec::len),
        }
    }

    /// Marks the node as not yet holding the cluster's state: until `until_ms`, or until
    /// called again with 0, every check is refused (nothing is consumed or counted), with
    /// `retry_after_ms` pointing at `until_ms` (at most a second ahead). A node that has just
    /// started, and has peers, knows nothing of what they admitted: admitting as if the
    /// cluster were empty would hand out again a day's quota that was used before the restart.
    pub fn set_warming_until(&self, until_ms: u64) {
        self.warming_until_ms.store(until_ms, Ordering::Release);
    }

    /// Whether this node holds window `id` (its own traffic, or registers or sums of it).
    pub fn holds(&self, id: &KeyId) -> bool {
        let guard = self.table.guard();
        self.table.get(id, &guard).is_some()
    }

    /// This process counts what it is offered from `now_ms` on: it started, or its warm-up
    /// ended (a warming node refuses without counting). For a window's first span after that,
    /// the demand it publishes is what it was offered scaled to the whole window
    /// (`own_demand::whole_window_demand`): what it was offered before, it never saw, which is
    /// not the same as nothing. Without this, a restarted node published a fraction of its
    /// demand for a window, while the demand of its previous process lapsed; its peers took
    /// the difference, and its window over-admitted as it caught up. Never called: no scaling.
    pub fn start_observing(&self, now_ms: u64) {
        self.observing_since_ms.store(now_ms, Ordering::Relaxed);
    }

    /// How long this process has counted what it is offered, at `now_ms`.
    fn observed_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.observing_since_ms.load(Ordering::Relaxed))
    }

    /// Whether decisions are made under the ledger ([`Policy::Ledger`]).
    pub fn is_ledger(&self) -> bool {
        matches!(self.config.policy, Policy::Ledger(_))
    }

    /// The spend clock of a window of `spec` (`ledger::SpendClock`): it keeps the buckets
    /// between two reports of a busy window (one a round), the current one and one more.
    fn clock_shape(&self, spec: &crate::window::WindowSpec) -> crate::ledger::ClockShape {
        let bucket_ms = spec.bucket_ms().max(1);
        crate::ledger::ClockShape {
            bucket_ms,
            buckets: (self.config.gossip_interval_ms.div_ceil(bucket_ms) + 2).min(16),
        }
    }

    fn lock_holding(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<KeyId>> {
        self.holding.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_holdings(&self) -> std::sync::MutexGuard<'_, ()> {
        self.holdings_write
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn lock_sync(&self) -> std::sync::MutexGuard<'_, ReplicationState> {
        self.sync.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes idle windows and stale remote registers; at most `budget` keys are examined.
    pub fn gc(&self, now_ms: u64, budget: usize) -> GcReport {
        let _writer = self.lock_sync();
        let guard = self.table.guard();
        self.table
            .collect_garbage(now_ms, budget, |idx| self.is_held(idx), &guard)
    }
}
