//! Under the ledger (`crate::ledger`), at every cluster size: each round a node sends its
//! changed registers, each with what it holds of the window, to the window's owner; an owner
//! leases every user of its windows tokens for the coming round, and answers an ask at once.
//!
//! Who owns a window is the first owner on the ring of the members SWIM does not suspect
//! (`placement.rs`), as in owner mode. The limiter sees the ring through [`RingView`]: a
//! member that became a window's owner when the ring changed leases nothing for a quiet period
//! (the previous owner's leases lapse, and their users report what they spent), and under
//! `strict` only a node whose side holds a majority of the members expected leases at all.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;

use super::core::NodeCore;
use super::placement::Ring;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::{LedgerEntry, decode_ledger, encode_ledger};
use crate::gossip::message::{
    Stamp, decode_leading_batch_stamped, empty_batch_body, encode_batch_stamped,
};
use crate::gossip::wire::{Destination, DropReason, Header, Kind};
use crate::ledger::AskAnswer;
use crate::limiter::{
    Batch, KeyId, LeaseGrant, LedgerReport, OriginId, OwnerOf, OwnerView, PartitionPolicy, Policy,
    RegisterUpdate, TokenNeed,
};
use crate::window::{EstimateMode, WindowSpec};

/// Rings before the last changes, kept for their quiet periods. More changes than this within
/// a quiet period make every window quiet until the oldest one dropped ends its period.
const RINGS_KEPT: usize = 8;

/// The ledger's state in a node.
#[derive(Debug, Default)]
pub(super) struct LedgerNode {
    /// `(when the ring changed, the ring before it)`, newest last.
    before: VecDeque<(u64, Ring)>,
    /// No window leases before this: a change fell out of `before`.
    floor_quiet_until_ms: u64,
    /// The ring generation and lease permission the limiter's view was made from.
    installed: Option<(u64, bool)>,
    /// The ring of the installed view.
    ring: Option<Ring>,
}

/// The limiter's view of the owners: see the module documentation.
#[derive(Debug)]
struct RingView {
    ring: Ring,
    before: Vec<(u64, Ring)>,
    floor_quiet_until_ms: u64,
    quiet_ms: u64,
    may_lease: bool,
}

impl OwnerView for RingView {
    fn owner_of(&self, key: KeyId) -> Option<OwnerOf> {
        let [owner, _] = self.ring.owners(key)?;
        let moved = self
            .before
            .iter()
            .filter(|(_, ring)| ring.owners(key).map(|[o, _]| o.id) != Some(owner.id))
            .map(|(at, _)| at + self.quiet_ms)
            .max()
            .unwrap_or(0);
        Some(OwnerOf {
            owner: owner.id,
            quiet_until_ms: moved.max(self.floor_quiet_until_ms),
        })
    }

    fn may_lease(&self) -> bool {
        self.may_lease
    }
}

impl<T: TimeSource> NodeCore<T> {
    /// How long a new owner leases nothing: a lease of the previous owner's lapses, and two
    /// rounds bring its users' reports of what they spent.
    fn quiet_ms(&self) -> u64 {
        self.limiter.config().ledger.lease_ms + 2 * self.params.gossip_interval.as_millis() as u64
    }

    /// Whether this node may lease: under `strict`, only while the members it does not
    /// suspect, with itself, are more than half the members expected (a partition's minority
    /// leases nothing; its users spend what they hold).
    fn may_lease(&self) -> bool {
        match self.limiter.config().policy {
            Policy::Ledger(PartitionPolicy::Strict) => {
                let expected = self.limiter.member_counts().1;
                let seen = self.membership.num_members() + 1 - self.suspects.len();
                2 * seen > expected
            }
            _ => true,
        }
    }

    /// Gives the limiter the current ring (and the rings before it within a quiet period).
    fn install_owner_view(&mut self, now: Now) {
        let may_lease = self.may_lease();
        let quiet_ms = self.quiet_ms();
        let Some(ownership) = self.ownership.as_ref() else {
            return;
        };
        let (ring, generation) = ownership.ring();
        let ledger = self.ledger.get_or_insert_with(LedgerNode::default);
        if ledger.installed == Some((generation, may_lease)) {
            return;
        }
        let old = ledger.ring.replace(ring.clone());
        if ledger.installed.is_some_and(|(g, _)| g != generation)
            && let Some(old) = old
        {
            ledger.before.push_back((now.cluster_ms, old));
        }
        ledger
            .before
            .retain(|(at, _)| at + quiet_ms > now.cluster_ms);
        while ledger.before.len() > RINGS_KEPT {
            if let Some((at, _)) = ledger.before.pop_front() {
                ledger.floor_quiet_until_ms = ledger.floor_quiet_until_ms.max(at + quiet_ms);
            }
        }
        ledger.installed = Some((generation, may_lease));
        self.limiter.set_owner_view(Box::new(RingView {
            ring: ring.clone(),
            before: ledger.before.iter().cloned().collect(),
            floor_quiet_until_ms: ledger.floor_quiet_until_ms,
            quiet_ms,
            may_lease,
        }));
    }

    /// Whether this node leases `key` now, and from when (`Limiter::owner_of` through the
    /// installed view).
    fn leases(&self, key: KeyId) -> Option<u64> {
        if !self.may_lease() {
            return None;
        }
        self.limiter
            .owner_of(key)
            .filter(|o| o.owner == self.params.node_id.as_u128())
            .map(|o| o.quiet_until_ms)
    }

    /// One ledger round: registers with reports to their owners, leases to users.
    pub(super) fn ledger_round(&mut self, now: Now) {
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
        // Users: what changed, with the reports, to each window's owner.
        let mut to_owners: BTreeMap<Destination, Vec<(RegisterUpdate, Option<LedgerReport>)>> =
            BTreeMap::new();
        if let Some((batch, reports)) = self.limiter.collect_with_reports(now.cluster_ms) {
            for (update, report) in batch.updates.into_iter().zip(reports) {
                let Some(owner) = self.first_owner(update.key).filter(|o| o.id != me) else {
                    continue;
                };
                to_owners
                    .entry(owner.destination())
                    .or_default()
                    .push((update, report));
            }
        }
        for (to, pairs) in to_owners {
            if self.may_send_state(now, to) {
                self.send_ledger(now, to, pairs, Vec::new());
            }
        }
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
        let grants = self
            .limiter
            .owner_round(now.cluster_ms, |k| self.leases(k).is_some());
        self.send_grants(now, grants);
    }

    /// Leases to their users: this node's taken at once, the others sent.
    fn send_grants(&mut self, now: Now, grants: Vec<LeaseGrant>) {
        let me = self.params.node_id.as_u128();
        let mut to_users: BTreeMap<Destination, Vec<LedgerEntry>> = BTreeMap::new();
        for g in grants {
            if g.user == me {
                self.limiter.accept_lease(&g, now.cluster_ms);
                continue;
            }
            let Some(member) = self.membership.member_by_id(uuid::Uuid::from_u128(g.user)) else {
                continue;
            };
            to_users
                .entry(super::core::destination(&member))
                .or_default()
                .push(LedgerEntry::Lease {
                    key: g.key,
                    window_ms: g.window_ms,
                    buckets: g.buckets,
                    lease: g.lease,
                });
        }
        for (to, entries) in to_users {
            if self.may_send_state(now, to) {
                self.send_ledger(now, to, Vec::new(), entries);
            }
        }
    }

    /// A request found no token for a window another member leases: asks it.
    pub(super) fn ask_owner(&mut self, now: Now, need: TokenNeed) {
        let me = self.params.node_id.as_u128();
        let Some(owner) = self.limiter.owner_of(need.key).filter(|o| o.owner != me) else {
            return;
        };
        let Some(member) = self
            .membership
            .member_by_id(uuid::Uuid::from_u128(owner.owner))
        else {
            return;
        };
        let to = super::core::destination(&member);
        if !self.may_send_state(now, to) {
            return;
        }
        let wait_ms = self.limiter.config().ledger.ask_wait_ms;
        let held = self
            .limiter
            .held_word(need.key, owner.owner, now.cluster_ms);
        // Asked: further requests wait for this answer rather than ask again.
        self.limiter.ask_refused(need.key, wait_ms, now.cluster_ms);
        let ask = LedgerEntry::Ask {
            key: need.key,
            window_ms: need.window_ms,
            buckets: need.buckets,
            limit: need.limit,
            want: need.want,
            wait_ms: u32::try_from(wait_ms).unwrap_or(u32::MAX),
            held,
        };
        self.send_ledger(now, to, Vec::new(), vec![ask]);
    }

    /// A ledger datagram from `header.sender` at `from`: its registers merged, its reports
    /// taken where this node leases their windows, its leases taken, its asks answered.
    pub(super) fn on_ledger(
        &mut self,
        now: Now,
        header: &Header,
        from: std::net::SocketAddr,
        rest: &[u8],
    ) {
        let sender = OriginId(header.sender);
        let me = self.params.node_id.as_u128();
        let stamp = Stamp::for_header(header.compact, header.sent_ms);
        let Ok((batch, used, rejects)) = decode_leading_batch_stamped(rest, sender, stamp) else {
            self.view.wire.dropped(DropReason::Malformed);
            return;
        };
        let Ok((entries, _)) = decode_ledger(&rest[used..], header.sender, me, header.sent_ms)
        else {
            self.view.wire.dropped(DropReason::Malformed);
            return;
        };
        if !batch.updates.is_empty() {
            let report = self.limiter.merge(&batch, now.cluster_ms);
            self.view.wire.merged(&report, rejects.bad_shape);
            let mut reports: Vec<Option<LedgerReport>> = vec![None; batch.updates.len()];
            for e in &entries {
                if let LedgerEntry::Report { index, report } = e
                    && let Some(slot) = reports.get_mut(*index as usize)
                {
                    *slot = Some(report.clone());
                }
            }
            // Only the sender's own registers carry its reports.
            if batch.origin == sender {
                self.limiter
                    .owner_heard(&batch, &reports, now.cluster_ms, |k| self.leases(k));
            }
        }
        let to = Destination {
            addr: from,
            node: Some(header.sender),
        };
        let mut answers = Vec::new();
        let mut woke = false;
        for e in entries {
            match e {
                LedgerEntry::Report { .. } => {}
                LedgerEntry::Lease {
                    key,
                    window_ms,
                    buckets,
                    lease,
                } => {
                    let grant = LeaseGrant {
                        user: me,
                        key,
                        window_ms,
                        buckets,
                        lease,
                    };
                    self.limiter.accept_lease(&grant, now.cluster_ms);
                    woke = true;
                }
                LedgerEntry::Refused {
                    key,
                    retry_after_ms,
                } => {
                    self.limiter
                        .ask_refused(key, u64::from(retry_after_ms), now.cluster_ms);
                    woke = true;
                }
                LedgerEntry::Ask {
                    key,
                    window_ms,
                    buckets,
                    limit,
                    want,
                    wait_ms,
                    held,
                } => answers.push(self.answer_ask(
                    now,
                    header,
                    key,
                    (window_ms, buckets),
                    (limit, want, wait_ms),
                    held,
                )),
            }
        }
        if woke {
            self.view.leases.notify_waiters();
        }
        if !answers.is_empty() && self.liveness.address_of(header.sender) == Some(from) {
            self.send_ledger(now, to, Vec::new(), answers);
        }
    }

    /// This node's answer to an ask for `want` tokens of `key`, under the asker's `limit`,
    /// spendable within `wait_ms` of the ask's sending; `held` is what the asker has of this
    /// node's lease.
    fn answer_ask(
        &mut self,
        now: Now,
        header: &Header,
        key: KeyId,
        (window_ms, buckets): (u64, u16),
        (limit, want, wait_ms): (u32, u32, u32),
        held: Option<crate::ledger::HeldLease>,
    ) -> LedgerEntry {
        let refused = |retry_after_ms: u64| LedgerEntry::Refused {
            key,
            retry_after_ms: u32::try_from(retry_after_ms.max(1)).unwrap_or(u32::MAX),
        };
        let round = self.params.gossip_interval.as_millis() as u64;
        let Ok(spec) = WindowSpec::new(window_ms, buckets, EstimateMode::Interpolated) else {
            return refused(round);
        };
        let Some(quiet_until) = self.leases(key) else {
            // Not this node's to lease (views differ, or it is a partition's minority).
            return refused(round);
        };
        // The ask's wait counts from when it was sent.
        let deadline = header.sent_ms.saturating_add(u64::from(wait_ms));
        match self.limiter.owner_ask(
            header.sender,
            key,
            &spec,
            limit,
            want,
            held,
            deadline,
            now.cluster_ms,
            quiet_until,
        ) {
            AskAnswer::Granted(lease) => LedgerEntry::Lease {
                key,
                window_ms,
                buckets,
                lease,
            },
            AskAnswer::Refused { retry_after_ms } => refused(retry_after_ms),
        }
    }

    /// Sends `to` registers with their reports, and `entries`, in as few datagrams as fit.
    fn send_ledger(
        &mut self,
        now: Now,
        to: Destination,
        pairs: Vec<(RegisterUpdate, Option<LedgerReport>)>,
        entries: Vec<LedgerEntry>,
    ) {
        let receiver = to.node.unwrap_or(0);
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
        let mut pending: Vec<(RegisterUpdate, Option<LedgerReport>)> = Vec::new();
        for pair in pairs {
            pending.push(pair);
            if body_of(&pending, &[]).is_none() {
                let last = pending.pop().expect("just pushed");
                if let Some(body) = body_of(&pending, &[]) {
                    bodies.push(body);
                } else {
                    // One register that fits no datagram is sent to no one.
                    self.view.wire.send_errors.fetch_add(1, Ordering::Relaxed);
                }
                pending = vec![last];
            }
        }
        let mut extra: Vec<LedgerEntry> = Vec::new();
        for e in entries {
            extra.push(e);
            if body_of(&pending, &extra).is_none() {
                let last = extra.pop().expect("just pushed");
                if let Some(body) = body_of(&pending, &extra) {
                    bodies.push(body);
                }
                pending.clear();
                extra = vec![last];
            }
        }
        if (!pending.is_empty() || !extra.is_empty())
            && let Some(body) = body_of(&pending, &extra)
        {
            bodies.push(body);
        }
        for body in bodies {
            let mut full = self.body_prefix(to);
            full.extend_from_slice(&body);
            self.outbox
                .seal(Kind::Ledger, now.wall_ms, &full, to, compact);
        }
    }
}
