//! The cached admission bound, attacked through every input it must not assume fixed: the
//! limit value (Envoy `limit` overrides, inline limits, reloads), the estimate mode, the cost,
//! merges and membership.

use proptest::prelude::*;

use super::*;

fn per(window_ms: u64, limit: u32, mode: EstimateMode) -> Limit {
    Limit {
        max: limit,
        window: WindowSpec::new(window_ms, 10, mode).unwrap(),
    }
}

#[test]
fn a_bound_cached_under_a_large_override_is_not_used_under_the_rule() {
    // One request under an Envoy `limit` override of 1000/min, then the rule's 10/min, all
    // in one bucket: the rule leaves room for 9.
    let l = limiter();
    let high = per(60_000, 1_000, EstimateMode::Interpolated);
    let rule = per(60_000, 10, EstimateMode::Interpolated);
    assert!(check(&l, "tenant", &[high], 1, T0 + 5).allowed);
    assert_eq!(admitted_in(&l, "tenant", &[rule], 50, T0 + 6), 9);
}

#[test]
fn a_reload_that_lowers_an_hourly_limit_applies_at_once() {
    // An hourly limit's bucket lasts six minutes: the old bound must not live that long.
    let l = limiter();
    let before = per(3_600_000, 500, EstimateMode::Interpolated);
    let after = per(3_600_000, 20, EstimateMode::Interpolated);
    assert_eq!(admitted_in(&l, "k", &[before], 15, T0 + 1_000), 15);
    assert_eq!(admitted_in(&l, "k", &[after], 50, T0 + 60_000), 5);
}

#[test]
fn a_bound_cached_in_exact_mode_is_not_used_interpolated() {
    // Exact mode leaves the straddling bucket out; interpolated counts 99 % of it. The same
    // key, shape and limit under the two modes must each get its own answer.
    let l = limiter();
    let exact = per(1_000, 10, EstimateMode::Exact);
    let interpolated = per(1_000, 10, EstimateMode::Interpolated);
    assert_eq!(admitted_in(&l, "k", &[interpolated], 10, T0 + 50), 10);
    // One bucket past the window: bucket 0 straddles with weight 0.99.
    let t = T0 + 1_000 + 1;
    assert!(check(&l, "k", &[exact], 1, t).allowed);
    assert_eq!(admitted_in(&l, "k", &[interpolated], 20, t), 0);
}

#[test]
fn a_small_inline_limit_after_a_large_one_holds_for_every_cost() {
    let l = limiter();
    let large = per(1_000, 100, EstimateMode::Interpolated);
    let small = per(1_000, 6, EstimateMode::Interpolated);
    assert!(check(&l, "k", &[large], 1, T0).allowed);
    // 5 left under the small limit, in requests of cost 2: two fit.
    let admitted = (0..10)
        .filter(|_| check(&l, "k", &[small], 2, T0 + 1).allowed)
        .count();
    assert_eq!(admitted, 2);
}

#[derive(Debug, Clone)]
enum Op {
    /// A check under the key's current rule, or under an override of it.
    Check {
        key: u8,
        both: bool,
        cost: u32,
        over: Option<(u32, bool)>,
        dt: u64,
    },
    /// The rules for `key` are reloaded: a new limit value and mode.
    Reload {
        key: u8,
        limit: u32,
        exact: bool,
    },
    PeerTraffic {
        key: u8,
        n: u32,
        dt: u64,
    },
    /// Members live, and whether one is silent (the whole-request credit depends on both).
    Members {
        live: usize,
        silent: bool,
    },
    /// Both limiters emit their registers: their own demand, as peers know it, changes.
    Emit {
        dt: u64,
    },
    /// An owner's sum of the others for `key`, made `age` ms ago: the others' demand then
    /// comes from a sum, with the larger credit, and a binding share counts its own demand
    /// as of the sum (before or after its last emission).
    OwnerSum {
        key: u8,
        demand: u32,
        admitted: u32,
        age: u64,
    },
}

const LIMITS: [u32; 5] = [1, 3, 10, 40, 1_000];

fn op() -> impl Strategy<Value = Op> {
    let limit = prop::sample::select(&LIMITS[..]);
    let over = prop::option::weighted(0.2, (limit.clone(), any::<bool>()));
    prop_oneof![
        14 => (0u8..2, any::<bool>(), 1u32..4, over, 0u64..25)
            .prop_map(|(key, both, cost, over, dt)| Op::Check { key, both, cost, over, dt }),
        1 => (0u8..2, limit, any::<bool>())
            .prop_map(|(key, limit, exact)| Op::Reload { key, limit, exact }),
        2 => (0u8..2, 1u32..60, 0u64..150).prop_map(|(key, n, dt)| Op::PeerTraffic { key, n, dt }),
        1 => (1usize..4, any::<bool>()).prop_map(|(live, silent)| Op::Members { live, silent }),
        2 => (0u64..250).prop_map(|dt| Op::Emit { dt }),
        2 => (0u8..2, 0u32..200, 0u32..40, 0u64..400)
            .prop_map(|(key, demand, admitted, age)| Op::OwnerSum { key, demand, admitted, age }),
    ]
}

fn second_in(limit: u32, exact: bool) -> Limit {
    let mode = if exact {
        EstimateMode::Exact
    } else {
        EstimateMode::Interpolated
    };
    per(1_000, limit, mode)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The cached bound only ever admits what the exact path would: with the cache on or off,
    /// every decision is the same, while limits, modes and costs change under each key.
    #[test]
    fn cached_bounds_never_change_a_decision(ops in prop::collection::vec(op(), 1..500)) {
        let on = limiter_with(LimiterConfig::default(), 1);
        let off = limiter_with(
            LimiterConfig { admission_cache: false, ..LimiterConfig::default() },
            1,
        );
        let peer = limiter_with(LimiterConfig::default(), 2);
        let per_minute = Limit {
            max: 300,
            window: WindowSpec::with_default_buckets(60_000).unwrap(),
        };
        let mut rules = [second_in(40, false), second_in(40, false)];
        let mut now = T0;
        let mut sum_version = 0;
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Check { key, both, cost, over, dt } => {
                    now += dt;
                    let limit = over.map_or(rules[*key as usize], |(l, e)| second_in(l, e));
                    let one = [limit];
                    let two = [limit, per_minute];
                    let limits: &[Limit] = if *both { &two } else { &one };
                    let key = format!("k{key}");
                    // A cost above the limit is an invalid request, not a decision.
                    let cost = (*cost).min(limit.max);
                    let a = check(&on, &key, limits, cost, now);
                    let b = check(&off, &key, limits, cost, now);
                    prop_assert_eq!(a.allowed, b.allowed, "op {} {:?}", i, op);
                }
                Op::Reload { key, limit, exact } => {
                    rules[*key as usize] = second_in(*limit, *exact);
                }
                Op::PeerTraffic { key, n, dt } => {
                    now += dt;
                    admitted_in(&peer, &format!("k{key}"), &[second(40)], *n as usize, now);
                    if let Some(batch) = peer.collect_changed(now) {
                        prop_assert_eq!(on.merge(&batch, now), off.merge(&batch, now));
                    }
                }
                Op::Members { live, silent } => {
                    let silent: &[OriginId] = if *silent { &[OriginId(7)] } else { &[] };
                    on.set_liveness(*live, silent, 0, now);
                    off.set_liveness(*live, silent, 0, now);
                }
                Op::Emit { dt } => {
                    now += dt;
                    let (a, b) = (on.collect_changed(now), off.collect_changed(now));
                    prop_assert_eq!(
                        a.map(|b| b.updates.len()),
                        b.map(|b| b.updates.len()),
                        "op {} {:?}", i, op
                    );
                }
                Op::OwnerSum { key, demand, admitted, age } => {
                    sum_version += 1;
                    let made = now.saturating_sub(*age);
                    let window = second(40).window;
                    let sum = Batch {
                        origin: OriginId(3),
                        updates: vec![RegisterUpdate {
                            key: on.key_id(format!("k{key}").as_bytes(), &window),
                            window_ms: window.window_ms(),
                            buckets: window.buckets(),
                            register: Register {
                                version: sum_version,
                                hlc: HlcTimestamp::new(made, 0),
                                newest_epoch: window.epoch(made),
                                demand: *demand,
                                admitted: vec![*admitted],
                            },
                        }],
                    };
                    prop_assert_eq!(
                        on.merge_aggregates(&sum, now),
                        off.merge_aggregates(&sum, now),
                        "op {} {:?}", i, op
                    );
                }
            }
        }
    }
}

#[test]
fn a_clock_cut_off_applies_at_once_to_a_cached_bound_even_under_available() {
    // Five members, two of them silent, `available` policy: this side may use the whole limit
    // of 100, and caches bounds that say so for the rest of a bucket. 80 per second for a
    // second, then, in the middle of a bucket, a member's clock is found beyond the
    // tolerance: the strict scale (3 of 5, so 60) applies at once, cached bound or not. A twin
    // limiter that is not told shows what the bound allowed.
    let limit = per(1_000, 100, EstimateMode::Interpolated);
    let run = |cut_off: bool| {
        let l = limiter_with(
            LimiterConfig {
                policy: Policy::DemandShare(PartitionPolicy::Available),
                ..LimiterConfig::default()
            },
            3,
        );
        l.set_liveness(3, &[OriginId(8), OriginId(9)], 5, T0);
        let start = T0 + 1_000;
        let mut t = start;
        // Two seconds: the first is the onset (a third at most), the second steady.
        while t < start + 2_040 {
            let allowed = check(&l, "k", &[limit], 1, t).allowed;
            assert!(allowed || t < start + 1_000, "80/s is within 100 (at {t})");
            t += 12;
        }
        if cut_off {
            l.set_clock_fenced(true);
        }
        // The rest of the same bucket, at the same rate.
        let mut admitted = 0;
        while t < start + 2_100 {
            admitted += usize::from(check(&l, "k", &[limit], 1, t).allowed);
            t += 12;
        }
        admitted
    };
    let (told, not_told) = (run(true), run(false));
    assert!(not_told >= 4, "the twin admits on: {not_told}");
    assert_eq!(told, 0, "the window holds about 80 of a 60 share");
}

#[test]
fn a_bound_cached_at_onset_does_not_outlive_it_within_a_bucket() {
    // A minute window has 6 s buckets, so onset (500 ms past the first busy bucket) ends in
    // the middle of one. During onset a node counts its fresh demand; after it, the demand it
    // published, which here is far smaller. A bound cached at onset must not admit past that.
    let lim = per(60_000, 1_000, EstimateMode::Interpolated);
    let spec = lim.window;
    let b0 = spec.epoch_start_ms(spec.epoch(T0) + 1);
    let run = |cache: bool| {
        let l = limiter_with(
            LimiterConfig {
                admission_cache: cache,
                ..LimiterConfig::default()
            },
            1,
        );
        l.set_members(2, b0);
        check(&l, "k", &[lim], 1, b0 + 10);
        let id = l.key_id(b"k", &spec);
        let peer = Batch {
            origin: OriginId(9),
            updates: vec![RegisterUpdate {
                key: id,
                window_ms: 60_000,
                buckets: 10,
                register: Register {
                    version: 1,
                    hlc: HlcTimestamp::new(b0 + 20, 0),
                    newest_epoch: spec.epoch(b0 + 20),
                    demand: 5_000,
                    admitted: vec![10],
                },
            }],
        };
        assert_eq!(l.merge(&peer, b0 + 20).inserted, 1);
        let published = l.collect_changed(b0 + 30).expect("changed");
        assert_eq!(published.updates[0].register.demand, 1);
        // The burst the peer has not heard of.
        admitted_in(&l, "k", &[lim], 200, b0 + 40);
        // Next bucket, still at onset: more of it, then one check (which caches a bound).
        admitted_in(&l, "k", &[lim], 200, b0 + 6_050);
        // A large request refused: more demand, so room for small ones.
        assert!(!check(&l, "k", &[lim], 40, b0 + 6_090).allowed);
        let at_onset = check(&l, "k", &[lim], 1, b0 + 6_100).allowed;
        // Onset is over.
        let after = admitted_in(&l, "k", &[lim], 20, b0 + 6_600);
        (at_onset, after)
    };
    let (cached, exact) = (run(true), run(false));
    assert_eq!(exact, (true, 0), "the case must arise");
    assert_eq!(cached, exact);
}
