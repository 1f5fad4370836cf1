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
mod bound_cache;
mod decision;
mod dirty;
mod expected_size;
mod inspection;
mod key;
mod origin;
mod replication;
mod state;
mod table;

#[cfg(test)]
mod tests;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use smallvec::SmallVec;

pub use admission::{
    Inputs as AdmissionInputs, PartitionPolicy, Policy, RecentLoad, allowance, lasting_allowance,
};
pub use decision::{
    CheckError, CheckItem, CheckRequest, Decision, LimitStatus, MAX_ITEMS_PER_CHECK, MAX_KEY_BYTES,
};
pub use expected_size::ExpectedSize;
pub use inspection::{Inspection, OriginUsage};
pub use key::{KeyHasher, KeyId, KeyIdHashBuilder, Limit};
pub use origin::OriginId;
pub use replication::{Batch, MergeReport, RegisterUpdate};
pub use table::GcReport;

use self::bound_cache::BoundKey;
use self::replication::ReplicationState;
use self::state::WindowState;
use self::table::KeyTable;
use crate::crdt::Arbitration;
use crate::crdt::Hlc;
use crate::window::{Admit, AgeProfile, WindowSpec};

/// The longest `retry_after_ms` a node that is warming up gives (it cannot tell exactly when
/// its peers' state will have arrived).
const WARMING_RETRY_MS: u64 = 1_000;

/// The largest cluster size a peer's count is believed up to.
const MAX_PEERS_COUNT: usize = 1 << 16;

/// How the limiter behaves. Every field has a production default.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// Most windows held at once. Only windows that count nothing any more are evicted: one
    /// that holds quota never is (see [`TableFullPolicy`]).
    pub max_keys: usize,
    pub policy: Policy,
    pub arbitration: Arbitration,
    /// How long after this node's demand for a window starts it may not yet know its peers'
    /// demand (two summary rounds plus latency). Until then it takes at most `1/N`.
    pub onset_ms: u64,
    /// How long the largest cluster size seen is still expected (`N_expected`).
    pub expected_hold_ms: u64,
    /// How far ahead of local wall time a peer's clock stamp may be before its registers are
    /// refused.
    pub max_clock_drift_ms: u64,
    /// What a check on a new key gets while the key table is full of windows that hold quota.
    pub when_full: TableFullPolicy,
    /// Cache each window's admission bound for the current bucket, so that a check far from
    /// its limit is one load and one CAS. Decisions are the same either way (a check the cached
    /// bound cannot admit takes the exact path); off only for comparison.
    pub admission_cache: bool,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self {
            max_keys: 100_000,
            policy: Policy::default(),
            arbitration: Arbitration::default(),
            onset_ms: 500,
            expected_hold_ms: 60_000,
            max_clock_drift_ms: 10_000,
            admission_cache: true,
            when_full: TableFullPolicy::default(),
        }
    }
}

/// What a check on a key the table has no room for gets. Windows that hold quota are never
/// evicted (that would hand the quota out again), so a table can be full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableFullPolicy {
    /// Refused as over the limit, with `retry_after_ms` when the earliest window can have
    /// expired: the limit holds, and new keys wait. The default: a rate limiter that admits
    /// what it cannot count is no limiter.
    #[default]
    Deny,
    /// Refused with [`CheckError::KeyTableFull`] (gRPC RESOURCE_EXHAUSTED): the caller's own
    /// failure mode decides (Envoy's default `failure_mode_deny: false` then admits).
    Error,
}

/// Counters for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LimiterStats {
    pub keys: usize,
    pub max_keys: usize,
    pub expired_keys: u64,
    pub evicted_keys: u64,
    pub refused_table_full: u64,
}

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
    /// A clock beyond the tolerance cuts a member (or this node) off: the strict policy's
    /// scale then applies whatever the partition policy (see [`Limiter::set_clock_fenced`]).
    clock_fenced: AtomicBool,
    /// Bumped after every change of the liveness; part of every cached bound.
    liveness_generation: AtomicU32,
    /// Until this time (ms) the node does not hold the cluster's state yet and admits nothing;
    /// 0 once it does (see [`Limiter::set_warming_until`]).
    warming_until_ms: AtomicU64,
    dirty: dirty::DirtyQueue,
    sync: Mutex<ReplicationState>,
}

/// One limit's evaluation, before consuming.
struct Eval<'g> {
    id: KeyId,
    state: &'g WindowState,
    limit: Limit,
    cost: u32,
    epoch: u64,
    local_admitted: f64,
    /// Local admitted minus the current bucket: what the CAS on the current bucket adds to.
    others: f64,
    allowance: f64,
    reset_before_ms: u64,
    /// The most the current bucket may hold for the rest of the bucket (see
    /// `WindowState::bound`).
    lasting_bound: u32,
}

impl Eval<'_> {
    fn fits(&self) -> bool {
        self.local_admitted + f64::from(self.cost) <= self.allowance
    }

    /// The most the current bucket may hold after the add.
    fn max_current(&self) -> u64 {
        // `as` truncates toward zero and saturates below at 0: floor for what matters here.
        (self.allowance - self.others) as u64
    }
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
            table: KeyTable::new(config.max_keys),
            config,
            origin,
            hasher,
            live: AtomicUsize::new(1),
            expected: AtomicUsize::new(1),
            silent_origins: arc_swap::ArcSwapOption::empty(),
            clock_fenced: AtomicBool::new(false),
            liveness_generation: AtomicU32::new(0),
            warming_until_ms: AtomicU64::new(0),
            dirty: dirty::DirtyQueue::default(),
            sync: Mutex::new(sync),
        }
    }

    pub fn origin(&self) -> OriginId {
        self.origin
    }

    pub fn config(&self) -> &LimiterConfig {
        &self.config
    }

    pub fn key_id(&self, key: &[u8], spec: &WindowSpec) -> KeyId {
        self.hasher.key_id(key, spec)
    }

    /// Says whether this node, or a member, is cut off for a clock beyond
    /// `max_clock_drift_ms`. The cut-off members are also among the silent ones of
    /// [`Limiter::set_liveness`] (all of them, when it is this node's clock): that takes their
    /// demand out of the shares. This makes the scale `live / N_expected` of the `strict`
    /// policy apply even under `available`, on both sides, so that the node with the wrong
    /// clock and the others together stay within the limit.
    pub fn set_clock_fenced(&self, fenced: bool) {
        if self.clock_fenced.swap(fenced, Ordering::Relaxed) != fenced {
            self.liveness_generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether [`Limiter::set_clock_fenced`] last said someone is cut off.
    pub fn clock_fenced(&self) -> bool {
        self.clock_fenced.load(Ordering::Relaxed)
    }

    /// Live members (this node included) and `N_expected`, as last set.
    pub fn member_counts(&self) -> (usize, usize) {
        (
            self.live.load(Ordering::Relaxed),
            self.expected.load(Ordering::Relaxed),
        )
    }

    /// Tells the limiter how many members are live, this node included. Call it on every
    /// membership change and periodically, so that `N_expected` can age.
    pub fn set_members(&self, live: usize, now_ms: u64) {
        self.set_liveness(live, &[], 0, now_ms);
    }

    /// Tells the limiter how many members are live (this node included) and which members
    /// have gone silent: not heard from lately, though not yet declared down. A silent
    /// member is on the other side of a partition as far as this node can tell, so its
    /// demand leaves the shares here while the live count (and, under `strict`, this side's
    /// scale) drops. Origins that are not members at all (a crashed or restarted process)
    /// keep their demand until it lapses, one window after their last register, so that
    /// their share is handed over only as their admissions leave the window.
    ///
    /// `peers_count` is the largest number of members any peer says it counts (itself
    /// included): a member this node cannot hear at all, and that SWIM has therefore declared
    /// down here, is still expected as long as its peers count it.
    pub fn set_liveness(&self, live: usize, silent: &[OriginId], peers_count: usize, now_ms: u64) {
        let mut sync = self.lock_sync();
        let mut idx: Vec<state::OriginIdx> = silent
            .iter()
            .filter(|o| **o != self.origin)
            .map(|o| sync.intern_origin(*o, now_ms))
            .collect();
        idx.sort_unstable();
        idx.dedup();
        // Silent members are still members: `N_expected` counts them, so that a member this
        // node never hears (one-way loss) is expected all the same and this side's scale
        // shrinks, rather than the member being forgotten and its share taken.
        let members = (live.max(1) + idx.len()).max(peers_count.min(MAX_PEERS_COUNT));
        let current = self.silent_origins.load();
        let changed = current.as_deref().map_or(!idx.is_empty(), |c| *c != idx);
        if changed {
            self.silent_origins
                .store((!idx.is_empty()).then(|| std::sync::Arc::new(idx)));
        }
        self.update_liveness(&mut sync, live, members, now_ms, changed);
    }

    fn update_liveness(
        &self,
        sync: &mut ReplicationState,
        live: usize,
        members: usize,
        now_ms: u64,
        set_changed: bool,
    ) {
        sync.expected.observe(members, now_ms);
        let expected = sync.expected.expected(now_ms);
        let live = live.clamp(1, expected);
        let counts_changed = (live, expected) != self.member_counts();
        if counts_changed {
            self.live.store(live, Ordering::Relaxed);
            self.expected.store(expected, Ordering::Relaxed);
        }
        if counts_changed || set_changed {
            // After the values: a reader that sees the new generation sees the new values.
            self.liveness_generation.fetch_add(1, Ordering::Release);
        }
    }

    fn generation(&self) -> u16 {
        self.liveness_generation.load(Ordering::Acquire) as u16
    }

    pub fn stats(&self) -> LimiterStats {
        let t = &self.table.stats;
        LimiterStats {
            keys: self.table.len(),
            max_keys: self.table.max_keys(),
            expired_keys: t.expired.load(Ordering::Relaxed),
            evicted_keys: t.evicted.load(Ordering::Relaxed),
            refused_table_full: t.refused_full.load(Ordering::Relaxed),
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

    /// Decides one request. Lock-free for existing keys; nothing is consumed unless every item
    /// allows, and nothing at all on a dry run or an error.
    pub fn check(&self, req: &CheckRequest<'_>, now_ms: u64) -> Result<Decision, CheckError> {
        decision::validate(req)?;
        let warming_until = self.warming_until_ms.load(Ordering::Acquire);
        if now_ms < warming_until {
            return Ok(refused_whole(
                req,
                (warming_until - now_ms).min(WARMING_RETRY_MS),
            ));
        }
        let guard = self.table.guard();
        let result = match req.items {
            [item] => self.check_one(item, req.dry_run, now_ms, &guard),
            items => self.check_many(items, req.dry_run, now_ms, &guard),
        };
        match result {
            Err(CheckError::KeyTableFull { .. })
                if self.config.when_full == TableFullPolicy::Deny =>
            {
                let room_at = self.table.room_expected_at(now_ms);
                Ok(refused_whole(req, room_at.saturating_sub(now_ms)))
            }
            other => other,
        }
    }

    /// Several items: all are evaluated, then all consumed or none.
    fn check_many(
        &self,
        items: &[CheckItem<'_>],
        dry_run: bool,
        now_ms: u64,
        guard: &impl papaya::Guard,
    ) -> Result<Decision, CheckError> {
        let mut evals: SmallVec<[Eval<'_>; 2]> = SmallVec::new();
        for item in items {
            let id = self.hasher.key_id(item.key, &item.limit.window);
            let state = self
                .table
                .get_or_insert(id, &item.limit.window, now_ms, guard)?;
            evals.push(self.evaluate(id, state, item.limit, item.cost, now_ms));
        }
        let mut fits: SmallVec<[bool; 2]> = evals.iter().map(Eval::fits).collect();
        let allowed = if dry_run {
            fits.iter().all(|f| *f)
        } else {
            let (allowed, refused_at) = self.consume(&evals);
            if let Some(i) = refused_at {
                fits[i] = false;
            }
            for e in &evals {
                self.record(e.id, e.state, e.epoch, e.cost, allowed);
            }
            allowed
        };
        let limits = evals
            .iter()
            .zip(&fits)
            .map(|(e, fits)| self.status(e, allowed, *fits, now_ms))
            .collect();
        Ok(Decision { allowed, limits })
    }

    /// The common case, one item, without the bookkeeping of several.
    fn check_one(
        &self,
        item: &CheckItem<'_>,
        dry_run: bool,
        now_ms: u64,
        guard: &impl papaya::Guard,
    ) -> Result<Decision, CheckError> {
        let limit = &item.limit;
        let id = self.hasher.key_id(item.key, &limit.window);
        let state = self.table.get_or_insert(id, &limit.window, now_ms, guard)?;
        let caching = self.config.admission_cache && !dry_run;
        // Read before anything the bound depends on (see `set_members`).
        let bound_key = BoundKey {
            epoch: limit.window.epoch(now_ms),
            limit: limit.max,
            mode: limit.window.mode(),
            generation: self.generation(),
        };
        if caching {
            let epoch = bound_key.epoch;
            if let Some(bound) = state.bound.get(&bound_key)
                && let Admit::Admitted { now_holds } =
                    state.ring.admit(epoch, item.cost, u64::from(bound))
            {
                self.record(id, state, epoch, item.cost, true);
                let status = LimitStatus {
                    allowed: true,
                    limit: limit.max,
                    // A lower bound: the cached bound is conservative.
                    remaining: u64::from(bound - now_holds),
                    reset_after_ms: limit.window.expiry_ms(epoch).saturating_sub(now_ms),
                    retry_after_ms: 0,
                };
                return Ok(Decision {
                    allowed: true,
                    limits: smallvec::smallvec![status],
                });
            }
        }
        let seen = state.bound.seen();
        let e = self.evaluate(id, state, *limit, item.cost, now_ms);
        let allowed = if dry_run {
            e.fits()
        } else {
            let admitted = matches!(
                state.ring.admit(e.epoch, item.cost, e.max_current()),
                Admit::Admitted { .. }
            );
            self.record(id, state, e.epoch, item.cost, admitted);
            admitted
        };
        if caching {
            state.bound.store(seen, &bound_key, e.lasting_bound);
        }
        let status = self.status(&e, allowed, allowed, now_ms);
        Ok(Decision {
            allowed,
            limits: smallvec::smallvec![status],
        })
    }

    /// Counts a refusal as demand, and queues the window for the next emission.
    fn record(&self, id: KeyId, state: &WindowState, epoch: u64, cost: u32, allowed: bool) {
        if !allowed {
            state.ring.reject(epoch, cost);
            // A refusal brings the current bucket closer to a surge, which a cached bound
            // computed before it may not allow for.
            state.bound.invalidate();
        }
        if state.mark_dirty() {
            self.dirty.push(id);
        }
    }

    /// Admits on every limit or on none. Returns whether admitted and, if not, which limit
    /// refused.
    fn consume(&self, evals: &[Eval<'_>]) -> (bool, Option<usize>) {
        for (i, e) in evals.iter().enumerate() {
            if let Admit::Refused { .. } = e.state.ring.admit(e.epoch, e.cost, e.max_current()) {
                for done in &evals[..i] {
                    done.state.ring.refund(done.epoch, done.cost);
                }
                return (false, Some(i));
            }
        }
        (true, None)
    }

    fn evaluate<'g>(
        &self,
        id: KeyId,
        state: &'g WindowState,
        limit: Limit,
        cost: u32,
        now_ms: u64,
    ) -> Eval<'g> {
        let spec = &limit.window;
        // The recent span is as long as the onset period (at least the current bucket).
        let buckets = u64::from(spec.buckets());
        let recent_span = self
            .config
            .onset_ms
            .div_ceil(spec.bucket_ms())
            .clamp(1, buckets);
        let local = state.ring.usage(spec, now_ms, recent_span as usize);
        let silent = self.silent_origins.load();
        let remote = state.remote_scalars(spec, now_ms, silent.as_deref().map(Vec::as_slice));
        // Demand started recently if the oldest bucket with traffic is young (until one bucket
        // plus `onset_ms` after it began, peers' demand may not have been heard yet), or if it
        // surged: peers may be surging too, unheard.
        // Rates are compared over the time this node has had traffic in the window: a ramp
        // from idle is the young case below, not a surge.
        let active_span = local
            .oldest_active_age
            .map_or(0, |age| age.min(buckets - 1) + 1);
        let recent_load = RecentLoad {
            current: local.current_offered,
            recent: local.recent_offered,
            older: local.older_offered,
            recent_span,
            older_span: active_span.saturating_sub(recent_span),
        };
        let surging = recent_load.surging();
        let onset = surging
            || local.oldest_active_age.is_none_or(|age| {
                let first = spec.epoch_start_ms(local.epoch.saturating_sub(age) + 1);
                now_ms < first.saturating_add(self.config.onset_ms)
            });
        let (live, expected) = self.member_counts();
        let inputs = admission::Inputs {
            limit: f64::from(limit.max),
            cost: f64::from(cost),
            local_admitted: local.admitted,
            local_offered: local.offered,
            remote_admitted: remote.admitted,
            remote_demand: remote.demand as f64,
            onset,
            live,
            expected,
            force_strict: self.clock_fenced.load(Ordering::Relaxed),
        };
        // For the rest of this bucket: the smallest cost, and only the offered load that cannot
        // fade before the bucket ends.
        let lasting_inputs = admission::Inputs {
            cost: 1.0,
            local_offered: local.offered - local.straddle_offered,
            ..inputs
        };
        let others = local.admitted - f64::from(local.current);
        let mut lasting =
            admission::lasting_allowance(self.config.policy, &lasting_inputs) - others;
        if !surging && let Some(room) = recent_load.current_room() {
            // The bound holds for the rest of the bucket only while the load does not surge:
            // it may not let the current bucket's offered load (refusals included) pass the
            // surge threshold.
            let refused = local.current_offered - u64::from(local.current);
            lasting = lasting.min(room - refused as f64);
        }
        let newest_age = match (local.newest_admitted_age, remote.newest_admitted_age) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Eval {
            id,
            state,
            limit,
            cost,
            epoch: local.epoch,
            local_admitted: local.admitted,
            others,
            allowance: admission::allowance(self.config.policy, &inputs),
            reset_before_ms: newest_age.map_or(0, |age| {
                spec.expiry_ms(local.epoch - age).saturating_sub(now_ms)
            }),
            // Saturating conversion: negative → 0, beyond u32 → u32::MAX.
            lasting_bound: lasting as u32,
        }
    }

    fn status(&self, e: &Eval<'_>, decision_allowed: bool, fits: bool, now_ms: u64) -> LimitStatus {
        let spec = &e.limit.window;
        let consumed = if decision_allowed {
            f64::from(e.cost)
        } else {
            0.0
        };
        let remaining = (e.allowance - e.local_admitted - consumed) as u64;
        let reset_after_ms = if decision_allowed {
            e.reset_before_ms
                .max(spec.expiry_ms(e.epoch).saturating_sub(now_ms))
        } else {
            e.reset_before_ms
        };
        let retry_after_ms = if decision_allowed || fits {
            0
        } else {
            self.retry_after(e, now_ms)
        };
        LimitStatus {
            allowed: fits,
            limit: e.limit.max,
            remaining,
            reset_after_ms,
            retry_after_ms,
        }
    }

    /// How long until a request of `cost` could fit, assuming no more admissions anywhere and
    /// the same allowance. The slow path: only refusals get here.
    fn retry_after(&self, e: &Eval<'_>, now_ms: u64) -> u64 {
        let spec = &e.limit.window;
        let local = e.state.ring.snapshot(spec, now_ms).admitted;
        let mut global = AgeProfile::new(spec);
        global.absorb(&local);
        global.absorb(&e.state.remote_usage(spec, now_ms).admitted);
        let cost = f64::from(e.cost);
        let local_target = (e.allowance - cost).max(0.0);
        let global_target = f64::from(e.limit.max) - cost;
        let never = spec.window_ms() + spec.bucket_ms();
        let local_wait = local
            .drain_time_ms(spec, now_ms, local_target)
            .unwrap_or(never);
        let global_wait = global
            .drain_time_ms(spec, now_ms, global_target)
            .unwrap_or(never);
        local_wait.max(global_wait).max(1)
    }

    fn lock_sync(&self) -> std::sync::MutexGuard<'_, ReplicationState> {
        self.sync.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes idle windows and stale remote registers; at most `budget` keys are examined.
    pub fn gc(&self, now_ms: u64, budget: usize) -> GcReport {
        let _writer = self.lock_sync();
        let guard = self.table.guard();
        self.table.collect_garbage(now_ms, budget, &guard)
    }
}

/// A request refused whole without being evaluated (a full table under
/// [`TableFullPolicy::Deny`], or a node still warming up): nothing consumed or counted, every
/// item told to retry after `retry_after_ms`.
fn refused_whole(req: &CheckRequest<'_>, retry_after_ms: u64) -> Decision {
    let retry_after_ms = retry_after_ms.max(1);
    let limits = req
        .items
        .iter()
        .map(|item| LimitStatus {
            allowed: false,
            limit: item.limit.max,
            remaining: 0,
            reset_after_ms: retry_after_ms,
            retry_after_ms,
        })
        .collect();
    Decision {
        allowed: false,
        limits,
    }
}
