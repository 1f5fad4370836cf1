//! Wrong clocks, seconds off, on fixed seeds: within `limiter.max_clock_drift_ms` (10 s) the
//! cluster runs on the median clock and holds the design's bars (mean ≤ 1 %, p99 ≤ 5 %, max
//! ≤ 10 %, utilization ≥ 95 %); beyond it, the node is cut off and the busiest window stays
//! within 1.05 × L. Each test first asserts that the clocks were as wrong as injected (the
//! peers estimated the offset, or the wall clock was seen to step). A failure names its seed;
//! rerun it with `cargo run --release -p limitmesh-sim -- <scenario> --seed <seed>`.

use limitmesh_sim::cluster::{Outcome, SimConfig};
use limitmesh_sim::scenario::scenario;
use limitmesh_sim::{Report, run};

const SEED: u64 = 3;

fn simulate(name: &str) -> (SimConfig, Outcome, Report) {
    let mut cfg = scenario(name, SEED, 5).expect("known scenario");
    cfg.duration_ms = 14_000;
    let outcome =
        run(&cfg).unwrap_or_else(|e| panic!("{name} seed {SEED}: simulation failed: {e}"));
    let report = Report::new(&cfg, &outcome);
    (cfg, outcome, report)
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
    let (_, out, r) = simulate("skew8-4");
    assert!(
        out.faults.max_estimated_offset_ms >= 7_900,
        "seed {SEED}: skew not seen: {:?}",
        out.faults
    );
    within_the_bars("skew8-4", &r, &out);
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
        "seed {SEED}: {future} registers refused as future"
    );
    assert!(
        merged > 1_000,
        "seed {SEED}: only {merged} registers merged"
    );
}

#[test]
fn two_nodes_6_s_either_way() {
    let (_, out, r) = simulate("skew6x2");
    assert!(
        out.faults.max_estimated_offset_ms >= 5_900,
        "seed {SEED}: skew not seen: {:?}",
        out.faults
    );
    within_the_bars("skew6x2", &r, &out);
}

#[test]
fn a_clock_stepped_5_s_ahead_mid_run() {
    let (_, out, r) = simulate("step5");
    assert_eq!(
        out.faults.clock_forward_steps, 1,
        "seed {SEED}: step not seen: {:?}",
        out.faults
    );
    assert!(
        out.faults.max_estimated_offset_ms >= 4_900,
        "seed {SEED}: peers did not see the stepped clock: {:?}",
        out.faults
    );
    within_the_bars("step5", &r, &out);
    // The stepped node kept admitting its share after the step.
    let after: u32 = out.admitted_by_node[1][10_000..12_000].iter().sum();
    assert!(
        after > 200,
        "seed {SEED}: node 1 admitted {after} after the step"
    );
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
    for (name, node, offset) in [("skew15", 1usize, 15_000i64), ("skew-12", 1, -12_000)] {
        let (_, out, r) = simulate(name);
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

#[test]
fn a_node_a_minute_and_a_half_off_cannot_join_and_is_cut_off() {
    let (_, out, r) = simulate("skew90");
    let stale: u64 = out
        .wire
        .iter()
        .map(|w| w.dropped.get("stale").copied().unwrap_or(0))
        .sum();
    assert!(
        stale > 0,
        "skew90 seed {SEED}: no datagram was refused as stale"
    );
    assert_eq!(
        out.faults
            .clock_fenced
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>(),
        [1],
        "skew90 seed {SEED}: {:?}",
        out.faults
    );
    assert!(r.over_admission_max <= 0.05, "skew90 seed {SEED}: {r:?}");
}
