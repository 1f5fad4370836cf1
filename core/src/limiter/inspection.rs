//! Why a window decides the way it does: each origin's part, the global estimate and this
//! node's allowance (the `Inspect` RPC, `limitmesh inspect`).

use super::origin::OriginId;
use super::state::{AGGREGATE, WindowState, is_aggregate, is_held_as_sum_alone, is_held_in};
use super::{KeyId, Limit, Limiter};
use crate::window::WindowSpec;

/// One origin's part in a window, for [`Limiter::inspect`].
#[derive(Debug, Clone, PartialEq)]
pub struct OriginUsage {
    pub origin: OriginId,
    pub is_local: bool,
    /// An owner's sum over the other origins it holds, not an origin's own register.
    pub aggregate: bool,
    /// Admitted estimate in the sliding window now.
    pub admitted: f64,
    /// Offered demand over the window, as the origin last reported it (local: now).
    pub demand: u64,
    /// The register's version (local: the last one emitted).
    pub version: u64,
    /// How old this information is, by the origin's stamp (local: 0).
    pub age_ms: u64,
}

/// Why a window decides the way it does.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    pub key_id: KeyId,
    pub limit: u32,
    pub window_ms: u64,
    /// Cluster-wide admitted estimate: local, plus the larger of the remote registers' sum and
    /// any owner's aggregate.
    pub global_admitted: f64,
    /// What this node may hold in the window now.
    pub allowance: f64,
    pub live_members: usize,
    pub expected_members: usize,
    /// Local first, then remote origins in origin order, then owners' aggregates.
    pub origins: Vec<OriginUsage>,
}

impl Limiter {
    /// Explains one window of `key`: each origin's part, the global estimate and this node's
    /// allowance. `None` if this node holds nothing for it.
    pub fn inspect(&self, key: &[u8], limit: &Limit, now_ms: u64) -> Option<Inspection> {
        let id = self.hasher.key_id(key, &limit.window);
        let guard = self.table.guard();
        let state = self.table.get(&id, &guard)?;
        if !state.has_shape(&limit.window) {
            return None;
        }
        let spec = &limit.window;
        let sync = self.lock_sync();
        let mut origins = vec![self.local_usage(state, spec, now_ms, sync.version())];
        if let Some(replica) = state.remote.load_full() {
            // As admission counts them: the sums of departed owners (held as sums alone) keep
            // the demand they said until another owner's sum is as new (`remote_scalars`).
            let (silent, held) = (self.silent_origins.load(), self.held_origins.load());
            let superseded = state
                .remote_scalars(
                    spec,
                    now_ms,
                    silent.as_deref().map(Vec::as_slice),
                    held.as_deref().map(Vec::as_slice),
                )
                .departed_sums_superseded;
            let departed = |idx| {
                held.as_deref()
                    .is_some_and(|h| is_held_as_sum_alone(h, idx))
            };
            for (idx, reg) in replica.iter() {
                let aggregate = is_aggregate(idx);
                let Some(origin) = sync.origin_of(idx & !AGGREGATE) else {
                    continue;
                };
                origins.push(OriginUsage {
                    origin,
                    is_local: false,
                    aggregate,
                    admitted: crate::window::sliding_sum(spec, now_ms, reg.buckets()),
                    // A held origin keeps the demand it last reported (`Limiter::set_held`).
                    demand: if held.as_deref().is_some_and(|h| is_held_in(h, idx))
                        && !(superseded && departed(idx))
                    {
                        u64::from(reg.demand)
                    } else {
                        u64::from(reg.live_demand(spec, now_ms))
                    },
                    version: reg.version,
                    age_ms: now_ms.saturating_sub(reg.hlc.physical_ms()),
                });
            }
        }
        drop(sync);
        let eval = self.evaluate(id, state, *limit, 1, now_ms);
        let sum = |aggregate: bool| {
            origins
                .iter()
                .filter(move |o| !o.is_local && o.aggregate == aggregate)
                .map(|o| o.admitted)
        };
        let remote = sum(false).sum::<f64>().max(sum(true).fold(0.0, f64::max));
        let local = origins.first().map_or(0.0, |o| o.admitted);
        Some(Inspection {
            key_id: id,
            limit: limit.max,
            window_ms: spec.window_ms(),
            global_admitted: local + remote,
            allowance: eval.allowance,
            live_members: self.member_counts().0,
            expected_members: self.member_counts().1,
            origins,
        })
    }

    fn local_usage(
        &self,
        state: &WindowState,
        spec: &WindowSpec,
        now_ms: u64,
        version: u64,
    ) -> OriginUsage {
        let snap = state.ring.snapshot(spec, now_ms);
        OriginUsage {
            origin: self.origin,
            is_local: true,
            aggregate: false,
            admitted: snap.admitted.sum(spec, now_ms),
            demand: snap.offered.sum(spec, now_ms).ceil() as u64,
            version,
            age_ms: 0,
        }
    }
}
