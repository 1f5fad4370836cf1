//! Wrong clocks, seconds off, on fixed seeds: within `limiter.max_clock_drift_ms` (10 s) the
//! cluster runs on the median clock and holds the design's bars (mean ≤ 1 %, p99 ≤ 5 %, max
//! ≤ 10 %, utilization ≥ 95 %); beyond it, the node is cut off and the busiest window stays
//! within 1.05 × L. Each test first asserts that the clocks were as wrong as injected (the
//! peers estimated the offset, or the wall clock was seen to step). A failure names its seed;
//! rerun it with `cargo run --release -p limitmesh-sim -- <scenario> --seed <seed>`.

use limitmesh::limiter::{PartitionPolicy, Policy};
use limitmesh_sim::cluster::{Outcome, SimConfig};
use limitmesh_sim::scenario::scenario;
use limitmesh_sim::{Report, run};

const SEED: u64 = 3;

/// Both admissions: the demand share and the ledger.
const POLICIES: [Policy; 2] = [
    Policy::DemandShare(PartitionPolicy::Strict),
    Policy::Ledger(PartitionPolicy::Strict),
];

fn simulate(name: &str, policy: Policy) -> (SimConfig, Outcome, Report) {
    let mut cfg = scenario(name, SEED, 5).expect("known scenario");
    cfg.duration_ms = 14_000;
    cfg.policy = policy;
    let outcome = run(&cfg)
        .unwrap_or_else(|e| panic!("{name} {policy:?} seed {SEED}: simulation failed: {e}"));
    let report = Report::new(&cfg, &outcome);
    (cfg, outcome, report)
}

/// The nodes cut off for their clocks at the end of the run.
fn cut_off(out: &Outcome) -> Vec<usize> {
    out.faults.clock_fenced.iter().map(|(n, _)| *n).collect()
}

/// Of what was offered from `from_s` to `to_s` seconds (the limit's room then at most), the
/// share admitted.
fn used_between(cfg: &SimConfig, out: &Outcome, from_s: usize, to_s: usize) -> f64 {
    let span = from_s * 1000..to_s * 1000;
    let offered: u32 = out.offered_per_ms[span.clone()].iter().sum();
    let admitted: u32 = out.admitted_per_ms[span].iter().sum();
    let room = u64::from(cfg.limit) * (to_s - from_s) as u64 * 1000 / cfg.window_ms;
    f64::from(admitted) / u64::from(offered).min(room) as f64
}

fn within_the_bars(name: &str, r: &Report, out: &Outcome) {
    assert!(r.over_admission_mean <= 0.01, "{name} seed {SEED}: {r:?}");
    assert!(r.over_admission_p99 <= 0.05, "{name} seed {SEED}: {r:?}");
    assert!(r.over_admission_max <= 0.10, "{name} seed {SEED}: {r:?}");
    assert!(r.utilization >= 0.95, "{name} seed {SEED}: {r:?}");
    assert!(
        out.faults.clock_fenced.is_empty(),
        "{name} seed {SEED}: no clock is beyond the tolerance, yet {:?} cut off",
        out.faults.clock_fenced
    );
}

#[test]
fn one_node_8_s_ahead_and_one_4_s_behind() {
    for policy in POLICIES {
        let (_, out, r) = simulate("skew8-4", policy);
        let name = format!("skew8-4 {policy:?}");
        assert!(
            out.faults.max_estimated_offset_ms >= 7_900,
            "{name} seed {SEED}: skew not seen: {:?}",
            out.faults
        );
        within_the_bars(&name, &r, &out);
        // Every node's registers stay acceptable to every other: none refused as from the future
        // (a register whose newest bucket is more than a window ahead of the receiver's time).
        let future: u64 = out.wire.iter().map(|w| w.merges.future).sum();
        let merged: u64 = out
            .wire
            .iter()
            .map(|w| w.merges.inserted + w.merges.replaced)
            .sum();
        assert_eq!(
            future, 0,
            "{name} seed {SEED}: {future} registers refused as future"
        );
        // Under the ledger a register goes to its window's owner, and to the others only at
        // anti-entropy.
        assert!(
            merged > 100,
            "{name} seed {SEED}: only {merged} registers merged"
        );
    }
}

#[test]
fn two_nodes_6_s_either_way() {
    for policy in POLICIES {
        let (_, out, r) = simulate("skew6x2", policy);
        let name = format!("skew6x2 {policy:?}");
        assert!(
            out.faults.max_estimated_offset_ms >= 5_900,
            "{name} seed {SEED}: skew not seen: {:?}",
            out.faults
        );
        within_the_bars(&name, &r, &out);
    }
}

#[test]
fn a_clock_stepped_5_s_ahead_mid_run() {
    for policy in POLICIES {
        let (_, out, r) = simulate("step5", policy);
        let name = format!("step5 {policy:?}");
        assert_eq!(
            out.faults.clock_forward_steps, 1,
            "{name} seed {SEED}: step not seen: {:?}",
            out.faults
        );
        assert!(
            out.faults.max_estimated_offset_ms >= 4_900,
            "{name} seed {SEED}: peers did not see the stepped clock: {:?}",
            out.faults
        );
        within_the_bars(&name, &r, &out);
        // The stepped node kept admitting its share after the step.
        let after: u32 = out.admitted_by_node[1][10_000..12_000].iter().sum();
        assert!(
            after > 200,
            "{name} seed {SEED}: node 1 admitted {after} after the step"
        );
    }
}

#[test]
fn a_clock_stepped_5_s_ahead_in_a_cluster_of_two() {
    // No majority to outvote the step: both nodes follow the midpoint, slewing together.
    let mut cfg = scenario("step5", SEED, 2).expect("known scenario");
    cfg.duration_ms = 14_000;
    let out = run(&cfg).expect("simulation runs");
    let r = Report::new(&cfg, &out);
    assert_eq!(cfg.nodes, 2);
    assert_eq!(
        out.faults.clock_forward_steps, 1,
        "seed {SEED}: {:?}",
        out.faults
    );
    within_the_bars("step5 at 2 nodes", &r, &out);
}

#[test]
fn two_nodes_one_3_s_ahead_meet_halfway() {
    let mut cfg = scenario("pair3", SEED, 5).expect("known scenario");
    cfg.duration_ms = 14_000;
    let out = run(&cfg).expect("simulation runs");
    let r = Report::new(&cfg, &out);
    assert_eq!(cfg.nodes, 2);
    // Each sees the other's wall clock 1.5 s from the midpoint.
    assert!(
        (1_400..=1_600).contains(&out.faults.max_estimated_offset_ms),
        "seed {SEED}: {:?}",
        out.faults
    );
    within_the_bars("pair3", &r, &out);
}

#[test]
fn beyond_the_tolerance_the_node_is_cut_off() {
    for policy in POLICIES {
        for (name, node, offset) in [("skew15", 1usize, 15_000i64), ("skew-12", 1, -12_000)] {
            let (_, out, r) = simulate(name, policy);
            let name = format!("{name} {policy:?}");
            assert_eq!(
                out.faults.clock_fenced.len(),
                1,
                "{name} seed {SEED}: {:?}",
                out.faults
            );
            let (fenced, reported) = out.faults.clock_fenced[0];
            assert_eq!(fenced, node, "{name} seed {SEED}: the wrong node cut off");
            assert!(
                (reported - offset).abs() <= 100,
                "{name} seed {SEED}: reports {reported} ms, clock is {offset} ms off"
            );
            // Cut off on both sides, it and they share the limit as the strict policy does.
            assert!(r.over_admission_max <= 0.05, "{name} seed {SEED}: {r:?}");
            assert!(r.utilization >= 0.95, "{name} seed {SEED}: {r:?}");
        }
    }
}

#[test]
fn a_node_a_minute_and_a_half_off_cannot_join_and_is_cut_off() {
    for policy in POLICIES {
        let (_, out, r) = simulate("skew90", policy);
        let name = format!("skew90 {policy:?}");
        let stale: u64 = out
            .wire
            .iter()
            .map(|w| w.dropped.get("stale").copied().unwrap_or(0))
            .sum();
        assert!(
            stale > 0,
            "{name} seed {SEED}: no datagram was refused as stale"
        );
        assert_eq!(cut_off(&out), [1], "{name} seed {SEED}: {:?}", out.faults);
        assert!(r.over_admission_max <= 0.05, "{name} seed {SEED}: {r:?}");
    }
}

/// Under the ledger a node whose clock is cut off leases nothing (its cluster time is its wall
/// clock then, seconds from everyone's) and says so; the others leave it off their rings while
/// its word holds, so the next owner leases its windows. On the seed below it owns the measured
/// key, from the start: the limit holds, and the key is leased all the same (ALGORITHM.md, L3,
/// Clocks).
#[test]
fn under_the_ledger_a_key_whose_owner_is_cut_off_is_leased_by_the_next_owner() {
    let mut cfg = scenario("skew15", 5, 5).expect("known scenario");
    cfg.duration_ms = 14_000;
    cfg.policy = Policy::Ledger(PartitionPolicy::Strict);
    let out = run(&cfg).unwrap_or_else(|e| panic!("skew15 ledger seed 5: {e}"));
    let r = Report::new(&cfg, &out);
    assert_eq!(cut_off(&out), [1], "skew15 ledger seed 5: {:?}", out.faults);
    assert!(r.over_admission_max <= 0.001, "skew15 ledger seed 5: {r:?}");
    let offered: u32 = out.offered_per_ms[8_000..].iter().sum();
    assert!(offered > 10_000, "offered {offered}");
    let used = used_between(&cfg, &out, 8, 14);
    assert!(
        used >= 0.9,
        "skew15 ledger seed 5: {used:.3} used in the last 6 s: {r:?}"
    );
}

/// The owner of the measured key (the seed above) has its clock stepped 15 s ahead while it
/// leases, and back 10 s later: its windows go to the next owner while it leases nothing, and
/// come back once its word has lapsed. No window passes the limit across either handover,
/// and the key is leased again in each phase.
#[test]
fn under_the_ledger_an_owner_cut_off_and_back_hands_its_windows_over_and_takes_them_back() {
    use limitmesh_sim::cluster::Fault;
    let mut cfg = scenario("steady", 5, 5).expect("known scenario");
    cfg.duration_ms = 34_000;
    cfg.policy = Policy::Ledger(PartitionPolicy::Strict);
    cfg.faults.push(Fault::ClockStep {
        node: 1,
        at_ms: 8_000,
        by_ms: 15_000,
    });
    cfg.faults.push(Fault::ClockStep {
        node: 1,
        at_ms: 18_000,
        by_ms: -15_000,
    });
    let out = run(&cfg).unwrap_or_else(|e| panic!("step15 ledger seed 5: {e}"));
    let r = Report::new(&cfg, &out);
    assert!(
        out.faults.clock_fence_events > 0,
        "the step cut no clock off: {:?}",
        out.faults
    );
    assert!(r.over_admission_max <= 0.001, "step15 ledger seed 5: {r:?}");
    for (from, to) in [(4, 8), (13, 18), (30, 34)] {
        let used = used_between(&cfg, &out, from, to);
        assert!(
            used >= 0.85,
            "step15 ledger seed 5: {used:.3} used from {from} s to {to} s: {r:?}"
        );
    }
}

/// A node whose clock is cut off from the start, the measured key's owner (the seed above), has
/// its clock mended at 8 s: 12 s behind and stepped forward (its cluster time jumps), or 15 s
/// ahead and stepped back (its cluster time stands still until real time catches up). No
/// window passes the limit while its windows come back to it, and the key is leased at the
/// end.
#[test]
fn under_the_ledger_an_owner_whose_clock_is_mended_takes_its_windows_back_within_the_limit() {
    use limitmesh_sim::cluster::Fault;
    for (name, by_ms) in [("skew-12", 12_000), ("skew15", -15_000)] {
        let mut cfg = scenario(name, 5, 5).expect("known scenario");
        cfg.duration_ms = 34_000;
        cfg.policy = Policy::Ledger(PartitionPolicy::Strict);
        cfg.faults.push(Fault::ClockStep {
            node: 1,
            at_ms: 8_000,
            by_ms,
        });
        let out = run(&cfg).unwrap_or_else(|e| panic!("{name} mended, seed 5: {e}"));
        let r = Report::new(&cfg, &out);
        assert!(
            out.faults.clock_fence_events > 0 && out.faults.clock_fenced.is_empty(),
            "{name} mended, seed 5: cut off, then not: {:?}",
            out.faults
        );
        assert!(
            r.over_admission_max <= 0.001,
            "{name} mended, seed 5: {r:?}"
        );
        let used = used_between(&cfg, &out, 30, 34);
        assert!(
            used >= 0.85,
            "{name} mended, seed 5: {used:.3} used in the last 4 s: {r:?}"
        );
    }
}

/// Three of five wall clocks step 5 s ahead: the median moves, and the serving nodes slew
/// towards it together, for a thousand seconds. A node that restarts meanwhile (the measured
/// key's owner, the seed above, or a user of it) takes the cluster time the serving members
/// keep, which their datagrams say, not the moved reference: a node that took the reference
/// would be 5 s from every other member, and the key's use would fall to nothing within
/// seconds (ALGORITHM.md §1, "A jump lands on the cluster time the serving members keep").
#[test]
fn a_node_restarted_while_the_cluster_slews_takes_the_cluster_time_it_keeps() {
    use limitmesh_sim::cluster::Fault;
    for policy in POLICIES {
        for restarted in [1usize, 0] {
            let name = format!("node {restarted} restarted while slewing, {policy:?}, seed 5");
            let mut cfg = scenario("steady", 5, 5).expect("known scenario");
            cfg.duration_ms = 24_000;
            cfg.policy = policy;
            for node in [2, 3, 4] {
                cfg.faults.push(Fault::ClockStep {
                    node,
                    at_ms: 6_000,
                    by_ms: 5_000,
                });
            }
            cfg.faults.push(Fault::Crash {
                node: restarted,
                at_ms: 9_000,
                restart_ms: Some(10_000),
            });
            let out = run(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
            let r = Report::new(&cfg, &out);
            assert!(
                out.faults.clock_forward_steps == 3 && out.faults.restarts == 1,
                "{name}: the steps and the restart: {:?}",
                out.faults
            );
            // The ledger's bound; the demand share's bars.
            let (max, mean) = match policy {
                Policy::Ledger(_) => (0.001, 0.0),
                _ => (0.10, 0.01),
            };
            assert!(
                r.over_admission_max <= max && r.over_admission_mean <= mean,
                "{name}: {r:?}"
            );
            let used = used_between(&cfg, &out, 14, 24);
            assert!(
                used >= 0.9,
                "{name}: {used:.3} used from 14 s to 24 s: {r:?}"
            );
        }
    }
}
