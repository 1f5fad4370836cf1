//! Registers relayed in the name of a member this node still counts as speaking for itself,
//! held until it no longer does.
//!
//! A live member speaks for itself: its registers relayed by another are refused (`receive.rs`).
//! But a member relays the registers of every origin it no longer lists (most often one it saw
//! depart, which this node sees later: SWIM's word spreads in a few rounds). The relay carries
//! what the origin spent last, which no one else sends again before the next anti-entropy: a
//! window's next owner that refused it would lease as if the departed origin had spent
//! nothing. So a refused relay is held, the newest per window and origin, and merged (as a
//! relay arriving then would be) in the first round where its origin no longer speaks for
//! itself here. A starting node's warm-up does not end holding the cluster's state while
//! anything is held (`NodeCore::update_readiness`): a joiner taking windows over counts what
//! users that departed as it joined spent before its early floor lets it lease, or its
//! warm-up times out and it waits the whole quiet period (`RingView::floor_of`).
//!
//! Held is what any member holding the cluster key could send once the origin has departed:
//! holding it grants no more. A relay goes once an own register of its origin's as new arrives
//! (the origin spoke for itself), once every slot it counts has slid out of its window, or when
//! merged. Only a relay in a valid window shape, not stamped further ahead than a merge takes
//! (a window's buckets), and still in its window is held; at most `capacity` (the key table's
//! size: one for each window the node can hold); past it, new relays are dropped.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use crate::limiter::{Batch, KeyId, OriginId, RegisterUpdate};
use crate::window::{EstimateMode, WindowSpec};

/// Refused relays, the newest per window and origin.
#[derive(Debug, Default)]
pub struct HeldRelays {
    held: BTreeMap<KeyId, BTreeMap<u128, RegisterUpdate>>,
    len: usize,
}

impl HeldRelays {
    /// Keeps `batch`'s registers (refused: their origin is listed here), each unless one of a
    /// version as high is held, and while fewer than `capacity` are held.
    pub fn hold(&mut self, batch: &Batch, capacity: usize, now_ms: u64) {
        for update in batch.updates.iter().filter(|u| may_hold(u, now_ms)) {
            let full = self.len >= capacity;
            let by_origin = match self.held.entry(update.key) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(_) if full => continue,
                Entry::Vacant(e) => e.insert(BTreeMap::new()),
            };
            match by_origin.entry(batch.origin.0) {
                Entry::Occupied(mut held) => {
                    if held.get().register.version < update.register.version {
                        held.insert(update.clone());
                    }
                }
                Entry::Vacant(slot) => {
                    if !full {
                        slot.insert(update.clone());
                        self.len += 1;
                    }
                }
            }
        }
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The origin's own registers arrived: held relays of a version no higher add nothing.
    pub fn drop_superseded_by(&mut self, own: &Batch) {
        if self.len == 0 {
            return;
        }
        for update in &own.updates {
            let Some(by_origin) = self.held.get_mut(&update.key) else {
                continue;
            };
            if by_origin
                .get(&own.origin.0)
                .is_some_and(|h| h.register.version <= update.register.version)
            {
                by_origin.remove(&own.origin.0);
                self.len -= 1;
                if by_origin.is_empty() {
                    self.held.remove(&update.key);
                }
            }
        }
    }

    /// Takes out what is held of origins that `departed` (no longer speak for themselves), as
    /// one batch an origin, and drops what has slid out of its window by `now_ms`.
    pub fn release(&mut self, now_ms: u64, departed: impl Fn(u128) -> bool) -> Vec<Batch> {
        if self.len == 0 {
            return Vec::new();
        }
        let mut released: BTreeMap<u128, Vec<RegisterUpdate>> = BTreeMap::new();
        let mut gone = BTreeMap::new();
        for by_origin in self.held.values_mut() {
            by_origin.retain(|&origin, update| {
                if expired(update, now_ms) {
                    return false;
                }
                let departed = *gone.entry(origin).or_insert_with(|| departed(origin));
                if departed {
                    released.entry(origin).or_default().push(update.clone());
                }
                !departed
            });
        }
        self.held.retain(|_, by_origin| !by_origin.is_empty());
        self.len = self.held.values().map(BTreeMap::len).sum();
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
        self.len
    }
}

/// A register in a window's shape, its newest bucket no further ahead of `now_ms`'s than a
/// merge takes (a window's buckets), and not yet slid out of its window.
fn may_hold(update: &RegisterUpdate, now_ms: u64) -> bool {
    let Some(spec) = spec_of(update) else {
        return false;
    };
    let ahead = spec.epoch(now_ms).saturating_add(u64::from(spec.buckets()));
    update.register.newest_epoch <= ahead && !update.register.as_ref().is_expired(&spec, now_ms)
}

/// Whether every slot `update` counts has left its window by `now_ms`.
fn expired(update: &RegisterUpdate, now_ms: u64) -> bool {
    spec_of(update).is_none_or(|spec| update.register.as_ref().is_expired(&spec, now_ms))
}

fn spec_of(update: &RegisterUpdate) -> Option<WindowSpec> {
    WindowSpec::new(update.window_ms, update.buckets, EstimateMode::Interpolated).ok()
}

#[cfg(test)]
mod tests;
