//! Under the ledger (`crate::ledger`), at every cluster size: each round a node sends its
//! changed registers, each with what it holds of the window, to the window's owner; an owner
//! leases every user of its windows tokens for the coming round, and answers an ask at once.
//!
//! Who owns a window is the first owner on the ring of the members SWIM has not declared
//! down (`placement.rs`, `refresh_ring`). The limiter sees the ring through [`RingView`]: a
//! member that became a window's owner when the ring changed leases nothing for a quiet period
//! (the previous owner's leases lapse, and their users report what they spent), and under
//! `strict` a node leases only its side's part of each limit (the members it sees over the
//! members expected).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::core::NodeCore;
use super::ledger_view::LedgerNode;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::{LedgerEntry, encode_ledger};
use crate::gossip::message::{Stamp, empty_batch_body, encode_batch_stamped};
use crate::gossip::wire::{Destination, Kind};
use crate::limiter::{
    Batch, KeyId, LeaseGrant, LedgerReport, OwnerOf, PartitionPolicy, Policy, RegisterUpdate,
};

/// What a round sends each member: registers with their reports, and ledger entries.
pub(super) type Outgoing = BTreeMap<
    Destination,
    (
        Vec<(RegisterUpdate, Option<LedgerReport>)>,
        Vec<LedgerEntry>,
    ),
>;

impl<T: TimeSource> NodeCore<T> {
    /// How long a new owner leases nothing: every lease of the previous owner ends (the
    /// longest: a calm window's, or an ask's answered at the latest deadline an owner holds,
    /// `ASK_WAIT_MAX_MS`; a calm window's users report only with their next change), and two
    /// rounds bring its users' reports of what they spent. Rounds are the limiter's, which
    /// sizes the leases.
    pub(super) fn quiet_ms(&self) -> u64 {
        let config = self.limiter.config();
        let round = config.gossip_interval_ms;
        let calm = crate::ledger::tuning::longest_lease_ms(round);
        let asked = crate::config::ASK_WAIT_MAX_MS.saturating_add(config.ledger.lease_ms);
        calm.max(asked).saturating_add(self.reports_ms())
    }

    /// One gossip round (ms): how long a refusal this node makes holds.
    pub(super) fn round_ms(&self) -> u64 {
        self.params.gossip_interval.as_millis() as u64
    }

    /// How long after a lease ends its users' reports of what they spent reach the window's
    /// owner: two rounds (the round its spends wait for, and one lost datagram).
    pub(super) fn reports_ms(&self) -> u64 {
        self.limiter.config().gossip_interval_ms.saturating_mul(2)
    }

    /// This node's side's part of the limits it leases: under `strict`, the members on its
    /// side, itself included, over the members expected. Expected are the members now and those
    /// that went down without saying they were leaving, within `expected_hold_ms` (they may be
    /// admitting on the far side of a partition); a member that left gracefully is expected no
    /// more, so the members staying keep the whole limit. Senders whose clocks are a minute off
    /// are expected too: they cannot join (each side refuses the other's datagrams as stale),
    /// and each of them may be leasing a ring of its own. On its side are the members its side
    /// heard from within [`present_within_rounds`] (`relay.rs`), so that the part falls within
    /// that time of a cut; and a process new to this node that came up here within that
    /// time, but less than a quiet period less a round (`Liveness::came_up_within`). It comes
    /// up before it is heard: without this every join would take the joiner's part from every
    /// window until a quiet period after it was heard (`part_at`), though a new process holds
    /// no token. So counted, it puts off the fall its coming up makes and counts toward the
    /// quiet period of a rise, which comes that much sooner; at a joiner, where every member
    /// comes up new, the joiner's floor keeps the bound (ALGORITHM.md, L3). A SWIM suspicion
    /// does not take a member off the side: under loss SWIM suspects members its side still
    /// hears, often (`sim/tests/faults.rs`,
    /// `loss_under_the_ledger_costs_utilization_never_the_bound`), and the horizon alone bounds
    /// when the part falls.
    ///
    /// [`present_within_rounds`]: crate::ledger::tuning::present_within_rounds
    fn lease_part(&mut self, now: Now) -> (u64, u64) {
        // A node whose own clock is cut off leases nothing: its cluster time is its wall
        // clock then (the calibrator does not steer past the tolerance), beyond the margin
        // from every other member's, so its books would place their spends seconds off. So
        // does one that hears more members a minute off its clock than it sees live
        // (`update_live`): it cannot join them, and they may not hear it to count it expected.
        // The first says so, and leases nothing until its word has lapsed everywhere
        // (`not_leasing.rs`).
        if self.far_fenced || self.not_leasing_holds_back(now) {
            return (0, 1);
        }
        let Policy::Ledger(PartitionPolicy::Strict) = self.limiter.config().policy else {
            return (1, 1);
        };
        let hold = std::time::Duration::from_millis(self.limiter.config().expected_hold_ms);
        let members = self.membership.num_members() + 1;
        let expected =
            members + self.member_log.crashed_within(hold, now.at) + self.liveness.far_members();
        let present_ms = self.present_within_ms();
        let since = now.cluster_ms.saturating_sub(present_ms);
        let came_up_ms = present_ms.min(self.quiet_ms().saturating_sub(self.round_ms()));
        let came_up = std::time::Duration::from_millis(came_up_ms);
        let heard = |id: &u128| {
            self.liveness.side_heard(*id).is_some_and(|t| t >= since)
                || self.liveness.came_up_within(*id, came_up, now.at)
        };
        let seen = 1 + self
            .membership
            .member_ids()
            .iter()
            .filter(|id| heard(id))
            .count();
        (seen as u64, expected as u64)
    }

    /// Gives the limiter the current ring (and the rings before it within a quiet period).
    /// A starting node leases nothing until a quiet period after its warm-up: the warm-up
    /// ends when every member it knows has pushed it its state, so each of them knows it, and
    /// has its windows' previous owner stop leasing them within a round of that push.
    fn install_owner_view(&mut self, now: Now) {
        let side = self.lease_part(now);
        let quiet_ms = self.quiet_ms();
        // A member gone down without a word may be across a cut, leasing its side the whole
        // limit until its part there falls (the horizon) and its leases end (the quiet period).
        let blind_after_ms = self.present_within_ms().saturating_add(quiet_ms);
        let policy = self.limiter.config().policy;
        let warming = self.warmup.is_some();
        let Some(ownership) = self.ownership.as_ref() else {
            return;
        };
        let (ring, generation) = ownership.ring();
        let ledger = self.ledger.get_or_insert_with(LedgerNode::default);
        let unsaid = if matches!(policy, Policy::Ledger(PartitionPolicy::Strict)) {
            self.member_log.unsaid_downs()
        } else {
            Vec::new()
        };
        let before = ledger.installed_ring();
        let ring = std::sync::Arc::clone(ring);
        let installed = ledger.install(
            now.cluster_ms,
            &ring,
            generation,
            side,
            quiet_ms,
            warming,
            &unsaid,
            blind_after_ms,
        );
        if let Some(view) = installed {
            self.limiter.set_owner_view(Box::new(view));
            if let Some(before) = before.filter(|b| !std::sync::Arc::ptr_eq(b, &ring)) {
                self.hand_to_joiners(now, &before, &ring);
            }
        }
    }

    /// Whether this node leases `key` now, and from when (`Limiter::owner_of` through the
    /// installed view).
    pub(super) fn leases(&self, key: KeyId) -> Option<OwnerOf> {
        if !self.ledger.as_ref().is_some_and(LedgerNode::may_lease) {
            return None;
        }
        self.limiter
            .owner_of(key)
            .filter(|o| o.owner == self.params.node_id.as_u128())
    }

    /// One ledger round: registers with reports to their owners, leases to users.
    pub(super) fn ledger_round(&mut self, now: Now) {
        let not_leasing = self.not_leasing_round(now);
        self.refresh_ring();
        self.install_owner_view(now);
        let me = self.params.node_id.as_u128();
        let newcomers = self
            .ownership
            .as_mut()
            .map(|o| o.take_bootstraps())
            .unwrap_or_default();
        for to in newcomers {
            self.push_bootstrap(now, to);
        }
        let resend_all = self.ownership.as_mut().is_some_and(|o| o.take_resend_all());
        // Users: what changed, with the reports, to each window's owner; sent with the
        // round's leases to the same member, in one datagram train.
        let mut out = Outgoing::new();
        if let Some((batch, reports)) = self.limiter.collect_with_reports(now.cluster_ms) {
            self.route_to_owners(now, batch.updates, reports, &mut out);
        }
        self.resend_to_next_owners(now, &mut out);
        if resend_all {
            // Owners moved, or anti-entropy is due: every register again (without reports:
            // what a user holds goes with its next change), to both owners, and what this
            // node holds of departed origins.
            let own = self.limiter.snapshot_local(now.cluster_ms);
            let mut by_owner: BTreeMap<Destination, Vec<RegisterUpdate>> = BTreeMap::new();
            if let Some(ownership) = self.ownership.as_mut() {
                for update in own.updates {
                    for to in ownership.owner_destinations(update.key, me) {
                        by_owner.entry(to).or_default().push(update.clone());
                    }
                }
            }
            let origin = self.limiter.origin();
            for (to, updates) in by_owner {
                if self.may_send_state(now, to) {
                    self.send_batch(now, Kind::AntiEntropy, &Batch { origin, updates }, &[to]);
                }
            }
            self.relay_departed(now);
        }
        // Owners: the round's leases.
        let grants = self.limiter.owner_round(now.cluster_ms, |k| self.leases(k));
        self.route_grants(now, grants, &mut out);
        self.send_outgoing(now, out);
        if let Some(word) = not_leasing {
            self.say_not_leasing(now, word);
        }
        if let Policy::Ledger(PartitionPolicy::Strict) = self.limiter.config().policy {
            self.relay_heard(now);
        }
    }

    /// The node is leaving: what it holds of every window goes back to the window's owner
    /// with a closed report (`Limiter::close_holdings`), so that the members staying lease
    /// it again at once rather than when the leases end; and every member hears that it
    /// leaves for good, so that none keeps room for it (`lease_part`). Sent before the node
    /// says it leaves, while the members still take its datagrams.
    pub(super) fn hand_back(&mut self, now: Now) {
        if !matches!(self.limiter.config().policy, Policy::Ledger(_)) {
            return;
        }
        let (updates, reports) = self
            .limiter
            .close_holdings(now.cluster_ms)
            .map(|(batch, reports)| (batch.updates, reports))
            .unwrap_or_default();
        self.send_to_owners(now, updates, reports);
        self.hand_over(now);
        // Every member hears that this one leaves for good, in a datagram of its own.
        for member in self.membership.members() {
            let to = super::core::destination(&member);
            // Twice: a member that misses the word takes this node for crashed, and keeps the
            // windows it owned blind for their length (`ledger_view.rs`).
            if self.may_send_state(now, to) {
                for _ in 0..2 {
                    self.send_ledger(now, to, Vec::new(), vec![LedgerEntry::Leaving]);
                }
            }
        }
    }

    /// This node's registers, each with its report, to their windows' first owners (other
    /// members), one datagram train per owner.
    fn send_to_owners(
        &mut self,
        now: Now,
        updates: Vec<RegisterUpdate>,
        reports: Vec<Option<LedgerReport>>,
    ) {
        let mut out = Outgoing::new();
        self.route_to_owners(now, updates, reports, &mut out);
        self.send_outgoing(now, out);
    }

    /// Adds this node's registers, each with its report, to what goes to their windows'
    /// owners (other members): each window's first owner, or the next where the first said it
    /// is leaving (it leases nothing more, and is gone before SWIM says so), whose books must
    /// then count what was spent (`hand_over`).
    fn route_to_owners(
        &mut self,
        now: Now,
        updates: Vec<RegisterUpdate>,
        reports: Vec<Option<LedgerReport>>,
        out: &mut Outgoing,
    ) {
        let me = self.params.node_id.as_u128();
        for (update, report) in updates.into_iter().zip(reports) {
            let Some(owner) = self.leasing_owner(now, update.key).filter(|o| o.id != me) else {
                continue;
            };
            let (pairs, _) = out.entry(owner.destination()).or_default();
            pairs.push((update, report));
        }
    }

    /// Adds leases to what goes to their users: this node's are taken at once. A member whose
    /// clock this node cuts off gets none (its reports stop at `on_ledger`; a renewal of what
    /// it reported before stays in the books until it ends, unspent).
    fn route_grants(&mut self, now: Now, grants: Vec<LeaseGrant>, out: &mut Outgoing) {
        let me = self.params.node_id.as_u128();
        let cut_off = &self.clock_sync.fences().peers;
        for g in grants {
            if g.user == me {
                self.limiter.accept_lease(&g, now.cluster_ms);
                self.view.leases_arrived();
                continue;
            }
            if cut_off.contains(&g.user) {
                continue;
            }
            let Some(member) = self.membership.member_by_id(uuid::Uuid::from_u128(g.user)) else {
                continue;
            };
            let (_, entries) = out.entry(super::core::destination(&member)).or_default();
            entries.push(LedgerEntry::Lease {
                key: g.key,
                window_ms: g.window_ms,
                buckets: g.buckets,
                lease: g.lease,
            });
        }
    }

    /// Sends each member what is routed to it, where it may be sent state.
    pub(super) fn send_outgoing(&mut self, now: Now, out: Outgoing) {
        for (to, (pairs, entries)) in out {
            if self.may_send_state(now, to) {
                self.send_ledger(now, to, pairs, entries);
            }
        }
    }

    /// Sends `to` registers with their reports, and `entries`, in as few datagrams as fit.
    pub(super) fn send_ledger(
        &mut self,
        now: Now,
        to: Destination,
        mut pairs: Vec<(RegisterUpdate, Option<LedgerReport>)>,
        entries: Vec<LedgerEntry>,
    ) {
        // Every member this node sends ledger datagrams to (reports, leases, asks, answers)
        // hears, now and then, what this build reads (`features.rs`): what it sends back may
        // then use it.
        self.announce_features(now, to);
        let receiver = to.node.unwrap_or(0);
        // A member of an older build drops a section with sealed buckets whole: it gets its
        // reports without them (its books count those buckets to their ends).
        if !to
            .node
            .is_some_and(|n| self.features.reads_sealed(n, now.at))
        {
            for report in pairs.iter_mut().filter_map(|(_, r)| r.as_mut()) {
                report.holdings.sealed.clear();
            }
        }
        let compact = self.compact_to(now, to);
        let stamp = Stamp::for_header(compact, now.wall_ms);
        let max = self.max_batch_body();
        let origin = self.limiter.origin();
        // The body of `pairs` and `entries`, or `None` if it does not fit.
        let body_of = |pairs: &[(RegisterUpdate, Option<LedgerReport>)],
                       entries: &[LedgerEntry]| {
            let batch = Batch {
                origin,
                updates: pairs.iter().map(|(u, _)| u.clone()).collect(),
            };
            let mut body = if batch.updates.is_empty() {
                empty_batch_body(stamp)
            } else {
                match encode_batch_stamped(&batch, origin, usize::MAX, stamp) {
                    Ok(mut parts) if parts.len() == 1 => parts.remove(0),
                    _ => return None,
                }
            };
            let mut all: Vec<LedgerEntry> = pairs
                .iter()
                .enumerate()
                .filter_map(|(i, (_, r))| {
                    r.clone().map(|report| LedgerEntry::Report {
                        index: i as u32,
                        report,
                    })
                })
                .collect();
            all.extend(entries.iter().cloned());
            body.extend_from_slice(&encode_ledger(&all, receiver, now.wall_ms));
            (body.len() <= max).then_some(body)
        };
        let mut bodies = Vec::new();
        // What fits no datagram is sent to no one, and counted.
        let mut dropped = 0u64;
        let mut flush = |pending: &[(RegisterUpdate, Option<LedgerReport>)],
                         extra: &[LedgerEntry],
                         bodies: &mut Vec<Vec<u8>>| {
            if pending.is_empty() && extra.is_empty() {
                return;
            }
            match body_of(pending, extra) {
                Some(body) => bodies.push(body),
                None => dropped += 1,
            }
        };
        let mut pending: Vec<(RegisterUpdate, Option<LedgerReport>)> = Vec::new();
        for pair in pairs {
            pending.push(pair);
            if body_of(&pending, &[]).is_none() {
                let last = pending.pop().expect("just pushed");
                flush(&pending, &[], &mut bodies);
                pending = vec![last];
            }
        }
        let mut extra: Vec<LedgerEntry> = Vec::new();
        for e in entries {
            extra.push(e);
            if body_of(&pending, &extra).is_none() {
                let last = extra.pop().expect("just pushed");
                flush(&pending, &extra, &mut bodies);
                pending.clear();
                extra = vec![last];
            }
        }
        flush(&pending, &extra, &mut bodies);
        if dropped > 0 {
            self.view
                .wire
                .send_errors
                .fetch_add(dropped, Ordering::Relaxed);
        }
        for body in bodies {
            let mut full = self.body_prefix(to);
            full.extend_from_slice(&body);
            self.seal_as(now, Kind::Ledger, &full, to, compact);
        }
    }
}
