use super::*;

const KEY: RingKey = [7; 32];

fn members(n: u128) -> Vec<Member> {
    (1..=n)
        .map(|i| Member {
            id: i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835),
            addr: SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 7946)),
        })
        .collect()
}

fn key(i: u128) -> KeyId {
    KeyId(i.wrapping_mul(0xD6E8_FEB8_6659_FD93_A5A5_5A5A_1234_5678))
}

/// Owners the slow way, independent of `Ring`: every point of every member, sorted by
/// point and then by member; the first at or after the key's point (wrapping), then the
/// next point of another member.
fn reference_ring(members: &[Member]) -> Vec<(u64, u128, SocketAddr)> {
    let mut points: Vec<(u64, u128, SocketAddr)> = members
        .iter()
        .flat_map(|m| points_of(&KEY, m.id).map(move |p| (p, m.id, m.addr)))
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

fn reference_owners(points: &[(u64, u128, SocketAddr)], k: KeyId) -> Option<[Member; 2]> {
    if points.is_empty() {
        return None;
    }
    let at = point_of_key(k);
    let start = points.partition_point(|(p, _, _)| *p < at) % points.len();
    let member = |i: usize| Member {
        id: points[i].1,
        addr: points[i].2,
    };
    let first = member(start);
    let second = (1..points.len())
        .map(|d| member((start + d) % points.len()))
        .find(|m| m.id != first.id)
        .unwrap_or(first);
    Some([first, second])
}

#[test]
fn every_view_of_the_same_members_names_the_same_two_owners() {
    let m = members(50);
    let mut shuffled = m.clone();
    shuffled.reverse();
    let (a, b) = (Ring::of(KEY, &m), Ring::of(KEY, &shuffled));
    for k in 0..1_000 {
        let owners = a.owners(key(k)).unwrap();
        assert_eq!(owners, b.owners(key(k)).unwrap());
        assert_ne!(owners[0].id, owners[1].id);
    }
}

#[test]
fn keys_spread_over_the_members_and_a_leaver_moves_only_its_own() {
    let m = members(100);
    let ring = Ring::of(KEY, &m);
    let mut owned = vec![0u32; 100];
    let keys = 20_000;
    for k in 0..keys {
        let [o, _] = ring.owners(key(k)).unwrap();
        owned[m.iter().position(|x| x.id == o.id).unwrap()] += 1;
    }
    let mean = keys as f64 / 100.0;
    let max = f64::from(*owned.iter().max().unwrap());
    assert!(
        max < mean * 1.7,
        "the busiest member owns {max}, the mean is {mean}"
    );
    assert!(owned.iter().all(|o| *o > 0));
    // Member 7 leaves: keys it did not own keep their first owner.
    let gone = m[7].id;
    let rest: Vec<Member> = m.iter().copied().filter(|x| x.id != gone).collect();
    let after = Ring::of(KEY, &rest);
    for k in 0..keys {
        let [before, next] = ring.owners(key(k)).unwrap();
        let [now, _] = after.owners(key(k)).unwrap();
        if before.id != gone {
            assert_eq!(now.id, before.id);
        } else {
            assert_eq!(now.id, next.id, "the second owner takes over");
        }
    }
}

#[test]
fn a_ring_updated_through_joins_and_leaves_names_the_owners_a_fresh_one_does() {
    use rand::{RngExt, SeedableRng};
    let all = members(120);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut ring = Ring::new(KEY);
    let mut current: Vec<Member> = Vec::new();
    for step in 0..60 {
        let before: BTreeSet<u128> = current.iter().map(|m| m.id).collect();
        // Some leave, some join (a few at once, as in a fleet's formation), in any order.
        current.retain(|_| rng.random_range(0..10) != 0);
        for _ in 0..rng.random_range(0..6) {
            let m = all[rng.random_range(0..all.len())];
            if !current.contains(&m) {
                current.push(m);
            }
        }
        let mut shuffled = current.clone();
        shuffled.rotate_left(step % current.len().max(1));
        let after: BTreeSet<u128> = current.iter().map(|m| m.id).collect();
        assert_eq!(ring.differs(&shuffled), before != after, "step {step}");
        assert_eq!(ring.update(&shuffled), before != after, "step {step}");
        let fresh = Ring::of(KEY, &current);
        assert_eq!(ring.points.len(), fresh.points.len(), "step {step}");
        let reference = reference_ring(&current);
        for k in 0..300 {
            let owners = reference_owners(&reference, key(k));
            assert_eq!(ring.owners(key(k)), owners, "step {step}, key {k}");
            assert_eq!(
                ring.owner(key(k)),
                owners.map(|[o, _]| o),
                "step {step}, key {k}"
            );
        }
        assert!(!ring.differs(&current), "step {step}");
        assert!(
            !ring.update(&current),
            "step {step}: nothing changed the second time"
        );
    }
    // A member at a new address is another member.
    let mut moved = current.clone();
    moved[0].addr = SocketAddr::from(([10, 9, 9, 9], 1));
    assert!(ring.differs(&moved));
    assert!(ring.update(&moved));
    assert!((0..300).all(|k| ring.owners(key(k)) == Ring::of(KEY, &moved).owners(key(k))));
}

/// The lookup goes by an index of the points' top bits: windows at each point, next to it,
/// and at both ends of the ring (where the search wraps) have the owners the whole ring
/// gives them.
#[test]
fn windows_at_and_beside_every_point_and_at_the_ends_find_their_owners() {
    for n in [1, 2, 7, 300] {
        let all = members(n);
        let ring = Ring::of(KEY, &all);
        let reference = reference_ring(&all);
        // A window id with no high half is its own point.
        let at = |p: u64| KeyId(u128::from(p));
        assert_eq!(point_of_key(at(12345)), 12345);
        let mut probes = vec![0, 1, u64::MAX - 1, u64::MAX];
        for (p, _, _) in &reference {
            probes.extend([p.wrapping_sub(1), *p, p.wrapping_add(1)]);
        }
        for top in 0..(1u64 << INDEX_BITS) {
            probes.push(top << (u64::BITS - INDEX_BITS));
        }
        for p in probes {
            assert_eq!(
                ring.owners(at(p)),
                reference_owners(&reference, at(p)),
                "{n} members, point {p:#x}"
            );
        }
    }
}

#[test]
fn the_same_id_at_two_addresses_is_one_member_whatever_the_order() {
    let m = members(20);
    let mut twin = m[3];
    twin.addr = SocketAddr::from(([10, 7, 7, 7], 1));
    // The twin joins after its original in one history, before it in another.
    let mut a = Ring::new(KEY);
    a.update(&m);
    let mut with_twin = m.clone();
    with_twin.push(twin);
    a.update(&with_twin);
    let mut b = Ring::new(KEY);
    b.update(&[twin]);
    b.update(&with_twin);
    let one = if (twin.id, twin.addr) < (m[3].id, m[3].addr) {
        twin
    } else {
        m[3]
    };
    let without: Vec<Member> = m
        .iter()
        .copied()
        .filter(|x| x.id != twin.id)
        .chain([one])
        .collect();
    let reference = reference_ring(&without);
    for k in 0..500 {
        let owners = a.owners(key(k)).unwrap();
        assert_eq!(Some(owners), b.owners(key(k)), "key {k}");
        assert_eq!(
            Some(owners),
            reference_owners(&reference, key(k)),
            "key {k}"
        );
        assert_ne!(owners[0].id, owners[1].id, "a second owner to take over");
    }
}

#[test]
fn a_ring_of_one_names_its_member_twice() {
    let m = members(1);
    assert_eq!(Ring::of(KEY, &m).owners(key(1)), Some([m[0], m[0]]));
    assert_eq!(Ring::of(KEY, &[]).owners(key(1)), None);
}

#[test]
fn rings_under_the_same_key_agree_and_another_key_places_members_elsewhere() {
    let m = members(40);
    let mut reversed = m.clone();
    reversed.reverse();
    let (a, b) = (Ring::of(KEY, &m), Ring::of(KEY, &reversed));
    let other = Ring::of([8; 32], &m);
    let mut moved = 0;
    for k in 0..1_000 {
        assert_eq!(a.owners(key(k)), b.owners(key(k)), "key {k}");
        if a.owners(key(k)).map(|[o, _]| o.id) != other.owners(key(k)).map(|[o, _]| o.id) {
            moved += 1;
        }
    }
    // Under an unrelated key a window keeps its first owner by chance, 1 in 40.
    assert!(
        moved > 900,
        "{moved} of 1000 windows have another first owner"
    );
}

/// The inverse of `mix`: each xor-shift and each odd multiplier undone.
fn unmix(mut x: u64) -> u64 {
    fn inverse(a: u64) -> u64 {
        // Newton's iteration for the inverse modulo 2^64 (each step doubles the bits).
        let mut inv = a;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(inv)));
        }
        inv
    }
    let unshift = |x: u64, s: u32| (1..=64 / s).fold(x, |y, i| y ^ (x >> (s * i)));
    x = unshift(x, 31);
    x = x.wrapping_mul(inverse(0x94D0_49BB_1331_11EB));
    x = unshift(x, 27);
    x = x.wrapping_mul(inverse(0xBF58_476D_1CE4_E5B9));
    unshift(x, 30)
}

#[test]
fn a_boot_id_solved_for_a_windows_point_does_not_make_its_node_the_owner() {
    // An unkeyed placement, `mix(fold(id) ^ mix(p + 1))` with `fold(v) = low ^ mix(high)`,
    // is solved for a boot id whose first point is exactly a window's point.
    let unkeyed_first_point = |id: u128| mix(((id as u64) ^ mix((id >> 64) as u64)) ^ mix(1));
    let solve = |at: u64, high: u64| -> u128 {
        let base = unmix(at) ^ mix(1);
        (u128::from(high) << 64) | u128::from(base ^ mix(high))
    };
    let honest = members(50);
    let mut owned = 0;
    for target in 0..20u128 {
        let window = key(1_000 + target);
        let id = solve(point_of_key(window), 0xA77A_C4E5 + target as u64);
        assert_eq!(unkeyed_first_point(id), point_of_key(window), "solved");
        let attacker = Member {
            id,
            addr: SocketAddr::from(([10, 66, 0, target as u8], 7946)),
        };
        let mut all = honest.clone();
        all.push(attacker);
        let [first, _] = Ring::of(KEY, &all).owners(window).unwrap();
        owned += usize::from(first.id == attacker.id);
    }
    // By chance a member is first owner of 1 window in 51.
    assert!(owned <= 3, "the solved ids own {owned} of their 20 windows");
}

/// The ranges `arcs_of` gives a member's points hold exactly the windows it owns: on a ring
/// it is on, and on a ring without it, those it would own if it came back.
#[test]
fn a_members_arcs_hold_exactly_the_windows_it_owns() {
    let on = Ring::of(KEY, &members(12));
    let gone = members(12)[4].id;
    let without: Vec<Member> = members(12).into_iter().filter(|m| m.id != gone).collect();
    let off = Ring::of(KEY, &without);
    let points = on.points_of_member(gone);
    for ring in [&on, &off] {
        let arcs = ring.arcs_of(&points);
        let within = |p: u64| {
            arcs.iter().any(|(first, last)| {
                if first <= last {
                    (*first..=*last).contains(&p)
                } else {
                    p >= *first || p <= *last
                }
            })
        };
        for k in (0..4_000u128).map(key) {
            let owned = on.owner(k).expect("an owner").id == gone;
            assert_eq!(within(point_of_key(k)), owned, "{k:?}");
        }
    }
}
