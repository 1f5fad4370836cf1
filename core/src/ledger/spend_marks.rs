//! The sealed buckets an owner heard from a window's users (`spend_clock.rs`): for each user
//! and bucket, its spends by fine slot. A sealed bucket's counts never change, so a bucket
//! heard once is kept until it has left every window that can hold it.
//!
//! A user is named as its registers are in the owner's replicas (its origin's index there,
//! which names no other origin before 2^31 more have come; this node's own ring, `u64::MAX`),
//! so that a round pairs each register with its marks without a lookup.

use std::collections::BTreeMap;

use super::spend_clock::SealedBucket;
use super::tuning::FINE_SLOTS;

#[derive(Debug, Clone, Default)]
pub struct SpendMarks {
    by_user: BTreeMap<(u64, u64), [u32; FINE_SLOTS]>,
}

impl SpendMarks {
    /// `user`'s sealed buckets, each taken only if its epoch is within `epochs` (the buckets
    /// the window can still hold: anything else is no spend that matters, or a wrong word).
    pub fn heard(
        &mut self,
        user: u64,
        sealed: &[SealedBucket],
        epochs: std::ops::RangeInclusive<u64>,
    ) {
        for s in sealed.iter().filter(|s| epochs.contains(&s.epoch)) {
            self.by_user.insert((user, s.epoch), s.counts);
        }
    }

    /// Forgets the buckets before `epoch`.
    pub fn forget_before(&mut self, epoch: u64) {
        self.by_user.retain(|(_, e), _| *e >= epoch);
    }

    /// `user`'s spends in bucket `epoch` by fine slot, if it sealed the bucket.
    pub fn of(&self, user: u64, epoch: u64) -> Option<&[u32; FINE_SLOTS]> {
        self.by_user.get(&(user, epoch))
    }

    /// The buckets `user` sealed, by epoch.
    pub fn epochs_of(&self, user: u64) -> impl Iterator<Item = u64> + '_ {
        self.by_user
            .range((user, 0)..=(user, u64::MAX))
            .map(|((_, e), _)| *e)
    }

    /// Every sealed bucket held: `(user, epoch, counts)`.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, &[u32; FINE_SLOTS])> + '_ {
        self.by_user.iter().map(|((u, e), c)| (*u, *e, c))
    }

    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_buckets_the_window_can_hold_are_kept_and_they_age_out() {
        let mut m = SpendMarks::default();
        let bucket = |epoch| SealedBucket {
            epoch,
            counts: [1; FINE_SLOTS],
        };
        m.heard(7, &[bucket(5), bucket(9), bucket(20)], 8..=12);
        assert!(m.of(7, 5).is_none(), "too old");
        assert!(m.of(7, 20).is_none(), "ahead of any clock");
        assert_eq!(m.of(7, 9), Some(&[1; FINE_SLOTS]));
        assert!(m.of(8, 9).is_none(), "another user's");
        m.heard(8, &[bucket(10), bucket(11)], 8..=12);
        assert_eq!(m.epochs_of(7).collect::<Vec<_>>(), vec![9]);
        assert_eq!(m.epochs_of(8).collect::<Vec<_>>(), vec![10, 11]);
        m.forget_before(12);
        assert!(m.is_empty());
    }
}
