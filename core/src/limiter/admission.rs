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
    /// trickle of 5 requests a window looked like a surge at 18 % of its checks, and each time
    /// the node fell to the onset share, `1/N` of the limit: in `fleet` at 100 nodes, tenant
    /// keys offered half their limit had 18 % of their requests refused. With the margin a
    /// steady load crosses it at under 1 % of checks, 2 % when the older rate is read from a
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
/// cluster forming or growing (members in their join grace) is not a heal, and at 1 000 nodes,
/// where forming lasts past the first seconds, holding the credit then cost `fleet` 0.1 point
/// of utilization.
///
/// After a heal every user of a window starts over at the same moment: what each side held
/// leaves the window at once, and each user takes its share back with the credit on top
/// before the owner's next sum shows what the others took. In lockstep the credits add up,
/// and the lockstep lasts: windows ending two to four seconds after the heal of
/// `fleet-partition` (200 nodes, seed 1) reached 1.12 x L, 2 434 of them over 1.07. Without
/// the credit for one window after the heal, 359 were, at most 1.10 x L; for two, 42, and
/// the over-admission p99 of the run fell from 5 to 3 %, for 0.4 points of its utilization.
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
/// request (0.5) recovers the first. What more credit costs is the over-admission tail: at
/// 100 nodes in `fleet`, 94.8 % utilization at 0.6, 95.1 % at 0.65, 95.8 % at 0.75, with p99
/// 5, 5 and 6 %. Shares still sum to the limit in expectation; the global cap stays exact.
/// Given only while the window's remote registers or sums are current (newer than a quarter
/// of the window): at the start of a partition the demand views drift apart, and with the
/// credit the busiest window of `fleet-partition` reached 1.19 × L, 1.13 without. Never to a
/// node whose share is scaled well below 1 (`CREDIT_MIN_SCALE`).
///
/// This is the credit where the others' demand comes in their own registers (the full mesh,
/// and a window's owner); [`WHOLE_REQUEST_CREDIT_FROM_SUMS`] where it comes in an owner's sum.
pub const WHOLE_REQUEST_CREDIT: f64 = 0.65;

/// The whole-request credit where the others' demand comes in an owner's sum (a large
/// cluster).
///
/// There a node whose share binds divides by the demand vector the owner's sum was made with,
/// its own included, and publishes its demand smoothed (`own_demand.rs`): the shares sum to 1
/// at every instant and hold still, and the over-admission p99 that 0.65 cost fell from 5 % to
/// 2 % (`fleet`, 50 nodes). The tail that is left buys more of the shares' rounding back: at
/// 50 nodes, utilization 97.0 % at 1.0 (p99 4 %), 97.3 % at 1.05 and 97.7 % at 1.1 (p99 5 %);
/// at 0.65, 94.7 %. Shares there are a handful of requests, where the rounding is most of
/// what is lost. In the full mesh the five-node scenarios (shares of hundreds) gain 0.2 points
/// of utilization from it and lose as much in mean over-admission, so it stays at
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
/// the credit: given on both sides of a 60 | 40 partition of 50 nodes, it was the whole excess
/// once the sides knew of each other (1.11 × L; under 1.05 × L without), and while SWIM was
/// still suspecting the other side it took the busiest window from 1.10 to 1.13 × L. But
/// `N_expected` also holds, for a minute, a member that left, and in a rolling deploy whose
/// new process joins before the old one leaves it holds one member more than there are:
/// without the credit whenever the scale is under 1, the 50-node `fleet-churn` (10
/// replacements) lost 5 points of utilization (93.0 % to 87.9 %). So a member or two gone
/// from a large cluster keeps the credit; a partition's sides, members suspected, or a crash
/// in a cluster of a few nodes do not.
pub const CREDIT_MIN_SCALE: f64 = 0.9;

/// The most members that may be expected and not live for the whole-request credit to be
/// given (with the scale at least [`CREDIT_MIN_SCALE`]). A side that cannot see `m` members
/// cannot see their admissions, which may let its credit pass by up to their part of the
/// limit: a cluster of 200 that lost 20 is at a scale of 0.9, and that part is a tenth.
pub const CREDIT_MAX_MISSING: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credit_hold_after_a_heal_is_two_windows_and_at_most_ten_seconds() {
        let back = 5_000;
        assert!(credit_settled(0, 0, 1_000), "never out of sight");
        assert!(!credit_settled(back, back + 1_999, 1_000));
        assert!(credit_settled(back, back + 2_000, 1_000));
        let day = 86_400_000;
        assert!(!credit_settled(back, back + CREDIT_HOLD_MAX_MS - 1, day));
        assert!(credit_settled(back, back + CREDIT_HOLD_MAX_MS, day));
    }

    #[test]
    fn a_configured_credit_applies_through_sums_within_0_and_its_maximum() {
        assert_eq!(whole_request_credit(true, 0.5), 0.5);
        assert_eq!(
            whole_request_credit(false, 0.5),
            WHOLE_REQUEST_CREDIT,
            "registers keep theirs"
        );
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -0.0, 0.0] {
            assert_eq!(whole_request_credit(true, bad), 0.0, "{bad}");
        }
        assert_eq!(whole_request_credit(true, 1e6), MAX_CREDIT_FROM_SUMS);
    }

    const STRICT: Policy = Policy::DemandShare(PartitionPolicy::Strict);
    const AVAILABLE: Policy = Policy::DemandShare(PartitionPolicy::Available);
    const C: f64 = WHOLE_REQUEST_CREDIT;

    fn inputs() -> Inputs {
        Inputs {
            limit: 1_000.0,
            cost: 1.0,
            local_admitted: 0.0,
            local_offered: 0.0,
            published_demand: None,
            credit: WHOLE_REQUEST_CREDIT,
            remote_admitted: 0.0,
            remote_demand: 0.0,
            onset: false,
            live: 5,
            expected: 5,
            force_strict: false,
            silent_members: false,
        }
    }

    #[test]
    fn a_lone_node_gets_the_whole_limit() {
        let i = Inputs {
            live: 1,
            expected: 1,
            local_offered: 5_000.0,
            ..inputs()
        };
        assert_eq!(allowance(STRICT, &i), 1_000.0);
    }

    #[test]
    fn equal_demand_splits_evenly_and_shares_sum_to_the_limit() {
        // Five nodes each offering 400/window, as everyone sees it.
        let mut total = 0.0;
        for _ in 0..5 {
            let i = Inputs {
                local_offered: 399.0,
                remote_demand: 1_600.0,
                ..inputs()
            };
            total += allowance(STRICT, &i) - C;
        }
        assert!((total - 1_000.0).abs() < 1e-9, "{total}");
    }

    #[test]
    fn shares_from_published_demand_sum_to_the_limit_whatever_the_fresh_load_says() {
        // Ten nodes that published different demands; since then each one's own load moved
        // by chance, up or down, and its peers do not know it yet.
        let published = [20.0, 18.0, 25.0, 22.0, 15.0, 21.0, 19.0, 24.0, 17.0, 19.0];
        let fresh = [26.0, 14.0, 31.0, 20.0, 21.0, 27.0, 15.0, 30.0, 23.0, 25.0];
        let total: f64 = published.iter().sum();
        let sum = |with_published: bool| -> f64 {
            (0..10)
                .map(|n| {
                    let i = Inputs {
                        limit: 100.0,
                        local_offered: fresh[n],
                        published_demand: with_published.then_some(published[n]),
                        remote_demand: total - published[n],
                        ..inputs()
                    };
                    allowance(STRICT, &i) - C
                })
                .sum()
        };
        assert!((sum(true) - 100.0).abs() < 1e-9, "{}", sum(true));
        // From fresh demand the same nodes would hand out more than the limit.
        assert!(sum(false) > 110.0, "{}", sum(false));
    }

    #[test]
    fn the_whole_request_credit_never_passes_the_global_estimate() {
        let i = Inputs {
            local_offered: 199.0,
            remote_demand: 800.0,
            remote_admitted: 800.0,
            ..inputs()
        };
        assert_eq!(allowance(STRICT, &i), 200.0);
        let roomy = Inputs {
            remote_admitted: 700.0,
            ..i
        };
        assert_eq!(allowance(STRICT, &roomy), 200.0 + C);
    }

    #[test]
    fn skewed_demand_gets_a_skewed_share() {
        let heavy = Inputs {
            local_offered: 1_599.0,
            remote_demand: 400.0,
            ..inputs()
        };
        let light = Inputs {
            local_offered: 99.0,
            remote_demand: 1_900.0,
            ..inputs()
        };
        assert!((allowance(STRICT, &heavy) - 800.0 - C).abs() < 1e-9);
        assert!((allowance(STRICT, &light) - 50.0 - C).abs() < 1e-9);
    }

    #[test]
    fn the_global_estimate_caps_the_share() {
        let i = Inputs {
            local_offered: 999.0,
            remote_admitted: 950.0,
            ..inputs()
        };
        assert_eq!(allowance(STRICT, &i), 50.0);
    }

    #[test]
    fn onset_without_demand_information_takes_one_nth() {
        let i = Inputs {
            local_offered: 0.0,
            onset: true,
            ..inputs()
        };
        assert_eq!(allowance(STRICT, &i), 200.0 + C);
        // After the onset period, nobody else has demand: the whole limit.
        let later = Inputs { onset: false, ..i };
        assert_eq!(allowance(STRICT, &later), 1_000.0);
    }

    #[test]
    fn strict_partition_scales_a_side_to_its_size() {
        // The 2-node side of a 3|2 split, equal demand on the side.
        let i = Inputs {
            local_offered: 99.0,
            remote_demand: 100.0,
            live: 2,
            expected: 5,
            ..inputs()
        };
        // Scaled, without the credit (see the next test); whole under `available`, with it.
        assert!((allowance(STRICT, &i) - 200.0).abs() < 1e-9);
        assert!((allowance(AVAILABLE, &i) - 500.0 - C).abs() < 1e-9);
    }

    #[test]
    fn a_scaled_side_gets_no_credit_as_its_global_estimate_cannot_catch_it() {
        // The 4 users of a 100 a window on the 30-node side of a 30|20 split, once the
        // other side's counts have left the window: the global estimate sees only this side
        // (36 of it) and leaves room for 64, so nothing but the shares holds the side to
        // its 60. With the credit, the 4 would hold 63.
        let user = Inputs {
            limit: 100.0,
            local_offered: 19.0,
            remote_demand: 60.0,
            remote_admitted: 36.0,
            live: 30,
            expected: 50,
            ..inputs()
        };
        let side: f64 = (0..4).map(|_| allowance(STRICT, &user)).sum();
        assert!((side - 60.0).abs() < 1e-9, "{side}");
        // The whole cluster, seen whole: the credit again.
        let whole = Inputs { live: 50, ..user };
        assert!((allowance(STRICT, &whole) - 25.0 - C).abs() < 1e-9);
        // One member more expected than there are (a rolling deploy's overlap, held): the
        // credit, unless a member is silent (a partition being found out).
        let deploy = Inputs {
            expected: 51,
            ..whole
        };
        let share = 100.0 * 50.0 / 51.0 * 0.25;
        assert!((allowance(STRICT, &deploy) - share - C).abs() < 1e-9);
        let suspected = Inputs {
            silent_members: true,
            ..deploy
        };
        assert!((allowance(STRICT, &suspected) - share).abs() < 1e-9);
        // A side of 180 that cannot see 20, none of them silent any more: a scale of 0.9, but
        // too many out of sight.
        let side = Inputs {
            live: 180,
            expected: 200,
            ..deploy
        };
        let share = 100.0 * 0.9 * 0.25;
        assert!((allowance(STRICT, &side) - share).abs() < 1e-9);
    }

    #[test]
    fn a_clock_cut_off_scales_every_policy_as_strict_does() {
        // A node whose clock is beyond the tolerance sees its 4 peers as cut off: alone on
        // its side of 5, it gets a fifth, under `available` too.
        let i = Inputs {
            local_offered: 5_000.0,
            live: 1,
            expected: 5,
            force_strict: true,
            ..inputs()
        };
        assert!((allowance(STRICT, &i) - 200.0).abs() < 1e-9);
        assert!((allowance(AVAILABLE, &i) - 200.0).abs() < 1e-9);
        let not_forced = Inputs {
            force_strict: false,
            ..i
        };
        assert!((allowance(AVAILABLE, &not_forced) - 1_000.0).abs() < 1e-9);
    }

    #[test]
    fn tiny_limits_do_not_starve() {
        // 3 per window across 41 nodes of equal demand: each share is 0.07 of a request,
        // under one even with the whole-request credit.
        let i = Inputs {
            limit: 3.0,
            local_offered: 9.0,
            remote_demand: 400.0,
            ..inputs()
        };
        assert_eq!(allowance(STRICT, &i), 1.0);
        // Once this node has admitted one, its share applies again: no second.
        let after = Inputs {
            local_admitted: 1.0,
            ..i
        };
        assert!(allowance(STRICT, &after) < 2.0);
        // And never past the global estimate.
        let full = Inputs {
            remote_admitted: 3.0,
            ..i
        };
        assert_eq!(allowance(STRICT, &full), 0.0);
    }

    #[test]
    fn a_surge_is_told_from_steady_load() {
        let load = |current, recent, older| RecentLoad {
            current,
            recent,
            older,
            recent_span: 5,
            older_span: 5,
            margin_cap: f64::INFINITY,
        };
        // Steady: about the same rate in both spans.
        assert!(!load(40, 160, 210).surging());
        // A trickle, then ten times as much.
        assert!(load(200, 0, 25).surging());
        // Twice the older rate is still steady, and so is chance on top of it (three standard
        // deviations, 3·√(51·6) = 52.5, and one request); more is a surge.
        assert!(!load(0, 100, 50).surging());
        assert!(!load(53, 100, 50).surging());
        assert!(load(54, 100, 50).surging());
        // How much more the current bucket may take before it surges.
        let room = load(0, 60, 50).current_room().unwrap();
        assert!((room - 93.4786).abs() < 1e-3, "{room}");
        // Nothing older: nine requests are a surge, eight are not.
        assert!(!load(8, 0, 0).surging());
        assert!(load(9, 0, 0).surging());
        // A limit of 10 caps the margin at one request.
        let small = |current, older| RecentLoad {
            margin_cap: 1.0,
            ..load(current, 0, older)
        };
        assert!(!small(2, 0).surging());
        assert!(small(3, 0).surging());
        assert!(!small(12, 5).surging());
        assert!(small(13, 5).surging());
        // No older span: no surge can be told.
        let short = RecentLoad {
            older_span: 0,
            ..load(500, 0, 0)
        };
        assert!(!short.surging());
        assert_eq!(short.current_room(), None);
    }

    /// The chance that a steady load of `rate` requests per bucket looks like a surge at one
    /// check, with spans of `recent_span` and `older_span` buckets: both totals are
    /// independent Poisson counts.
    fn false_surge_chance(rate: f64, recent_span: u64, older_span: u64) -> f64 {
        let pmf = |mean: f64, n: u64| -> Vec<f64> {
            let mut log_factorial = 0.0;
            (0..n)
                .map(|k| {
                    if k > 0 {
                        log_factorial += (k as f64).ln();
                    }
                    (-mean + k as f64 * mean.ln() - log_factorial).exp()
                })
                .collect()
        };
        let older_pmf = pmf(rate * older_span as f64, 300);
        let recent_pmf = pmf(rate * recent_span as f64, 400);
        let mut chance = 0.0;
        for older in 0..300 {
            for recent in 0..400 {
                let load = RecentLoad {
                    current: 0,
                    recent,
                    older,
                    recent_span,
                    older_span,
                    margin_cap: f64::INFINITY,
                };
                if load.surging() {
                    chance += older_pmf[older as usize] * recent_pmf[recent as usize];
                }
            }
        }
        chance
    }

    #[test]
    fn a_steady_load_rarely_looks_like_a_surge_at_any_rate() {
        // From a request every two windows to 40 a window, in windows of 10 buckets with a
        // recent span of 5; 0.5 a bucket is `fleet`'s tenant keys at half their limit. The
        // older span is short when the node's traffic in the window began recently.
        for rate in [0.05, 0.2, 0.5, 1.0, 2.0, 4.0] {
            for older_span in [1, 2, 5] {
                let chance = false_surge_chance(rate, 5, older_span);
                // A one-bucket older span is a rate read from one bucket.
                let bound = if older_span == 1 { 0.02 } else { 0.01 };
                assert!(
                    chance < bound,
                    "rate {rate}, older span {older_span}: {chance}"
                );
            }
        }
    }

    #[test]
    fn global_count_ignores_shares() {
        let i = Inputs {
            local_offered: 1.0,
            remote_demand: 1e6,
            remote_admitted: 400.0,
            ..inputs()
        };
        assert_eq!(allowance(Policy::GlobalCount, &i), 600.0);
    }
}
