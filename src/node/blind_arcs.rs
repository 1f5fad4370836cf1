//! The ranges of the ring (points of window ids) whose windows are blind to their owners under
//! `strict` (`OwnerOf::blind_since_ms`), each with the time it is blind from: those a member
//! that went down without a word owned, or would own beside the members that stayed.
//!
//! The ranges are kept as disjoint, sorted, inclusive intervals, each point with the latest
//! time of the ranges that hold it, so that a window's blind time is a binary search. They are
//! never forgotten (a window stays blind for its own length past the time, and windows can be
//! a year long) but they are bounded: past [`MOST_ARCS`], the neighbours with the least room
//! between them become one, over that room too, blind from the later time. That only ever
//! makes more windows blind, for longer: never fewer.

/// Most intervals kept (24 bytes each): 64 members gone without a word, at 64 points each.
pub const MOST_ARCS: usize = 4_096;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlindArcs {
    /// `(first point, last point, blind since ms)`, sorted, disjoint.
    arcs: Vec<(u64, u64, u64)>,
}

impl BlindArcs {
    /// Makes every point of `ranges` (inclusive; a range whose first point is past its last
    /// wraps past `u64::MAX`) blind from `since_ms` at least. A point keeps the latest time of
    /// the ranges that hold it.
    pub fn add(&mut self, ranges: impl IntoIterator<Item = (u64, u64)>, since_ms: u64) {
        let mut all = std::mem::take(&mut self.arcs);
        for (first, last) in ranges {
            if first <= last {
                all.push((first, last, since_ms));
            } else {
                all.push((first, u64::MAX, since_ms));
                all.push((0, last, since_ms));
            }
        }
        let merged = latest_by_point(all);
        let excess = merged.len().saturating_sub(MOST_ARCS);
        self.arcs = join_closest(merged, excess);
    }

    /// When `point` became blind (ms), `0` if it is not.
    pub fn blind_since(&self, point: u64) -> u64 {
        let i = self.arcs.partition_point(|(first, _, _)| *first <= point);
        i.checked_sub(1)
            .map(|i| self.arcs[i])
            .filter(|(_, last, _)| point <= *last)
            .map_or(0, |(_, _, since)| since)
    }

    /// How many intervals are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.arcs.len()
    }
}

/// Disjoint intervals holding every point of `ranges`, each with the latest time of the ranges
/// that hold it; neighbours that touch with the same time are one.
fn latest_by_point(ranges: Vec<(u64, u64, u64)>) -> Vec<(u64, u64, u64)> {
    // Each range opens at its first point and closes past its last (`None`: past u64::MAX).
    let mut edges: Vec<(u64, bool, u64)> = Vec::with_capacity(ranges.len() * 2);
    for (first, last, t) in &ranges {
        edges.push((*first, true, *t));
        if let Some(past) = last.checked_add(1) {
            edges.push((past, false, *t));
        }
    }
    edges.sort_unstable();
    let mut open: std::collections::BTreeMap<u64, usize> = Default::default();
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    let mut i = 0;
    while i < edges.len() {
        let at = edges[i].0;
        while i < edges.len() && edges[i].0 == at {
            let (_, opens, t) = edges[i];
            if opens {
                *open.entry(t).or_default() += 1;
            } else if let Some(n) = open.get_mut(&t) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&t);
                }
            }
            i += 1;
        }
        let until = edges.get(i).map_or(u64::MAX, |e| e.0 - 1);
        if let Some((&latest, _)) = open.last_key_value() {
            match out.last_mut() {
                Some(prev) if prev.2 == latest && prev.1.checked_add(1) == Some(at) => {
                    prev.1 = until;
                }
                _ => out.push((at, until, latest)),
            }
        }
    }
    out
}

/// `arcs` (disjoint, sorted) with `joins` fewer intervals: the neighbours with the least room
/// between them are joined over it, with the later time.
fn join_closest(arcs: Vec<(u64, u64, u64)>, joins: usize) -> Vec<(u64, u64, u64)> {
    let mut gaps: Vec<(u64, usize)> = (1..arcs.len())
        .map(|i| (arcs[i].0.saturating_sub(arcs[i - 1].1), i))
        .collect();
    let joins = joins.min(gaps.len());
    if joins == 0 {
        return arcs;
    }
    gaps.select_nth_unstable(joins - 1);
    let mut joined = vec![false; arcs.len()];
    for (_, i) in &gaps[..joins] {
        joined[*i] = true;
    }
    let mut out: Vec<(u64, u64, u64)> = Vec::with_capacity(arcs.len() - joins);
    for (i, arc) in arcs.into_iter().enumerate() {
        match out.last_mut() {
            Some(prev) if joined[i] => {
                prev.1 = arc.1;
                prev.2 = prev.2.max(arc.2);
            }
            _ => out.push(arc),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_keep_the_latest_time_and_wrap() {
        let mut arcs = BlindArcs::default();
        arcs.add([(10, 20), (30, 40)], 100);
        arcs.add([(15, 32)], 200);
        arcs.add([(u64::MAX - 5, 3)], 50);
        assert_eq!(arcs.blind_since(9), 0);
        assert_eq!(
            arcs.blind_since(10),
            100,
            "only the points the later range holds"
        );
        assert_eq!(arcs.blind_since(14), 100);
        assert_eq!(arcs.blind_since(15), 200);
        assert_eq!(arcs.blind_since(32), 200);
        assert_eq!(arcs.blind_since(33), 100);
        assert_eq!(arcs.blind_since(40), 100);
        assert_eq!(arcs.blind_since(41), 0);
        assert_eq!(arcs.blind_since(u64::MAX), 50);
        assert_eq!(arcs.blind_since(3), 50);
        assert_eq!(arcs.blind_since(4), 0);
    }

    #[test]
    fn past_the_most_kept_the_closest_merge_and_no_point_loses_its_blindness() {
        let mut arcs = BlindArcs::default();
        let ranges: Vec<(u64, u64)> = (0..MOST_ARCS as u64 + 10)
            .map(|i| (i * 1_000, i * 1_000 + 10 + (i % 7)))
            .collect();
        for (n, r) in ranges.iter().enumerate() {
            arcs.add([*r], n as u64 + 1);
        }
        assert_eq!(arcs.len(), MOST_ARCS);
        // Many at once, as a cut's worth of members gone: bounded, and not quadratic.
        arcs.add(
            (0..40_000u64).map(|i| (i * 7_919 + 1, i * 7_919 + 5)),
            9_999,
        );
        assert_eq!(arcs.len(), MOST_ARCS);
        assert_eq!(arcs.blind_since(7_919 * 123 + 3), 9_999);
        for (n, (first, last)) in ranges.iter().enumerate() {
            assert!(arcs.blind_since(*first) > n as u64, "{first}");
            assert!(arcs.blind_since(*last) > n as u64, "{last}");
        }
    }
}
