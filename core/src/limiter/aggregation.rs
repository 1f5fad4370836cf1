//! What the owner of a window tells the nodes that use it.
//!
//! In a large cluster a node does not send its register of a window to every member but to
//! the window's owners, and hears of the others from the owner: one register per round that
//! sums, bucket by bucket, what every other origin the owner holds admitted, and their demand.
//! The owner leaves the subscriber's own register out of its sum, so that the subscriber can
//! add its own ring, which it knows better. It keeps the demand of every origin in the sum,
//! silent or not: the subscriber scales its share by the members it counts live, and demand
//! left out by the owner's view of who is silent, but scaled by the subscriber's, would hand
//! out shares twice. A subscriber keeps each owner's sum as that owner's register of the
//! window (`state::aggregate_of`).

use std::collections::BTreeMap;

use super::admission::{Policy, members_out_of_sight, side_scale};
use super::replication::RegisterUpdate;
use super::state::{WindowState, is_aggregate};
use super::{KeyId, Limiter, OriginId};
use crate::crdt::{HlcTimestamp, Register};
use crate::window::WindowSpec;

/// See [`Limiter::minor`].
pub const MINOR_PART: f64 = 32.0;

/// See [`Limiter::contended`]. The threshold must sit low enough that a user whose view of the
/// others' demand is a second old counts the window contended before the side's demand nears
/// its part: users whose demand rises together within a second (Poisson traffic) each stay
/// under a higher threshold for several rounds with the others' demand a second old, and
/// their shares of the side's part then sum to more than the part. Half the part leaves room
/// for such a rise to be seen a round after it starts, for a little more gossip during a
/// partition only. Pinned by `a_window_near_its_sides_part_is_contended_on_a_side_only`
/// (`limiter/tests/cluster.rs`); the bound it keeps inside a partition is not pinned by a
/// test.
pub const NEAR_PART: f64 = 0.5;

/// The version and stamp of one round's aggregates (see [`Limiter::aggregate_stamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregateStamp {
    version: u64,
    hlc: HlcTimestamp,
}

impl Limiter {
    /// Whether window `key` refused anything lately, as far as this node knows: a refusal of
    /// its own, or a register (or an owner's sum) whose demand exceeds what it admitted; or
    /// whether the demand this node knows of reaches `NEAR_PART` (half) of what its side may admit
    /// (the limit the window was last checked under, scaled as a partition scales it). Such
    /// a window is near its limit, where the others' counts matter: its registers and sums go
    /// out every round, the others' less often.
    ///
    /// The last: in a partition each side's part is its share of the limit, and a window that
    /// was calm when whole can have about that much demand on one side. It refuses little, so
    /// it would stay calm, and its users would divide their side's part by demand a second old
    /// while their own moved, their shares summing past the part (see `NEAR_PART`;
    /// `a_window_near_its_sides_part_is_contended_on_a_side_only`).
    pub fn contended(&self, key: KeyId, now_ms: u64) -> bool {
        let guard = self.table.guard();
        let Some(state) = self.table.get(&key, &guard) else {
            return false;
        };
        let spec = state.spec();
        let local = state.ring.snapshot(&spec, now_ms);
        if local.offered.by_age() != local.admitted.by_age() {
            return true;
        }
        let refused_elsewhere = state.remote.load().as_deref().is_some_and(|replica| {
            replica.iter().any(|(_, reg)| {
                // Demand is the offered estimate over the window rounded up, admissions whole
                // buckets: one more is rounding, two more is a refusal.
                let admitted: u64 = reg.buckets().map(|(_, c)| c).sum();
                u64::from(reg.live_demand(&spec, now_ms)) > admitted + 1
            })
        });
        refused_elsewhere || self.near_limit(state, &spec, now_ms)
    }

    /// The part of each limit this node's side of the cluster may admit (below 1 while
    /// members are out of sight under `strict`, or with a clock fenced), if it is a side:
    /// members out of sight beyond a member or two gone, as for the credit
    /// (`admission::members_out_of_sight`).
    pub fn side_part(&self) -> Option<f64> {
        let Policy::DemandShare(partition) = self.config.policy else {
            return None;
        };
        let (live, expected) = self.member_counts();
        let scale = side_scale(partition, live, expected, self.clock_fenced());
        members_out_of_sight(scale, live, expected).then_some(scale)
    }

    /// See [`Limiter::contended`]: only on a side (see [`Limiter::side_part`]), as in steady
    /// state demand that nears the limit shows in refusals soon enough.
    fn near_limit(&self, state: &WindowState, spec: &WindowSpec, now_ms: u64) -> bool {
        let Some(scale) = self.side_part() else {
            return false;
        };
        let limit = state.bound.last_limit();
        if limit == 0 {
            return false;
        }
        let own = state.ring.usage(spec, now_ms, 1).offered;
        own + self.others_demand(state, spec, now_ms) >= NEAR_PART * scale * f64::from(limit)
    }

    /// The others' demand for a window as admission counts it (`check.rs`): a silent
    /// member's left out, a held one's kept.
    fn others_demand(&self, state: &WindowState, spec: &WindowSpec, now_ms: u64) -> f64 {
        let (silent, held) = (self.silent_origins.load(), self.held_origins.load());
        state
            .remote_scalars(
                spec,
                now_ms,
                silent.as_deref().map(Vec::as_slice),
                held.as_deref().map(Vec::as_slice),
            )
            .demand as f64
    }

    /// Whether this node's demand for window `key` is a minor part of it: at most
    /// 1/`MINOR_PART` of the others' demand as far as this node knows (a window that many
    /// nodes use about evenly, like a fleet-wide limit). Its register moves the others'
    /// shares by under 1/`MINOR_PART` of theirs, so it need not reach the owner every round
    /// even when the window is contended (`node::ownership` sends it every other round): the
    /// owner of a window used by a thousand nodes would otherwise receive a thousand
    /// registers a round. Its own share still follows the owner's sums, which go out every
    /// round. A rise of this node's demand past the part ends it at the next round.
    pub fn minor(&self, key: KeyId, now_ms: u64) -> bool {
        let guard = self.table.guard();
        let Some(state) = self.table.get(&key, &guard) else {
            return false;
        };
        let spec = state.spec();
        let own = state.ring.usage(&spec, now_ms, 1).offered;
        // The others' demand as admission counts it: counting a partition's far side would
        // make this node minor where its demand is a large part of what is live.
        let others = self.others_demand(state, &spec, now_ms);
        others > 0.0 && own * MINOR_PART <= others
    }

    /// A fresh version and stamp for one round of aggregates. Every aggregate of the round
    /// carries the same one, so that a datagram of them states it once rather than per window
    /// (`gossip::message`): about 10 bytes less per aggregate, a quarter of one.
    pub fn aggregate_stamp(&self, now_ms: u64) -> AggregateStamp {
        let (version, hlc) = self.lock_sync().next_emission(now_ms);
        AggregateStamp { version, hlc }
    }

    /// For window `key`: one aggregate per subscriber, in order, each summing this node's ring
    /// and every register it holds except the subscriber's own, stamped with `stamp` (fresh
    /// for the round, from [`Limiter::aggregate_stamp`]). Empty if this node holds no such
    /// window.
    pub fn aggregates_for(
        &self,
        key: KeyId,
        subscribers: &[OriginId],
        stamp: AggregateStamp,
        now_ms: u64,
    ) -> Vec<RegisterUpdate> {
        let guard = self.table.guard();
        let Some(state) = self.table.get(&key, &guard) else {
            return Vec::new();
        };
        let spec = state.spec();
        let AggregateStamp { version, hlc } = stamp;
        let sync = self.lock_sync();
        // A held origin keeps the demand it last reported (see `Limiter::set_held`).
        let demand_of = |idx, reg: &crate::crdt::RegisterRef<'_>| {
            if self.is_held(idx) {
                u64::from(reg.demand)
            } else {
                u64::from(reg.live_demand(&spec, now_ms))
            }
        };

        // Everything held: bucket counts by epoch, and demand.
        let mut total: BTreeMap<u64, u64> = BTreeMap::new();
        let local = state.ring.snapshot(&spec, now_ms);
        for (age, count) in local.admitted.by_age().iter().enumerate() {
            if *count > 0
                && let Some(epoch) = local.epoch.checked_sub(age as u64)
            {
                *total.entry(epoch).or_default() += count;
            }
        }
        // This node's demand as its registers told it, as for its own decisions (admission.rs).
        let fresh = local.offered.sum(&spec, now_ms).ceil();
        let mut demand = state
            .published_demand(fresh > 0.0)
            .map_or(fresh as u64, u64::from);
        let replica = state.remote.load_full();
        if let Some(replica) = &replica {
            for (idx, reg) in replica.iter() {
                if is_aggregate(idx) {
                    // A sum is not an origin: this node's own decisions use the registers.
                    continue;
                }
                for (epoch, count) in reg.buckets() {
                    *total.entry(epoch).or_default() += count;
                }
                demand += demand_of(idx, &reg);
            }
        }

        let slots = spec.slots();
        subscribers
            .iter()
            .map(|s| {
                let mut sum = total.clone();
                let mut d = demand;
                let own = sync
                    .lookup_origin(*s)
                    .and_then(|idx| Some((idx, replica.as_ref()?.get(idx)?)));
                if let Some((idx, reg)) = own {
                    for (epoch, count) in reg.buckets() {
                        if let Some(c) = sum.get_mut(&epoch) {
                            *c = c.saturating_sub(count);
                        }
                    }
                    d = d.saturating_sub(demand_of(idx, &reg));
                }
                let newest = sum
                    .iter()
                    .rev()
                    .find(|(_, c)| **c > 0)
                    .map_or(local.epoch, |(e, _)| *e);
                let admitted: Vec<u32> = (0..slots as u64)
                    .map_while(|age| newest.checked_sub(age))
                    .map(|epoch| {
                        u32::try_from(sum.get(&epoch).copied().unwrap_or(0)).unwrap_or(u32::MAX)
                    })
                    .collect();
                let used = admitted.iter().rposition(|c| *c > 0).map_or(0, |i| i + 1);
                RegisterUpdate {
                    key,
                    window_ms: spec.window_ms(),
                    buckets: spec.buckets(),
                    register: Register {
                        version,
                        hlc,
                        newest_epoch: newest,
                        demand: u32::try_from(d).unwrap_or(u32::MAX),
                        admitted: admitted[..used].to_vec(),
                    },
                }
            })
            .collect()
    }
}
