//! How many of a window's `L` slots are taken at each moment from now on, as an owner counts
//! them: every token spent or that may still be spent, each over the span it can occupy a
//! sliding window. A lease is granted only where the count stays at most `L` over the whole
//! span its tokens could occupy, so no sliding window ever holds more than `L` spends.

/// `count` slots taken from `from_ms` (inclusive) until `until_ms` (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from_ms: u64,
    pub until_ms: u64,
    pub count: u64,
}

/// Slots taken over time: a sum of spans.
#[derive(Debug, Clone, Default)]
pub struct Occupancy {
    spans: Vec<Span>,
}

impl Occupancy {
    pub fn add(&mut self, span: Span) {
        if span.count > 0 && span.until_ms > span.from_ms {
            self.spans.push(span);
        }
    }

    /// Slots taken at `t_ms`.
    pub fn at(&self, t_ms: u64) -> u64 {
        self.spans
            .iter()
            .filter(|s| s.from_ms <= t_ms && t_ms < s.until_ms)
            .map(|s| s.count)
            .sum()
    }

    /// The most slots taken at any moment of `[from_ms, until_ms)`. The count only rises
    /// where a span starts, so it is enough to look at `from_ms` and at the starts inside.
    pub fn peak(&self, from_ms: u64, until_ms: u64) -> u64 {
        let mut peak = self.at(from_ms);
        for s in &self.spans {
            if s.from_ms > from_ms && s.from_ms < until_ms {
                peak = peak.max(self.at(s.from_ms));
            }
        }
        peak
    }

    /// How many slots are free over the whole of `[from_ms, until_ms)` under `limit`.
    pub fn room(&self, limit: u64, from_ms: u64, until_ms: u64) -> u64 {
        limit.saturating_sub(self.peak(from_ms, until_ms))
    }

    /// When slots are freed in `(after_ms, before_ms)`: the ends of spans there, ascending,
    /// without repeats.
    pub fn frees_between(&self, after_ms: u64, before_ms: u64) -> Vec<u64> {
        let mut ends: Vec<u64> = self
            .spans
            .iter()
            .map(|s| s.until_ms)
            .filter(|t| *t > after_ms && *t < before_ms)
            .collect();
        ends.sort_unstable();
        ends.dedup();
        ends
    }

    /// The earliest moment at or after `from_ms` from which `count` slots stay free for
    /// `hold_ms`, looking no further than `horizon_ms`.
    pub fn earliest_room(
        &self,
        limit: u64,
        count: u64,
        from_ms: u64,
        hold_ms: u64,
        horizon_ms: u64,
    ) -> Option<u64> {
        std::iter::once(from_ms)
            .chain(self.frees_between(from_ms, horizon_ms))
            .find(|t| self.room(limit, *t, t.saturating_add(hold_ms)) >= count)
    }

    pub fn spans(&self) -> &[Span] {
        &self.spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(from_ms: u64, until_ms: u64, count: u64) -> Span {
        Span {
            from_ms,
            until_ms,
            count,
        }
    }

    #[test]
    fn the_peak_looks_at_every_span_that_starts_inside() {
        let mut o = Occupancy::default();
        o.add(span(0, 100, 5));
        o.add(span(50, 200, 3));
        o.add(span(150, 300, 4));
        assert_eq!(o.at(0), 5);
        assert_eq!(o.at(60), 8);
        assert_eq!(o.at(160), 7);
        assert_eq!(o.peak(0, 40), 5);
        assert_eq!(o.peak(0, 300), 8);
        assert_eq!(o.peak(100, 300), 7);
        assert_eq!(o.room(10, 100, 300), 3);
        assert_eq!(o.frees_between(0, 250), vec![100, 200]);
        // 6 slots for 100 ms: not at 0 (5 taken, then 8), from 200 (4 taken) yes.
        assert_eq!(o.earliest_room(10, 6, 0, 100, 1_000), Some(200));
        assert_eq!(o.earliest_room(10, 11, 0, 100, 1_000), None);
    }
}
