//! Deciding a request: every limit evaluated, then all consumed or none. Lock-free for keys
//! the table holds; the cached bound serves most checks with one load and one CAS.

use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::bound_cache::BoundKey;
use super::decision::{self, CheckError, CheckItem, CheckRequest, Decision, LimitStatus};
use super::state::WindowState;
use super::{KeyId, Limit, Limiter, RecentLoad, TableFullPolicy, WARMING_RETRY_MS, admission};
use crate::window::{Admit, AgeProfile};

/// One limit's evaluation, before consuming.
pub(super) struct Eval<'g> {
    id: KeyId,
    state: &'g WindowState,
    limit: Limit,
    cost: u32,
    epoch: u64,
    local_admitted: f64,
    /// Local admitted minus the current bucket: what the CAS on the current bucket adds to.
    others: f64,
    pub(super) allowance: f64,
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
    /// Decides one request. Lock-free for existing keys; nothing is consumed unless every item
    /// allows, and nothing at all on a dry run or an error.
    pub fn check(&self, req: &CheckRequest<'_>, now_ms: u64) -> Result<Decision, CheckError> {
        self.check_counting(req, now_ms, false)
    }

    /// [`Limiter::check`], or [`Limiter::check_again`] if `again`.
    pub(super) fn check_counting(
        &self,
        req: &CheckRequest<'_>,
        now_ms: u64,
        again: bool,
    ) -> Result<Decision, CheckError> {
        decision::validate(req)?;
        let warming_until = self.warming_until_ms.load(Ordering::Acquire);
        if now_ms < warming_until {
            return Ok(decision::refused_whole(
                req,
                (warming_until - now_ms).min(WARMING_RETRY_MS),
            ));
        }
        let guard = self.table.guard();
        let result = match req.items {
            i if self.is_ledger() => self.check_ledger(i, req.dry_run, again, now_ms, &guard),
            [item] => self.check_one(item, req.dry_run, now_ms, &guard),
            items => self.check_many(items, req.dry_run, now_ms, &guard),
        };
        match result {
            Err(CheckError::KeyTableFull { .. })
                if self.config.when_full == TableFullPolicy::Deny =>
            {
                let room_at = self.table.room_expected_at(now_ms);
                Ok(decision::refused_whole(req, room_at.saturating_sub(now_ms)))
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
            if !dry_run {
                // What `Limiter::contended` knows of the window's limit, where nothing is
                // cached.
                state.bound.note_limit(item.limit.max);
            }
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
        Ok(Decision {
            allowed,
            limits,
            needs: SmallVec::new(),
        })
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
                    needs: SmallVec::new(),
                });
            }
        }
        if !caching && !dry_run {
            // What `Limiter::contended` knows of the window's limit (a stored bound says it).
            state.bound.note_limit(limit.max);
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
        // Not for a blind window (`blind.rs`): its cap depends on whether the others' demand
        // has lapsed, which happens within a bucket and would tighten the bound.
        if caching && !self.is_blind(id) {
            state.bound.store(seen, &bound_key, e.lasting_bound);
        }
        let status = self.status(&e, allowed, allowed, now_ms);
        Ok(Decision {
            allowed,
            limits: smallvec::smallvec![status],
            needs: SmallVec::new(),
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

    pub(super) fn evaluate<'g>(
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
        let (silent, held) = (self.silent_origins.load(), self.held_origins.load());
        let remote = state.remote_scalars(
            spec,
            now_ms,
            silent.as_deref().map(Vec::as_slice),
            held.as_deref().map(Vec::as_slice),
        );
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
            margin_cap: f64::from(limit.max) / 10.0,
        };
        let surging = recent_load.surging();
        let young = local.oldest_active_age.is_none_or(|age| {
            let first = spec.epoch_start_ms(local.epoch.saturating_sub(age) + 1);
            now_ms < first.saturating_add(self.config.onset_ms)
        });
        // Young by the window's buckets alone is not new: sparse traffic (5 requests a
        // window) often leaves the older half of a window empty, and peers have this node's
        // demand from before the gap. Traffic that lasted past its onset stays established
        // until a window with none (`WindowState::published_demand` forgets it then). Without
        // this, keys offered half their limit would be refused at the onset share of `1/N`
        // (`keys_offered_half_their_limit_are_seldom_refused`, `sim/tests/fleet.rs`).
        if !young {
            state.establish();
        }
        // A blind window (registers unanswered, `blind.rs`) of which this node knows no other
        // user's demand is capped as an onset is: it cannot tell who else uses it. Where it
        // does know of some (an owner's last sum, which lasts a window), the share follows
        // those, as it does while SWIM finds a crashed owner out.
        let blind = remote.demand == 0 && self.is_blind(id);
        let onset = surging || (young && !state.established(local.active)) || blind;
        let (live, expected) = self.member_counts();
        // The credit relies on the others' shares being current. Without a register or sum
        // for the window in the last quarter of a window (a node that stopped hearing from the
        // window's owner: a partition starting), none; through an owner, none for two windows
        // (at most 10 s) after a heal either (`admission::credit_settled`). Currency lapses as
        // time passes and the hold ends, so a bound stored for the rest of the bucket takes
        // currency at the bucket's end and the hold as it is now: either way no more credit
        // than the exact path gives. (A hold begins with new member counts, which bump the
        // liveness generation and so drop every stored bound.)
        let from_sum = remote.sum_emission_ms.is_some();
        let settled = !from_sum
            || admission::credit_settled(
                self.back_in_sight_ms.load(Ordering::Relaxed),
                now_ms,
                spec.window_ms(),
            );
        let credit_until = |at_ms: u64| {
            if settled
                && admission::remote_current(remote.newest_emission_ms, at_ms, spec.window_ms())
            {
                admission::whole_request_credit(from_sum, self.config.credit_from_sums)
            } else {
                0.0
            }
        };
        let inputs = admission::Inputs {
            limit: f64::from(limit.max),
            cost: f64::from(cost),
            local_admitted: local.admitted,
            local_offered: local.offered,
            published_demand: state
                .counted_demand(local.active, remote.sum_emission_ms)
                .map(f64::from),
            credit: credit_until(now_ms),
            remote_admitted: remote.admitted,
            remote_demand: remote.demand as f64,
            onset,
            live,
            expected,
            force_strict: self.clock_fenced.load(Ordering::Relaxed),
            silent_members: silent.is_some(),
        };
        // For the rest of this bucket: the smallest cost, and only the offered load that cannot
        // fade before the bucket ends.
        let lasting_inputs = admission::Inputs {
            cost: 1.0,
            local_offered: local.offered - local.straddle_offered,
            // Only if it lasts until the bucket ends.
            credit: credit_until(spec.epoch_start_ms(local.epoch + 1)),
            ..inputs
        };
        let others = local.admitted - f64::from(local.current);
        let mut lasting_allowance =
            admission::lasting_allowance(self.config.policy, &lasting_inputs);
        if onset && lasting_inputs.published_demand.is_some() {
            // Onset can end within the bucket, and with it the fresh demand gives way to the
            // published one, which may be smaller: the bound must hold either way.
            let after = admission::Inputs {
                onset: false,
                ..lasting_inputs
            };
            lasting_allowance =
                lasting_allowance.min(admission::lasting_allowance(self.config.policy, &after));
        }
        let mut lasting = lasting_allowance - others;
        if !surging && let Some(room) = recent_load.current_room() {
            // The bound holds for the rest of the bucket only while the load does not surge:
            // it may not let the current bucket's offered load (refusals included) pass the
            // surge threshold.
            let refused = local.current_offered - u64::from(local.current);
            lasting = lasting.min(room - refused as f64);
        }
        let mut allowance = admission::allowance(self.config.policy, &inputs);
        // Known only from the last stop: nothing more until its owner confirms it (`blind.rs`).
        if self.is_unconfirmed(id) {
            (allowance, lasting) = (allowance.min(local.admitted), 0.0);
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
            allowance,
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
}
