//! Which members own a window: consistent hashing over the members, so that every node that
//! sees the same members names the same two owners for a key, and a member joining or leaving
//! moves only the keys it takes or gives up.
//!
//! Each member (this node included) has [`POINTS`] points on a ring of `u64`, placed by a hash
//! of its boot id; a window's id hashes to a point, and its owners are the members of the
//! first two distinct points clockwise from it. The ring is rebuilt when the members change
//! (at most once per summary round), and a lookup is a binary search.

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
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// `(point, index into members)`, sorted.
    points: Vec<(u64, u32)>,
    /// Per point, the member of the next point clockwise that is another member.
    next_other: Vec<u32>,
    members: Vec<Member>,
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

impl Ring {
    /// The ring of `members` (this node included, in any order).
    pub fn new(members: &[Member]) -> Self {
        let mut points = Vec::with_capacity(members.len() * POINTS as usize);
        for (i, m) in members.iter().enumerate() {
            let base = fold(m.id);
            for p in 0..POINTS {
                points.push((mix(base ^ mix(p + 1)), i as u32));
            }
        }
        points.sort_unstable();
        // A point's next other member is the next point's member, unless that is the same
        // member, whose next other it then shares. Twice round backwards settles the points
        // whose run of one member wraps past the end.
        let n = points.len();
        let mut next_other = vec![u32::MAX; n];
        for k in (0..2 * n).rev() {
            let (i, j) = (k % n, (k + 1) % n);
            next_other[i] = if points[j].1 != points[i].1 {
                points[j].1
            } else {
                next_other[j]
            };
        }
        for (i, other) in next_other.iter_mut().enumerate() {
            if *other == u32::MAX {
                // A ring of one member.
                *other = points[i].1;
            }
        }
        Self {
            points,
            next_other,
            members: members.to_vec(),
        }
    }

    /// The owner and the next owner of `key` (the same member twice only on a ring of one).
    pub fn owners(&self, key: KeyId) -> Option<[Member; 2]> {
        if self.points.is_empty() {
            return None;
        }
        let at = fold(key.0);
        let start = self.points.partition_point(|(p, _)| *p < at) % self.points.len();
        let first = self.points[start].1;
        let second = self.next_other[start];
        Some([self.members[first as usize], self.members[second as usize]])
    }
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
    fn a_ring_of_one_names_its_member_twice() {
        let m = members(1);
        assert_eq!(Ring::new(&m).owners(key(1)), Some([m[0], m[0]]));
        assert_eq!(Ring::new(&[]).owners(key(1)), None);
    }
}
