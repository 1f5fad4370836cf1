//! Version vectors: origin → highest version seen.

use std::collections::BTreeMap;

/// Highest register version seen per origin. Used for cheap dominance checks and as the digest
/// of anti-entropy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VersionVector<O: Ord>(BTreeMap<O, u64>);

impl<O: Ord + Copy> VersionVector<O> {
    pub fn new() -> Self {
        Self(BTreeMap::new())
    }

    pub fn get(&self, origin: O) -> u64 {
        self.0.get(&origin).copied().unwrap_or(0)
    }

    /// Raises the entry for `origin` to at least `version`.
    pub fn observe(&mut self, origin: O, version: u64) {
        let v = self.0.entry(origin).or_insert(0);
        *v = (*v).max(version);
    }

    /// Whether `self` has seen everything `other` has (pointwise `>=`).
    pub fn dominates(&self, other: &Self) -> bool {
        other.0.iter().all(|(o, v)| self.get(*o) >= *v)
    }

    /// Pointwise maximum.
    pub fn merge(&mut self, other: &Self) {
        for (o, v) in &other.0 {
            self.observe(*o, *v);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (O, u64)> + '_ {
        self.0.iter().map(|(o, v)| (*o, *v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<O: Ord + Copy> FromIterator<(O, u64)> for VersionVector<O> {
    fn from_iter<I: IntoIterator<Item = (O, u64)>>(iter: I) -> Self {
        let mut vv = Self::new();
        for (o, v) in iter {
            vv.observe(o, v);
        }
        vv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dominance_is_pointwise() {
        let a: VersionVector<u8> = [(1, 5), (2, 3)].into_iter().collect();
        let b: VersionVector<u8> = [(1, 4), (2, 3)].into_iter().collect();
        let c: VersionVector<u8> = [(1, 4), (3, 1)].into_iter().collect();
        assert!(a.dominates(&b));
        assert!(!b.dominates(&a));
        assert!(!a.dominates(&c), "a has never seen origin 3");
        let mut m = a.clone();
        m.merge(&c);
        assert!(m.dominates(&a) && m.dominates(&c));
        assert_eq!(m.get(3), 1);
    }
}
