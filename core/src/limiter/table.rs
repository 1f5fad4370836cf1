//! The key table: window states by [`KeyId`], bounded by `max_keys`, garbage collected through a
//! delay queue rather than by scanning.
//!
//! Every key sits in the delay queue exactly once, at the time its newest bucket stops
//! counting as last seen. A GC pass pops only what is due: a key that turns out to be still
//! live is pushed back at its new end, an idle one is removed. The queue's front is therefore
//! the least recently active keys, which is also the order eviction wants.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use papaya::{Guard, HashMap};

use super::decision::CheckError;
use super::key::{KeyId, KeyIdHashBuilder};
use super::state::{OriginIdx, WindowState};
use crate::window::WindowSpec;

/// The longest a full table is taken to stay full without looking again.
const FULL_BACKOFF_MS: u64 = 1_000;
/// How many queue entries one eviction looks at before giving up. A full table of windows that
/// all hold quota is found out after this many; until the earliest of them can have expired,
/// later evictions do not look again (so a spray of new keys cannot make every check scan).
const EVICTION_PROBES: usize = 4_096;

/// Counters the table keeps about itself.
#[derive(Debug, Default)]
pub struct TableStats {
    pub expired: AtomicU64,
    pub evicted: AtomicU64,
    pub refused_full: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct KeyTable {
    map: HashMap<Slot, WindowState, KeyIdHashBuilder>,
    max_keys: usize,
    /// The ledger's clock margin: a window is kept while a lease's tokens may count in it
    /// ([`WindowState::live_until_ms`]).
    margin_ms: u64,
    due: Mutex<BTreeMap<u64, Vec<KeyId>>>,
    /// No window can be evicted before this time (ms): the last eviction found every window it
    /// looked at holding quota, and none of them can expire before then.
    no_room_before: AtomicU64,
    pub stats: TableStats,
}

/// What one GC pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GcReport {
    pub examined: usize,
    pub removed: usize,
    pub rescheduled: usize,
}

impl KeyTable {
    pub fn new(max_keys: usize, margin_ms: u64) -> Self {
        Self {
            map: HashMap::builder()
                .hasher(KeyIdHashBuilder)
                .resize_mode(papaya::ResizeMode::Blocking)
                .build(),
            max_keys: max_keys.max(1),
            margin_ms,
            due: Mutex::new(BTreeMap::new()),
            no_room_before: AtomicU64::new(0),
            stats: TableStats::default(),
        }
    }

    pub fn guard(&self) -> impl Guard + '_ {
        self.map.guard()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    pub fn get<'g>(&self, id: &KeyId, guard: &'g impl Guard) -> Option<&'g WindowState> {
        self.map.get(&Slot::of(*id), guard)
    }

    /// The state of `id` for what another member sent (a register, a lease, an ask, books),
    /// created with shape `spec` if absent; `Ok(None)` if held in another shape. Ids name a
    /// shape, so only a faulty or forged datagram names another, and it must not replace the
    /// window (its registers, the tokens this node holds, its books).
    pub fn get_or_insert_sent<'g>(
        &self,
        id: KeyId,
        spec: &WindowSpec,
        now_ms: u64,
        guard: &'g impl Guard,
    ) -> Result<Option<&'g WindowState>, CheckError> {
        let state = match self.get(&id, guard) {
            Some(state) => state,
            // A local check may insert it meanwhile: what comes back is checked too.
            None => self.insert_absent(id, spec, now_ms, guard)?,
        };
        Ok(state.has_shape(spec).then_some(state))
    }

    /// The state of `id`, created with shape `spec` if absent. An existing state of another
    /// shape can only come from a faulty peer (ids name a shape) or a local check whose id
    /// collides with it; it is replaced.
    pub fn get_or_insert<'g>(
        &self,
        id: KeyId,
        spec: &WindowSpec,
        now_ms: u64,
        guard: &'g impl Guard,
    ) -> Result<&'g WindowState, CheckError> {
        if let Some(state) = self.map.get(&Slot::of(id), guard) {
            if state.has_shape(spec) {
                return Ok(state);
            }
            self.map.remove(&Slot::of(id), guard);
        }
        self.insert_absent(id, spec, now_ms, guard)
    }

    /// The state of `id`, inserted with shape `spec` unless another insert got there first
    /// (then that one, whatever its shape).
    fn insert_absent<'g>(
        &self,
        id: KeyId,
        spec: &WindowSpec,
        now_ms: u64,
        guard: &'g impl Guard,
    ) -> Result<&'g WindowState, CheckError> {
        if self.map.len() >= self.max_keys {
            self.make_room(now_ms, guard);
            if self.map.len() >= self.max_keys {
                self.stats.refused_full.fetch_add(1, Ordering::Relaxed);
                return Err(CheckError::KeyTableFull {
                    max_keys: self.max_keys,
                });
            }
        }
        match self
            .map
            .try_insert_with(Slot::of(id), || WindowState::new(*spec), guard)
        {
            Ok(state) => {
                self.schedule(
                    id,
                    now_ms.saturating_add(spec.window_ms() + spec.bucket_ms()),
                );
                Ok(state)
            }
            Err(existing) => Ok(existing),
        }
    }

    /// When a full table can next have room: the earliest a window in it can expire.
    pub fn room_expected_at(&self, now_ms: u64) -> u64 {
        let queued = self
            .due
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first_key_value()
            .map_or(now_ms, |(at, _)| *at);
        queued.max(self.no_room_before.load(Ordering::Relaxed))
    }

    fn schedule(&self, id: KeyId, at_ms: u64) {
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        due.entry(at_ms).or_default().push(id);
    }

    /// Removes windows until the table is under `max_keys`, least recently active first, and
    /// only windows that hold nothing: no admission or refusal of their own still in the
    /// window, no live register from a peer and no lease that may still count. Evicting a
    /// window that holds quota would hand that quota out again (an attacker could use a limit
    /// up, then spray new keys to reset it), so a table full of such windows stays full and new
    /// keys meet the table-full policy.
    fn make_room(&self, now_ms: u64, guard: &impl Guard) {
        if now_ms < self.no_room_before.load(Ordering::Relaxed) {
            return;
        }
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        let mut probed = 0;
        let mut emptied = Vec::new();
        // Windows looked at and kept move to their real end in the queue, so that the next
        // scan looks at others rather than at these again.
        let mut kept: Vec<(KeyId, u64)> = Vec::new();
        // The earliest time a window kept, or one not looked at, can stop holding anything: a
        // queued window holds on at least until its place in the queue.
        let mut earliest_end = u64::MAX;
        for (at, ids) in due.iter_mut() {
            // Oldest first within one due time; `done` entries are dropped from this list.
            let mut done = 0;
            let mut stop = false;
            for &id in ids.iter() {
                if self.map.len() < self.max_keys {
                    stop = true;
                    break;
                }
                if probed >= EVICTION_PROBES {
                    earliest_end = earliest_end.min(*at);
                    stop = true;
                    break;
                }
                probed += 1;
                done += 1;
                let live_until = self.map.get(&Slot::of(id), guard).and_then(|state| {
                    let local = state.ring.snapshot(&state.spec(), now_ms);
                    state
                        .live_until_ms(&local, self.margin_ms)
                        .filter(|end| *end > now_ms)
                });
                match live_until {
                    None => {
                        if self.map.remove(&Slot::of(id), guard).is_some() {
                            self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Some(end) => {
                        earliest_end = earliest_end.min(end);
                        kept.push((id, end));
                    }
                }
            }
            ids.drain(..done);
            if ids.is_empty() {
                emptied.push(*at);
            }
            if stop {
                break;
            }
        }
        for at in emptied {
            due.remove(&at);
        }
        for (id, end) in kept {
            due.entry(end).or_default().push(id);
        }
        if self.map.len() >= self.max_keys {
            // Every window looked at holds quota: none can go before the earliest ends. Never
            // later than a short back-off, in case the queue was empty while GC held it.
            let until = earliest_end.min(now_ms.saturating_add(FULL_BACKOFF_MS));
            self.no_room_before
                .store(until.max(now_ms + 1), Ordering::Relaxed);
        }
    }

    /// Pops due keys (at most `budget`): removes the idle ones, reschedules the rest at their
    /// new end, expires stale registers and clears stale ring slots on the way.
    /// Registers of origins `held` selects are kept whatever their age, and so are their
    /// windows (see `Limiter::set_held`).
    pub fn collect_garbage(
        &self,
        now_ms: u64,
        budget: usize,
        held: impl Fn(OriginIdx) -> bool,
        guard: &impl Guard,
    ) -> GcReport {
        let mut report = GcReport::default();
        let mut batch = Vec::new();
        {
            let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
            while batch.len() < budget {
                let Some(mut entry) = due.first_entry() else {
                    break;
                };
                if *entry.key() > now_ms {
                    break;
                }
                let ids = entry.get_mut();
                let take = (budget - batch.len()).min(ids.len());
                batch.extend(ids.drain(ids.len() - take..));
                if ids.is_empty() {
                    entry.remove();
                }
            }
        }
        let mut reschedule = Vec::new();
        for id in batch {
            report.examined += 1;
            let Some(state) = self.map.get(&Slot::of(id), guard) else {
                continue;
            };
            expire_remote(state, now_ms, &held);
            state.ring.clear_stale(&state.spec(), now_ms);
            let local = state.ring.snapshot(&state.spec(), now_ms);
            let holds = state
                .remote
                .load()
                .as_deref()
                .is_some_and(|r| r.iter().any(|(o, _)| held(o)));
            // A window with a held register stays until its origin is released.
            let until = if holds {
                Some(now_ms + 1_000)
            } else {
                state.live_until_ms(&local, self.margin_ms)
            };
            // A window whose every bucket has expired has nothing left to emit either: peers
            // expire their copies of its registers on the same clock.
            match until {
                Some(at) if at > now_ms => reschedule.push((id, at)),
                _ => {
                    self.map.remove(&Slot::of(id), guard);
                    self.stats.expired.fetch_add(1, Ordering::Relaxed);
                    report.removed += 1;
                }
            }
        }
        report.rescheduled = reschedule.len();
        if report.removed > 0 {
            // Room was made: a full table may take new keys again at once.
            self.no_room_before.store(0, Ordering::Relaxed);
        }
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        for (id, at) in reschedule {
            due.entry(at).or_default().push(id);
        }
        report
    }

    /// Every key id, in id order (deterministic, for anti-entropy scans).
    pub fn ids(&self, guard: &impl Guard) -> Vec<KeyId> {
        let mut ids: Vec<KeyId> = self.map.keys(guard).map(|s| s.id()).collect();
        ids.sort_unstable();
        ids
    }
}

/// A window's id as the table keys it: the same 128 bits as [`KeyId`], in two 8-aligned words,
/// so that an entry (key and window) is not padded to the 16-byte alignment of a `u128`: a
/// window state of 136 bytes takes 152 in the table, not 160.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot([u64; 2]);

impl Slot {
    fn of(id: KeyId) -> Self {
        Self([id.0 as u64, (id.0 >> 64) as u64])
    }

    fn id(self) -> KeyId {
        KeyId(u128::from(self.0[0]) | (u128::from(self.0[1]) << 64))
    }
}

impl std::hash::Hash for Slot {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As a `KeyId` hashes: the table's hasher takes the id's own bits.
        self.id().hash(state);
    }
}

/// Drops remote registers (and owners' aggregates) that have left the window.
fn expire_remote(state: &WindowState, now_ms: u64, held: &impl Fn(OriginIdx) -> bool) {
    let Some(current) = state.remote.load_full() else {
        return;
    };
    if current
        .iter()
        .any(|(o, r)| r.is_expired(&state.spec(), now_ms) && !held(o))
    {
        let mut next = (*current).clone();
        next.expire_except(&state.spec(), now_ms, held);
        // Only the merge path and GC write `remote`, and both hold the limiter's sync lock.
        state
            .remote
            .store((!next.is_empty()).then(|| std::sync::Arc::new(next)));
    }
}
