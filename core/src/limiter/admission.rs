//! How much of a cluster-wide limit this node may use right now (ALGORITHM.md §4).
//!
//! Sharing raw counts ("admit while local + remote < L") over-admits in proportion to offered
//! rate × staleness, because every node spends the same unseen headroom. Instead each node may
//! hold, over the window, at most its **demand share** of the limit,
//! `L · d_i / Σ d_j` with `d` the offered load (admitted + rejected) over the last window, and
//! never more than the global estimate leaves: `L − remote admitted`. Shares computed from the
//! same demands sum to 1, so the cluster stays within `L` however stale the counts are; the
//! global cap covers the moments when demand views disagree. To keep the demands the same,
//! a node counts its own as its peers do: the demand of its last emitted register.

/// What happens to each side of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartitionPolicy {
    /// Each side's total share is `|side| / N_expected`, so the whole cluster stays within the
    /// limit while the sides cannot see each other.
    #[default]
    Strict,
    /// Each side may use the whole limit: availability over accuracy.
    Available,
}

/// The admission rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Demand-proportional share of the limit plus a global cap (the default).
    DemandShare(PartitionPolicy),
    /// The naive rule, kept as a baseline for the simulation: admit while the global estimate
    /// has room. It over-admits under load and under staleness.
    GlobalCount,
    /// Owners lease tokens, nodes spend them (`crate::ledger`): admission never computes an
    /// allowance, and the partition policy says which side may lease.
    Ledger(PartitionPolicy),
}

impl Default for Policy {
    fn default() -> Self {
        Policy::DemandShare(PartitionPolicy::Strict)
    }
}

/// Everything the rule looks at, for one limit of one request.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    pub limit: f64,
    pub cost: f64,
    /// This node's admitted estimate over the window.
    pub local_admitted: f64,
    /// This node's offered estimate over the window, before this request.
    pub local_offered: f64,
    /// This node's demand as its peers know it (its last emitted register), if still current.
    pub published_demand: Option<f64>,
    /// How far past its share this node may hold (`WHOLE_REQUEST_CREDIT`, or 0).
    pub credit: f64,
    /// Other origins' admitted estimate, as last gossiped.
    pub remote_admitted: f64,
    /// Other origins' demand, as last gossiped and still current.
    pub remote_demand: f64,
    /// This node's demand for the window started so recently that peers' demand may not have
    /// reached it yet (a burst from idle).
    pub onset: bool,
    /// Live members on this side, this node included.
    pub live: usize,
    /// `N_expected`.
    pub expected: usize,
    /// Scale by `live / expected` as the strict policy does, whatever the partition policy: a
    /// clock beyond the tolerance cuts a member off (ALGORITHM.md §1, fences).
    pub force_strict: bool,
    /// Some members are silent: suspected, just joined, or cut off for their clocks.
    pub silent_members: bool,
}

/// This node's offered load (admitted + refused) in the recent span of a window, against the
/// full buckets before it: how a burst is told apart from steady load.
///
/// A node whose load surges cannot yet know whether its peers' loads surged too: their demand
/// takes two summary rounds to arrive. So a surge counts as an onset (at most `1/N` of the
/// limit, unless known demand says less), whether or not the node had traffic before: a node
/// that had a trickle is otherwise past its onset and, hearing no peer demand, takes the
/// whole limit while every node bursts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecentLoad {
    /// In the current bucket.
    pub current: u64,
    /// In the full buckets of the recent span (before the current one).
    pub recent: u64,
    /// In the full buckets before the recent span.
    pub older: u64,
    /// Buckets in the recent span, the current one included (at least 1).
    pub recent_span: u64,
    /// Full buckets before it.
    pub older_span: u64,
    /// The most the margin for chance may be, in requests (`RecentLoad::threshold`): a
    /// tenth of the limit.
    pub margin_cap: f64,
}

impl RecentLoad {
    /// The recent span's total past which its rate is more than twice the older buckets',
    /// by more than chance explains: `2μ + min(3·√((μ + 1)(2 + 4ρ)), cap) + 1`, with `ρ` the
    /// ratio of the spans' lengths and `μ = ρ · older` what the older rate gives the recent
    /// span. The root is three standard deviations of `recent − 2ρ · older` when the recent
    /// rate is twice the older (`+ 1` for spans that saw nothing).
    ///
    /// Requests arrive at random, so both totals are Poisson counts. Compared bare, a steady
    /// trickle of a few requests a window looks like a surge at a good part of its checks, and
    /// each time the node falls to the onset share, `1/N` of the limit, refusing a key offered
    /// half its limit (`keys_offered_half_their_limit_are_seldom_refused`, in
    /// `sim/tests/fleet.rs`). With the margin a steady load crosses it at under 1 % of checks, 2 % when the older rate is read from a
    /// single bucket (`a_steady_load_rarely_looks_like_a_surge_at_any_rate`), as long as the
    /// cap below leaves the margin whole (it does for `fleet`'s tenant keys: a limit of 100,
    /// half a request a bucket). Under the cap chance does more: a limit of 50 at half load
    /// (2.5 requests a bucket) crosses it at 0.5 % of checks with an older span of 5 buckets,
    /// 10 % with one.
    ///
    /// The margin is what a node may take at its usual share once its load does surge, before
    /// the onset share holds it. That share can be the whole limit (a node that trickled while
    /// its peers were idle, `burst-trickle`), so the margin is capped at a tenth of the limit:
    /// one request for a limit of 10.
    fn threshold(&self) -> Option<f64> {
        (self.older_span > 0).then(|| {
            let ratio = self.recent_span as f64 / self.older_span as f64;
            let expected = self.older as f64 * ratio;
            let chance = 3.0 * ((expected + 1.0) * (2.0 + 4.0 * ratio)).sqrt();
            2.0 * expected + chance.min(self.margin_cap) + 1.0
        })
    }

    /// Whether the load surged.
    pub fn surging(&self) -> bool {
        self.threshold()
            .is_some_and(|t| (self.recent + self.current) as f64 > t)
    }

    /// How much the current bucket may hold (offered) before the load surges, if a surge can
    /// start at all. A bound cached for the rest of the bucket must not let it pass this.
    pub fn current_room(&self) -> Option<f64> {
        self.threshold().map(|t| t - self.recent as f64)
    }
}

/// The most this node may hold in the window, this request included. The request is admitted
/// when `local_admitted + cost <= allowance`.
pub fn allowance(policy: Policy, i: &Inputs) -> f64 {
    let (mut local_cap, global_room) = caps(policy, i);
    if i.local_admitted <= 0.0 && local_cap < i.cost {
        // A share worth less than one request would starve every node of a small limit
        // (say 3 per minute across 5 nodes). A node that has admitted nothing in the window
        // may take one request whenever the global estimate has room.
        local_cap = i.cost;
    }
    local_cap.min(global_room)
}

/// The allowance without the small-limit exception, which stops applying once this node
/// admits anything: what a bound meant to hold for a while may rely on.
pub fn lasting_allowance(policy: Policy, i: &Inputs) -> f64 {
    let (local_cap, global_room) = caps(policy, i);
    local_cap.min(global_room)
}

/// The part of the limit this node's side of the cluster may admit: `live / N_e` under
/// strict (or any clock fenced) while members are out of sight, else all of it.
pub fn side_scale(
    partition: PartitionPolicy,
    live: usize,
    expected: usize,
    force_strict: bool,
) -> f64 {
    match partition {
        PartitionPolicy::Strict if expected > live => live.max(1) as f64 / expected as f64,
        PartitionPolicy::Available if force_strict && expected > live => {
            live.max(1) as f64 / expected as f64
        }
        _ => 1.0,
    }
}

/// Whether members are out of sight beyond a member or two gone: a side's `scale` under
/// [`CREDIT_MIN_SCALE`], or more than [`CREDIT_MAX_MISSING`] members expected and not live.
/// A crash, or a rolling deploy's replacement, holds one member in `N_e` for a minute and is
/// not that; the sides of a partition are.
pub fn members_out_of_sight(scale: f64, live: usize, expected: usize) -> bool {
    scale < 1.0 && (scale < CREDIT_MIN_SCALE || expected.saturating_sub(live) > CREDIT_MAX_MISSING)
}

/// Whether members are out of sight (as [`members_out_of_sight`]) by the counts alone, the
/// partition policy aside: `live` of `expected` members, scaled as `strict` scales them.
pub fn out_of_sight(live: usize, expected: usize) -> bool {
    let scale = side_scale(PartitionPolicy::Strict, live, expected, false);
    members_out_of_sight(scale, live, expected)
}

/// Whether the whole-request credit may be given at `at_ms` to a window of `window_ms` whose
/// others' demand comes in an owner's sum, members having last come back in sight at
/// `back_in_sight_ms` (0: never out of sight), at a size this node had seen whole before: a
/// cluster forming or growing (members in their join grace) is not a heal: in a large fleet
/// forming lasts past the first seconds, and holding the credit then would cost utilization
/// for no heal.
///
/// After a heal every user of a window starts over at the same moment: what each side held
/// leaves the window at once, and each user takes its share back with the credit on top
/// before the owner's next sum shows what the others took. In lockstep the credits add up,
/// and the lockstep lasts for windows ending seconds after the heal; holding the credit for
/// two windows after it lets the lockstep pass. Pinned by
/// `through_an_owner_the_credit_waits_two_windows_after_members_come_back_in_sight`
/// (`limiter/tests/cluster.rs`) and `the_credit_hold_after_a_heal_is_two_windows_and_at_most_ten_seconds`.
/// The full mesh keeps its credit: there every user's registers reach every other each
/// round, and the global cap catches the credits a round later.
///
/// At most [`CREDIT_HOLD_MAX_MS`]: a day's window would otherwise lose its credit for two days,
/// where a whole request is a sliver of its limit and the lockstep of a heal long gone. (The
/// cap's effect on windows of 5 to 60 s is not measured.) A clock stepped back past the heal
/// lengthens the hold by the step: cluster time does not step back.
pub fn credit_settled(back_in_sight_ms: u64, at_ms: u64, window_ms: u64) -> bool {
    let hold = window_ms.saturating_mul(2).min(CREDIT_HOLD_MAX_MS);
    back_in_sight_ms == 0 || at_ms >= back_in_sight_ms.saturating_add(hold)
}

/// The longest the whole-request credit is held back after a heal (see [`credit_settled`]).
pub const CREDIT_HOLD_MAX_MS: u64 = 10_000;

/// This node's share of the limit, and the room the global estimate leaves.
fn caps(policy: Policy, i: &Inputs) -> (f64, f64) {
    let global_room = i.limit - i.remote_admitted;
    let local_cap = match policy {
        Policy::GlobalCount | Policy::Ledger(_) => global_room,
        Policy::DemandShare(partition) => {
            let live = i.live.max(1) as f64;
            let scale = side_scale(partition, i.live, i.expected, i.force_strict);
            // This node's demand as its peers count it, so that every node divides the limit
            // by the same demand vector and the shares sum to 1 (ALGORITHM.md §4). Its fresh
            // demand would not: a node whose load just rose by chance would take more before
            // the others knew to take less. At onset, and before its first emission, the
            // fresh demand: the onset share caps it, and a demand published a round into a
            // burst would hold this node to a sliver while its peers, capped at onset too,
            // could not take the rest.
            let fresh = i.local_offered + i.cost;
            let mine = match i.published_demand {
                Some(p) if !i.onset => p.max(i.cost),
                _ => fresh,
            };
            let proportional = if i.remote_demand <= 0.0 {
                scale
            } else {
                scale * mine / (mine + i.remote_demand)
            };
            let share = if i.onset && i.live > 1 {
                // Peers that are bursting too may not have been heard yet: assume each live
                // member wants an equal part, unless known demand already says less.
                proportional.min(scale / live)
            } else {
                proportional
            };
            // The credit is safe while the global cap can catch it. Scaled with members out of
            // sight, this node may be on a side that cannot see much of the cluster's
            // admissions, and the cap cannot (see `CREDIT_MIN_SCALE`).
            let in_view = !members_out_of_sight(scale, i.live, i.expected)
                && (scale >= 1.0 || !i.silent_members);
            let credit = if in_view { i.credit } else { 0.0 };
            i.limit * share + credit
        }
    };
    (local_cap, global_room)
}

/// Whether what this node knows of its peers' part of a window is current at `at_ms`: the
/// newest remote register or sum of the window was emitted within a quarter of the window
/// (`newest_emission_ms`, `None` when the node has heard of no peer using it). The
/// whole-request credit is given only while current.
pub fn remote_current(newest_emission_ms: Option<u64>, at_ms: u64, window_ms: u64) -> bool {
    newest_emission_ms.is_none_or(|e| at_ms.saturating_sub(e) <= window_ms / 4)
}

/// How far past its share (in requests) a node may hold, within the global estimate.
///
/// A share is a real number and a node holds whole requests: admitting only while
/// `held + 1 <= share` leaves half a request of every node's share unused on average, and the
/// wait for the next arrival once a request leaves the window loses about as much again. At
/// a limit of 100 shared by 10 nodes that is 5-10 % of the limit. Rounding to the nearest
/// request (0.5) recovers the first. What more credit costs is the over-admission tail: each
/// node may pass its share by the credit, so the credit trades utilization for over-admission
/// (`--credit` in the simulator, README's trade-off table). Shares still sum to the limit in
/// expectation; the global cap stays exact, and the credit never passes it
/// (`the_whole_request_credit_never_passes_the_global_estimate`). Given only while the
/// window's remote registers or sums are current (newer than a quarter of the window): at
/// the start of a partition the demand views drift apart, and credits given on stale views
/// add up (`the_whole_request_credit_needs_current_news_of_the_others`). Never to a node
/// whose share is scaled well below 1 (`CREDIT_MIN_SCALE`).
///
/// This is the credit where the others' demand comes in their own registers (the full mesh,
/// and a window's owner); [`WHOLE_REQUEST_CREDIT_FROM_SUMS`] where it comes in an owner's sum.
pub const WHOLE_REQUEST_CREDIT: f64 = 0.65;

/// The whole-request credit where the others' demand comes in an owner's sum (a large
/// cluster).
///
/// There a node whose share binds divides by the demand vector the owner's sum was made with,
/// its own included, and publishes its demand smoothed (`own_demand.rs`): the shares sum to 1
/// at every instant and hold still, which leaves room in the over-admission bars for a larger
/// credit to buy back more of the shares' rounding. Shares there are a handful of requests,
/// where the rounding is most of what is lost. The bars it is chosen to hold (97 % of the
/// limit used within an over-admission p99 of 5 %, and half the credit using less and
/// passing less) are pinned by
/// `a_fleet_in_owner_mode_uses_its_limits_within_the_over_admission_bars`
/// (`sim/tests/fleet.rs`). In the full mesh shares are hundreds of requests, where the
/// rounding is a sliver and more credit buys nothing back, so it stays at
/// [`WHOLE_REQUEST_CREDIT`].
pub const WHOLE_REQUEST_CREDIT_FROM_SUMS: f64 = 1.05;

/// The most `LimiterConfig::credit_from_sums` counts for: past a few requests a share no
/// longer binds, and the limiter admits as the naive rule does (the global cap alone).
pub const MAX_CREDIT_FROM_SUMS: f64 = 10.0;

/// The whole-request credit for a window whose others' demand comes in an owner's sum
/// (`from_sum`: `from_sums`, as configured, `LimiterConfig::credit_from_sums`) or in their
/// registers. A configured credit that is not a finite number of at least 0 counts as 0, and
/// one past [`MAX_CREDIT_FROM_SUMS`] as that.
pub fn whole_request_credit(from_sum: bool, from_sums: f64) -> f64 {
    if from_sum {
        if from_sums.is_finite() && from_sums > 0.0 {
            from_sums.min(MAX_CREDIT_FROM_SUMS)
        } else {
            0.0
        }
    } else {
        WHOLE_REQUEST_CREDIT
    }
}

/// The least scale (`live / N_expected`) at which the whole-request credit is given, and only
/// while no member is silent.
///
/// Below 1 a side may not see every member's admissions, and its global estimate cannot catch
/// the credit: given on both sides of a partition, the credits of both sides add up past the
/// limit (`a_scaled_side_gets_no_credit_as_its_global_estimate_cannot_catch_it`). But
/// `N_expected` also holds, for a minute, a member that left, and in a rolling deploy whose
/// new process joins before the old one leaves it holds one member more than there are:
/// withholding the credit whenever the scale is under 1 would cost every rolling deploy its
/// utilization (not pinned by a test). So a member or two gone from a large cluster keeps the
/// credit; a partition's sides, members suspected, or a crash
/// in a cluster of a few nodes do not.
pub const CREDIT_MIN_SCALE: f64 = 0.9;

/// The most members that may be expected and not live for the whole-request credit to be
/// given (with the scale at least [`CREDIT_MIN_SCALE`]). A side that cannot see `m` members
/// cannot see their admissions, which may let its credit pass by up to their part of the
/// limit: a cluster of 200 that lost 20 is at a scale of 0.9, and that part is a tenth.
pub const CREDIT_MAX_MISSING: usize = 2;

#[cfg(test)]
mod tests;
