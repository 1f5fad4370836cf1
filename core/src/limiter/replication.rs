//! The limiter's cluster side: emitting this node's registers, merging peers' registers,
//! serving anti-entropy.
//!
//! Everything here runs under one lock (`ReplicationState`), off the check path. It is the
//! only writer of remote replica state, which the check path reads lock-free.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::expected_size::ExpectedSize;
use super::origin::{OriginId, OriginTable};
use super::own_demand::{
    share_binds, smoothed_demand, span_counted_ms, whole_window_demand, window_scale,
};
use super::state::{WindowState, aggregate_of, is_aggregate, is_held_as_sum_alone};
use super::{KeyId, Limiter};
use crate::crdt::Hlc;
use crate::crdt::{Arbitration, Register, Replica, succession};

pub use super::merge_report::MergeReport;
use crate::window::{EstimateMode, RingSnapshot, WindowSpec};

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

/// Where a merged register goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// An origin's own register.
    Registers,
    /// An owner's sum over the origins it holds.
    Aggregates,
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
/// together, that ratchet added up to a fifth of the limit in the first second of a
/// partition (`fleet-partition` at 50 nodes, 1.23 x L): the cap on the global count, which
/// catches it otherwise, counts only what was heard. Held where it was, the demand each of
/// them divides by is the one its peers last had of it, and the shares sum to 1 again. A fall
/// is held too: published while nobody hears it, it would only ratchet the other way.
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
    /// Forgets the sums of departed owners this node holds for window `key` (held until
    /// another owner's sum is newer, [`Limiter::set_held`]) once their admissions have left
    /// the window. For a window this node now owns first, as its users' registers arrive: no
    /// other owner's sum comes to it, and the registers say more than the old sum (in a
    /// partition, the old sum also holds the far side's demand, and this node would take too
    /// little for as long as the sum was held).
    pub fn release_departed_sums(&self, key: KeyId, now_ms: u64) {
        let held = self.held_origins.load();
        let Some(held) = held.as_deref() else {
            return;
        };
        // Sums held alone are marked, and sort after every bare origin.
        let first_sum = held.partition_point(|idx| !is_aggregate(*idx));
        if first_sum == held.len() {
            return;
        }
        let _merges = self.lock_sync();
        let guard = self.table.guard();
        let Some(state) = self.table.get(&key, &guard) else {
            return;
        };
        let Some(current) = state.remote.load_full() else {
            return;
        };
        let weigher = state.spec().weigher(now_ms);
        // Only sums whose admissions have left the window: what they counted still counts
        // against the limit until then (the users count it too), only their demand goes.
        let departed: Vec<_> = held[first_sum..]
            .iter()
            .copied()
            .filter(|idx| is_held_as_sum_alone(held, *idx))
            .filter(|idx| {
                current
                    .get(*idx)
                    .is_some_and(|reg| reg.buckets().all(|(epoch, _)| weigher.weight(epoch) <= 0.0))
            })
            .collect();
        if departed.is_empty() {
            return;
        }
        let mut next = (*current).clone();
        for idx in departed {
            next.remove(idx);
        }
        state
            .remote
            .store((!next.is_empty()).then(|| Arc::new(next)));
        state.bound.invalidate();
    }

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

    /// Merges a peer's batch into the replica state of each window it names, as registers
    /// relayed by a node other than their origin (see [`Limiter::merge_sent_by`]).
    pub fn merge(&self, batch: &Batch, now_ms: u64) -> MergeReport {
        self.merge_into(batch, now_ms, Held::Registers, false)
    }

    /// Merges a batch that arrived from `sender` (the datagram's authenticated sender). When
    /// the sender is the batch's origin, its registers speak for it: one that ranks below the
    /// held register of its window replaces it, unless that one can be a later emission of the
    /// origin that overtook it on the way (`crdt::succession`).
    pub fn merge_sent_by(&self, batch: &Batch, sender: OriginId, now_ms: u64) -> MergeReport {
        self.merge_into(batch, now_ms, Held::Registers, batch.origin == sender)
    }

    /// Merges an owner's batch of aggregates (see [`Limiter::aggregates_for`]): each is kept
    /// as that owner's register of the window, beside the registers held (see
    /// `WindowState::aggregates`). Only windows this node holds take one: it asked for them by
    /// sending its own register.
    pub fn merge_aggregates(&self, batch: &Batch, now_ms: u64) -> MergeReport {
        self.merge_into(batch, now_ms, Held::Aggregates, false)
    }

    fn merge_into(&self, batch: &Batch, now_ms: u64, into: Held, from_origin: bool) -> MergeReport {
        let mut report = MergeReport::default();
        if batch.origin == self.origin {
            report.own = batch.updates.len() as u64;
            return report;
        }
        let mut sync = self.lock_sync();
        let idx = sync.origins.intern(batch.origin, now_ms);
        let guard = self.table.guard();
        let arbitration = self.config.arbitration;
        for update in &batch.updates {
            let reg = &update.register;
            let Ok(spec) =
                WindowSpec::new(update.window_ms, update.buckets, EstimateMode::Interpolated)
            else {
                report.bad_shape += 1;
                continue;
            };
            let max_epoch = spec.epoch(now_ms).saturating_add(u64::from(spec.buckets()));
            if reg.newest_epoch > max_epoch || sync.hlc.check_remote(reg.hlc, now_ms).is_err() {
                report.future += 1;
                continue;
            }
            if reg.as_ref().is_expired(&spec, now_ms) {
                report.expired += 1;
                continue;
            }
            let existing = self.table.get(&update.key, &guard);
            if into == Held::Aggregates && existing.is_none() {
                report.unsolicited += 1;
                continue;
            }
            if let Some(existing) = existing
                && !existing.has_shape(&spec)
            {
                // Ids name a shape, so this is a faulty peer: its register is dropped rather
                // than replacing a window (and whatever quota it holds).
                report.bad_shape += 1;
                continue;
            }
            let state = match self.table.get_or_insert(update.key, &spec, now_ms, &guard) {
                Ok(state) => state,
                Err(_) => {
                    report.table_full += 1;
                    continue;
                }
            };
            let (idx, arbitration) = match into {
                Held::Registers => (idx, arbitration),
                // An owner's aggregates of a window are ordered by its emissions.
                Held::Aggregates => (aggregate_of(idx), Arbitration::VectorDominance),
            };
            let slot = &state.remote;
            let current = slot.load_full();
            let stamp = (reg.version, reg.hlc);
            let held = current
                .as_ref()
                .and_then(|c| c.get(idx))
                .map(|h| (h.version, h.hlc));
            if let Some(held) = held
                && succession::leads_too_far(held, stamp)
            {
                report.version_jump += 1;
                continue;
            }
            if into == Held::Registers {
                sync.origins.observe_version(idx, reg.version);
            }
            // The origin's own register below one it cannot have emitted after it.
            let supersede = from_origin
                && held.is_some_and(|held| {
                    arbitration.rank(stamp.0, stamp.1) < arbitration.rank(held.0, held.1)
                        && !succession::genuinely_later(held, stamp)
                });
            if !supersede
                && let Some(cur) = &current
                && cur.dominates([(idx, reg.version, reg.hlc)], arbitration)
            {
                report.dominated += 1;
                continue;
            }
            let mut next = current
                .map(|c| (*c).clone())
                .unwrap_or_else(|| Replica::new(&state.spec()));
            if supersede {
                next.supersede(idx, reg.as_ref());
                report.superseded += 1;
            } else {
                report.record(next.merge_register(idx, reg.as_ref(), arbitration));
            }
            next.expire_except(&state.spec(), now_ms, |o| self.is_held(o));
            slot.store(Some(Arc::new(next)));
            // Remote counts may have grown: the cached bound may no longer hold.
            state.bound.invalidate();
        }
        report
    }
}
