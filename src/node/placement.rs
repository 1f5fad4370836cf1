//! Which members own a window: consistent hashing over the members, so that every node that
//! sees the same members names the same two owners for a key, and a member joining or leaving
//! moves only the keys it takes or gives up.
//!
//! Each member (this node included) has [`POINTS`] points on a ring of `u64`, placed by a hash
//! of its boot id; a window's id hashes to a point, and its owners are the members of the
//! first two distinct points clockwise from it. The ring is updated when the members change
//! (at most once per summary round), and a lookup is a binary search.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::gossip::wire::Destination;
use crate::limiter::KeyId;

/// Points per member: enough that a member's share of the keys stays within a few tens of
/// percent of `1/N`, few enough that a rebuild of a thousand members is a sort of 64 000 words.
pub const POINTS: u64 = 64;

/// A member on the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub id: u128,
    pub addr: SocketAddr,
}

impl Member {
    pub fn destination(self) -> Destination {
        Destination {
            addr: self.addr,
            node: Some(self.id),
        }
    }
}

/// The ring of one membership view.
///
/// Members hold slots that stay theirs while they are members, so a change of the members
/// moves only their own points: the ring is updated in time linear in its points, with no
/// sort of the whole (in a fleet's formation it changes every round, on every node).
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// `(point, slot)`, sorted.
    points: Vec<(u64, u32)>,
    /// The members, by slot; `None`: a free slot.
    slots: Vec<Option<Member>>,
    free: Vec<u32>,
}

/// A 64-bit mix (the finalizer of SplitMix64): ids and key ids are uniformly random already
/// (boot uuids; keyed hashes), so this only has to spread points and combine halves.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn fold(v: u128) -> u64 {
    (v as u64) ^ mix((v >> 64) as u64)
}

/// The points of the member with boot id `id`.
fn points_of(id: u128) -> impl Iterator<Item = u64> {
    let base = fold(id);
    (0..POINTS).map(move |p| mix(base ^ mix(p + 1)))
}

impl Ring {
    /// The ring of `members` (this node included, in any order).
    #[cfg(test)]
    pub fn new(members: &[Member]) -> Self {
        let mut ring = Self::default();
        ring.update(members);
        ring
    }

    /// Makes this the ring of `members` (in any order): the points of members that left
    /// go, those of members that joined come in. Returns whether anything changed.
    ///
    /// Two members whose ids fold to the same value would have the same points, and which of
    /// them owns those would depend on the order they came in: the same id at two addresses,
    /// or an id made up to collide (in an insecure cluster). Only the least of them, by id and
    /// address, is on the ring, so every node names the same owners.
    pub fn update(&mut self, members: &[Member]) -> bool {
        let mut by_fold: std::collections::BTreeMap<u64, (u128, SocketAddr)> = Default::default();
        for m in members {
            let entry = by_fold.entry(fold(m.id)).or_insert((m.id, m.addr));
            *entry = (*entry).min((m.id, m.addr));
        }
        let wanted: BTreeSet<(u128, SocketAddr)> = by_fold.into_values().collect();
        let mut gone = vec![false; self.slots.len()];
        let mut kept: BTreeSet<(u128, SocketAddr)> = BTreeSet::new();
        for (slot, m) in self.slots.iter_mut().enumerate() {
            if let Some(member) = m {
                if wanted.contains(&(member.id, member.addr)) {
                    kept.insert((member.id, member.addr));
                } else {
                    gone[slot] = true;
                    *m = None;
                    self.free.push(slot as u32);
                }
            }
        }
        let mut added: Vec<(u64, u32)> = Vec::new();
        for &(id, addr) in wanted.difference(&kept) {
            let member = Member { id, addr };
            let slot = match self.free.pop() {
                Some(s) => {
                    self.slots[s as usize] = Some(member);
                    s
                }
                None => {
                    self.slots.push(Some(member));
                    (self.slots.len() - 1) as u32
                }
            };
            added.extend(points_of(id).map(|p| (p, slot)));
        }
        let removed_any = gone.iter().any(|g| *g);
        if !removed_any && added.is_empty() {
            return false;
        }
        if removed_any {
            self.points.retain(|(_, s)| !gone[*s as usize]);
        }
        added.sort_unstable();
        self.points = merge_sorted(std::mem::take(&mut self.points), added);
        true
    }

    /// The owner and the next owner of `key` (the same member twice only on a ring of one).
    pub fn owners(&self, key: KeyId) -> Option<[Member; 2]> {
        if self.points.is_empty() {
            return None;
        }
        let at = fold(key.0);
        let start = self.points.partition_point(|(p, _)| *p < at) % self.points.len();
        let first = self.points[start].1;
        // The next point of another member: with `POINTS` points per member, almost always
        // the next point or the one after it; a ring of one member is the whole ring.
        let n = self.points.len();
        let second = (1..n)
            .map(|d| self.points[(start + d) % n].1)
            .find(|s| *s != first)
            .unwrap_or(first);
        Some([self.slots[first as usize]?, self.slots[second as usize]?])
    }
}

/// The union of two sorted lists, sorted.
fn merge_sorted(a: Vec<(u64, u32)>, b: Vec<(u64, u32)>) -> Vec<(u64, u32)> {
    if b.is_empty() {
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x <= y => a.next(),
            (Some(_), Some(_)) => b.next(),
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
            .flat_map(|m| points_of(m.id).map(move |p| (p, m.id, m.addr)))
            .collect();
        points.sort_unstable();
        points.dedup();
        points
    }

    fn reference_owners(points: &[(u64, u128, SocketAddr)], k: KeyId) -> Option<[Member; 2]> {
        if points.is_empty() {
            return None;
        }
        let at = fold(k.0);
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
        let (a, b) = (Ring::new(&m), Ring::new(&shuffled));
        for k in 0..1_000 {
            let owners = a.owners(key(k)).unwrap();
            assert_eq!(owners, b.owners(key(k)).unwrap());
            assert_ne!(owners[0].id, owners[1].id);
        }
    }

    #[test]
    fn keys_spread_over_the_members_and_a_leaver_moves_only_its_own() {
        let m = members(100);
        let ring = Ring::new(&m);
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
        let after = Ring::new(&rest);
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
        let mut ring = Ring::default();
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
            assert_eq!(ring.update(&shuffled), before != after, "step {step}");
            let fresh = Ring::new(&current);
            assert_eq!(ring.points.len(), fresh.points.len(), "step {step}");
            let reference = reference_ring(&current);
            for k in 0..300 {
                assert_eq!(
                    ring.owners(key(k)),
                    reference_owners(&reference, key(k)),
                    "step {step}, key {k}"
                );
            }
            assert!(
                !ring.update(&current),
                "step {step}: nothing changed the second time"
            );
        }
        // A member at a new address is another member.
        let mut moved = current.clone();
        moved[0].addr = SocketAddr::from(([10, 9, 9, 9], 1));
        assert!(ring.update(&moved));
        assert!((0..300).all(|k| ring.owners(key(k)) == Ring::new(&moved).owners(key(k))));
    }

    #[test]
    fn the_same_id_at_two_addresses_is_one_member_whatever_the_order() {
        let m = members(20);
        let mut twin = m[3];
        twin.addr = SocketAddr::from(([10, 7, 7, 7], 1));
        // The twin joins after its original in one history, before it in another.
        let mut a = Ring::default();
        a.update(&m);
        let mut with_twin = m.clone();
        with_twin.push(twin);
        a.update(&with_twin);
        let mut b = Ring::default();
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
        assert_eq!(Ring::new(&m).owners(key(1)), Some([m[0], m[0]]));
        assert_eq!(Ring::new(&[]).owners(key(1)), None);
    }
}
