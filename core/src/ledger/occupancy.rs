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

    /// The count as a step function: each moment at which it changes, ascending, with the
    /// count from then until the next.
    fn steps(&self) -> Vec<(u64, u64)> {
        let mut changes: Vec<(u64, i128)> = Vec::with_capacity(2 * self.spans.len());
        for s in &self.spans {
            changes.push((s.from_ms, i128::from(s.count)));
            changes.push((s.until_ms, -i128::from(s.count)));
        }
        changes.sort_unstable_by_key(|(t, _)| *t);
        let mut steps: Vec<(u64, u64)> = Vec::with_capacity(changes.len());
        let mut count: i128 = 0;
        for (t, delta) in changes {
            count += delta;
            let taken = u64::try_from(count).unwrap_or(u64::MAX);
            match steps.last_mut() {
                Some(last) if last.0 == t => last.1 = taken,
                _ => steps.push((t, taken)),
            }
        }
        steps
    }

    /// The most slots taken at any moment of `[from_ms, until_ms)`: the count at `from_ms`
    /// and at every change inside (the count only rises where a span starts).
    pub fn peak(&self, from_ms: u64, until_ms: u64) -> u64 {
        let steps = self.steps();
        let first = steps.partition_point(|(t, _)| *t <= from_ms);
        let at_from = first.checked_sub(1).map_or(0, |i| steps[i].1);
        steps[first..]
            .iter()
            .take_while(|(t, _)| *t < until_ms)
            .fold(at_from, |peak, (_, taken)| peak.max(*taken))
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
    /// `hold_ms`, looking no further than `horizon_ms`: `from_ms`, else the first moment a
    /// span ends at which they do. One pass over the step function: the candidates and
    /// the ends of their spans both move forward, and a queue keeps the steps inside the
    /// span by falling count, so its front is the span's peak.
    pub fn earliest_room(
        &self,
        limit: u64,
        count: u64,
        from_ms: u64,
        hold_ms: u64,
        horizon_ms: u64,
    ) -> Option<u64> {
        let steps = self.steps();
        let mut inside: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
        let mut next = 0;
        let candidates = std::iter::once(from_ms).chain(self.frees_between(from_ms, horizon_ms));
        for at in candidates {
            // A span of no length still looks at the count at `at`.
            let end = at.saturating_add(hold_ms.max(1));
            // The step in force at `at`, and every step that starts before `end`.
            let first = steps.partition_point(|(t, _)| *t <= at).saturating_sub(1);
            while next < steps.len() && steps[next].0 < end {
                while inside.back().is_some_and(|j| steps[*j].1 <= steps[next].1) {
                    inside.pop_back();
                }
                inside.push_back(next);
                next += 1;
            }
            while inside.front().is_some_and(|j| *j < first) {
                inside.pop_front();
            }
            // Before the first step nothing is taken.
            let peak = inside
                .front()
                .filter(|j| steps[**j].0 < end)
                .map_or(0, |j| steps[*j].1);
            if limit.saturating_sub(peak) >= count {
                return Some(at);
            }
        }
        None
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

    /// The count at one moment and its peak over a span, as the definition says, span by
    /// span: what the step function must agree with.
    fn naive_at(spans: &[Span], t: u64) -> u64 {
        spans
            .iter()
            .filter(|s| s.from_ms <= t && t < s.until_ms)
            .map(|s| s.count)
            .sum()
    }

    fn naive_room(spans: &[Span], limit: u64, from: u64, until: u64) -> u64 {
        let mut peak = naive_at(spans, from);
        for s in spans {
            if s.from_ms > from && s.from_ms < until {
                peak = peak.max(naive_at(spans, s.from_ms));
            }
        }
        limit.saturating_sub(peak)
    }

    proptest::proptest! {
        #[test]
        fn the_step_function_agrees_with_the_spans(
            raw in proptest::collection::vec((0u64..200, 0u64..120, 0u64..8), 0..30),
            limit in 0u64..40,
            count in 0u64..12,
            from in 0u64..250,
            hold in 0u64..150,
            horizon in 0u64..400,
        ) {
            let mut o = Occupancy::default();
            for (from_ms, len, count) in raw {
                o.add(span(from_ms, from_ms + len, count));
            }
            let spans = o.spans().to_vec();
            let until = from + hold;
            proptest::prop_assert_eq!(o.at(from), naive_at(&spans, from));
            proptest::prop_assert_eq!(o.room(limit, from, until), naive_room(&spans, limit, from, until));
            let naive = std::iter::once(from)
                .chain(o.frees_between(from, horizon))
                .find(|t| naive_room(&spans, limit, *t, t + hold) >= count);
            proptest::prop_assert_eq!(o.earliest_room(limit, count, from, hold, horizon), naive);
        }
    }
}
