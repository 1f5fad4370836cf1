//! Merge laws as properties, and the replica's bookkeeping as examples.

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::*;
use crate::crdt::HlcTimestamp;
use crate::window::WindowSpec;

fn spec() -> WindowSpec {
    WindowSpec::with_default_buckets(1_000).unwrap()
}

fn arb_register() -> impl Strategy<Value = Register> {
    (
        0u64..12,
        (0u64..40, 0u16..3),
        100u64..110,
        0u32..20,
        prop::collection::vec(prop_oneof![9 => 0u32..6, 1 => 65_530u32..70_000], 0..=13),
    )
        .prop_map(
            |(version, (ms, logical), newest_epoch, demand, admitted)| Register {
                version,
                hlc: HlcTimestamp::new(ms, logical),
                newest_epoch,
                demand,
                admitted,
            },
        )
}

fn arb_delivery() -> impl Strategy<Value = (u32, Register)> {
    (0u32..5, arb_register())
}

fn arb_arbitration() -> impl Strategy<Value = Arbitration> {
    prop_oneof![
        Just(Arbitration::VectorDominance),
        Just(Arbitration::MaxTimestamp)
    ]
}

fn replica_of(items: &[(u32, Register)], arb: Arbitration) -> Replica {
    let mut r = Replica::new(&spec());
    for (origin, reg) in items {
        r.merge_register(*origin, reg.as_ref(), arb);
    }
    r
}

fn merged(a: &Replica, b: &Replica, arb: Arbitration) -> Replica {
    let mut out = a.clone();
    out.merge(b, arb);
    out
}

proptest! {
    #![proptest_config(Config::with_cases(512))]

    #[test]
    fn merge_is_commutative(
        a in prop::collection::vec(arb_delivery(), 0..8),
        b in prop::collection::vec(arb_delivery(), 0..8),
        arb in arb_arbitration(),
    ) {
        let (ra, rb) = (replica_of(&a, arb), replica_of(&b, arb));
        prop_assert_eq!(merged(&ra, &rb, arb), merged(&rb, &ra, arb));
    }

    #[test]
    fn merge_is_associative(
        a in prop::collection::vec(arb_delivery(), 0..6),
        b in prop::collection::vec(arb_delivery(), 0..6),
        c in prop::collection::vec(arb_delivery(), 0..6),
        arb in arb_arbitration(),
    ) {
        let (ra, rb, rc) = (replica_of(&a, arb), replica_of(&b, arb), replica_of(&c, arb));
        let left = merged(&merged(&ra, &rb, arb), &rc, arb);
        let right = merged(&ra, &merged(&rb, &rc, arb), arb);
        prop_assert_eq!(left, right);
    }

    #[test]
    fn merge_is_idempotent(
        a in prop::collection::vec(arb_delivery(), 0..8),
        arb in arb_arbitration(),
    ) {
        let ra = replica_of(&a, arb);
        prop_assert_eq!(merged(&ra, &ra, arb), ra);
    }

    /// Two replicas receive the same registers, one in emission order, the other shuffled, with
    /// duplicates, and with some deliveries lost and later repaired by anti-entropy (a full
    /// merge of the first replica's state). They end up equal.
    #[test]
    fn replicas_converge_under_reordering_duplication_and_loss(
        deliveries in prop::collection::vec(arb_delivery(), 1..20),
        order in prop::collection::vec(any::<prop::sample::Index>(), 1..40),
        lost in prop::collection::vec(any::<bool>(), 40),
        arb in arb_arbitration(),
    ) {
        let x = replica_of(&deliveries, arb);
        let mut y = Replica::new(&spec());
        for (k, idx) in order.iter().enumerate() {
            let (origin, reg) = &deliveries[idx.index(deliveries.len())];
            if !lost[k % lost.len()] {
                y.merge_register(*origin, reg.as_ref(), arb);
            }
        }
        // Eventual delivery: everything arrives at least once more, in reverse order.
        for (origin, reg) in deliveries.iter().rev() {
            y.merge_register(*origin, reg.as_ref(), arb);
        }
        prop_assert_eq!(&x, &y);
        // Anti-entropy in either direction changes nothing once converged.
        prop_assert_eq!(merged(&x, &y, arb), x.clone());
        prop_assert_eq!(merged(&y, &x, arb), y);
    }

    /// A summary the replica dominates carries nothing newer: merging it would not raise any
    /// origin's rank, so dropping it unread loses nothing.
    #[test]
    fn a_dominated_summary_carries_nothing_newer(
        held in prop::collection::vec(arb_delivery(), 0..10),
        summary in prop::collection::vec(arb_delivery(), 0..5),
        arb in arb_arbitration(),
    ) {
        let r = replica_of(&held, arb);
        if r.dominates(summary.iter().map(|(o, g)| (*o, g.version, g.hlc)), arb) {
            let mut after = r.clone();
            for (origin, reg) in &summary {
                after.merge_register(*origin, reg.as_ref(), arb);
            }
            prop_assert_eq!(after.len(), r.len());
            for (origin, reg) in after.iter() {
                let before = r.get(origin).unwrap();
                prop_assert_eq!(arb.rank(reg.version, reg.hlc), arb.rank(before.version, before.hlc));
            }
        }
    }

    /// Merging never lowers an origin's rank: what a replica has seen stays seen.
    #[test]
    fn merge_is_monotone_per_origin(
        a in prop::collection::vec(arb_delivery(), 0..8),
        b in prop::collection::vec(arb_delivery(), 0..8),
        arb in arb_arbitration(),
    ) {
        let ra = replica_of(&a, arb);
        let m = merged(&ra, &replica_of(&b, arb), arb);
        for (origin, reg) in ra.iter() {
            let after = m.get(origin).expect("origins are never dropped by merge");
            prop_assert!(arb.rank(after.version, after.hlc) >= arb.rank(reg.version, reg.hlc));
        }
    }
}

fn reg(version: u64, hlc_ms: u64, admitted: &[u32]) -> Register {
    Register {
        version,
        hlc: HlcTimestamp::new(hlc_ms, 0),
        newest_epoch: 17_000_000_000,
        demand: admitted.iter().sum(),
        admitted: admitted.to_vec(),
    }
}

#[test]
fn outcomes_and_counts_that_go_down() {
    let arb = Arbitration::VectorDominance;
    let mut r: Replica = Replica::new(&spec());
    assert_eq!(
        r.merge_register(1, reg(3, 10, &[5, 4]).as_ref(), arb),
        MergeOutcome::Inserted
    );
    assert_eq!(
        r.merge_register(1, reg(3, 10, &[5, 4]).as_ref(), arb),
        MergeOutcome::Duplicate
    );
    assert_eq!(
        r.merge_register(1, reg(2, 99, &[9]).as_ref(), arb),
        MergeOutcome::Stale
    );
    // A refund: a later version with smaller counts replaces the earlier one.
    assert_eq!(
        r.merge_register(1, reg(4, 11, &[2, 4]).as_ref(), arb),
        MergeOutcome::Replaced
    );
    assert_eq!(&r.get(1).unwrap().admitted.to_vec()[..3], &[2, 4, 0]);

    // Under max-timestamp the later stamp wins even with a lower version (a reset counter).
    let mut t: Replica = Replica::new(&spec());
    t.merge_register(1, reg(9, 10, &[1]).as_ref(), Arbitration::MaxTimestamp);
    let out = t.merge_register(1, reg(1, 20, &[7]).as_ref(), Arbitration::MaxTimestamp);
    assert_eq!(out, MergeOutcome::Replaced);
    assert_eq!(t.get(1).unwrap().admitted.get(0), 7);
}

#[test]
fn registers_are_normalised_to_the_window_shape() {
    let arb = Arbitration::VectorDominance;
    let mut r: Replica = Replica::new(&spec());
    let long: Vec<u32> = (1..=20).collect();
    r.merge_register(2, reg(1, 1, &long).as_ref(), arb);
    r.merge_register(1, reg(1, 1, &[7]).as_ref(), arb);
    let two = r.get(2).unwrap();
    assert_eq!(two.admitted.len(), 11);
    assert_eq!(two.admitted.get(10), 11);
    assert_eq!(
        r.get(1).unwrap().admitted.to_vec(),
        vec![7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    // Origins come out in order, whatever the arrival order.
    assert_eq!(r.iter().map(|(o, _)| o).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(r.version_vector().get(2), 1);
}

#[test]
fn expire_drops_registers_that_left_the_window() {
    let s = spec();
    let arb = Arbitration::VectorDominance;
    let mut r: Replica = Replica::new(&s);
    let mut old = reg(1, 1, &[3]);
    old.newest_epoch = 100;
    let mut live = reg(1, 1, &[4]);
    live.newest_epoch = 105;
    r.merge_register(1, old.as_ref(), arb);
    r.merge_register(2, live.as_ref(), arb);
    // At epoch 111, epoch 100 has left (age 11) and epoch 105 is still inside.
    let now = s.epoch_start_ms(111);
    assert_eq!(r.expire(&s, now), 1);
    assert_eq!(r.len(), 1);
    assert!(r.get(2).is_some());
    assert_eq!(
        r.get(2).unwrap().admitted.get(0),
        4,
        "the survivor's counts moved with it"
    );
    assert!(r.remove(2));
    assert!(r.is_empty());
}

#[test]
fn counts_widen_when_one_does_not_fit_sixteen_bits() {
    let arb = Arbitration::VectorDominance;
    let mut r = Replica::new(&spec());
    r.merge_register(1, reg(1, 1, &[3, 65_535]).as_ref(), arb);
    r.merge_register(2, reg(1, 1, &[9]).as_ref(), arb);
    let narrow_bytes = r.heap_bytes();
    r.merge_register(3, reg(1, 1, &[70_000, 1]).as_ref(), arb);
    assert!(r.heap_bytes() > narrow_bytes + 32, "widened");
    assert_eq!(r.get(1).unwrap().admitted.get(1), 65_535);
    assert_eq!(r.get(2).unwrap().admitted.get(0), 9);
    assert_eq!(r.get(3).unwrap().admitted.get(0), 70_000);
    // The same registers in another order give the same replica.
    let mut s = Replica::new(&spec());
    s.merge_register(3, reg(1, 1, &[70_000, 1]).as_ref(), arb);
    s.merge_register(2, reg(1, 1, &[9]).as_ref(), arb);
    s.merge_register(1, reg(1, 1, &[3, 65_535]).as_ref(), arb);
    assert_eq!(r, s);
}

#[test]
fn live_demand_lapses_one_window_after_emission() {
    let s = spec();
    let r = reg(1, 50_000, &[3]);
    assert_eq!(r.as_ref().live_demand(&s, 50_999), 3);
    assert_eq!(r.as_ref().live_demand(&s, 51_000), 0);
}
