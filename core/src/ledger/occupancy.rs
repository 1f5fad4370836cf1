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

    /// The count from `from_ms` on as at most `most` steps `(until_ms, count)`, each from the
    /// end of the one before (the first from `from_ms`), the last ending where the count
    /// falls to 0: exact where it changes no more than that, else the most taken over each of
    /// `most` equal stretches. Never less than the count at any moment.
    pub fn ceiling(&self, from_ms: u64, most: usize) -> Vec<(u64, u64)> {
        let steps = self.steps();
        let first = steps.partition_point(|(t, _)| *t <= from_ms);
        let at_from = first.checked_sub(1).map_or(0, |i| steps[i].1);
        // `(from, count)` from `from_ms` on. Every span ends, so the last count is 0 (it may
        // fall to 0 before, and rise again).
        let mut exact: Vec<(u64, u64)> = vec![(from_ms, at_from)];
        exact.extend_from_slice(&steps[first..]);
        let end_ms = exact.last().map_or(from_ms, |(t, _)| *t);
        let most = most.max(1);
        let mut out: Vec<(u64, u64)> = Vec::new();
        if exact.len() <= most + 1 {
            for pair in exact.windows(2) {
                push_step(&mut out, pair[1].0, pair[0].1);
            }
            return out;
        }
        let span_ms = end_ms - from_ms;
        let mut i = 0;
        for k in 1..=most as u64 {
            let until_ms = from_ms + (u128::from(span_ms) * u128::from(k) / most as u128) as u64;
            // The step in force at the stretch's start, and every one that starts inside.
            let mut peak = exact[i].1;
            while i + 1 < exact.len() && exact[i + 1].0 < until_ms {
                i += 1;
                peak = peak.max(exact[i].1);
            }
            if until_ms > out.last().map_or(from_ms, |l| l.0) {
                push_step(&mut out, until_ms, peak);
            }
        }
        out
    }

    pub fn spans(&self) -> &[Span] {
        &self.spans
    }
}

/// Appends a step `(until_ms, count)`, or stretches the last one where the count is the same.
fn push_step(steps: &mut Vec<(u64, u64)>, until_ms: u64, count: u64) {
    match steps.last_mut() {
        Some(last) if last.1 == count => last.0 = until_ms,
        _ => steps.push((until_ms, count)),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::ledger) fn span(from_ms: u64, until_ms: u64, count: u64) -> Span {
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

    #[test]
    fn the_ceiling_is_exact_when_it_fits_and_never_below_otherwise() {
        let mut o = Occupancy::default();
        o.add(span(0, 100, 5));
        o.add(span(50, 200, 3));
        assert_eq!(o.ceiling(20, 8), vec![(50, 5), (100, 8), (200, 3)]);
        assert_eq!(o.ceiling(250, 8), Vec::<(u64, u64)>::new());
        // Two stretches of 90 ms: the peak of each.
        assert_eq!(o.ceiling(20, 2), vec![(110, 8), (200, 3)]);
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
            let most = 1 + (count as usize % 6);
            let ceiling = o.ceiling(from, most);
            proptest::prop_assert!(ceiling.len() <= most);
            let mut start = from;
            for (until, c) in &ceiling {
                proptest::prop_assert!(*until > start);
                for t in start..*until {
                    proptest::prop_assert!(naive_at(&spans, t) <= *c, "{t}: {c}");
                }
                start = *until;
            }
            // Nothing is taken after the last step.
            proptest::prop_assert!(spans.iter().all(|s| s.until_ms <= start));
            // With room for every change, the steps are the count itself.
            let mut start = from;
            for (until, c) in o.ceiling(from, 1_000) {
                for t in start..until {
                    proptest::prop_assert_eq!(naive_at(&spans, t), c, "{}", t);
                }
                start = until;
            }
            let naive = std::iter::once(from)
                .chain(o.frees_between(from, horizon))
                .find(|t| naive_room(&spans, limit, *t, t + hold) >= count);
            proptest::prop_assert_eq!(o.earliest_room(limit, count, from, hold, horizon), naive);
        }
    }
}
