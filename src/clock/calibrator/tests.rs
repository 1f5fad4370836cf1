//! The calibrator on recorded offset sequences: steady, noisy, stepped and asymmetric clocks,
//! as one node sees four peers through datagrams every 200 ms.

use super::*;

/// One node's view: its own wall is `mono + own_offset`, peer `p` sends its wall
/// `mono + offsets[p]` (true time is `mono`), seen `latency(p, round)` ms later.
struct Recording {
    own_offset: Vec<i64>,
    peer_offsets: Vec<Vec<i64>>,
    latency: fn(usize, usize) -> u64,
}

const WALL0: i64 = 1_700_000_000_000;

/// Replays `rec` round by round (warm-up for the first `warm_rounds`), returning each round's
/// steering.
fn replay(rec: &Recording, warm_rounds: usize, max_drift_ms: u64) -> Vec<Steering> {
    let mut cal = Calibrator::default();
    let mut base = WALL0 + rec.own_offset[0];
    let mut fenced = false;
    let mut out = Vec::new();
    for round in 0..rec.own_offset.len() {
        let mono = 10_000 + round as u64 * 200;
        for (p, offsets) in rec.peer_offsets.iter().enumerate() {
            let lat = (rec.latency)(p, round);
            let sent_wall = (mono as i64 + WALL0 + offsets[round]) as u64;
            cal.observe(p as u128, sent_wall, mono + lat);
        }
        let own = WALL0 + rec.own_offset[round];
        let reference = cal.reference(own, 0..rec.peer_offsets.len() as u128);
        let how = if round < warm_rounds {
            Steer::Jump
        } else {
            Steer::Slew { elapsed_ms: 200 }
        };
        let s = steer(base, own, reference, max_drift_ms, fenced, how);
        (base, fenced) = (s.base, s.fenced);
        out.push(s);
    }
    out
}

/// Cluster time minus true time, for a base.
fn error_of(s: &Steering) -> i64 {
    s.base - WALL0
}

fn constant(v: i64, n: usize) -> Vec<i64> {
    vec![v; n]
}

#[test]
fn steady_clocks_leave_time_alone() {
    let rec = Recording {
        own_offset: constant(0, 50),
        peer_offsets: vec![constant(0, 50); 4],
        latency: |_, _| 1,
    };
    let s = replay(&rec, 5, 10_000);
    assert!(
        s.iter().all(|s| s.base == WALL0 && !s.fenced),
        "{:?}",
        s.last()
    );
}

#[test]
fn a_node_8_s_fast_is_corrected_during_warm_up() {
    let rec = Recording {
        own_offset: constant(8_000, 20),
        peer_offsets: vec![constant(0, 20); 4],
        latency: |p, r| 1 + ((p * 7 + r * 13) % 20) as u64,
    };
    let s = replay(&rec, 5, 10_000);
    let last = s.last().unwrap();
    assert!(!last.fenced);
    assert!(
        error_of(last).abs() <= DEAD_BAND_MS,
        "error {}",
        error_of(last)
    );
    assert!(
        (last.offset_ms - 8_000).abs() <= 20,
        "offset {}",
        last.offset_ms
    );
    // It jumped in the first round, not slewed.
    assert!(error_of(&s[0]).abs() <= 20, "{:?}", s[0]);
}

#[test]
fn noisy_latency_biases_the_estimate_by_no_more_than_the_smallest_latency() {
    // Every peer correct, latencies 1..=40 ms varying per datagram: the estimate keeps the
    // tightest of the last 16, so once the warm-up's jumps are over cluster time stays within
    // the dead band of true time; during them, within the latency the first datagrams took.
    let rec = Recording {
        own_offset: constant(0, 200),
        peer_offsets: vec![constant(0, 200); 4],
        latency: |p, r| 1 + ((p * 31 + r * 17) % 40) as u64,
    };
    let s = replay(&rec, 5, 10_000);
    for (round, st) in s.iter().enumerate() {
        let within = if round < 5 { 40 } else { DEAD_BAND_MS };
        assert!(error_of(st).abs() <= within, "round {round}: {st:?}");
    }
}

#[test]
fn a_step_of_this_nodes_wall_clock_is_outvoted() {
    // Correct until round 50, then its wall clock steps 5 s ahead; the peers stay right.
    let own: Vec<i64> = (0..150).map(|r| if r < 50 { 0 } else { 5_000 }).collect();
    let rec = Recording {
        own_offset: own,
        peer_offsets: vec![constant(0, 150); 4],
        latency: |_, _| 2,
    };
    let s = replay(&rec, 5, 10_000);
    for st in &s {
        assert!(error_of(st).abs() <= DEAD_BAND_MS, "{st:?}");
    }
    assert!((s[149].offset_ms - 5_000).abs() <= 5, "{:?}", s[149]);
}

#[test]
fn a_step_of_a_peer_is_outvoted_and_a_step_of_most_peers_is_followed_slowly() {
    // Round 20: one peer steps −3 s (outvoted). Round 40: three peers and this node step
    // +3 s together (an NTP correction fleet-wide): followed at the slew rate, not at once.
    let rounds = 200;
    let own: Vec<i64> = (0..rounds)
        .map(|r| if r < 40 { 0 } else { 3_000 })
        .collect();
    let shifted = |from: usize, by: i64| -> Vec<i64> {
        (0..rounds).map(|r| if r < from { 0 } else { by }).collect()
    };
    let rec = Recording {
        own_offset: own,
        peer_offsets: vec![
            shifted(20, -3_000),
            shifted(40, 3_000),
            shifted(40, 3_000),
            shifted(40, 3_000),
        ],
        latency: |_, _| 1,
    };
    let s = replay(&rec, 5, 10_000);
    assert!(error_of(&s[39]).abs() <= DEAD_BAND_MS, "{:?}", s[39]);
    // 1 ms per 200 ms round at 0.5 %.
    let per_round = 200 * SLEW_FORWARD_PER_MILLE / 1_000;
    for r in 41..rounds {
        let moved = s[r].base - s[r - 1].base;
        assert!((0..=per_round).contains(&moved), "round {r}: moved {moved}");
    }
    // After 160 rounds at 1 ms: 160 ms of the 3 000 ms.
    let err = error_of(&s[rounds - 1]);
    assert!((150..=170).contains(&err), "err {err}");
}

#[test]
fn a_node_that_served_alone_jumps_at_first_contact_then_slews() {
    // A node served alone on a clock 8 s fast (no warm-up: it had no peers); then four
    // correct peers appear. Slewing would take 400 s: its first steer with peers jumps (the
    // node loop passes `Steer::Jump` then), the later ones slew.
    let rec = Recording {
        own_offset: constant(8_000, 10),
        peer_offsets: vec![constant(0, 10); 4],
        latency: |_, _| 1,
    };
    let s = replay(&rec, 1, 10_000);
    assert!(error_of(&s[0]).abs() <= DEAD_BAND_MS, "{:?}", s[0]);
    assert!(!s[0].fenced && !s[0].uncorrected);
    let slewed = steer(
        WALL0,
        WALL0 - 900,
        WALL0 - 900,
        10_000,
        false,
        Steer::Slew { elapsed_ms: 200 },
    );
    // Back at 1 %: 2 ms per 200 ms round.
    assert_eq!(slewed.base, WALL0 - 2);
}

#[test]
fn asymmetric_latency_biases_by_the_one_way_latency_only() {
    // Peers' datagrams take 60 ms to arrive (a slow return path): every estimate is 60 ms
    // short, the median too; no feedback makes it grow round after round.
    let rec = Recording {
        own_offset: constant(0, 300),
        peer_offsets: vec![constant(0, 300); 4],
        latency: |_, _| 60,
    };
    let s = replay(&rec, 5, 10_000);
    let last = s.last().unwrap();
    assert_eq!(error_of(last), -60, "{last:?}");
    assert_eq!(last.offset_ms, 60);
}

#[test]
fn beyond_the_tolerance_the_node_cuts_itself_off_and_keeps_its_time() {
    let rec = Recording {
        own_offset: constant(15_000, 20),
        peer_offsets: vec![constant(0, 20); 4],
        latency: |_, _| 1,
    };
    let s = replay(&rec, 5, 10_000);
    assert!(
        s.iter()
            .all(|s| s.fenced && s.uncorrected && s.base == WALL0 + 15_000),
        "{:?}",
        s[0]
    );
    assert!((s[19].offset_ms - 15_000).abs() <= 2);
    // Its peers cut it off too, from their side.
    assert!(peer_fenced(WALL0 + 15_000 - 1, WALL0, 10_000, false));
    assert!(!peer_fenced(WALL0 + 8_000, WALL0, 10_000, false));
}

#[test]
fn the_node_and_its_peers_cut_it_off_at_the_same_threshold_and_let_it_back_lower() {
    // 9.5 s of a 10 s tolerance: corrected, and cut off, by itself and by its peers alike, so
    // that neither side counts on a share the other does not leave it.
    let s = steer(WALL0, WALL0 + 9_500, WALL0, 10_000, false, Steer::Jump);
    assert!(s.fenced && !s.uncorrected);
    assert_eq!(s.base, WALL0);
    assert!(peer_fenced(WALL0 + 9_500, WALL0, 10_000, false));
    // 8.7 s: not cut off if it was not, still cut off if it was (back below 8.5 s only).
    for was in [false, true] {
        let s = steer(WALL0, WALL0 + 8_700, WALL0, 10_000, was, Steer::Jump);
        assert_eq!(s.fenced, was);
        assert_eq!(peer_fenced(WALL0 + 8_700, WALL0, 10_000, was), was);
    }
    let s = steer(WALL0, WALL0 + 8_400, WALL0, 10_000, true, Steer::Jump);
    assert!(!s.fenced);
    assert!(!peer_fenced(WALL0 - 8_400, WALL0, 10_000, true));
}

#[test]
fn two_nodes_meet_halfway() {
    let rec = Recording {
        own_offset: constant(0, 10),
        peer_offsets: vec![constant(3_000, 10)],
        latency: |_, _| 1,
    };
    let s = replay(&rec, 5, 10_000);
    let last = s.last().unwrap();
    assert!((error_of(last) - 1_500).abs() <= 1, "{last:?}");
}

#[test]
fn medians() {
    assert_eq!(median(&mut []), 0);
    assert_eq!(median(&mut [5]), 5);
    assert_eq!(median(&mut [9, -1, 4]), 4);
    assert_eq!(median(&mut [0, 3_000]), 1_500);
    assert_eq!(median(&mut [-3, 0]), -2);
    assert_eq!(median(&mut [i64::MAX, i64::MAX]), i64::MAX);
    assert_eq!(median(&mut [i64::MIN, i64::MIN + 2]), i64::MIN + 1);
}

#[test]
fn a_clock_fixed_after_being_beyond_the_tolerance_stays_cut_off_until_cluster_time_follows() {
    // Cut off at +15 s with cluster time left on the wrong clock; NTP fixes the wall clock.
    // Slewing back from +15 s, cluster time is still far from the cluster's: still cut off.
    let s = steer(
        WALL0 + 15_000,
        WALL0,
        WALL0,
        10_000,
        true,
        Steer::Slew { elapsed_ms: 200 },
    );
    assert!(!s.uncorrected && s.fenced, "{s:?}");
    // A jump (the node loop allows one, as at first contact) ends it.
    let s = steer(WALL0 + 15_000, WALL0, WALL0, 10_000, true, Steer::Jump);
    assert!(!s.fenced && s.base == WALL0, "{s:?}");
}

proptest::proptest! {
    /// The estimate is the largest of the last `SAMPLES` samples, whatever their order: a
    /// maximum that leaves the window is replaced by the largest of those still in it.
    #[test]
    fn the_estimate_is_the_largest_of_the_last_samples(
        offsets in proptest::collection::vec(-1_000i64..1_000, 1..60),
    ) {
        let mut cal = Calibrator::default();
        let mono = 1_000_000u64;
        for (i, offset) in offsets.iter().enumerate() {
            let sent = (mono as i64 + offset) as u64;
            cal.observe(7, sent, mono);
            let from = (i + 1).saturating_sub(SAMPLES);
            let expected = offsets[from..=i].iter().copied().max();
            proptest::prop_assert_eq!(cal.estimate(7), expected, "after sample {}", i);
        }
        proptest::prop_assert_eq!(cal.estimate(8), None);
    }
}

/// A datagram's lateness is told against the peer's datagrams before it: one that came the
/// quickest is 0 late, one that waited is late by the wait; one that came more than `within`
/// sooner than any before it (its sender's clock stepped forward) cannot be told, nor can the
/// first.
#[test]
fn a_datagrams_lateness_is_told_against_the_quickest_before_it() {
    let mut c = Calibrator::default();
    // The peer's wall clock is 5 000 ahead of this node's monotonic clock; latencies 3, 1, 4.
    c.observe(9, 105_000 - 3, 100_000);
    assert_eq!(
        c.lateness_ms(9, 105_000 - 3, 100_000, 200),
        None,
        "the first"
    );
    c.observe(9, 105_100 - 1, 100_100);
    assert_eq!(
        c.lateness_ms(9, 105_100 - 1, 100_100, 200),
        Some(0),
        "quicker than before"
    );
    c.observe(9, 105_200 - 4, 100_200);
    assert_eq!(c.lateness_ms(9, 105_200 - 4, 100_200, 200), Some(3));
    // Held back 900 ms on the way.
    c.observe(9, 105_300 - 901, 100_300);
    assert_eq!(c.lateness_ms(9, 105_300 - 901, 100_300, 200), Some(900));
    // The peer's clock stepped 1 s forward: its next datagram looks 1 s early.
    c.observe(9, 106_400 - 1, 100_400);
    assert_eq!(c.lateness_ms(9, 106_400 - 1, 100_400, 200), None);
    assert_eq!(c.lateness_ms(7, 1, 1, 200), None, "a peer never heard");
}

/// A jump to a target lands on it, whatever the reference, and however near it is (the dead
/// band would leave a joiner up to the band from the members it joins). The fence is still
/// judged against the reference.
#[test]
fn a_jump_to_a_target_lands_on_it() {
    let s = steer(1_000, 6_000, 6_000, 10_000, false, Steer::JumpTo(1_500));
    assert_eq!(s.base, 1_500);
    assert!(!s.fenced);
    let s = steer(
        1_000,
        6_000,
        6_000,
        10_000,
        false,
        Steer::JumpTo(1_000 + DEAD_BAND_MS),
    );
    assert_eq!(s.base, 1_000 + DEAD_BAND_MS);
    let s = steer(1_000, 6_000, 6_000, 10_000, false, Steer::Jump);
    assert_eq!(s.base, 6_000, "a jump to the reference");
    // The reference moved 9.5 s, and the serving members follow it, cut off until they are
    // closer: so is the node that joins them.
    let s = steer(0, 9_500, 9_500, 10_000, false, Steer::JumpTo(0));
    assert_eq!(s.base, 0);
    assert!(s.fenced);
    // A target beyond the tolerance lands at its edge.
    let s = steer(0, 0, 0, 10_000, false, Steer::JumpTo(3_600_000));
    assert_eq!(s.base, 10_000);
    let s = steer(0, 0, 0, 10_000, false, Steer::JumpTo(i64::MIN));
    assert_eq!(s.base, -10_000);
}
