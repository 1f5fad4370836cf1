//! Which members own a window: consistent hashing over the members, so that every node that
//! sees the same members names the same two owners for a key, and a member joining or leaving
//! moves only the keys it takes or gives up.
//!
//! Each member (this node included) has [`POINTS`] points on a ring of `u64`, placed by a hash
//! of its boot id keyed with a secret every member holds ([`RingKey`]); a window's id hashes
//! to a point, and its owners are the members of the first two distinct points clockwise from
//! it. The ring is updated when the members change (at most once per summary round), and a
//! lookup is a binary search.
//!
//! The points are a keyed PRF (blake3 in keyed mode) of the boot id, not a function anyone can
//! invert: a node picks its own boot id, and with a public, invertible placement it could
//! solve for an id whose point lands just before a window's and so be that window's first
//! owner, whose sums every user of the window counts by. Without the key the placement of an
//! id cannot be computed at all. A member that holds the key can still try boot ids until one
//! lands where it wants (about one in `N` does, in a cluster of `N`); the key takes away the
//! outright solution, and everyone outside the cluster.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::gossip::wire::Destination;
use crate::limiter::KeyId;

/// Points per member: enough that a member's share of the keys stays within a few tens of
/// percent of `1/N`, few enough that a rebuild of a thousand members is a sort of 64 000 words.
pub const POINTS: u64 = 64;

/// The secret that places members' points: the same on every member, or their rings differ.
pub type RingKey = [u8; 32];

/// The ring key a cluster uses unless it is given one: derived from the cluster id, which is
/// no secret, so every node of the cluster computes the same without configuration.
pub fn ring_key_of_cluster(cluster_id: &str) -> RingKey {
    blake3::derive_key("limitmesh ring points", cluster_id.as_bytes())
}

/// The ring key of a cluster with a naming secret (`cluster.naming_key`): the points then
/// are as hard to place as the window names are to guess.
pub fn ring_key_of_secret(naming_secret: &[u8; 32]) -> RingKey {
    blake3::derive_key(
        "limitmesh ring points from the naming secret",
        naming_secret,
    )
}

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
#[derive(Clone)]
pub struct Ring {
    /// Places the members' points (see the module documentation).
    key: RingKey,
    /// `(point, slot)`, sorted.
    points: Vec<(u64, u32)>,
    /// The members, by slot; `None`: a free slot.
    slots: Vec<Option<Member>>,
    free: Vec<u32>,
    /// `index[b]`: the first point whose top [`INDEX_BITS`] bits are `b` or more, so that a
    /// lookup searches only the few points that share its top bits (a ring of a thousand
    /// members has 64 000 points, and a lookup of an owner is on every window's round).
    index: Vec<u32>,
}

/// The top bits of a point that [`Ring::index`] goes by: with `POINTS` points a member, about
/// `members * POINTS / 2^INDEX_BITS` points share them (16 at a thousand members).
const INDEX_BITS: u32 = 12;

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the key.
        f.debug_struct("Ring")
            .field("points", &self.points.len())
            .field("members", &(self.slots.len() - self.free.len()))
            .finish_non_exhaustive()
    }
}

/// A 64-bit mix (the finalizer of SplitMix64): window ids are uniformly random already (keyed
/// hashes of their names), so this only has to combine their halves.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A window id's point on the ring.
pub(super) fn point_of_key(key: KeyId) -> u64 {
    (key.0 as u64) ^ mix((key.0 >> 64) as u64)
}

/// The points of the member with boot id `id` on the ring keyed with `key`: the first
/// `8 * POINTS` bytes of blake3's keyed output for the id.
fn points_of(key: &RingKey, id: u128) -> impl Iterator<Item = u64> + use<> {
    let mut bytes = [0u8; 8 * POINTS as usize];
    blake3::Hasher::new_keyed(key)
        .update(&id.to_le_bytes())
        .finalize_xof()
        .fill(&mut bytes);
    (0..POINTS as usize).map(move |p| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[8 * p..8 * p + 8]);
        u64::from_le_bytes(word)
    })
}

impl Ring {
    /// An empty ring whose points `key` places.
    pub fn new(key: RingKey) -> Self {
        Self {
            key,
            points: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            index: Vec::new(),
        }
    }

    /// The ring of `members` (this node included, in any order), keyed with `key`.
    #[cfg(test)]
    pub fn of(key: RingKey, members: &[Member]) -> Self {
        let mut ring = Self::new(key);
        ring.update(members);
        ring
    }

    /// Makes this the ring of `members` (in any order): the points of members that left
    /// go, those of members that joined come in. Returns whether anything changed.
    ///
    /// Two members with the same id (one id at two addresses: a restart's old entry, or a
    /// member that took another's id) would have the same points, and which of them owns those
    /// would depend on the order they came in. Only the least of them, by address, is on the
    /// ring, so every node names the same owners.
    pub fn update(&mut self, members: &[Member]) -> bool {
        let wanted = wanted(members);
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
            added.extend(points_of(&self.key, id).map(|p| (p, slot)));
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
        self.index = index_of(&self.points);
        true
    }

    /// Whether [`Ring::update`] with `members` would change this ring.
    pub fn differs(&self, members: &[Member]) -> bool {
        let wanted = wanted(members);
        let mut on_ring = self.slots.iter().flatten();
        wanted.len() != self.slots.len() - self.free.len()
            || on_ring.any(|m| !wanted.contains(&(m.id, m.addr)))
    }

    /// The index in `points` of `key`'s owner's point, `None` on an empty ring.
    fn start_of(&self, key: KeyId) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let at = point_of_key(key);
        let top = (at >> (u64::BITS - INDEX_BITS)) as usize;
        let (from, to) = (self.index[top] as usize, self.index[top + 1] as usize);
        let within = self.points[from..to].partition_point(|(p, _)| *p < at);
        Some((from + within) % self.points.len())
    }

    /// The owner of `key`: the first of [`Ring::owners`], found without the second.
    pub fn owner(&self, key: KeyId) -> Option<Member> {
        let start = self.start_of(key)?;
        self.slots[self.points[start].1 as usize]
    }

    /// The members on the ring, by id.
    pub fn member_ids(&self) -> BTreeSet<u128> {
        self.slots.iter().flatten().map(|m| m.id).collect()
    }

    /// This ring with only the members `keep` keeps.
    pub fn retaining(&self, keep: impl Fn(u128) -> bool) -> Ring {
        let kept: Vec<Member> = self
            .slots
            .iter()
            .flatten()
            .filter(|m| keep(m.id))
            .copied()
            .collect();
        let mut ring = self.clone();
        ring.update(&kept);
        ring
    }

    /// The points member `id` has (or would have) on this ring, sorted.
    pub fn points_of_member(&self, id: u128) -> Vec<u64> {
        let mut points: Vec<u64> = points_of(&self.key, id).collect();
        points.sort_unstable();
        points
    }

    /// The ranges of window points (inclusive; a range whose first point is past its last
    /// wraps) that a member with `points` (sorted) owns on this ring with it, whether or not it
    /// is on the ring: from past the point before each of its points, to that point.
    pub fn arcs_of(&self, points: &[u64]) -> Vec<(u64, u64)> {
        let greatest = self
            .points
            .last()
            .map(|(q, _)| *q)
            .max(points.last().copied());
        let before = |p: u64| {
            let on_ring = self.points.partition_point(|(q, _)| *q < p);
            let own = points.partition_point(|q| *q < p);
            let on_ring = on_ring.checked_sub(1).map(|i| self.points[i].0);
            let own = own.checked_sub(1).map(|i| points[i]);
            on_ring.max(own).or(greatest)
        };
        points
            .iter()
            .filter_map(|p| before(*p).map(|q| (q.wrapping_add(1), *p)))
            .collect()
    }

    /// The owner and the next owner of `key` (the same member twice only on a ring of one).
    pub fn owners(&self, key: KeyId) -> Option<[Member; 2]> {
        let start = self.start_of(key)?;
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

/// The members a ring of `members` holds: one entry per id, at its least address.
fn wanted(members: &[Member]) -> BTreeSet<(u128, SocketAddr)> {
    let mut by_id: std::collections::BTreeMap<u128, SocketAddr> = Default::default();
    for m in members {
        let addr = by_id.entry(m.id).or_insert(m.addr);
        *addr = (*addr).min(m.addr);
    }
    by_id.into_iter().collect()
}

/// [`Ring::index`] of sorted `points`: `2^INDEX_BITS + 1` entries, the last the number of
/// points.
fn index_of(points: &[(u64, u32)]) -> Vec<u32> {
    let mut index = Vec::with_capacity((1 << INDEX_BITS) + 1);
    let mut i = 0;
    for top in 0..=(1u64 << INDEX_BITS) {
        while i < points.len() && (points[i].0 >> (u64::BITS - INDEX_BITS)) < top {
            i += 1;
        }
        index.push(u32::try_from(i).unwrap_or(u32::MAX));
    }
    index
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
mod tests;
