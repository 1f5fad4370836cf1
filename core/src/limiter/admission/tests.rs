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
