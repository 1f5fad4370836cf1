//! The local time wheel: a lock-free ring of `B + 1` bucket slots for one window on this node.
//!
//! Each slot holds two words, one for admitted and one for rejected requests. A word packs the
//! low 32 bits of its bucket's epoch (the tag) with a 32-bit count. A write to a slot whose tag is
//! stale resets it and adds in one compare-and-swap, so a reset can never lose a concurrent add;
//! the well-known "check epoch, store zero, then fetch_add" version loses every add that lands
//! between the store and another thread's reset.
//!
//! Tags compare by equality with the epoch a slot is expected to hold at `now`. Two epochs that
//! share a slot and a tag are `lcm(B + 1, 2^32)` buckets apart, far beyond the idle time after
//! which a window is garbage collected.

use std::sync::atomic::{AtomicU64, Ordering};

use super::estimate::AgeProfile;
use super::spec::WindowSpec;

#[derive(Debug, Default)]
struct Slot {
    admitted: AtomicU64,
    rejected: AtomicU64,
}

fn pack(epoch: u64, count: u32) -> u64 {
    ((epoch as u32 as u64) << 32) | u64::from(count)
}

fn tag(word: u64) -> u32 {
    (word >> 32) as u32
}

fn count(word: u64) -> u32 {
    word as u32
}

/// The count a word holds for `epoch`, or 0 if the word belongs to another epoch.
fn count_for(word: u64, epoch: u64) -> u32 {
    if tag(word) == epoch as u32 {
        count(word)
    } else {
        0
    }
}

/// What a ring holds at one instant, by age (0 = current bucket).
#[derive(Debug, Clone)]
pub struct RingSnapshot {
    /// The epoch the snapshot was taken in.
    pub epoch: u64,
    /// Admitted per age, `0..=B`.
    pub admitted: Vec<u32>,
    /// Rejected per age, `0..=B`.
    pub rejected: Vec<u32>,
}

impl RingSnapshot {
    /// `(epoch, admitted)` for every bucket with admissions, newest first.
    pub fn admitted_buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.admitted
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(age, c)| (self.epoch - age as u64, u64::from(*c)))
    }

    /// `(epoch, admitted + rejected)` for every bucket with any traffic, newest first.
    pub fn offered_buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.admitted
            .iter()
            .zip(&self.rejected)
            .enumerate()
            .filter(|(_, (a, r))| **a > 0 || **r > 0)
            .map(|(age, (a, r))| (self.epoch - age as u64, u64::from(*a) + u64::from(*r)))
    }

    pub fn admitted_profile(&self, spec: &WindowSpec, now_ms: u64) -> AgeProfile {
        let mut p = AgeProfile::new(spec);
        p.extend(spec, now_ms, self.admitted_buckets());
        p
    }

    pub fn is_empty(&self) -> bool {
        self.admitted.iter().chain(&self.rejected).all(|c| *c == 0)
    }

    /// The newest epoch with any traffic.
    pub fn newest_active_epoch(&self) -> Option<u64> {
        self.offered_buckets().next().map(|(e, _)| e)
    }
}

/// The outcome of a conditional add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Admitted,
    /// The current bucket already held this much; adding would pass the allowance.
    Refused {
        current: u32,
    },
}

#[derive(Debug)]
pub struct LocalRing {
    slots: Box<[Slot]>,
}

impl LocalRing {
    pub fn new(spec: &WindowSpec) -> Self {
        Self {
            slots: (0..spec.slots()).map(|_| Slot::default()).collect(),
        }
    }

    fn slot(&self, epoch: u64) -> &Slot {
        // The ring length is `B + 1`, at most 65, so the remainder fits in usize.
        &self.slots[(epoch % self.slots.len() as u64) as usize]
    }

    /// Reads every live bucket at `now_ms`. Lock-free; a concurrent writer may or may not be
    /// seen, as with any read of a changing counter.
    pub fn snapshot(&self, spec: &WindowSpec, now_ms: u64) -> RingSnapshot {
        let now_epoch = spec.epoch(now_ms);
        let n = spec.slots();
        let mut admitted = vec![0u32; n];
        let mut rejected = vec![0u32; n];
        for age in 0..n {
            let Some(epoch) = now_epoch.checked_sub(age as u64) else {
                break;
            };
            let slot = self.slot(epoch);
            let a = slot.admitted.load(Ordering::Acquire);
            let r = slot.rejected.load(Ordering::Acquire);
            admitted[age] = count_for(a, epoch);
            rejected[age] = count_for(r, epoch);
            if age + 1 == n {
                // The straddling slot is the one a writer whose clock already reads the next
                // bucket would use. Such counts are newer than ours: count them as current.
                let next = now_epoch + 1;
                admitted[0] = admitted[0].saturating_add(count_for(a, next));
                rejected[0] = rejected[0].saturating_add(count_for(r, next));
            }
        }
        RingSnapshot {
            epoch: now_epoch,
            admitted,
            rejected,
        }
    }

    /// Adds `cost` admissions to the bucket of `epoch` if that bucket then holds at most
    /// `max_current`. Exact under contention: the check and the add are one CAS.
    pub fn admit(&self, epoch: u64, cost: u32, max_current: u64) -> Admit {
        let word = &self.slot(epoch).admitted;
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let held = count_for(cur, epoch);
            let next = u64::from(held) + u64::from(cost);
            if next > max_current || next > u64::from(u32::MAX) {
                return Admit::Refused { current: held };
            }
            if Self::is_newer(cur, epoch) {
                // The slot already moved on to a later bucket: this writer is a bucket-ring
                // behind and its epoch has left the window.
                return Admit::Refused { current: 0 };
            }
            match word.compare_exchange_weak(
                cur,
                pack(epoch, next as u32),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Admit::Admitted,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Counts `cost` rejected requests in the bucket of `epoch` (saturating).
    pub fn reject(&self, epoch: u64, cost: u32) {
        Self::add(&self.slot(epoch).rejected, epoch, cost);
    }

    /// Takes back up to `cost` admissions from the bucket of `epoch`, if it is still that
    /// bucket. Used when a later limit of the same request refuses.
    pub fn refund(&self, epoch: u64, cost: u32) {
        let word = &self.slot(epoch).admitted;
        let mut cur = word.load(Ordering::Acquire);
        while tag(cur) == epoch as u32 {
            let next = pack(epoch, count(cur).saturating_sub(cost));
            match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    fn add(word: &AtomicU64, epoch: u64, cost: u32) {
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let next = if tag(cur) == epoch as u32 {
                count(cur).saturating_add(cost)
            } else if Self::is_newer(cur, epoch) {
                return;
            } else {
                cost
            };
            match word.compare_exchange_weak(
                cur,
                pack(epoch, next),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Whether `word` holds a later bucket than `epoch` (wrapping compare on the 32-bit tag,
    /// valid for buckets less than 2^31 apart). A never-written word (0) holds nothing.
    fn is_newer(word: u64, epoch: u64) -> bool {
        word != 0 && (tag(word).wrapping_sub(epoch as u32) as i32) > 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::window::EstimateMode;

    const T0: u64 = 1_700_000_000_000;

    fn spec() -> WindowSpec {
        WindowSpec::new(1_000, 10, EstimateMode::Interpolated).unwrap()
    }

    #[test]
    fn counts_land_in_their_bucket_and_expire_lazily() {
        let s = spec();
        let ring = LocalRing::new(&s);
        let e0 = s.epoch(T0);
        assert_eq!(ring.admit(e0, 3, u64::MAX), Admit::Admitted);
        ring.reject(e0, 2);
        assert_eq!(ring.admit(e0 + 4, 5, u64::MAX), Admit::Admitted);

        let snap = ring.snapshot(&s, T0 + 450);
        assert_eq!(snap.admitted[0], 5);
        assert_eq!(snap.admitted[4], 3);
        assert_eq!(snap.rejected[4], 2);
        assert_eq!(
            snap.offered_buckets().collect::<Vec<_>>(),
            vec![(e0 + 4, 5), (e0, 5)]
        );

        // e0 shares a slot with e0 + 11; writing there resets the stale count first.
        assert_eq!(ring.admit(e0 + 11, 1, u64::MAX), Admit::Admitted);
        let snap = ring.snapshot(&s, T0 + 1_100);
        assert_eq!(
            snap.admitted_buckets().collect::<Vec<_>>(),
            vec![(e0 + 11, 1), (e0 + 4, 5)]
        );
    }

    #[test]
    fn admit_respects_the_allowance_for_the_current_bucket() {
        let s = spec();
        let ring = LocalRing::new(&s);
        let e0 = s.epoch(T0);
        assert_eq!(ring.admit(e0, 4, 5), Admit::Admitted);
        assert_eq!(ring.admit(e0, 2, 5), Admit::Refused { current: 4 });
        assert_eq!(ring.admit(e0, 1, 5), Admit::Admitted);
        assert_eq!(ring.admit(e0, 1, 5), Admit::Refused { current: 5 });
        ring.refund(e0, 2);
        assert_eq!(ring.snapshot(&s, T0).admitted[0], 3);
    }

    #[test]
    fn a_writer_a_whole_ring_behind_cannot_reset_a_newer_bucket() {
        let s = spec();
        let ring = LocalRing::new(&s);
        let e0 = s.epoch(T0);
        assert_eq!(ring.admit(e0 + 11, 7, u64::MAX), Admit::Admitted);
        assert_eq!(ring.admit(e0, 1, u64::MAX), Admit::Refused { current: 0 });
        ring.reject(e0, 1);
        ring.refund(e0, 1);
        let snap = ring.snapshot(&s, T0 + 1_100);
        assert_eq!(snap.admitted[0], 7);
        assert_eq!(snap.rejected[0], 0);
    }

    #[test]
    fn a_writer_already_in_the_next_bucket_is_counted_as_current() {
        let s = spec();
        let ring = LocalRing::new(&s);
        let e0 = s.epoch(T0);
        ring.admit(e0 + 1, 2, u64::MAX);
        let snap = ring.snapshot(&s, T0 + 99);
        assert_eq!(snap.admitted[0], 2);
    }

    #[test]
    fn refund_after_the_bucket_moved_on_is_a_no_op() {
        let s = spec();
        let ring = LocalRing::new(&s);
        let e0 = s.epoch(T0);
        ring.admit(e0, 2, u64::MAX);
        ring.admit(e0 + 11, 2, u64::MAX);
        ring.refund(e0, 2);
        assert_eq!(ring.snapshot(&s, T0 + 1_100).admitted[0], 2);
    }

    /// Many threads add to the same buckets while the epoch rolls over under them: no add is
    /// lost, and conditional adds never pass their allowance.
    #[test]
    fn concurrent_adds_are_exact() {
        const THREADS: usize = 8;
        const PER_THREAD: u32 = 20_000;
        let s = spec();
        let ring = Arc::new(LocalRing::new(&s));
        let e0 = s.epoch(T0);
        let admitted = Arc::new(AtomicU32::new(0));
        let allowance = 50_000u64;
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let ring = ring.clone();
                let admitted = admitted.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        // Half the threads write one bucket, half the next; all race on resets
                        // of the rejected word, which starts out stale.
                        let epoch = e0 + (t % 2) as u64;
                        ring.reject(epoch, 1);
                        if ring.admit(epoch, 1, allowance) == Admit::Admitted {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        if i % 1000 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let snap = ring.snapshot(&s, s.epoch_start_ms(e0 + 1));
        let total_rejected: u64 = snap.rejected.iter().map(|c| u64::from(*c)).sum();
        let total_admitted: u64 = snap.admitted.iter().map(|c| u64::from(*c)).sum();
        assert_eq!(total_rejected, THREADS as u64 * u64::from(PER_THREAD));
        assert_eq!(total_admitted, u64::from(admitted.load(Ordering::Relaxed)));
        // Each bucket got 80 000 attempts against an allowance of 50 000.
        assert_eq!(snap.admitted[0], 50_000);
        assert_eq!(snap.admitted[1], 50_000);
    }

    /// Threads race to be first into a stale slot: the CAS reset keeps every add.
    #[test]
    fn concurrent_resets_keep_every_add() {
        let s = spec();
        for round in 0..200u64 {
            let ring = Arc::new(LocalRing::new(&s));
            let e_old = s.epoch(T0);
            ring.reject(e_old, 1_000);
            let e_new = e_old + 11 * (round + 1); // same slot, later ring turn
            let barrier = Arc::new(std::sync::Barrier::new(4));
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let ring = ring.clone();
                    let barrier = barrier.clone();
                    std::thread::spawn(move || {
                        barrier.wait();
                        for _ in 0..50 {
                            ring.reject(e_new, 1);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let snap = ring.snapshot(&s, s.epoch_start_ms(e_new));
            assert_eq!(snap.rejected[0], 200, "round {round}");
        }
    }
}
