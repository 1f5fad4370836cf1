//! How registers travel: summary rounds, periodic anti-entropy and bootstrap pushes.
//!
//! - **Summary rounds** (every `gossip_interval`, 200 ms by default): the registers that changed
//!   since the last round (plus, once, those of the round before, against a single lost
//!   datagram) go to every live member directly. For full replication that is the
//!   bandwidth-optimal scheme, and every register reaches every peer within one round and one
//!   network latency. Members that get no register this round get a heartbeat.
//! - **Bootstrap pushes**: when a member comes up or is renamed (a restart), this node pushes it
//!   its own live registers and those of origins that are gone, so a new or restarted node
//!   holds the live state within a round trip.
//! - **Anti-entropy**: every `anti_entropy_interval` this node pushes its registers to one
//!   member, a page at a time, repairing what losses left behind.
//!
//! Every register and heartbeat body starts with how many members this node counts, and, where
//! return routability is checked, the cookies (`return_route.rs`).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use rand::RngExt;

use super::core::{NodeCore, destination};
use crate::clock::{Clock, Now, TimeSource};
use crate::gossip::message::{Stamp, empty_batch_body};
use crate::gossip::wire::{Destination, Kind};
use crate::limiter::{Batch, OriginId};

impl<T: TimeSource> NodeCore<T> {
    /// One summary round: steer cluster time, update who is live and whether the warm-up is
    /// over, then send what changed to every live member and a heartbeat to members that would
    /// otherwise hear nothing from this node this round.
    /// Returns the time of the round, cluster time steered.
    pub(super) fn summary_round(&mut self, mut now: Now) -> Now {
        let peers = self.membership.member_ids();
        self.clock_sync.round(
            &self.clock,
            &now,
            &peers,
            self.warmup.is_some(),
            &self.view.clock,
        );
        // Steering moved cluster time: the one second reading of an input.
        now.cluster_ms = self.clock.now_ms();
        self.rounds += 1;
        if let Some(route) = &mut self.return_route {
            route.new_round();
        }
        self.features.new_round();
        let suspects = self.membership.suspect_members();
        self.suspects = suspects.keys().copied().collect();
        for change in self.member_log.round(suspects) {
            change.log();
        }
        let owners = self.choose_dissemination();
        if let Some(o) = &mut self.ownership
            && std::mem::take(&mut o.members_dirty)
        {
            self.members_changed(now);
        }
        self.release_held_relays(now);
        // The member list carries clock offsets and cut-offs, which move every round; a large
        // cluster's is published once a second.
        if !owners || self.rounds.is_multiple_of(5) {
            self.publish();
        }
        self.update_live(now);
        self.update_readiness(now);
        self.compare_rules(now);
        self.view
            .wire
            .summary_rounds
            .fetch_add(1, Ordering::Relaxed);
        if self.limiter.is_ledger() {
            self.ledger_round(now);
            return now;
        }
        let batch = self.limiter.collect_changed(now.cluster_ms);
        if owners {
            self.owner_round(now, batch);
            return now;
        }
        let peers: Vec<Destination> = self.membership.members().iter().map(destination).collect();
        if peers.is_empty() {
            return now;
        }
        // Registers go only where they can be received (see `return_route.rs`); the others
        // get a heartbeat, as does everyone in a round with nothing to send.
        let (receiving, unverified): (Vec<Destination>, Vec<Destination>) =
            peers.into_iter().partition(|p| self.may_push_to(p.addr));
        let heartbeats = match batch {
            Some(batch) if !batch.updates.is_empty() => {
                self.view.wire.summary_register_sends.fetch_add(
                    (batch.updates.len() * receiving.len()) as u64,
                    Ordering::Relaxed,
                );
                self.send_batch(now, Kind::Summary, &batch, &receiving);
                // Every member hears now and then what this build reads and which rules it
                // enforces (in owner mode, the members this node exchanges with:
                // `owner_round`); these in a heartbeat of their own.
                for peer in &receiving {
                    self.announce_features(now, *peer);
                }
                unverified
            }
            _ => receiving.into_iter().chain(unverified).collect(),
        };
        for peer in heartbeats {
            if let Some(route) = &mut self.return_route
                && !route.is_verified(peer.addr)
                && !route.may_probe(peer.addr, now.at)
            {
                continue;
            }
            // The others in the heartbeat they get anyway.
            let flags = (self.may_push_to(peer.addr) && self.announce_due(now, peer))
                .then_some(super::features::READS);
            let body = self.heartbeat_body(peer, flags);
            self.seal(now, Kind::Heartbeat, &body, peer);
        }
        now
    }

    /// Whether registers may be sent to `addr`: always, unless return routability is checked
    /// and `addr` has not shown it receives.
    pub(super) fn may_push_to(&self, addr: std::net::SocketAddr) -> bool {
        self.return_route
            .as_ref()
            .is_none_or(|route| route.is_verified(addr))
    }

    /// How many members this node counts, itself and members a minute off included: what its
    /// register and heartbeat bodies say.
    pub(super) fn members_counted(&self) -> usize {
        self.membership.num_members() + 1 + self.liveness.far_members()
    }

    /// This node's registers to one member picked at random, a page at a time, and a page of
    /// the registers it holds of origins that are no longer members: a departed origin cannot
    /// push its own, and after a whole-fleet restart those (restored from snapshots) are all
    /// that remembers what was admitted, so a member that missed its bootstrap push (or joined
    /// before this node restored them) still gets them.
    pub(super) fn periodic_anti_entropy(&mut self, now: Now) {
        if let Some(ownership) = &mut self.ownership {
            // In a large cluster, every register goes to its owners again (departed origins'
            // with them: `owner_round`).
            ownership.resend_all();
            return;
        }
        let members = self.membership.members();
        if members.is_empty() {
            return;
        }
        let to = destination(&members[self.rng.random_range(0..members.len())]);
        if !self.may_push_to(to.addr) {
            return;
        }
        let page = self.params.anti_entropy_page.max(1);
        let own = self.limiter.snapshot_local(now.cluster_ms);
        let own = page_of(vec![own], page, &mut self.anti_entropy_cursor);
        let departed = self.departed_registers(now);
        let departed = page_of(departed, page, &mut self.relay_cursor);
        for batch in own.iter().chain(&departed) {
            self.send_batch(now, Kind::AntiEntropy, batch, &[to]);
        }
    }

    /// The live registers this node holds of origins that are neither members nor itself,
    /// one batch per origin.
    pub(super) fn departed_registers(&self, now: Now) -> Vec<Batch> {
        let mut live: BTreeSet<OriginId> = self
            .membership
            .members()
            .iter()
            .map(|m| OriginId(m.node.as_u128()))
            .collect();
        live.insert(self.limiter.origin());
        self.limiter.relay(now.cluster_ms, |o| !live.contains(&o))
    }

    /// Queues for `to` this node's live registers and those of origins that are no longer
    /// members (they cannot push their own).
    pub(super) fn queue_bootstrap(&mut self, now: Now, to: Destination) {
        if let Some(route) = &mut self.return_route
            && !route.is_verified(to.addr)
        {
            // Pushed once the address has shown it receives: a forged announce must not turn
            // this node into an amplifier. Asked to show it now: in owner mode nothing else
            // may go to it for a while.
            route.defer_bootstrap(to.addr);
            self.may_send_state(now, to);
            return;
        }
        if let Some(ownership) = &mut self.ownership {
            // Once the ring includes the newcomer (next round): the windows it owns.
            ownership.bootstrap(to);
            return;
        }
        self.push_bootstrap(now, to);
    }

    /// Pushes `to` this node's live registers and those of origins that are no longer
    /// members; in a large cluster, of the windows `to` owns.
    pub(super) fn push_bootstrap(&mut self, now: Now, to: Destination) {
        self.push_bootstraps(now, &[to]);
    }

    /// [`NodeCore::push_bootstrap`] to each of `targets`, from one emission: the newcomers of
    /// a round of a fleet forming may be hundreds, and an emission per newcomer would copy the
    /// key table as often and advance this origin's version by as many (which peers bound:
    /// `crdt::succession`).
    pub(super) fn push_bootstraps(&mut self, now: Now, targets: &[Destination]) {
        if targets.is_empty() {
            return;
        }
        let own = self.limiter.snapshot_local(now.cluster_ms);
        let relayed = self.departed_registers(now);
        for &to in targets {
            match to.node.filter(|_| self.ownership.is_some()) {
                // In a large cluster a newcomer needs only the windows it now owns.
                Some(newcomer) => {
                    let mut owned = |batch: &Batch| Batch {
                        origin: batch.origin,
                        updates: batch
                            .updates
                            .iter()
                            .filter(|u| self.owned_by(u.key, newcomer))
                            .cloned()
                            .collect(),
                    };
                    let own = owned(&own);
                    let relayed: Vec<Batch> = relayed
                        .iter()
                        .map(&mut owned)
                        .filter(|b| !b.updates.is_empty())
                        .collect();
                    self.push_to(now, to, &own, &relayed);
                }
                None => self.push_to(now, to, &own, &relayed),
            }
        }
    }

    /// One bootstrap push: `own` and `relayed` registers to `to`, or word that there are none.
    fn push_to(&mut self, now: Now, to: Destination, own: &Batch, relayed: &[Batch]) {
        if own.updates.is_empty() && relayed.is_empty() {
            // Nothing to push, said all the same: the newcomer waits for word from every
            // member before it serves (see `warmup.rs`).
            let compact = self.compact_to(now, to);
            let mut body = self.body_prefix(to);
            body.extend_from_slice(&empty_batch_body(Stamp::for_header(compact, now.wall_ms)));
            self.seal_as(now, Kind::AntiEntropy, &body, to, compact);
            return;
        }
        self.send_batch(now, Kind::AntiEntropy, own, &[to]);
        for batch in relayed {
            self.send_batch(now, Kind::AntiEntropy, batch, &[to]);
        }
    }

    /// Whether `to` may get registers or sums: always, unless return routability is checked
    /// and `to` has not shown it receives. Then it gets a heartbeat asking for its echo
    /// instead, a few and then one every few seconds (`ReturnRoute::may_probe`).
    pub(super) fn may_send_state(&mut self, now: Now, to: Destination) -> bool {
        let Some(route) = &mut self.return_route else {
            return true;
        };
        if route.is_verified(to.addr) {
            return true;
        }
        if route.may_probe(to.addr, now.at) {
            self.send_flags(now, to, super::features::READS | super::features::ASKS_ECHO);
        }
        false
    }

    /// Compares this node's rules with what the live members said of theirs; a change of this
    /// node's is announced to every member at its next chance.
    fn compare_rules(&mut self, now: Now) {
        let live = self
            .membership
            .member_ids()
            .into_iter()
            .filter(|m| !self.suspects.contains(m));
        let (changed, mismatched) = self
            .rules
            .round(self.params.rules_digest.get(), live, now.at);
        if changed {
            self.features.announce_again();
        }
        self.view
            .rules_mismatched_members
            .store(mismatched as u64, Ordering::Relaxed);
    }
}

/// At most `page` of the registers of `batches`, from `cursor` on (wrapping), in their
/// batches; `cursor` moves past them, so that successive pages cover everything in turn.
fn page_of(batches: Vec<Batch>, page: usize, cursor: &mut usize) -> Vec<Batch> {
    let total: usize = batches.iter().map(|b| b.updates.len()).sum();
    if total <= page {
        return batches;
    }
    let start = *cursor % total;
    *cursor = start + page;
    let (mut seen, end) = (0, start + page);
    let mut out = Vec::new();
    for Batch { origin, updates } in batches {
        let n = updates.len();
        // Positions `seen..seen + n` in the sequence, and again `total` further on (wrapped).
        let picked: Vec<_> = updates
            .into_iter()
            .enumerate()
            .filter(|(i, _)| {
                let at = seen + i;
                (start..end).contains(&at) || (start..end).contains(&(at + total))
            })
            .map(|(_, u)| u)
            .collect();
        seen += n;
        if !picked.is_empty() {
            out.push(Batch {
                origin,
                updates: picked,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
