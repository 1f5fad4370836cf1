//! What the node makes of its members each round: who counts as live for admission (and whose
//! clock forces the strict scale), whether the warm-up is over, and the member list it
//! publishes.

use std::collections::BTreeSet;

use super::core::{NodeCore, destination};
use super::view::{MemberInfo, MemberState};
use super::warmup::WarmupEnd;
use crate::clock::{Now, TimeSource};
use crate::gossip::wire::Destination;

impl<T: TimeSource> NodeCore<T> {
    /// The member list, for the API, the admin endpoint and metrics.
    pub(super) fn publish(&self) {
        let me = self.membership.identity();
        let fences = self.clock_sync.fences();
        let mut members = vec![MemberInfo {
            id: me.node,
            addr: me.addr,
            state: MemberState::Alive,
            is_self: true,
            boot_ms: self.boot_ms,
            clock_offset_ms: Some(
                self.view
                    .clock
                    .offset_ms
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            clock_fenced: fences.own || self.far_fenced,
            last_heard_ms: None,
        }];
        for (_, (id, state)) in self.membership.states() {
            members.push(MemberInfo {
                id: id.node,
                addr: id.addr,
                state: MemberState::from(state),
                is_self: false,
                boot_ms: id.boot_ms,
                clock_offset_ms: self.clock_sync.offset_of(id.node.as_u128()),
                clock_fenced: fences.peers.contains(&id.node.as_u128()),
                last_heard_ms: self.liveness.last_datagram(id.node.as_u128()),
            });
        }
        self.view.publish(members);
    }

    /// Tells the limiter who is live (see `liveness.rs`) and whose clock is cut off.
    pub(super) fn update_live(&mut self, now: Now) {
        let members = self.membership.members();
        let fences = self.clock_sync.fences();
        let mut silent = if self.ownership.is_some() {
            // Held from the silence threshold on, before anything it reported can lapse (a
            // window's demand lapses one window after it was reported). Calm windows go out
            // once a second, so their peers are often held between sends: harmless, as a held
            // member only keeps what it last reported.
            let quiet = self.params.silence_threshold;
            let held = self.liveness.held(quiet, now.at);
            let sums_held = self
                .liveness
                .departed_within(super::liveness::HOLD_FOR, now.at);
            self.limiter.set_held(&held, &sums_held, now.cluster_ms);
            self.liveness
                .silent_by_swim(&members, &self.suspects, fences, now.at)
        } else {
            // Nothing is held in the full mesh (a node that left owner mode lets go).
            self.limiter.set_held(&[], &[], now.cluster_ms);
            self.liveness.silent(&members, fences, now.at)
        };
        // `silent` names members only; saturating all the same, so that a future path where it
        // did not could not wrap the count.
        let live = members.len().saturating_sub(silent.len()) + 1;
        let silent_members = silent.len();
        // Senders a minute off count as silent members. When they are at least as many as the
        // live members (this node included), this node's own clock is the likelier one to be
        // wrong: it cuts itself off as for a clock beyond the tolerance.
        let far = self.liveness.far_clocks(&members, now.at);
        let far_fenced = !far.is_empty() && far.len() >= live;
        if far_fenced != self.far_fenced {
            if far_fenced {
                tracing::warn!(
                    senders = far.len(),
                    live,
                    "datagrams of cluster members arrive sent more than 60 s from this node's \
                     clock: this node is cut off for admission until the clocks agree"
                );
            } else {
                tracing::info!("no more datagrams a minute off this node's clock");
            }
            self.far_fenced = far_fenced;
        }
        self.view
            .clock
            .far_members
            .store(far.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if far_fenced {
            // Until the next round's steering says otherwise: cut off, as a clock beyond the
            // tolerance is.
            self.view
                .clock
                .fenced
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let any_far = !far.is_empty();
        silent.extend(far);
        // Any sender a minute off forces the strict scale, as a peer beyond the tolerance does:
        // under `available` the others would otherwise take the whole limit beside it. So does
        // a peer that counts members this node does not know of (one a minute off that only
        // the peer hears).
        let largest = self.liveness.largest_count();
        let unknown = largest > members.len() + 1 + silent.len().saturating_sub(silent_members);
        self.limiter.set_clock_fenced(
            fences.own || far_fenced || any_far || unknown || !fences.peers.is_empty(),
        );
        self.limiter
            .set_liveness(live, &silent, largest, now.cluster_ms);
    }

    /// In owner mode, the windows another member owns of which this node holds registers of
    /// departed origins, which only its state file can have given it (the bootstrap pushes
    /// bring only the windows it owns): they admit nothing until their owners' first sums
    /// (`Limiter::set_unconfirmed`).
    fn hold_unconfirmed(&mut self, now: Now) {
        // The ledger leases from owners, and sums play no part in it.
        if self.ownership.is_none() || self.limiter.is_ledger() {
            return;
        }
        // Owned, as of the members now.
        self.refresh_ring();
        let me = self.params.node_id.as_u128();
        let keys: std::collections::BTreeSet<crate::limiter::KeyId> = self
            .departed_registers(now)
            .iter()
            .flat_map(|b| b.updates.iter().map(|u| u.key))
            .collect();
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        ownership.unconfirmed = keys
            .into_iter()
            .filter(|k| !ownership.owns(*k, me))
            .collect();
        self.limiter
            .set_unconfirmed(ownership.unconfirmed.iter().copied().collect());
    }

    /// Whether the members of `members` that read the timed header said what their cluster
    /// time is (which a warming node jumps to, and may not once it serves): more than half of
    /// them (a median of their words then lies among the majority's), or five in a `large`
    /// cluster; not all, so that a member this node cannot reach does not hold the warm-up. A
    /// member sends the timed header once it knows this node reads it, and answers at once
    /// when asked; one that has not may have dropped this node's flags (it counted this node
    /// no member yet), or sent it nothing since: it is asked again each round.
    fn heard_cluster_times(&mut self, now: Now, members: &[u128], large: bool) -> bool {
        let timed: BTreeSet<u128> = members
            .iter()
            .copied()
            .filter(|m| self.features.reads_cluster_time(*m, now.at))
            .collect();
        let majority = timed.len() / 2 + 1;
        let needed = if large { majority.min(5) } else { majority }.min(timed.len());
        if self.clock_sync.cluster_words_of(timed.iter().copied()) >= needed {
            return true;
        }
        let unsaid: Vec<Destination> = self
            .membership
            .members()
            .iter()
            .map(destination)
            .filter(|d| {
                d.node.is_some_and(|n| {
                    timed.contains(&n) && self.clock_sync.cluster_words_of([n]) == 0
                })
            })
            .collect();
        let flags = super::features::READS | super::features::ASKS_CLUSTER_TIME;
        for to in unsaid {
            self.send_flags(now, to, flags);
        }
        false
    }

    /// Ends the warm-up once the node holds the cluster's state (see `warmup.rs`).
    pub(super) fn update_readiness(&mut self, now: Now) {
        if self.warmup.is_none() {
            return;
        }
        let members = self.membership.member_ids();
        // Two rounds for the members' pushes to land, and their join grace, after which this
        // node counts them live (and so shares the limit with them).
        let settle = (2 * self.params.gossip_interval).max(self.params.join_grace);
        let large = self.ownership.is_some();
        let said = self.heard_cluster_times(now, &members, large);
        let estimated = if large {
            // A node of a large cluster hears from the members it shares windows with: enough
            // of them for a median.
            self.clock_sync.estimates_of(members.iter().copied()) >= members.len().min(5)
        } else {
            self.clock_sync.has_estimates(members.iter().copied())
        };
        // Nor is the state whole while a relay of a member that still speaks for itself here
        // is held: what that member spent counts once it no longer does (`held_relays.rs`).
        let rest_whole = estimated && said && self.held_relays.is_empty();
        let Some(w) = &self.warmup else {
            return;
        };
        match w.end(
            now.at,
            &members,
            rest_whole,
            settle,
            self.params.warmup_timeout,
        ) {
            None => return,
            Some(WarmupEnd::HoldsState { waited }) => {
                tracing::info!(
                    members = members.len(),
                    waited_ms = waited.as_millis() as u64,
                    "ready: holds the cluster's state"
                );
                if let Some(ledger) = self.ledger.as_mut() {
                    ledger.held_state();
                }
            }
            Some(WarmupEnd::TimedOut { waited }) => tracing::warn!(
                members = members.len(),
                waited_ms = waited.as_millis() as u64,
                "ready without the state or the clock of every member: the warm-up timed out"
            ),
        }
        self.warmup = None;
        if let Some(saved) = self.saved.take() {
            saved.restore_again(&self.limiter, now.cluster_ms);
            self.hold_unconfirmed(now);
        }
        self.limiter.start_observing(now.cluster_ms);
        self.limiter.set_warming_until(0);
        self.view.set_ready();
    }
}
