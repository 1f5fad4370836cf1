//! The local time wheel: a lock-free ring of `B + 1` bucket slots for one window on this node.
//!
//! Each slot is one word: a 16-bit tag (the low bits of its bucket's epoch), a 32-bit admitted
//! count and a 16-bit rejected count. A write to a slot whose tag is stale resets it and adds in
//! one compare-and-swap, so a reset can never lose a concurrent add; the well-known "check the
//! epoch, store zero, then fetch_add" version loses every add that lands between the store and
//! another thread's reset. Admissions are conditional adds: the allowance check and the add are
//! the same CAS, so the count never passes the allowance under any interleaving.
//!
//! Rejected counts only weigh this node's demand in the cluster's share computation, so they
//! saturate at 65 535 per bucket instead of taking bits from admissions.
//!
//! Tags compare by equality with the epoch a slot is expected to hold at `now`. Two epochs that
//! share a slot and a tag are at least `lcm(B + 1, 2^16)` buckets apart; the key table clears
//! the slots of windows idle that long ([`LocalRing::clear_stale`]).

mod reads;
mod slot_word;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::estimate::AgeProfile;
use super::spec::WindowSpec;

pub use self::reads::{OfferedTotals, RingSnapshot, RingUsage};
use self::slot_word::{admitted, epoch_tag, holds, holds_newer, pack, rejected, tag};

/// The outcome of a conditional add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Added; the bucket now holds `now_holds`.
    Admitted { now_holds: u32 },
    /// The current bucket already held this much; adding would pass the allowance.
    Refused { current: u32 },
}

/// The published word's top bit: the traffic is established ([`LocalRing::establish`]).
const ESTABLISHED: u32 = 1 << 31;
/// The largest demand the published word holds (below the flag, and `+ 1` for "some").
pub const MAX_PUBLISHED: u32 = ESTABLISHED - 2;

/// Slots kept inline in the window's own allocation: enough for the default 10 buckets.
const INLINE_SLOTS: usize = 11;

/// The slots, and the demand this node last told its peers for the window (see
/// [`LocalRing::publish`]). That word sits in what would otherwise be the enum's padding, so
/// the ring stays 96 bytes.
#[derive(Debug)]
enum Slots {
    Inline {
        len: u8,
        published: AtomicU32,
        words: [AtomicU64; INLINE_SLOTS],
    },
    Heap {
        published: AtomicU32,
        words: Box<[AtomicU64]>,
    },
}

#[derive(Debug)]
pub struct LocalRing {
    slots: Slots,
}

impl LocalRing {
    pub fn new(spec: &WindowSpec) -> Self {
        let n = spec.slots();
        let slots = match u8::try_from(n) {
            Ok(len) if n <= INLINE_SLOTS => Slots::Inline {
                len,
                published: AtomicU32::new(0),
                words: Default::default(),
            },
            _ => Slots::Heap {
                published: AtomicU32::new(0),
                words: (0..n).map(|_| AtomicU64::new(0)).collect(),
            },
        };
        Self { slots }
    }

    fn words(&self) -> &[AtomicU64] {
        match &self.slots {
            Slots::Inline { len, words, .. } => &words[..usize::from(*len)],
            Slots::Heap { words, .. } => words,
        }
    }

    fn published_word(&self) -> &AtomicU32 {
        match &self.slots {
            Slots::Inline { published, .. } | Slots::Heap { published, .. } => published,
        }
    }

    /// Records the demand this node just emitted for the window; returns the one recorded
    /// before, if any. Demands above [`MAX_PUBLISHED`] are recorded as that. Whether the
    /// traffic is established ([`LocalRing::establish`]) is kept.
    pub fn publish(&self, demand: u32) -> Option<u32> {
        let value = demand.min(MAX_PUBLISHED) + 1;
        let before = self
            .published_word()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some((w & ESTABLISHED) | value)
            })
            .unwrap_or_else(|w| w);
        (before & !ESTABLISHED).checked_sub(1)
    }

    /// The demand last recorded by [`LocalRing::publish`], if any and not forgotten since.
    pub fn published(&self) -> Option<u32> {
        (self.published_word().load(Ordering::Acquire) & !ESTABLISHED).checked_sub(1)
    }

    /// Forgets the recorded demand, and that the traffic was established; returns whether
    /// there was either (a bound cached from them is then stale).
    pub fn forget_published(&self) -> bool {
        self.published_word().swap(0, Ordering::AcqRel) != 0
    }

    /// Records that this node's traffic on the window has lasted past its onset: from now
    /// until [`LocalRing::forget_published`] (a window with no traffic), a gap that leaves
    /// only young buckets in the window is not a new onset.
    ///
    /// Only while a demand is recorded. A check that read the clock just before another
    /// thread's check forgot the demand still sees the old traffic; it must not mark the
    /// traffic after the gap, which records its first demand a round later, long after
    /// such a check is done. Traffic outlives its onset (500 ms) after its first emission.
    pub fn establish(&self) {
        // `Err` is "no demand recorded": nothing to mark.
        let _ = self
            .published_word()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & !ESTABLISHED != 0).then_some(w | ESTABLISHED)
            });
    }

    /// Whether [`LocalRing::establish`] took since the last forget.
    pub fn established(&self) -> bool {
        self.published_word().load(Ordering::Acquire) & ESTABLISHED != 0
    }

    fn slot(&self, epoch: u64) -> &AtomicU64 {
        let words = self.words();
        // The ring length is `B + 1`, at most 65, so the remainder fits in usize.
        &words[(epoch % words.len() as u64) as usize]
    }

    /// Reads every live bucket at `now_ms`. Lock-free and allocation-free; a concurrent writer
    /// may or may not be seen, as with any read of a changing counter.
    pub fn snapshot(&self, spec: &WindowSpec, now_ms: u64) -> RingSnapshot {
        let now_epoch = spec.epoch(now_ms);
        let n = spec.slots();
        let mut out = RingSnapshot {
            epoch: now_epoch,
            admitted: AgeProfile::new(spec),
            offered: AgeProfile::new(spec),
        };
        for age in 0..n {
            let Some(epoch) = now_epoch.checked_sub(age as u64) else {
                break;
            };
            let word = self.slot(epoch).load(Ordering::Acquire);
            // The straddling slot is also the one a writer whose clock already reads the next
            // bucket would use. Such counts are newer than ours: count them as current.
            let at = if holds(word, epoch) {
                age
            } else if age + 1 == n && holds(word, now_epoch + 1) {
                0
            } else {
                continue;
            };
            let a = u64::from(admitted(word));
            out.admitted.add_at_age(at, a);
            out.offered.add_at_age(at, a + rejected(word));
        }
        out
    }

    /// What [`LocalRing::snapshot`] says of the offered load, folded without building the
    /// profiles: the newest epoch with any traffic, and the traffic of every live bucket.
    pub fn offered_totals(&self, spec: &WindowSpec, now_ms: u64) -> OfferedTotals {
        let now_epoch = spec.epoch(now_ms);
        let slots = self.words();
        let n = slots.len();
        let mut out = OfferedTotals {
            newest_epoch: None,
            total: 0,
        };
        // Backwards from the current slot, one division per read, as `usage`.
        let mut idx = (now_epoch % n as u64) as usize;
        for age in 0..n {
            let Some(epoch) = now_epoch.checked_sub(age as u64) else {
                break;
            };
            let word = slots[idx].load(Ordering::Acquire);
            idx = if idx == 0 { n - 1 } else { idx - 1 };
            // As the snapshot: a writer already in the next bucket counts as current.
            let at = if holds(word, epoch) {
                epoch
            } else if age + 1 == n && holds(word, now_epoch + 1) {
                now_epoch
            } else {
                continue;
            };
            let offered = u64::from(admitted(word)) + rejected(word);
            if offered > 0 {
                out.total += offered;
                out.newest_epoch = Some(out.newest_epoch.map_or(at, |e| e.max(at)));
            }
        }
        out
    }

    /// The hot-path read: the same numbers as [`LocalRing::snapshot`] folded on the fly, walking
    /// the ring backwards from the current slot (one division per read, not one per slot).
    /// `recent` (at least 1) is how many buckets, the current one included, make up the recent
    /// span whose offered load is told apart from the older buckets'.
    pub fn usage(&self, spec: &WindowSpec, now_ms: u64, recent: usize) -> RingUsage {
        let now_epoch = spec.epoch(now_ms);
        let slots = self.words();
        let n = slots.len();
        let b = n - 1;
        let mut idx = (now_epoch % n as u64) as usize;
        let mut full_admitted = 0u64;
        let mut full_offered = 0u64;
        let mut current = 0u32;
        let mut current_offered = 0u64;
        let mut recent_offered = 0u64;
        let mut older_offered = 0u64;
        let recent = recent.max(1) as u64;
        let mut newest = u64::MAX;
        let mut oldest_active = None;
        // Buckets fully inside the window: ages 0..B.
        for age in 0..b as u64 {
            let word = slots[idx].load(Ordering::Acquire);
            idx = if idx == 0 { b } else { idx - 1 };
            if word == 0 || tag(word) != epoch_tag(now_epoch.wrapping_sub(age)) {
                continue;
            }
            oldest_active = Some(age);
            let a = admitted(word);
            let offered = u64::from(a) + rejected(word);
            if age == 0 {
                current = a;
                current_offered = offered;
            } else if age < recent {
                recent_offered += offered;
            } else {
                older_offered += offered;
            }
            if a > 0 && newest == u64::MAX {
                newest = age;
            }
            full_admitted += u64::from(a);
            full_offered += offered;
        }
        // The straddling bucket, or a writer already in the next bucket (count it as current).
        let word = slots[idx].load(Ordering::Acquire);
        let (mut admitted_est, mut straddle_offered) = (0.0, 0.0);
        if holds(word, now_epoch.wrapping_sub(b as u64)) {
            oldest_active = Some(b as u64);
            let w = spec.straddle_weight(now_ms);
            let a = admitted(word);
            if a > 0 && newest == u64::MAX {
                newest = b as u64;
            }
            admitted_est = f64::from(a) * w;
            straddle_offered = (u64::from(a) + rejected(word)) as f64 * w;
        } else if holds(word, now_epoch + 1) {
            let a = admitted(word);
            current = current.saturating_add(a);
            current_offered += u64::from(a) + rejected(word);
            oldest_active = oldest_active.or(Some(0));
            if a > 0 {
                newest = 0;
            }
            full_admitted += u64::from(a);
            full_offered += u64::from(a) + rejected(word);
        }
        admitted_est += full_admitted as f64;
        let offered_est = straddle_offered + full_offered as f64;
        RingUsage {
            epoch: now_epoch,
            admitted: admitted_est,
            offered: offered_est,
            straddle_offered,
            current,
            current_offered,
            recent_offered,
            older_offered,
            newest_admitted_age: (newest != u64::MAX).then_some(newest),
            oldest_active_age: oldest_active,
            active: offered_est > 0.0,
        }
    }

    /// Adds `cost` admissions to the bucket of `epoch` if that bucket then holds at most
    /// `max_current`. Exact under contention: the check and the add are one CAS.
    pub fn admit(&self, epoch: u64, cost: u32, max_current: u64) -> Admit {
        self.update(epoch, |held, rej| {
            let next = u64::from(held) + u64::from(cost);
            if next > max_current || next > u64::from(u32::MAX) {
                Err(held)
            } else {
                Ok((next as u32, rej))
            }
        })
        .map_or_else(
            |current| Admit::Refused { current },
            |now_holds| Admit::Admitted { now_holds },
        )
    }

    /// Counts `cost` rejected requests in the bucket of `epoch` (saturating).
    pub fn reject(&self, epoch: u64, cost: u32) {
        let _ = self.update(epoch, |held, rej| Ok((held, rej + u64::from(cost))));
    }

    /// Takes back up to `cost` admissions from the bucket of `epoch`, if it is still that
    /// bucket. Used when a later limit of the same request refuses.
    pub fn refund(&self, epoch: u64, cost: u32) {
        let word = self.slot(epoch);
        let mut cur = word.load(Ordering::Acquire);
        while holds(cur, epoch) {
            let next = pack(epoch, admitted(cur).saturating_sub(cost), rejected(cur));
            match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Applies `f(admitted, rejected)` to the bucket of `epoch`, resetting a stale slot first,
    /// in one CAS. A slot that already holds a later bucket is left alone: its writer is a
    /// whole ring ahead and this epoch has left the window.
    fn update(
        &self,
        epoch: u64,
        f: impl Fn(u32, u64) -> Result<(u32, u64), u32>,
    ) -> Result<u32, u32> {
        let word = self.slot(epoch);
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let (held, rej) = if holds(cur, epoch) {
                (admitted(cur), rejected(cur))
            } else if holds_newer(cur, epoch) {
                return Err(0);
            } else {
                (0, 0)
            };
            let (a, r) = f(held, rej)?;
            match word.compare_exchange_weak(
                cur,
                pack(epoch, a, r),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(a),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Zeroes slots that hold no live bucket at `now_ms`, so that a window idle for longer than
    /// its tags can tell apart never mistakes an ancient count for a current one. A slot written
    /// meanwhile is left as it is (CAS).
    pub fn clear_stale(&self, spec: &WindowSpec, now_ms: u64) {
        let now_epoch = spec.epoch(now_ms);
        let slots = self.words();
        for (i, word) in slots.iter().enumerate() {
            let cur = word.load(Ordering::Acquire);
            if cur == 0 {
                continue;
            }
            let live = (0..=u64::from(spec.buckets()) + 1).any(|age| {
                let epoch = (now_epoch + 1).saturating_sub(age);
                (epoch % slots.len() as u64) as usize == i && holds(cur, epoch)
            });
            if !live {
                let _ = word.compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
