//! An owner's sum of a window's spends by the moment each stops occupying it: spends whose
//! users sealed their bucket end with their fine slot, the others with their bucket (a bucket
//! ends with its last fine slot). The moments a window can still hold fall in a few buckets,
//! so the sum is an array over their fine slots, not a map.

use super::occupancy::Span;
use super::spend_clock::slot_end_ms;
use super::tuning::FINE_SLOTS;

/// Spends by fine slot over the buckets `oldest..=newest`; a spend in a later bucket (a
/// register from a clock ahead) is kept apart, an earlier one has left every window.
#[derive(Debug)]
pub struct SpendTally {
    oldest: u64,
    bucket_ms: u64,
    by_slot: Vec<u64>,
    /// `(end of its slot, count)` of spends in buckets past `newest`.
    later: Vec<(u64, u64)>,
}

impl SpendTally {
    /// A tally of the buckets `oldest..=newest` (at most a few more than a window's), of
    /// `bucket_ms` each.
    pub fn new(oldest: u64, newest: u64, bucket_ms: u64) -> Self {
        let buckets = newest.saturating_sub(oldest).saturating_add(1);
        let slots = usize::try_from(buckets)
            .unwrap_or(usize::MAX)
            .saturating_mul(FINE_SLOTS);
        Self {
            oldest,
            bucket_ms,
            by_slot: vec![0; slots],
            later: Vec::new(),
        }
    }

    /// `count` spends of bucket `epoch` that end with it.
    pub fn add_bucket(&mut self, epoch: u64, count: u64) {
        self.add_slot(epoch, FINE_SLOTS - 1, count);
    }

    /// `count` spends of slot `j` of bucket `epoch`.
    pub fn add_slot(&mut self, epoch: u64, j: usize, count: u64) {
        if epoch < self.oldest || j >= FINE_SLOTS || count == 0 {
            return;
        }
        let index = usize::try_from(epoch - self.oldest)
            .ok()
            .and_then(|b| b.checked_mul(FINE_SLOTS))
            .and_then(|b| b.checked_add(j));
        match index.and_then(|i| self.by_slot.get_mut(i)) {
            Some(sum) => *sum = sum.saturating_add(count),
            None => self
                .later
                .push((slot_end_ms(epoch, j, self.bucket_ms), count)),
        }
    }

    /// The spends as spans, each until its slot's end plus `tail`, of those still held after
    /// `now_ms`: one span per moment, in order.
    pub fn spans(mut self, tail: u64, now_ms: u64) -> Vec<Span> {
        let mut out: Vec<Span> = Vec::new();
        let mut push = |until_ms: u64, count: u64| {
            if until_ms <= now_ms || count == 0 {
                return;
            }
            match out.last_mut() {
                Some(last) if last.until_ms == until_ms => {
                    last.count = last.count.saturating_add(count);
                }
                _ => out.push(Span {
                    from_ms: 0,
                    until_ms,
                    count,
                }),
            }
        };
        for (i, count) in self.by_slot.iter().enumerate() {
            if *count > 0 {
                let epoch = self.oldest.saturating_add((i / FINE_SLOTS) as u64);
                let end = slot_end_ms(epoch, i % FINE_SLOTS, self.bucket_ms);
                push(end.saturating_add(tail), *count);
            }
        }
        self.later.sort_unstable();
        for (end, count) in self.later {
            push(end.saturating_add(tail), count);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// The definition: every spend at its slot's end plus the tail, summed by moment, those
    /// after `now` in order.
    fn reference(
        adds: &[(u64, usize, u64)],
        oldest: u64,
        bucket_ms: u64,
        tail: u64,
        now: u64,
    ) -> Vec<Span> {
        let mut by: BTreeMap<u64, u64> = BTreeMap::new();
        for &(epoch, j, count) in adds {
            if epoch >= oldest && j < FINE_SLOTS {
                let e = by
                    .entry(slot_end_ms(epoch, j, bucket_ms).saturating_add(tail))
                    .or_default();
                *e = e.saturating_add(count);
            }
        }
        by.into_iter()
            .filter(|(t, c)| *t > now && *c > 0)
            .map(|(until_ms, count)| Span {
                from_ms: 0,
                until_ms,
                count,
            })
            .collect()
    }

    proptest! {
        /// Whatever the buckets (older than the tally's, in it, or past it), the slots, the bucket
        /// size (down to a millisecond, where slots share their ends) and the counts (up to
        /// saturation), the tally gives the definition's spans.
        #[test]
        fn the_tally_agrees_with_the_definition(
            oldest in 0u64..50,
            width in 0u64..16,
            bucket_ms in prop_oneof![Just(1u64), Just(3), Just(100), 1u64..1_000],
            adds in prop::collection::vec(
                (0u64..90, 0usize..FINE_SLOTS + 1, prop_oneof![0u64..20, Just(u64::MAX)]),
                0..60,
            ),
            tail in 0u64..3_000,
            now in 0u64..100_000,
        ) {
            let mut tally = SpendTally::new(oldest, oldest + width, bucket_ms);
            for &(epoch, j, count) in &adds {
                if j == FINE_SLOTS - 1 && count % 2 == 0 {
                    tally.add_bucket(epoch, count);
                } else {
                    tally.add_slot(epoch, j, count);
                }
            }
            prop_assert_eq!(tally.spans(tail, now), reference(&adds, oldest, bucket_ms, tail, now));
        }
    }

    #[test]
    fn a_bucket_ends_with_its_last_slot_and_a_far_epoch_stays_in_order() {
        let mut tally = SpendTally::new(10, 12, 100);
        tally.add_bucket(11, 3);
        tally.add_slot(11, FINE_SLOTS - 1, 2);
        tally.add_slot(10, 0, 1);
        tally.add_slot(9, 0, 50);
        tally.add_bucket(u64::MAX, 4);
        let spans = tally.spans(1_000, 0);
        let got: Vec<(u64, u64)> = spans.iter().map(|s| (s.until_ms, s.count)).collect();
        assert_eq!(got, vec![(2_013, 1), (2_200, 5), (u64::MAX, 4)]);
    }
}
