//! What the limiter knows of the cluster: how many members are live now, and how many it
//! should expect (the largest size seen over a hold period).

use std::collections::VecDeque;

/// Tracks `N_expected`: the largest cluster size seen over the last `hold_ms`.
///
/// While a partition lasts less than the hold period, each side keeps expecting the whole
/// cluster, which is what lets the `strict` policy keep the two sides' total within the limit.
/// After the hold period the expectation follows live membership, so a node that left for good
/// stops reserving its share.
#[derive(Debug, Clone)]
pub struct ExpectedSize {
    hold_ms: u64,
    current: usize,
    /// `(until_ms, size)`: `size` was the observed size until `until_ms`. Sizes only ever decrease
    /// along the queue (a larger later size makes earlier smaller ones irrelevant).
    past: VecDeque<(u64, usize)>,
}

impl ExpectedSize {
    pub fn new(hold_ms: u64) -> Self {
        Self {
            hold_ms,
            current: 1,
            past: VecDeque::new(),
        }
    }

    /// Records the size the node sees at `now_ms`: its live members, this node included, its
    /// silent members, and at least the largest count a peer reports (`Limiter::set_liveness`).
    pub fn observe(&mut self, live: usize, now_ms: u64) {
        let live = live.max(1);
        if live != self.current {
            let old = self.current;
            // Keep the queue a decreasing staircase: entries not larger than `old` are dominated.
            while self.past.back().is_some_and(|(_, s)| *s <= old) {
                self.past.pop_back();
            }
            self.past.push_back((now_ms, old));
            self.current = live;
        }
        self.prune(now_ms);
    }

    fn prune(&mut self, now_ms: u64) {
        while self
            .past
            .front()
            .is_some_and(|(until, _)| until.saturating_add(self.hold_ms) <= now_ms)
        {
            self.past.pop_front();
        }
    }

    pub fn live(&self) -> usize {
        self.current
    }

    /// The expected size at `now_ms`.
    pub fn expected(&mut self, now_ms: u64) -> usize {
        self.prune(now_ms);
        self.past
            .iter()
            .map(|(_, s)| *s)
            .chain([self.current])
            .max()
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_the_largest_size_for_the_hold_period() {
        let mut e = ExpectedSize::new(60_000);
        e.observe(5, 0);
        assert_eq!(e.expected(0), 5);
        e.observe(3, 10_000); // partition: 3 on this side
        assert_eq!(e.live(), 3);
        assert_eq!(e.expected(30_000), 5);
        assert_eq!(e.expected(69_999), 5);
        assert_eq!(e.expected(70_000), 3, "5 was last seen at 10 s");
    }

    #[test]
    fn a_shrinking_cluster_steps_down_through_recent_sizes() {
        let mut e = ExpectedSize::new(60_000);
        e.observe(5, 0);
        e.observe(4, 10_000);
        e.observe(2, 40_000);
        assert_eq!(e.expected(60_000), 5);
        assert_eq!(e.expected(70_000), 4, "4 was seen until 40 s");
        assert_eq!(e.expected(100_000), 2);
    }

    #[test]
    fn growth_takes_effect_at_once() {
        let mut e = ExpectedSize::new(60_000);
        e.observe(2, 0);
        e.observe(7, 1_000);
        assert_eq!(e.expected(1_000), 7);
        e.observe(0, 2_000); // an idle node still counts itself
        assert_eq!(e.live(), 1);
        assert_eq!(e.expected(61_999), 7);
        assert_eq!(e.expected(62_000), 1);
    }
}
