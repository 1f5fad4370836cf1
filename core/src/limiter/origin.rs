//! Origins: who wrote a register. One origin per node process boot.

use std::collections::HashMap;

use super::key::IdHashBuilder;

use super::state::OriginIdx;

/// A node process boot, named by the random uuid it drew at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OriginId(pub u128);

impl std::fmt::Display for OriginId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Most origins remembered at once. Each boot of each peer is one; a table this size would take
/// years of restarts to fill, and past it the longest-unseen origin is forgotten.
const MAX_ORIGINS: usize = 1 << 16;

#[derive(Debug, Clone, Copy)]
pub(crate) struct OriginEntry {
    pub id: OriginId,
    /// Highest register version received from this origin.
    pub max_version: u64,
    pub last_seen_ms: u64,
}

/// Interns origins to small indices for compact per-key storage.
#[derive(Debug, Default)]
pub(crate) struct OriginTable {
    // Hashed: every datagram looks its sender up, and a large cluster's tables are too large
    // for a tree's walk to stay in cache. Their order is never relied on
    // (`forget_longest_unseen` breaks ties by index; `Limiter::digest` sorts).
    by_id: HashMap<OriginId, OriginIdx, IdHashBuilder>,
    entries: HashMap<OriginIdx, OriginEntry, IdHashBuilder>,
    next: OriginIdx,
    /// Origins forgotten so far: an index interned before one was may name another now.
    forgotten: u64,
}

impl OriginTable {
    pub fn intern(&mut self, id: OriginId, now_ms: u64) -> OriginIdx {
        if let Some(idx) = self.by_id.get(&id) {
            if let Some(e) = self.entries.get_mut(idx) {
                e.last_seen_ms = e.last_seen_ms.max(now_ms);
            }
            return *idx;
        }
        if self.entries.len() >= MAX_ORIGINS {
            self.forget_longest_unseen();
        }
        // Indices stay below the mark of owners' aggregates (`state::AGGREGATE`). After 2^31
        // origins the counter wraps: it skips the indices still in use (there are at most
        // `MAX_ORIGINS` of them, so this ends).
        while self.entries.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1) % super::state::AGGREGATE;
        }
        let idx = self.next;
        self.next = self.next.wrapping_add(1) % super::state::AGGREGATE;
        self.by_id.insert(id, idx);
        self.entries.insert(
            idx,
            OriginEntry {
                id,
                max_version: 0,
                last_seen_ms: now_ms,
            },
        );
        idx
    }

    fn forget_longest_unseen(&mut self) {
        if let Some((&idx, e)) = self
            .entries
            .iter()
            .min_by_key(|(idx, e)| (e.last_seen_ms, **idx))
        {
            self.by_id.remove(&e.id);
            self.entries.remove(&idx);
            self.forgotten += 1;
        }
    }

    /// Origins forgotten so far (see `forget_longest_unseen`).
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// The index of `id`, if it is known (unlike [`OriginTable::intern`], adds nothing).
    pub fn lookup(&self, id: OriginId) -> Option<OriginIdx> {
        self.by_id.get(&id).copied()
    }

    pub fn observe_version(&mut self, idx: OriginIdx, version: u64) {
        if let Some(e) = self.entries.get_mut(&idx) {
            e.max_version = e.max_version.max(version);
        }
    }

    pub fn get(&self, idx: OriginIdx) -> Option<&OriginEntry> {
        self.entries.get(&idx)
    }

    pub fn iter(&self) -> impl Iterator<Item = &OriginEntry> + '_ {
        self.entries.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_tracks_versions() {
        let mut t = OriginTable::default();
        let a = t.intern(OriginId(7), 10);
        let b = t.intern(OriginId(9), 11);
        assert_ne!(a, b);
        assert_eq!(t.intern(OriginId(7), 12), a);
        t.observe_version(a, 5);
        t.observe_version(a, 3);
        assert_eq!(t.get(a).unwrap().max_version, 5);
        assert_eq!(t.get(a).unwrap().last_seen_ms, 12);
    }
}
