//! The limiter's cluster side: emitting this node's registers, merging peers' registers,
//! serving anti-entropy.
//!
//! Everything here runs under one lock (`ReplicationState`), off the check path. It is the
//! only writer of remote replica state, which the check path reads lock-free.

mod merge;

use std::collections::BTreeMap;

use super::expected_size::ExpectedSize;
use super::origin::{OriginId, OriginTable};
use super::own_demand::{
    share_binds, smoothed_demand, span_counted_ms, whole_window_demand, window_scale,
};
use super::state::{WindowState, is_aggregate};
use super::{KeyId, Limiter};
use crate::crdt::Hlc;
use crate::crdt::Register;

pub use super::merge_report::MergeReport;
use crate::window::{RingSnapshot, WindowSpec};

pub(crate) struct ReplicationState {
    hlc: Hlc,
    /// This origin's emission counter: every batch it emits gets the next value.
    version: u64,
    origins: OriginTable,
    pub expected: ExpectedSize,
    /// The last lists of silent and of held origins, interned (see `intern_list`).
    interned: [Option<InternedList>; 2],
}

/// Which list of origins [`ReplicationState::intern_list`] interns.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OriginList {
    Silent = 0,
    Held = 1,
}

/// A list of origins as given, and its indices, sorted and deduplicated.
#[derive(Debug)]
struct InternedList {
    ids: Vec<OriginId>,
    forgotten: u64,
    idx: Vec<super::state::OriginIdx>,
}

impl std::fmt::Debug for ReplicationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationState")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl ReplicationState {
    /// The version of this origin's last emitted batch.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A fresh version and stamp for an emission at `now_ms`.
    pub fn next_emission(&mut self, now_ms: u64) -> (u64, crate::crdt::HlcTimestamp) {
        self.version += 1;
        (self.version, self.hlc.now(now_ms))
    }

    /// The index of `origin`, if it is known.
    pub fn lookup_origin(&self, origin: OriginId) -> Option<super::state::OriginIdx> {
        self.origins.lookup(origin)
    }

    /// The origin behind an interned index, if it is still remembered.
    pub fn origin_of(&self, idx: super::state::OriginIdx) -> Option<OriginId> {
        self.origins.get(idx).map(|e| e.id)
    }

    /// The indices of `ids` other than `own`, sorted and deduplicated. The node gives the same
    /// list round after round (every member of a large cluster that has gone quiet, say), so
    /// the last one's indices are kept and reused while no origin has been forgotten since.
    pub fn intern_list(
        &mut self,
        which: OriginList,
        ids: &[OriginId],
        own: OriginId,
        now_ms: u64,
    ) -> Vec<super::state::OriginIdx> {
        let forgotten = self.origins.forgotten();
        if let Some(last) = &self.interned[which as usize]
            && last.forgotten == forgotten
            && last.ids == ids
        {
            return last.idx.clone();
        }
        let mut idx: Vec<super::state::OriginIdx> = ids
            .iter()
            .filter(|o| **o != own)
            // Members already known keep their index; looking it up is all it takes.
            .map(|o| {
                self.origins
                    .lookup(*o)
                    .unwrap_or_else(|| self.origins.intern(*o, now_ms))
            })
            .collect();
        if self.origins.forgotten() != forgotten {
            // Interning a newcomer evicted an origin of a full table, perhaps one listed here
            // (its index would then name nobody, or somebody else later). Once more, each
            // listed origin seen now, so that none of them is the one evicted.
            idx = ids
                .iter()
                .filter(|o| **o != own)
                .map(|o| self.origins.intern(*o, now_ms))
                .collect();
        }
        idx.sort_unstable();
        idx.dedup();
        self.interned[which as usize] = Some(InternedList {
            ids: ids.to_vec(),
            forgotten: self.origins.forgotten(),
            idx: idx.clone(),
        });
        idx
    }

    pub fn new(hlc: Hlc, expected: ExpectedSize) -> Self {
        Self {
            hlc,
            version: 0,
            origins: OriginTable::default(),
            expected,
            interned: [None, None],
        }
    }
}

/// One register of one window, as it travels between nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterUpdate {
    pub key: KeyId,
    /// The window's shape, so a node that never saw the key can still age its buckets.
    pub window_ms: u64,
    pub buckets: u16,
    pub register: Register,
}

/// Registers of one origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub origin: OriginId,
    pub updates: Vec<RegisterUpdate>,
}

pub(super) fn register_of(
    snap: &RingSnapshot,
    spec: &WindowSpec,
    now_ms: u64,
    version: u64,
    hlc: crate::crdt::HlcTimestamp,
) -> Register {
    let by_age = snap.admitted.by_age();
    let used = by_age.iter().rposition(|c| *c > 0).map_or(0, |i| i + 1);
    Register {
        version,
        hlc,
        newest_epoch: snap.epoch,
        // Clamped as this node records what it published, so that the two agree.
        demand: snap
            .offered
            .sum(spec, now_ms)
            .ceil()
            .min(f64::from(crate::window::MAX_PUBLISHED)) as u32,
        admitted: by_age[..used]
            .iter()
            .map(|c| u32::try_from(*c).unwrap_or(u32::MAX))
            .collect(),
    }
}

/// What the ring offered and admitted over the window, in whole buckets.
fn window_totals(snap: &RingSnapshot) -> (u64, u64) {
    (
        snap.offered.by_age().iter().sum(),
        snap.admitted.by_age().iter().sum(),
    )
}

/// The demand this node publishes for a window whose register it emits now, `measured` over
/// the window: the one it published last, up or down, while the window refuses more than a
/// fifth of its load, here and over the cluster as last heard, and nothing of it has been
/// heard from its peers lately (`Limiter::hearing_bounds_ms`: a round and a
/// quarter where sums come, two and a quarter where only registers do). A window refusing
/// that much has its registers and sums go out every round, so older ones mean the owner is
/// out of hearing; a calm window's come once a second, and are old between sends for no
/// fault.
///
/// Shares sum to the limit only while every node divides it by the same demands. Cut off
/// from a window's owner (in a large cluster, from the sums that tell it its peers' demand),
/// a node still sees its own demand move, by chance from one round to the next, while its
/// peers' stay where the last sum left them; and a node whose share rose takes the rise at
/// once, while one whose share fell has admitted what it admitted. Over the peers cut off
/// together, that ratchet adds up at the start of a partition, and the cap on the global
/// count, which catches it otherwise, counts only what was heard. Held where it was, the
/// demand each of them divides by is the one its peers last had of it, and the shares sum to
/// 1 again. A fall is held too: published while nobody hears it, it would only ratchet the
/// other way. Pinned by `a_demand_does_not_rise_while_the_owners_sums_are_out_of_hearing` and
/// `a_demand_out_of_hearing_is_held_both_ways_until_a_sum_comes` (`limiter/tests/cluster.rs`).
fn demand_out_of_hearing(
    state: &WindowState,
    (offered, admitted): (u64, u64),
    measured: u32,
    (within_sums_ms, within_registers_ms): (u64, u64),
    now_ms: u64,
) -> u32 {
    let Some(published) = state.ring.published() else {
        return measured;
    };
    if measured == published {
        return measured;
    }
    // Refusing more than a fifth of its load: its share binds. A node that refused a few at
    // a chance surge of a window far from its limit is not cut off for it.
    if !share_binds(offered, admitted) {
        return measured;
    }
    let Some(last) = state.remote_unheard_since(now_ms, within_sums_ms, within_registers_ms) else {
        return measured;
    };
    let cluster_demand = u64::from(published).saturating_add(last.demand);
    if share_binds(cluster_demand, admitted.saturating_add(last.admitted)) {
        published
    } else {
        measured
    }
}

impl Limiter {
    /// This node's register of one window, as emitted now: its demand is the one peers will
    /// count it by (`demand_out_of_hearing`; smoothed where its share binds, `own_demand.rs`),
    /// and, with `publish`, recorded as published.
    fn emit_register(
        &self,
        state: &WindowState,
        snap: &RingSnapshot,
        spec: &WindowSpec,
        now_ms: u64,
        (version, hlc): (u64, crate::crdt::HlcTimestamp),
        publish: bool,
    ) -> Register {
        let mut register = register_of(snap, spec, now_ms, version, hlc);
        let counted_ms = span_counted_ms(snap, spec, now_ms, self.observed_ms(now_ms));
        let scale = window_scale(spec.window_ms(), counted_ms);
        register.demand = whole_window_demand(register.demand, spec.window_ms(), counted_ms);
        let (offered, admitted) = window_totals(snap);
        register.demand = demand_out_of_hearing(
            state,
            (offered, admitted),
            register.demand,
            self.hearing_bounds_ms(),
            now_ms,
        );
        // Binding here and over the cluster as last heard: a node of a window far from its
        // limit that refused at a chance surge follows its demand at once.
        let binding = share_binds(offered, admitted)
            && state.remote_last_said().is_some_and(|others| {
                share_binds(
                    offered.saturating_add(others.demand),
                    admitted.saturating_add(others.admitted),
                )
            });
        if binding && let Some(published) = state.ring.published() {
            let elapsed = state.last_emission().elapsed_ms(now_ms);
            register.demand = smoothed_demand(published, register.demand, elapsed, scale);
        }
        if publish {
            state.publish_demand(register.demand, now_ms, binding);
        }
        register
    }

    /// The registers of this node that changed since the previous call (plus the previous
    /// call's, once more), as one batch with a fresh version. `None` when nothing changed.
    pub fn collect_changed(&self, now_ms: u64) -> Option<Batch> {
        let mut sync = self.lock_sync();
        let mut all = self.dirty.take();
        all.sort_unstable();
        all.dedup();
        if all.is_empty() {
            return None;
        }
        sync.version += 1;
        let version = sync.version;
        let hlc = sync.hlc.now(now_ms);
        let guard = self.table.guard();
        let mut updates = Vec::with_capacity(all.len());
        let mut again = Vec::new();
        for id in all {
            let Some(state) = self.table.get(&id, &guard) else {
                continue;
            };
            // Clear before reading: a change after the read sets it again and requeues. What
            // changed goes once more next round.
            if state.take_dirty() && state.requeue() {
                again.push(id);
            }
            let spec = state.spec();
            let snap = state.ring.snapshot(&spec, now_ms);
            // What peers will count this node's demand as (admission.rs). In a large cluster a
            // window that refused nothing lately goes to its owner only on a calm round, so
            // they may count an older one; but such a window's share does not bind, and the
            // round it refuses, its register goes out.
            let register = self.emit_register(state, &snap, &spec, now_ms, (version, hlc), true);
            updates.push(RegisterUpdate {
                key: id,
                window_ms: spec.window_ms(),
                buckets: spec.buckets(),
                register,
            });
        }
        self.dirty.queue_again(&again);
        Some(Batch {
            origin: self.origin,
            updates,
        })
    }

    /// Every live register of this node, with a fresh version: what it publishes as its
    /// demand moves with it (see `emit_register`).
    pub fn snapshot_local(&self, now_ms: u64) -> Batch {
        self.own_registers(now_ms, true)
    }

    /// Every live register of this node, with a fresh version, for a snapshot on disk: the
    /// demand it would publish is written but not published, so that saving (periodically,
    /// while serving) changes no admission.
    pub fn saved_registers(&self, now_ms: u64) -> Batch {
        self.own_registers(now_ms, false)
    }

    fn own_registers(&self, now_ms: u64, publish: bool) -> Batch {
        let mut sync = self.lock_sync();
        sync.version += 1;
        let version = sync.version;
        let hlc = sync.hlc.now(now_ms);
        let guard = self.table.guard();
        let mut updates = Vec::new();
        for id in self.table.ids(&guard) {
            let Some(state) = self.table.get(&id, &guard) else {
                continue;
            };
            let spec = state.spec();
            let snap = state.ring.snapshot(&spec, now_ms);
            if snap.is_empty() {
                continue;
            }
            // A newer version than any this node sent: where it goes (an owner on a calm
            // round, a newcomer, anti-entropy) it supersedes what was sent before.
            let register = self.emit_register(state, &snap, &spec, now_ms, (version, hlc), publish);
            updates.push(RegisterUpdate {
                key: id,
                window_ms: spec.window_ms(),
                buckets: spec.buckets(),
                register,
            });
        }
        Batch {
            origin: self.origin,
            updates,
        }
    }

    /// Live registers this node holds from other origins that `relay` selects (for example,
    /// origins that are no longer members and so cannot serve their own), one batch per origin.
    pub fn relay(&self, now_ms: u64, relay: impl Fn(OriginId) -> bool) -> Vec<Batch> {
        let sync = self.lock_sync();
        let guard = self.table.guard();
        let mut by_origin: BTreeMap<OriginId, Vec<RegisterUpdate>> = BTreeMap::new();
        for id in self.table.ids(&guard) {
            let Some(state) = self.table.get(&id, &guard) else {
                continue;
            };
            let Some(replica) = state.remote.load_full() else {
                continue;
            };
            for (idx, reg) in replica.iter() {
                // Owners' sums are not any origin's register: never relayed or saved.
                if is_aggregate(idx) {
                    continue;
                }
                let Some(origin) = sync.origins.get(idx).map(|e| e.id) else {
                    continue;
                };
                if reg.is_expired(&state.spec(), now_ms) || !relay(origin) {
                    continue;
                }
                by_origin.entry(origin).or_default().push(RegisterUpdate {
                    key: id,
                    window_ms: state.spec().window_ms(),
                    buckets: state.spec().buckets(),
                    register: reg.to_owned(),
                });
            }
        }
        by_origin
            .into_iter()
            .map(|(origin, updates)| Batch { origin, updates })
            .collect()
    }

    /// The highest version seen per origin, this node's own included.
    pub fn digest(&self) -> Vec<(OriginId, u64)> {
        let sync = self.lock_sync();
        let mut out: Vec<(OriginId, u64)> = sync
            .origins
            .iter()
            .map(|e| (e.id, e.max_version))
            .chain([(self.origin, sync.version)])
            .collect();
        out.sort_unstable();
        out
    }
}
