//! The ranges of the ring (points of window ids) whose windows are blind to their owners under
//! `strict` (`OwnerOf::blind_since_ms`), each with the time it is blind from: those a member
//! that went down without a word owned, or would own beside the members that stayed.
//!
//! The ranges are kept as disjoint, sorted, inclusive intervals, so that a window's blind time
//! is a binary search. They are never forgotten (a window stays blind for its own length past
//! the time, and windows can be a year long) but they are bounded: past [`MOST_ARCS`], the two
//! intervals with the least room between them become one, over that room too, blind from the
//! later time. That only ever makes more windows blind, for longer: never fewer.

/// Most intervals kept (24 bytes each): 64 members gone without a word, at 64 points each.
pub const MOST_ARCS: usize = 4_096;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlindArcs {
    /// `(first point, last point, blind since ms)`, sorted, disjoint.
    arcs: Vec<(u64, u64, u64)>,
}

impl BlindArcs {
    /// Makes every point of `ranges` (inclusive; a range whose first point is past its last
    /// wraps past `u64::MAX`) blind from `since_ms` at least.
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
        all.sort_unstable();
        let mut merged: Vec<(u64, u64, u64)> = Vec::with_capacity(all.len());
        for (first, last, since) in all {
            match merged.last_mut() {
                Some(prev) if first <= prev.1.saturating_add(1) => {
                    prev.1 = prev.1.max(last);
                    prev.2 = prev.2.max(since);
                }
                _ => merged.push((first, last, since)),
            }
        }
        while merged.len() > MOST_ARCS {
            let closest = (1..merged.len())
                .min_by_key(|i| merged[*i].0 - merged[*i - 1].1)
                .expect("more than one interval");
            let (_, last, since) = merged.remove(closest);
            let prev = &mut merged[closest - 1];
            prev.1 = last;
            prev.2 = prev.2.max(since);
        }
        self.arcs = merged;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_keep_the_latest_time_and_wrap() {
        let mut arcs = BlindArcs::default();
        arcs.add([(10, 20), (30, 40)], 100);
        arcs.add([(15, 32)], 200);
        arcs.add([(u64::MAX - 5, 3)], 50);
        assert_eq!(arcs.len(), 3);
        assert_eq!(arcs.blind_since(9), 0);
        assert_eq!(arcs.blind_since(10), 200, "merged with a later range");
        assert_eq!(arcs.blind_since(40), 200);
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
        for (n, (first, last)) in ranges.iter().enumerate() {
            assert!(arcs.blind_since(*first) > n as u64, "{first}");
            assert!(arcs.blind_since(*last) > n as u64, "{last}");
        }
    }
}
