//! Registers relayed in the name of a member this node still counts as live, held until that
//! member departs here.
//!
//! A live member speaks for itself: its registers relayed by another are refused (`receive.rs`).
//! But a member that relays them does so because it has seen their origin depart, and this node
//! sees the same departure later (SWIM's word spreads in a few rounds). The relay carries what
//! the origin spent last, which no one else will send again before the next anti-entropy: a
//! window's next owner that refused it would lease as if the departed origin had spent nothing.
//! So a refused relay is kept, the newest per origin and window, and merged (as any departed
//! origin's relayed register) in the first round where its origin no longer speaks for itself.
//! A starting node's warm-up cannot end while it lists such an origin (it waits for every
//! member it lists to push it its state, and a departed one never pushes), so what is held
//! counts before the node leases.
//!
//! Held is what any member holding the cluster key could send once the origin has departed:
//! holding it longer grants no more. An origin's own later register makes a held relay of an
//! older or equal version moot, and it is dropped. A relay is dropped once every slot it counts
//! has slid out of its window. At most `capacity` are held (the key table's size: one for each
//! window the node can hold); past it, new relays are refused as before.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use crate::limiter::{Batch, KeyId, OriginId, RegisterUpdate};

/// Refused relays, the newest per origin and window.
#[derive(Debug, Default)]
pub struct HeldRelays {
    held: BTreeMap<(u128, KeyId), RegisterUpdate>,
}

impl HeldRelays {
    /// Keeps `batch`'s registers (refused: their origin is live here), each unless one of a
    /// version as high is held, and while fewer than `capacity` are held.
    pub fn hold(&mut self, batch: &Batch, capacity: usize) {
        for update in &batch.updates {
            let full = self.held.len() >= capacity;
            match self.held.entry((batch.origin.0, update.key)) {
                Entry::Occupied(mut held) => {
                    if held.get().register.version < update.register.version {
                        held.insert(update.clone());
                    }
                }
                Entry::Vacant(slot) => {
                    if !full {
                        slot.insert(update.clone());
                    }
                }
            }
        }
    }

    /// The origin's own registers arrived: a held relay of a version no higher adds nothing.
    pub fn superseded(&mut self, own: &Batch) {
        if self.held.is_empty() {
            return;
        }
        for update in &own.updates {
            let slot = (own.origin.0, update.key);
            if self
                .held
                .get(&slot)
                .is_some_and(|h| h.register.version <= update.register.version)
            {
                self.held.remove(&slot);
            }
        }
    }

    /// Takes out what is held of origins that no longer speak for themselves, as one batch an
    /// origin, and drops what has slid out of its window by `now_ms`.
    pub fn release(&mut self, now_ms: u64, speaks_for_itself: impl Fn(u128) -> bool) -> Vec<Batch> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let mut released: BTreeMap<u128, Vec<RegisterUpdate>> = BTreeMap::new();
        let mut spoken = BTreeMap::new();
        self.held.retain(|&(origin, _), update| {
            if now_ms >= last_slot_frees_ms(update) {
                return false;
            }
            let speaks = *spoken
                .entry(origin)
                .or_insert_with(|| speaks_for_itself(origin));
            if !speaks {
                released.entry(origin).or_default().push(update.clone());
            }
            speaks
        });
        released
            .into_iter()
            .map(|(origin, updates)| Batch {
                origin: OriginId(origin),
                updates,
            })
            .collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.held.len()
    }
}

/// When the newest slot `update` counts leaves its window: the end of its newest bucket plus
/// the window's length.
fn last_slot_frees_ms(update: &RegisterUpdate) -> u64 {
    let bucket_ms = update.window_ms / u64::from(update.buckets.max(1));
    update
        .register
        .newest_epoch
        .saturating_add(1)
        .saturating_mul(bucket_ms.max(1))
        .saturating_add(update.window_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::{HlcTimestamp, Register};

    const WINDOW_MS: u64 = 1_000;
    const BUCKETS: u16 = 10;

    fn update(key: u128, version: u64, newest_epoch: u64, admitted: u32) -> RegisterUpdate {
        RegisterUpdate {
            key: KeyId(key),
            window_ms: WINDOW_MS,
            buckets: BUCKETS,
            register: Register {
                version,
                hlc: HlcTimestamp::new(newest_epoch * 100, 0),
                newest_epoch,
                demand: admitted,
                admitted: vec![admitted],
            },
        }
    }

    fn batch(origin: u128, updates: Vec<RegisterUpdate>) -> Batch {
        Batch {
            origin: OriginId(origin),
            updates,
        }
    }

    #[test]
    fn a_relay_is_released_once_its_origin_no_longer_speaks_for_itself() {
        let mut held = HeldRelays::default();
        held.hold(&batch(7, vec![update(1, 5, 100, 30)]), 10);
        held.hold(&batch(8, vec![update(1, 2, 100, 4)]), 10);
        // Held, not released, while both origins speak for themselves.
        assert!(held.release(10_050, |_| true).is_empty());
        assert_eq!(held.len(), 2);
        // Origin 7 departs: its relay comes out, origin 8's stays.
        let out = held.release(10_050, |o| o != 7);
        assert_eq!(out, vec![batch(7, vec![update(1, 5, 100, 30)])]);
        assert_eq!(held.len(), 1);
    }

    #[test]
    fn the_newest_relay_of_a_window_is_kept_and_the_origins_own_register_supersedes_it() {
        let mut held = HeldRelays::default();
        held.hold(&batch(7, vec![update(1, 5, 100, 30)]), 10);
        held.hold(&batch(7, vec![update(1, 4, 100, 20)]), 10);
        held.hold(&batch(7, vec![update(1, 6, 100, 35)]), 10);
        // An own register of a lower version than held leaves it.
        held.superseded(&batch(7, vec![update(1, 5, 100, 30)]));
        assert_eq!(held.len(), 1);
        let out = held.release(10_050, |_| false);
        assert_eq!(out, vec![batch(7, vec![update(1, 6, 100, 35)])]);
        // One of a version as high drops it.
        held.hold(&batch(7, vec![update(1, 6, 100, 35)]), 10);
        held.superseded(&batch(7, vec![update(1, 6, 100, 35)]));
        assert_eq!(held.len(), 0);
    }

    #[test]
    fn what_is_held_is_bounded_and_dropped_once_its_window_slid_past() {
        let mut held = HeldRelays::default();
        let many: Vec<_> = (0..5).map(|k| update(k, 1, 100, 1)).collect();
        held.hold(&batch(7, many), 3);
        assert_eq!(held.len(), 3, "capacity");
        // A newer version of a held window still replaces it when full.
        held.hold(&batch(7, vec![update(0, 2, 100, 9)]), 3);
        assert_eq!(held.len(), 3);
        // Epoch 100 of 100 ms buckets ends at 10 100 ms; its last slot frees at 11 100 ms.
        assert_eq!(held.release(11_099, |_| true).len(), 0);
        assert_eq!(held.len(), 3, "still in its window");
        assert!(held.release(11_100, |_| false).is_empty());
        assert_eq!(held.len(), 0, "slid out of its window, released to no one");
    }
}
