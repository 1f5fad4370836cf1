//! When a user spent its tokens, finer than the window's buckets, for the window's owner.
//!
//! An owner counts a spend as taking its slot until the latest moment it can leave a sliding
//! window. Knowing only the spend's bucket, that is the bucket's end plus `W`: half a bucket
//! (a twentieth of the window at the default 10 buckets) lost per token on average, at every
//! turn of the window. So each user also counts its spends in [`FINE_SLOTS`] slots per bucket,
//! and once a bucket has ended it *seals* the bucket's slots: from then on no spend lands in
//! them (a check that read the clock before the bucket ended and reaches the slot after the
//! seal takes no token), so the sealed counts hold every spend of that bucket made with this
//! window's tokens. The owner then counts each sealed slot's spends until the slot's end plus
//! `W`, and the unsealed buckets as before.
//!
//! The clock keeps the last `buckets` buckets; a bucket that was not sealed before its slots
//! are reused is left to its bucket's end at the owner. Lock-free: one compare-and-swap per
//! spend.

use std::sync::atomic::{AtomicU64, Ordering};

use super::tuning::FINE_SLOTS;

/// The shape of a window's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockShape {
    pub bucket_ms: u64,
    /// Buckets kept: at least those between two reports of a busy window, and the current.
    pub buckets: u64,
}

/// One bucket's sealed counts: spends in each of its [`FINE_SLOTS`] slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedBucket {
    pub epoch: u64,
    pub counts: [u32; FINE_SLOTS],
}

impl SealedBucket {
    /// The end (exclusive) of slot `j` of this bucket, for buckets of `bucket_ms`: every
    /// spend counted in the slot was made before it.
    pub fn slot_end_ms(&self, j: usize, bucket_ms: u64) -> u64 {
        slot_end_ms(self.epoch, j, bucket_ms)
    }
}

/// The end (exclusive) of slot `j` of bucket `epoch`.
pub fn slot_end_ms(epoch: u64, j: usize, bucket_ms: u64) -> u64 {
    let k = FINE_SLOTS as u64;
    epoch
        .saturating_mul(bucket_ms)
        .saturating_add(((j as u64 + 1) * bucket_ms).div_ceil(k))
}

/// A slot as one word: `tag (30) | live (1) | sealed (1) | count (32)`, the tag being the low
/// bits of the slot's number (`epoch * FINE_SLOTS + j`); `live` tells a written slot (even one
/// refunded to nothing) from a word never written. A word left unwritten for 2^29 slots (18 h
/// at the shortest bucket, 1 ms; years at a second's) may read as a later slot: a spend is
/// then refused, or a stale count sealed with its bucket, which only over-counts.
const TAG_SHIFT: u32 = 34;
const LIVE: u64 = 1 << 33;
const SEALED: u64 = 1 << 32;
const COUNT: u64 = u32::MAX as u64;
const TAG_MASK: u64 = (1 << 30) - 1;

fn tag(fine: u64) -> u64 {
    fine & TAG_MASK
}

fn holds(word: u64, fine: u64) -> bool {
    word & LIVE != 0 && word >> TAG_SHIFT == tag(fine)
}

/// Whether `word` holds a slot later than `fine` (a wrapping compare on the tag, valid for
/// slots less than 2^29 apart).
fn holds_newer(word: u64, fine: u64) -> bool {
    word & LIVE != 0 && {
        let d = (word >> TAG_SHIFT).wrapping_sub(tag(fine)) & TAG_MASK;
        d != 0 && d < (1 << 29)
    }
}

/// What a word says of slot `fine`.
enum Slot {
    /// Its count so far (0: the word holds an earlier slot, or none).
    Open(u32),
    Sealed(u32),
    /// The word holds a later slot: this one is gone.
    Later,
}

fn read(word: u64, fine: u64) -> Slot {
    if holds(word, fine) {
        let count = (word & COUNT) as u32;
        if word & SEALED != 0 {
            Slot::Sealed(count)
        } else {
            Slot::Open(count)
        }
    } else if holds_newer(word, fine) {
        Slot::Later
    } else {
        Slot::Open(0)
    }
}

fn pack(fine: u64, sealed: bool, count: u32) -> u64 {
    (tag(fine) << TAG_SHIFT) | LIVE | if sealed { SEALED } else { 0 } | u64::from(count)
}

/// A window's spends by fine slot. See the module documentation.
#[derive(Debug)]
pub struct SpendClock {
    shape: ClockShape,
    words: Box<[AtomicU64]>,
}

impl SpendClock {
    pub fn new(shape: ClockShape) -> Self {
        let shape = ClockShape {
            bucket_ms: shape.bucket_ms.max(1),
            buckets: shape.buckets.max(2),
        };
        let n = shape.buckets as usize * FINE_SLOTS;
        Self {
            shape,
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The slot of `t_ms`: `epoch * FINE_SLOTS + j`.
    fn fine(&self, t_ms: u64) -> u64 {
        let b = self.shape.bucket_ms;
        let j = (t_ms % b) * FINE_SLOTS as u64 / b;
        (t_ms / b) * FINE_SLOTS as u64 + j
    }

    fn word(&self, fine: u64) -> &AtomicU64 {
        &self.words[(fine % self.words.len() as u64) as usize]
    }

    /// Counts `cost` spends at `now_ms`. `false` if its slot is sealed (or already reused by
    /// a later one): the spend must not be made.
    pub fn spend(&self, now_ms: u64, cost: u32) -> bool {
        let fine = self.fine(now_ms);
        let word = self.word(fine);
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let Slot::Open(count) = read(cur, fine) else {
                return false;
            };
            let next = pack(fine, false, count.saturating_add(cost));
            match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes back `cost` spends counted at `now_ms` (the request was refused after all). A
    /// sealed slot keeps them: its counts were told as they were.
    pub fn refund(&self, now_ms: u64, cost: u32) {
        let fine = self.fine(now_ms);
        let word = self.word(fine);
        let mut cur = word.load(Ordering::Acquire);
        while holds(cur, fine) && cur & SEALED == 0 {
            let next = pack(fine, false, ((cur & COUNT) as u32).saturating_sub(cost));
            match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Seals slot `fine`; its count, or `None` if the slot was reused by a later one.
    /// `Some((count, true))` when this call sealed it.
    fn seal_slot(&self, fine: u64) -> Option<(u32, bool)> {
        let word = self.word(fine);
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let count = match read(cur, fine) {
                Slot::Open(count) => count,
                Slot::Sealed(count) => return Some((count, false)),
                Slot::Later => return None,
            };
            match word.compare_exchange_weak(
                cur,
                pack(fine, true, count),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((count, true)),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Seals every bucket the clock keeps that ended by `now_ms` (and the current one too if
    /// `all`: no spend comes any more), and returns those this call sealed that hold a spend.
    pub fn seal(&self, now_ms: u64, all: bool) -> Vec<SealedBucket> {
        let now_epoch = now_ms / self.shape.bucket_ms;
        let first = (now_epoch + 1).saturating_sub(self.shape.buckets);
        let last = if all { now_epoch + 1 } else { now_epoch };
        let mut out = Vec::new();
        for epoch in first..last {
            let mut counts = [0u32; FINE_SLOTS];
            let mut fresh = false;
            let mut whole = true;
            for (j, c) in counts.iter_mut().enumerate() {
                match self.seal_slot(epoch * FINE_SLOTS as u64 + j as u64) {
                    Some((count, sealed_now)) => {
                        *c = count;
                        fresh |= sealed_now;
                    }
                    None => whole = false,
                }
            }
            if whole && fresh && counts.iter().any(|c| *c > 0) {
                out.push(SealedBucket { epoch, counts });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> SpendClock {
        SpendClock::new(ClockShape {
            bucket_ms: 100,
            buckets: 3,
        })
    }

    #[test]
    fn slots_split_a_bucket_and_end_after_every_spend_they_count() {
        for bucket_ms in [1, 3, 7, 100, 6_000] {
            let c = SpendClock::new(ClockShape {
                bucket_ms,
                buckets: 3,
            });
            for t in 10 * bucket_ms..12 * bucket_ms {
                let fine = c.fine(t);
                let (epoch, j) = (
                    fine / FINE_SLOTS as u64,
                    (fine % FINE_SLOTS as u64) as usize,
                );
                assert_eq!(epoch, t / bucket_ms, "{bucket_ms} {t}");
                assert!(t < slot_end_ms(epoch, j, bucket_ms), "{bucket_ms} {t}");
                if j > 0 {
                    assert!(t >= slot_end_ms(epoch, j - 1, bucket_ms), "{bucket_ms} {t}");
                }
            }
            assert_eq!(slot_end_ms(4, FINE_SLOTS - 1, bucket_ms), 5 * bucket_ms);
        }
    }

    #[test]
    fn a_sealed_bucket_takes_no_spend_and_tells_its_counts_once() {
        let c = clock();
        assert!(c.spend(1_000, 2));
        assert!(c.spend(1_012, 1));
        assert!(c.spend(1_099, 4));
        assert!(c.spend(1_100, 1));
        c.refund(1_012, 1);
        assert!(c.seal(1_099, false).is_empty(), "the bucket has not ended");
        let sealed = c.seal(1_100, false);
        let mut counts = [0; FINE_SLOTS];
        counts[0] = 2;
        counts[FINE_SLOTS - 1] = 4;
        assert_eq!(sealed, vec![SealedBucket { epoch: 10, counts }]);
        assert!(
            !c.spend(1_050, 1),
            "a late spend in a sealed bucket is refused"
        );
        c.refund(1_099, 4);
        assert!(c.seal(1_150, false).is_empty(), "sealed once");
        // The current bucket is sealed only when every bucket is.
        let all = c.seal(1_150, true);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].epoch, 11);
        assert!(!c.spend(1_150, 1));
    }

    /// A slot refunded to nothing is still written: a spend for an older slot of the same
    /// word (its bucket sealed, then the word reused) is refused, whatever the tag.
    #[test]
    fn a_slot_refunded_to_nothing_still_holds_its_place() {
        let c = clock();
        let wrap = (TAG_MASK + 1) / FINE_SLOTS as u64 * 100;
        // A bucket whose first slot's tag is 0, three buckets after one sealed in the same word.
        let t = wrap * (1 << 10);
        assert_eq!(tag(c.fine(t)), 0);
        assert!(c.spend(t - 300, 1));
        assert_eq!(c.seal(t - 200, false).len(), 1);
        assert!(c.spend(t, 1));
        c.refund(t, 1);
        assert!(
            !c.spend(t - 300, 1),
            "a late spend in a sealed and reused slot"
        );
    }

    #[test]
    fn a_bucket_whose_slots_were_reused_is_not_sealed() {
        let c = clock();
        assert!(c.spend(1_100, 1));
        assert!(c.spend(1_150, 1));
        // A spend three buckets on (a clock ahead) takes the first slot of bucket 11.
        assert!(c.spend(1_400, 1));
        let sealed = c.seal(1_301, false);
        assert!(sealed.iter().all(|s| s.epoch != 11), "{sealed:?}");
        assert!(!c.spend(1_100, 1), "an older slot never takes a spend back");
    }
}
