use super::*;
use crate::node::placement::Member;

fn ring(ids: &[u128]) -> Arc<Ring> {
    let members: Vec<Member> = ids
        .iter()
        .map(|&id| Member {
            id,
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + id as u16)),
        })
        .collect();
    Arc::new(Ring::of([7; 32], &members))
}

fn spread(k: u128) -> KeyId {
    KeyId(k.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835))
}

/// A node that starts alone owns every window in its first ring, and still owns some once
/// it sees the others: it leases none of them before a quiet period past its warm-up, as
/// the owners before it may lease them until they know of it.
#[test]
fn a_starting_node_leases_nothing_until_a_quiet_period_past_its_warm_up() {
    const QUIET: u64 = 1_600;
    let all = ring(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let quiet_at = |view: &RingView, k: KeyId| view.owner_of(k).expect("an owner").quiet_until_ms;
    let mut node = LedgerNode::default();
    let alone = node
        .install(10_000, &ring(&[1]), 1, (1, 1), QUIET, true, &[], 0)
        .expect("a first view");
    assert_eq!(alone.owner_of(spread(42)).map(|o| o.owner), Some(1));
    assert_eq!(quiet_at(&alone, spread(42)), 10_000 + QUIET);
    let seen = node
        .install(10_200, &all, 2, (8, 8), QUIET, true, &[], 0)
        .expect("a new ring");
    let owned: Vec<KeyId> = (0..256u128)
        .map(spread)
        .filter(|k| seen.owner_of(*k).is_some_and(|o| o.owner == 1))
        .collect();
    assert!(!owned.is_empty(), "the node owns some windows");
    assert!(owned.iter().all(|k| quiet_at(&seen, *k) >= 10_200 + QUIET));
    // The owner alone is the one `owner_of` names, with a ring from before kept.
    assert!((0..256u128).map(spread).all(|k| {
        seen.owner_id(k) == seen.owner_of(k).map(|o| o.owner) && alone.owner_id(k) == Some(1)
    }));
    // Still warming up a round later, with nothing else changed: quiet a period past it.
    let warming = node
        .install(10_400, &all, 2, (8, 8), QUIET, true, &[], 0)
        .expect("a later floor");
    assert!(
        owned
            .iter()
            .all(|k| quiet_at(&warming, *k) >= 10_400 + QUIET)
    );
    // Warmed up: the floor stays where the warm-up left it (the first view past the warm-up
    // is a new one, for the windows handed over: see the joiner's test below).
    node.held_state();
    let warmed = node
        .install(10_600, &all, 2, (8, 8), QUIET, false, &[], 0)
        .expect("the first view past the warm-up");
    assert!(
        owned
            .iter()
            .all(|k| quiet_at(&warmed, *k) == 10_400 + QUIET)
    );
    assert!(
        node.install(10_800, &all, 2, (8, 8), QUIET, false, &[], 0)
            .is_none()
    );
    // A ring change later leaves the windows that stay with the node leasing.
    let later = node
        .install(
            20_000,
            &ring(&[1, 2, 3, 4, 5, 6, 7]),
            3,
            (7, 7),
            QUIET,
            false,
            &[],
            0,
        )
        .expect("a new ring");
    let kept = owned
        .iter()
        .find(|k| later.owner_of(**k).is_some_and(|o| o.owner == 1))
        .expect("a window the node keeps");
    assert!(quiet_at(&later, *kept) < 20_000);
}

/// A starting node whose clock is stepped back to the cluster's (seconds) holds its lease
/// part, its floor and its rings a quiet period from the step, not from readings the step
/// left seconds ahead: it leases its whole part a quiet period after the step.
#[test]
fn a_clock_stepped_back_holds_parts_and_floors_a_quiet_period_from_the_step() {
    const QUIET: u64 = 1_800;
    let mut node = LedgerNode::default();
    let two = ring(&[1, 2]);
    // Ahead by 8 s: alone, then a first peer seen but not heard from.
    node.install(18_000, &ring(&[1]), 1, (1, 1), QUIET, true, &[], 0);
    node.install(18_200, &two, 2, (1, 2), QUIET, true, &[], 0);
    // Stepped back to the cluster's clock, warmed up, the peer heard.
    let stepped = node
        .install(10_400, &two, 2, (2, 2), QUIET, true, &[], 0)
        .expect("a view after the step");
    assert_eq!(stepped.lease_part(), (1, 2), "the part that fell holds");
    let owned = (0..256u128)
        .map(spread)
        .find(|k| stepped.owner_of(*k).is_some_and(|o| o.owner == 1))
        .expect("a window the node owns");
    let quiet_at = |view: &RingView| view.owner_of(owned).expect("an owner").quiet_until_ms;
    assert_eq!(quiet_at(&stepped), 10_400 + QUIET);
    let after = node
        .install(10_400 + QUIET, &two, 2, (2, 2), QUIET, false, &[], 0)
        .expect("the part rises");
    assert_eq!(after.lease_part(), (2, 2), "a quiet period after the step");
    assert!(quiet_at(&after) <= 10_400 + QUIET);
}

/// A ring before a change stays in the view for the change's quiet period and no longer:
/// its quiet time would be in the past, and every owner lookup would read it.
#[test]
fn a_ring_whose_quiet_period_ended_leaves_the_view() {
    const QUIET: u64 = 1_600;
    let mut node = LedgerNode::default();
    let three = ring(&[1, 2, 3]);
    let at = |node: &mut LedgerNode, now: u64| {
        node.install(now, &three, 2, (4, 4), QUIET, false, &[], 0)
    };
    node.install(1_000, &ring(&[1, 2, 3, 4]), 1, (4, 4), QUIET, false, &[], 0)
        .expect("a first view");
    let changed = at(&mut node, 10_000).expect("a new ring");
    assert_eq!(changed.before.len(), 1);
    let moved = (0..256u128)
        .map(spread)
        .find(|k| changed.owner_of(*k).expect("an owner").quiet_until_ms >= 10_000 + QUIET)
        .expect("a window that moved");
    assert!(
        at(&mut node, 10_000 + QUIET - 1).is_none(),
        "within the period"
    );
    let settled = at(&mut node, 10_000 + QUIET).expect("a view without the ring before");
    assert!(settled.before.is_empty());
    assert!(settled.owner_of(moved).expect("an owner").quiet_until_ms <= 10_000 + QUIET);
    assert!(
        at(&mut node, 10_000 + QUIET + 200).is_none(),
        "and it stays"
    );
}

/// Under `strict`, a window whose owner went down without a word is blind to its next
/// owner: the member may be across a cut, where it leased its side the whole limit until
/// its part there fell. A window whose owner left saying so, or that did not move, is not.
#[test]
fn a_window_whose_owner_went_down_without_a_word_is_blind_to_its_next_owner() {
    const QUIET: u64 = 1_600;
    const BLIND_AFTER: u64 = 3_000;
    let mut node = LedgerNode::default();
    node.install(1_000, &ring(&[1, 2, 3, 4]), 1, (4, 4), QUIET, false, &[], 0)
        .expect("a first view");
    let before = ring(&[1, 2, 3, 4]);
    // 3 crashed, 4 left saying so.
    let view = node
        .install(
            50_000,
            &ring(&[1, 2]),
            2,
            (2, 3),
            QUIET,
            false,
            &[(3, crate::clock::monotonic_now())],
            BLIND_AFTER,
        )
        .expect("a new ring");
    // A window is blind where 3 owned it, and where it would own it beside the members now
    // (a member that saw 4 leave before 3 went down gave 3 those of 4's).
    let with_3 = ring(&[1, 2, 3]);
    let (mut blind, mut moved, mut kept) = (Vec::new(), 0, 0);
    for k in (0..2_000u128).map(spread) {
        let was = before.owner(k).expect("an owner").id;
        let o = view.owner_of(k).expect("an owner");
        if was == 3 || with_3.owner(k).expect("an owner").id == 3 {
            blind.push(k);
            assert_eq!(o.blind_since_ms, 50_000 + BLIND_AFTER, "{k:?}");
            assert_eq!(o.leases_from_ms(60_000, 10), 50_000 + BLIND_AFTER + 60_010);
            assert_eq!(o.leases_from_ms(1_000, 10), 50_000 + BLIND_AFTER + 1_010);
        } else if was == 4 {
            moved += 1;
            assert_eq!(o.blind_since_ms, 0, "{k:?}");
            assert_eq!(o.leases_from_ms(60_000, 10), 50_000 + QUIET);
        } else {
            kept += 1;
            assert_eq!(o.blind_since_ms, 0, "{k:?}");
            assert!(o.leases_from_ms(60_000, 10) < 50_000);
        }
    }
    assert!(!blind.is_empty() && moved > 0 && kept > 0);
    // A member that joins (or a member that comes back) takes some of those windows: they
    // stay blind to whoever owns them, from the same time.
    let joined = node
        .install(51_000, &ring(&[1, 2, 9]), 3, (3, 4), QUIET, false, &[], 0)
        .expect("9 joined");
    let taken = blind
        .iter()
        .filter(|k| joined.owner_of(**k).is_some_and(|o| o.owner == 9))
        .count();
    assert!(taken > 0, "9 takes some of 3's windows");
    assert!(blind.iter().all(|k| {
        joined
            .owner_of(*k)
            .is_some_and(|o| o.blind_since_ms == 50_000 + BLIND_AFTER)
    }));
    // A member that came and went down without a word between two views (never on a ring
    // this node installed): the windows it would own beside the members are blind all the
    // same, from when this node learned of it.
    let with_5 = ring(&[1, 2, 5, 9]);
    let down_5 = [(5, crate::clock::monotonic_now())];
    let late = node
        .install(
            52_000,
            &ring(&[1, 2, 9]),
            3,
            (3, 5),
            QUIET,
            false,
            &down_5,
            BLIND_AFTER,
        )
        .expect("5's windows blind");
    let fives: Vec<KeyId> = (0..2_000u128)
        .map(spread)
        .filter(|k| with_5.owner(*k).is_some_and(|o| o.id == 5))
        .collect();
    assert!(!fives.is_empty());
    assert!(fives.iter().all(|k| {
        late.owner_of(*k)
            .is_some_and(|o| o.blind_since_ms >= 52_000 + BLIND_AFTER)
    }));
}

/// A window that member 4 handed over when it left (its last lease there ending at 10 300) is
/// leasable by its next owner once those leases' users have reported, not a quiet period after
/// the ring changed (10 000); one whose last lease ended before the ring changed, once the
/// users have heard the owner left and reported. A window 4 did not hand over, one it named
/// with an end no lease has, or one whose handoff names a member that did not own it, waits out
/// the quiet period. A window it handed with its books, which the limiter keeps, is leasable
/// from the ring's change, and a later word on its end does not forget the books. A handoff
/// past a quiet period is forgotten.
#[test]
fn a_window_handed_over_by_its_leaving_owner_is_leased_once_its_leases_end() {
    const QUIET: u64 = 1_600;
    const REPORTS: u64 = 400;
    // The word comes at 9 500: no lease of 4's ends past a quiet period from then.
    const CAME: u64 = 9_500;
    const TIMING: (u64, u64) = (QUIET, REPORTS);
    let mut node = LedgerNode::default();
    let four = ring(&[1, 2, 3, 4]);
    node.install(1_000, &four, 1, (4, 4), QUIET, false, &[], 0)
        .expect("a first view");
    let of_four: Vec<KeyId> = (0..512u128)
        .map(spread)
        .filter(|k| four.owner(*k).is_some_and(|o| o.id == 4))
        .collect();
    let [handed, ended, far, kept, booked] = [0, 1, 2, 3, 4].map(|i| {
        let fifth = of_four.len() / 5;
        &of_four[i * fifth..(i + 1) * fifth]
    });
    assert!(booked.len() > 1);
    assert!(!kept.is_empty());
    let of_three = (0..512u128)
        .map(spread)
        .find(|k| four.owner(*k).is_some_and(|o| o.id == 3))
        .expect("a window of 3");
    let ends = |keys: &[KeyId], end: u64| keys.iter().map(|k| (*k, end)).collect::<Vec<_>>();
    node.handed(4, &ends(handed, 10_300), CAME, TIMING);
    node.handed(4, &ends(ended, 8_000), CAME, TIMING);
    node.handed(4, &ends(far, CAME + QUIET + 1), CAME, TIMING);
    // Member 3 did not own `of_three`: 4's word on it counts for nothing.
    node.handed(4, &[(of_three, 9_000)], CAME, TIMING);
    for k in booked {
        node.handed_books(4, *k, CAME, TIMING);
    }
    node.handed(4, &ends(&booked[..1], 10_300), CAME, TIMING);
    // Member 3 did not own `kept[0]`: its books on it count for nothing.
    node.handed_books(3, kept[0], CAME, TIMING);
    let view = node
        .install(10_000, &ring(&[1, 2, 3]), 2, (3, 3), QUIET, false, &[], 0)
        .expect("a new ring");
    let quiet = |k: &KeyId| view.owner_of(*k).expect("an owner").quiet_until_ms;
    assert!(handed.iter().all(|k| quiet(k) == 10_300 + REPORTS));
    assert!(ended.iter().all(|k| quiet(k) == 10_000 + REPORTS));
    assert!(booked.iter().all(|k| quiet(k) == 10_000));
    let by = |k: &KeyId| view.owner_of(*k).expect("an owner").handed_by;
    assert!(booked.iter().all(|k| by(k) == Some(4)));
    assert!(handed.iter().chain(kept).all(|k| by(k).is_none()));
    assert!(far.iter().chain(kept).all(|k| quiet(k) == 10_000 + QUIET));
    assert!(quiet(&of_three) < 10_000, "a window that did not move");
    // A quiet period past the leases' reports the word is forgotten, as the ring before is.
    let late = 10_300 + REPORTS + QUIET;
    let settled = node
        .install(late, &ring(&[1, 2, 3]), 2, (3, 3), QUIET, false, &[], 0)
        .expect("a view without the ring before");
    assert!(node.handed.is_empty() && settled.before.is_empty());
    assert!(
        handed
            .iter()
            .all(|k| settled.owner_of(*k).unwrap().quiet_until_ms < late)
    );
}

/// A starting node's window handed over by the member that leased it until it knew of the node
/// (its second owner on the node's ring): leased once the last lease there has ended and the
/// node's warm-up is over, and both were reported, if that is before the floor. Handed by any
/// other member, not handed, or handed to a node whose warm-up timed out (it may not hold every
/// member's registers), the window waits for the floor.
#[test]
fn a_joiners_window_handed_over_by_its_previous_owner_is_leased_before_the_floor() {
    const QUIET: u64 = 1_800;
    const REPORTS: u64 = 400;
    let all = ring(&[1, 2, 3, 4, 5]);
    let owned: Vec<(KeyId, u128)> = (0..512u128)
        .map(spread)
        .filter_map(|k| match all.owners(k) {
            Some([first, second]) if first.id == 1 => Some((k, second.id)),
            _ => None,
        })
        .collect();
    assert!(owned.len() >= 3, "node 1 owns windows");
    let [(early, early_from), (late, late_from), (other, other_from)] =
        [owned[0], owned[1], owned[2]];
    let stranger = (2..=5)
        .find(|id| *id != other_from)
        .expect("a member that is not the window's second owner");
    let floor = 10_200 + QUIET;
    // Node 1 starts: warming up at 10 000 and 10 200 (floor 12 000), warmed at 10 400. The
    // words come while it warms up: lease ends before and after its warm-up's end, and a
    // stranger's word for `other`.
    let start = |held_state: bool| {
        let mut node = LedgerNode::default();
        node.install(10_000, &ring(&[1]), 1, (1, 1), QUIET, true, &[], 0);
        node.install(10_200, &all, 2, (5, 5), QUIET, true, &[], 0);
        node.handed(early_from, &[(early, 10_300)], 10_250, (QUIET, REPORTS));
        node.handed(late_from, &[(late, 10_900)], 10_250, (QUIET, REPORTS));
        node.handed(stranger, &[(other, 10_300)], 10_250, (QUIET, REPORTS));
        if held_state {
            node.held_state();
        }
        node.install(10_400, &all, 2, (5, 5), QUIET, false, &[], 0)
            .expect("the handoffs make a new view")
    };
    let view = start(true);
    let quiet_at = |view: &RingView, k: KeyId| view.owner_of(k).expect("an owner").quiet_until_ms;
    // The later of the lease's end and the warm-up's end (the first view past it), reported.
    assert_eq!(quiet_at(&view, early), 10_400 + REPORTS);
    assert_eq!(quiet_at(&view, late), 10_900 + REPORTS);
    assert_eq!(
        quiet_at(&view, other),
        floor,
        "handed by a member that did not lease it"
    );
    assert!(
        owned[3..].iter().all(|(w, _)| quiet_at(&view, *w) == floor),
        "the windows not handed wait for the floor"
    );
    // A warm-up that timed out: every window waits for the floor.
    let timed_out = start(false);
    assert!(owned.iter().all(|(w, _)| quiet_at(&timed_out, *w) == floor));
}
