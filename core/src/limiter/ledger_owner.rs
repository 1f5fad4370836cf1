//! The owner's side of the ledger in the limiter: the books of the windows this node owns,
//! fed by its users' reports, granting leases at each round and answering asks.
//!
//! Which windows this node owns, and since when it may lease for them, is the node's to say
//! (it holds the ring of members): through [`OwnerView`] for checks that find no token, and
//! through the `owns` argument of the methods the node calls.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use super::replication::Batch;
use super::state::{WindowState, is_aggregate};
use super::{KeyId, Limiter, OwnerOf};
use crate::ledger::tuning::LEASE_QUANTILE;
use crate::ledger::{
    Books, Cover, HandedBooks, Heard, HeldLease, HoldingsReport, Lease, LedgerParams, Renewal,
    Span, SpendMarks, SpendTally, cover_targets, cut_near_cushions, poisson_quantile,
    spend_tail_ms,
};
use crate::window::{EstimateMode, WindowSpec};

/// How this node's own spends are named in a window's [`SpendMarks`] (others by their origin
/// index, below 2^32).
const OWN_MARKS: u64 = u64::MAX;

/// What a user's emission carries for its window's owner besides the register.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerReport {
    /// The window's limit by this node's rules.
    pub limit: u32,
    pub holdings: HoldingsReport,
}

/// A message of a user's lease, to send it (or, for this node, to take at once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    pub user: u128,
    pub key: KeyId,
    pub window_ms: u64,
    pub buckets: u16,
    pub lease: Lease,
}

/// The books of the windows this node owns.
#[derive(Debug, Default)]
pub(crate) struct OwnedWindows {
    pub(super) windows: BTreeMap<KeyId, Owned>,
    /// Books leaving owners handed this node, by window, with who handed each
    /// (`ledger_handoff.rs`): kept until the last slot they hold frees, whether or not this
    /// node owns the window yet.
    pub(super) handed: BTreeMap<KeyId, Vec<(u128, HandedBooks)>>,
    /// Steps of all the books in `handed`.
    pub(super) handed_steps: usize,
    /// The node handed its books over (it is leaving): it leases nothing more.
    pub(super) sealed: bool,
}

#[derive(Debug)]
pub(super) struct Owned {
    pub(super) books: Books,
    pub(super) spec: WindowSpec,
    /// The buckets the users sealed, by fine slot.
    pub(super) marks: SpendMarks,
}

impl Owned {
    pub(super) fn new(me: u128, spec: WindowSpec) -> Self {
        Self {
            books: Books::new(me),
            spec,
            marks: SpendMarks::default(),
        }
    }
}

/// The buckets whose sealed counts an owner keeps at `now_ms`: those a sliding window can
/// still hold, on any clock within a bucket of this one.
fn marked_epochs(spec: &WindowSpec, now_ms: u64) -> std::ops::RangeInclusive<u64> {
    let newest = spec.epoch(now_ms) + 1;
    newest.saturating_sub(u64::from(spec.buckets()) + 2)..=newest
}

impl Limiter {
    /// The parameters of `spec`'s ledger under `limit`.
    pub(super) fn ledger_params(
        &self,
        spec: &WindowSpec,
        limit: u32,
        owner: &OwnerOf,
    ) -> LedgerParams {
        let timing = &self.config.ledger;
        let (seen, expected) = self.lease_part();
        LedgerParams {
            limit: (u128::from(limit) * u128::from(seen.min(expected))
                / u128::from(expected.max(1))) as u64,
            window_ms: spec.window_ms(),
            lease_ms: timing.lease_ms,
            round_ms: self.config.gossip_interval_ms,
            margin_ms: timing.margin_ms,
            start_step_ms: timing.start_step_ms,
            horizon_ms: timing.lease_ms,
            quiet_until_ms: owner.leases_from_ms(spec.window_ms(), timing.margin_ms),
        }
    }

    /// Every spend the window's registers record (this node's ring and every origin's
    /// register), each until the latest moment it can occupy a sliding window: the end of its
    /// fine slot where its user sealed its bucket (`marks`; the sealed counts hold every spend
    /// of that user's bucket), else its bucket's end; plus the window and twice the clock
    /// margin ([`CLOCK_MARGIN_MS`](crate::ledger::tuning::CLOCK_MARGIN_MS)).
    pub(super) fn spends_of(
        &self,
        state: &WindowState,
        spec: &WindowSpec,
        marks: &SpendMarks,
        now_ms: u64,
    ) -> Vec<Span> {
        let tail = spend_tail_ms(spec.window_ms(), self.config.ledger.margin_ms);
        let bucket_ms = spec.bucket_ms();
        // A bucket older than this has left every window, with its tail, by now; the marks
        // reach a bucket past now (`marked_epochs`), a register as far as its clock is ahead.
        let oldest = spec.epoch(now_ms.saturating_sub(tail));
        let mut tally = SpendTally::new(oldest, *marked_epochs(spec, now_ms).end(), bucket_ms);
        // A bucket its user sealed is counted from the marks below, not from the register.
        let mut add = |origin: u64, buckets: &mut dyn Iterator<Item = (u64, u64)>| {
            // Ascending (the marks are ordered by user, then epoch).
            let sealed: SmallVec<[u64; 16]> = marks.epochs_of(origin).collect();
            for (epoch, count) in buckets.filter(|(e, _)| *e >= oldest) {
                if sealed.binary_search(&epoch).is_err() {
                    tally.add_bucket(epoch, count);
                }
            }
        };
        let snapshot = state.ring.snapshot(spec, now_ms);
        add(OWN_MARKS, &mut snapshot.admitted_buckets());
        if let Some(replica) = state.remote.load_full() {
            for (idx, reg) in replica.iter() {
                if !is_aggregate(idx) && reg.newest_epoch >= oldest {
                    add(u64::from(idx), &mut reg.buckets());
                }
            }
        }
        for (_, epoch, counts) in marks.iter() {
            for (j, c) in counts.iter().enumerate() {
                tally.add_slot(epoch, j, u64::from(*c));
            }
        }
        tally.spans(tail, now_ms)
    }

    pub(super) fn lock_owned(&self) -> std::sync::MutexGuard<'_, OwnedWindows> {
        self.owned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `user`'s reports of an emission (`batch`, and `reports` by the same index), for the
    /// windows this node leases (`owns`). A report counts only with a register of its
    /// emission or a later one held here: what it does not list as unspent, the register
    /// must show spent.
    pub fn owner_heard(
        &self,
        batch: &Batch,
        reports: &[Option<LedgerReport>],
        now_ms: u64,
        owns: impl Fn(KeyId) -> Option<OwnerOf>,
    ) {
        let user = batch.origin;
        let guard = self.table.guard();
        let idx = if user == self.origin {
            None
        } else {
            match self.lock_sync().lookup_origin(user) {
                Some(idx) => Some(idx),
                None => return,
            }
        };
        let mut owned = self.lock_owned();
        for (update, report) in batch.updates.iter().zip(reports) {
            let (Some(report), Some(_)) = (report, owns(update.key)) else {
                continue;
            };
            let Some(state) = self.table.get(&update.key, &guard) else {
                continue;
            };
            let backed = match idx {
                None => true,
                Some(idx) => state
                    .remote
                    .load()
                    .as_ref()
                    .and_then(|r| r.get(idx).map(|reg| reg.version))
                    .is_some_and(|v| v >= update.register.version),
            };
            if !backed {
                continue;
            }
            let spec = state.spec();
            let entry = owned
                .windows
                .entry(update.key)
                .or_insert_with(|| Owned::new(self.origin.0, spec));
            let epochs = marked_epochs(&spec, now_ms);
            entry.marks.forget_before(*epochs.start());
            let named = idx.map_or(OWN_MARKS, u64::from);
            entry.marks.heard(named, &report.holdings.sealed, epochs);

            entry.books.heard(
                user.0,
                update.register.version,
                Heard {
                    report: report.holdings.clone(),
                    demand: update.register.demand,
                    limit: report.limit,
                },
                now_ms,
            );
        }
    }

    /// A round's renewals for every window this node leases. Each user heard from within a
    /// calm lease is renewed: it wants what covers its demand over a lease
    /// ([`LEASE_QUANTILE`]), less what it holds; a lease that would end within two rounds is
    /// moved a lease on. A calm window (see [`CALM_ROUNDS`])
    /// is leased for that many rounds and one more; a busy one for
    /// [`LedgerTiming::lease_ms`].
    ///
    /// [`CALM_ROUNDS`]: crate::ledger::tuning::CALM_ROUNDS
    /// [`LedgerTiming::lease_ms`]: super::LedgerTiming
    /// `leases(key)`: whether this node leases the window, and from when (see
    /// [`OwnerOf`]).
    pub fn owner_round(
        &self,
        now_ms: u64,
        leases: impl Fn(KeyId) -> Option<OwnerOf>,
    ) -> Vec<LeaseGrant> {
        let guard = self.table.guard();
        let mut owned = self.lock_owned();
        let round = self.config.gossip_interval_ms;
        let calm_lease_ms = crate::ledger::tuning::longest_lease_ms(round);
        let mut out = Vec::new();
        let OwnedWindows {
            windows,
            handed,
            handed_steps,
            sealed,
        } = &mut *owned;
        handed.retain(|_, books| {
            books.retain(|(_, b)| {
                let keep = b.until_ms() > now_ms;
                if !keep {
                    *handed_steps -= b.steps.len();
                }
                keep
            });
            !books.is_empty()
        });
        if *sealed {
            return out;
        }
        windows.retain(|key, w| {
            let Some(owner) = leases(*key) else {
                return false;
            };
            // A user's demand is its count over the window when it reported: until a window
            // has passed since, nothing says it fell (a user reports when it is offered
            // anything), so it is renewed that long, and its books kept a calm lease more.
            let active_since = now_ms.saturating_sub(calm_lease_ms.max(w.spec.window_ms()));
            let kept_since = active_since.saturating_sub(calm_lease_ms);
            w.books.forget_idle(kept_since);
            let Some(state) = self.table.get(key, &guard) else {
                return !w.books.is_empty();
            };
            let Some(limit) = w.books.limit(kept_since) else {
                return !w.books.is_empty();
            };
            // Each user with its demand and its request size.
            let demands: Vec<(u128, u32, u64)> = w
                .books
                .demands(active_since)
                .map(|(u, d)| (u, d, w.books.cost_of(u)))
                .collect();
            if demands.is_empty() {
                return true;
            }
            w.marks
                .forget_before(*marked_epochs(&w.spec, now_ms).start());
            let mut spends = self.spends_of(state, &w.spec, &w.marks, now_ms);
            self.add_handed(&mut spends, handed.get(key), &w.spec, owner.handed_by);
            let mut params = self.ledger_params(&w.spec, limit, &owner);
            let window_ms = w.spec.window_ms() as f64;
            // What a user is expected to be offered over `lease_ms`: its count over the window,
            // scaled; and the tokens that cover it with LEASE_QUANTILE.
            let expected =
                |demand: u32, lease_ms: u64| f64::from(demand) * lease_ms as f64 / window_ms;
            // Requests come in units of the user's request size: the cover counts requests.
            let cover = |demand: u32, cost: u64, lease_ms: u64| {
                cost * poisson_quantile(expected(demand, lease_ms) / cost as f64, LEASE_QUANTILE)
            };
            // Calm: what is taken, with every user covered over a calm lease, is at most half
            // the limit.
            let calm_end = params.tail_of(now_ms + calm_lease_ms);
            let taken = w
                .books
                .occupancy(&spends, now_ms, &params)
                .peak(now_ms, calm_end);
            let calm_cover: u64 = demands
                .iter()
                .map(|(_, d, c)| cover(*d, *c, calm_lease_ms))
                .sum();
            let calm = 2 * (taken + calm_cover) <= params.limit;
            let lease_ms = if calm {
                calm_lease_ms
            } else {
                self.config.ledger.lease_ms
            };
            params.lease_ms = lease_ms;
            // Slots that free before the next round but one: a segment post-dated further
            // would be spendable only briefly before its lease ends, unless renewed; the next
            // round offers the later ones.
            params.horizon_ms = lease_ms.saturating_sub(round).max(round);
            // What the round may lease: the slots free from the horizon on, over a lease's
            // span (a full window frees slots within the horizon, which the round post-dates;
            // where each is leased is the books' to say).
            let from = now_ms + params.horizon_ms;
            let room = w.books.occupancy(&spends, now_ms, &params).room(
                params.limit,
                from,
                params.tail_of(from + lease_ms),
            );
            // A near user (its asks come back well within their wait: `NEAR_ASKS`) asks when
            // it runs short and is served from the room: it needs no cushion past its expected
            // count where the covers do not all fit, and no guess of its spends.
            let near: Vec<bool> = demands
                .iter()
                .map(|(user, _, _)| w.books.is_near(*user))
                .collect();
            // What each holds now: what it said it had left, less what it is expected to
            // have spent since. A user that spends reports within a calm lease (and at once
            // when its tokens run low): a longer silence says it spent nothing, and guessing
            // spends past that would lease it more and more tokens it does not need. A near
            // user's word stands: it asks when it runs short.
            let held: Vec<u64> = demands
                .iter()
                .zip(&near)
                .map(|((user, demand, unit), near)| {
                    let since_report = now_ms.saturating_sub(w.books.heard_at(*user));
                    // In whole requests: what it holds is a whole number of them.
                    let spent_since = if !*near && since_report <= calm_lease_ms {
                        expected(*demand, since_report) as u64 / unit * unit
                    } else {
                        0
                    };
                    w.books.held_by(*user).saturating_sub(spent_since)
                })
                .collect();
            let wants: Vec<Cover> = demands
                .iter()
                .map(|(_, d, c)| Cover {
                    expected: expected(*d, lease_ms),
                    covered: cover(*d, *c, lease_ms),
                    unit: *c,
                })
                .collect();
            let capacity = room + held.iter().sum::<u64>();
            let first = (now_ms / round.max(1)) as usize;
            let targets = cover_targets(&wants, capacity, first);
            let targets = cut_near_cushions(targets, &wants, &near, capacity);
            let renewals: Vec<Renewal> = demands
                .iter()
                .zip(targets)
                .zip(&held)
                .map(|(((user, _, _), target), held)| Renewal {
                    user: *user,
                    want: target.saturating_sub(*held),
                    extend: target > 0 && w.books.lease_end(*user) < now_ms + 2 * round,
                })
                .collect();
            for (user, lease) in w.books.grant_round(&renewals, &spends, now_ms, &params) {
                out.push(LeaseGrant {
                    user,
                    key: *key,
                    window_ms: w.spec.window_ms(),
                    buckets: w.spec.buckets(),
                    lease,
                });
            }
            true
        });
        out
    }

    /// A lease from a window's owner: this node may spend it. `false` if it was refused (an
    /// older lease than one already taken, or a window of another shape).
    pub fn accept_lease(&self, grant: &LeaseGrant, now_ms: u64) -> bool {
        let Ok(spec) = WindowSpec::new(grant.window_ms, grant.buckets, EstimateMode::Interpolated)
        else {
            return false;
        };
        let guard = self.table.guard();
        let Ok(Some(state)) = self
            .table
            .get_or_insert_sent(grant.key, &spec, now_ms, &guard)
        else {
            return false;
        };
        let accepted = {
            let _writer = self.lock_holdings();
            state.holdings.accept(&grant.lease, self.clock_shape(&spec))
        };
        if accepted {
            self.lock_holding().insert(grant.key);
        }
        accepted
    }

    /// What this node would report now of `owner`'s lease of window `key`, for an ask.
    pub fn held_word(&self, key: KeyId, owner: u128, now_ms: u64) -> Option<HeldLease> {
        let guard = self.table.guard();
        self.table
            .get(&key, &guard)?
            .holdings
            .word_of(owner, now_ms, self.config.ledger.margin_ms)
    }

    /// The windows this node holds books for.
    pub fn owned_windows(&self) -> usize {
        self.lock_owned().windows.len()
    }
}
