//! The ledger's messages between members (`ledger.rs` has the rounds): a node's asks to a
//! window's owner, and what comes in: registers with their users' reports for the windows this
//! node leases, leases and refusals for its own requests, asks to answer, and members saying
//! they leave.

use super::core::NodeCore;
use crate::clock::{Now, TimeSource};
use crate::config::ASK_WAIT_MAX_MS;
use crate::gossip::ledger_message::{LedgerEntry, decode_ledger};
use crate::gossip::message::{Stamp, decode_leading_batch_stamped};
use crate::gossip::wire::{Destination, DropReason, Header};
use crate::ledger::AskAnswer;
use crate::limiter::{KeyId, LeaseGrant, LedgerReport, OriginId, TokenNeed};
use crate::window::{EstimateMode, WindowSpec};

impl<T: TimeSource> NodeCore<T> {
    /// A request found no token for a window another member leases, or an admitted one left
    /// it short: asks it.
    pub(super) fn ask_owner(&mut self, now: Now, need: TokenNeed) {
        // Several requests may have sent one: the first asks, the others wait for its answer
        // (an ask ahead, claimed once a round by its window, goes unless one is on its way).
        if !self.limiter.may_ask(need.key, now.cluster_ms) {
            return;
        }
        let me = self.params.node_id.as_u128();
        let fences = self.clock_sync.fences();
        let Some(owner) = self.limiter.owner_of(need.key) else {
            return;
        };
        // No answer can come for a round: the window is this node's own and it may not lease
        // it now (a quiet period, a part of 0, its clock cut off), or the owner's clock or this
        // node's is cut off (a lease between them is not taken). Refused here, so that the
        // requests waiting for it are decided at once rather than at the end of their wait.
        if owner.owner == me || fences.own || fences.peers.contains(&owner.owner) {
            self.limiter
                .ask_refused(need.key, self.round_ms(), now.cluster_ms);
            self.view.leases_arrived();
            return;
        }
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
        self.limiter.asked(need.key, wait_ms, now.cluster_ms);
        let ask = LedgerEntry::Ask {
            key: need.key,
            window_ms: need.window_ms,
            buckets: need.buckets,
            limit: need.limit,
            want: need.want,
            deadline_ms: now.cluster_ms.saturating_add(wait_ms),
            held,
        };
        self.send_ledger(now, to, Vec::new(), vec![ask]);
    }

    /// A ledger datagram from `header.sender` at `from`: its registers merged, its reports
    /// taken where this node leases their windows, its leases taken, its asks answered.
    /// `timed`: the datagram is the sender's own, bound here, and its send time was taken as
    /// the newest sample of the sender's clock (`receive.rs`).
    pub(super) fn on_ledger(
        &mut self,
        now: Now,
        header: &Header,
        from: std::net::SocketAddr,
        rest: &[u8],
        timed: bool,
    ) {
        let sender = OriginId(header.sender);
        let me = self.params.node_id.as_u128();
        // A member whose clock this node cuts off is leased nothing (`route_grants` too), and
        // its leases are not taken: a lease ends on its owner's clock, which the other is
        // beyond the tolerance from. It stays on every ring (`refresh_ring`).
        let fences = self.clock_sync.fences();
        let cut_off = fences.peers.contains(&header.sender);
        // Nor does a node whose own clock is cut off take a lease: it would spend it on a clock
        // beyond the margin from its owner's.
        let take_leases = !cut_off && !fences.own;
        let stamp = Stamp::for_header(header.compact, header.sent_ms);
        let Ok((batch, used, rejects)) = decode_leading_batch_stamped(rest, sender, stamp) else {
            self.view.wire.dropped(DropReason::Malformed);
            return;
        };
        let Ok((entries, entry_rejects)) =
            decode_ledger(&rest[used..], header.sender, me, header.sent_ms)
        else {
            self.view.wire.dropped(DropReason::Malformed);
            return;
        };
        self.view
            .wire
            .ledger_entries_malformed(entry_rejects.malformed);
        // A ledger datagram carries its sender's own registers alone (`send_ledger`): one that
        // names another origin is refused whole, or any member holding the key could relay a
        // live member's registers with nothing admitted, which `receive.rs` refuses elsewhere.
        if batch.origin != sender {
            let report = crate::limiter::MergeReport {
                not_from_origin: batch.updates.len() as u64,
                ..Default::default()
            };
            self.view.wire.merged(&report, rejects.bad_shape);
        } else if !batch.updates.is_empty() {
            self.held_relays.drop_superseded_by(&batch);
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
            // One cut off is leased nothing (its registers still count what it spent).
            if !cut_off {
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
                // Not taken: a refusal for a round, so that requests do not wait for it.
                LedgerEntry::Lease { key, .. } if !take_leases => {
                    self.limiter
                        .ask_refused(key, self.round_ms(), now.cluster_ms);
                    woke = true;
                }
                LedgerEntry::Handoff { .. } | LedgerEntry::Books { .. } if !take_leases => {}
                LedgerEntry::Lease {
                    key,
                    window_ms,
                    buckets,
                    lease,
                } => {
                    // No owner's lease ends later than its longest lease from now (a quiet
                    // period): one that claims to would hold its window in this node's table
                    // that long (`WindowState::live_until_ms`), a window a member could pin
                    // for good. It is dropped, not cut short: a shorter end here would let the
                    // window be collected while its owner still counts the lease, and a later
                    // message of it would bring back tokens already spent.
                    if lease.expires_ms > now.cluster_ms.saturating_add(self.quiet_ms()) {
                        self.view.wire.ledger_entries_malformed(1);
                        continue;
                    }
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
                // Its own word only: from the address SWIM holds for it.
                LedgerEntry::Leaving if self.liveness.address_of(header.sender) == Some(from) => {
                    self.member_log.leaving_said(header.sender, now.at);
                    // Its windows' next owners lease them soon (`hand_over`): this node's
                    // registers of those windows go to them next round, so that their books
                    // count what it spent there.
                    if let Some(ownership) = self.ownership.as_mut() {
                        ownership.resend_windows_of(header.sender);
                    }
                }
                LedgerEntry::Leaving => {}
                // Its own word only, timed as a sample of its clock; off the ring from the
                // next round.
                LedgerEntry::NotLeasing { seq, holds_ms } if timed => {
                    self.heard_not_leasing(now, header.sender, (seq, holds_ms), header.sent_ms);
                }
                LedgerEntry::NotLeasing { .. } => {}
                LedgerEntry::Handoff { ends }
                    if self.liveness.address_of(header.sender) == Some(from) =>
                {
                    let timing = (self.quiet_ms(), self.reports_ms());
                    if let Some(ledger) = self.ledger.as_mut() {
                        ledger.handed(header.sender, &ends, now.cluster_ms, timing);
                    }
                }
                LedgerEntry::Books {
                    key,
                    window_ms,
                    buckets,
                    books,
                } if self.liveness.address_of(header.sender) == Some(from) => {
                    self.take_books((header.sender, key), (window_ms, buckets), books, now);
                }
                LedgerEntry::Handoff { .. } | LedgerEntry::Books { .. } => {}
                LedgerEntry::Heard { members } => {
                    self.heard_from_side(header.sender, from, &members, now);
                }
                // Refused for a round: a fence may lift at the next.
                LedgerEntry::Ask { key, .. } if cut_off => answers.push(LedgerEntry::Refused {
                    key,
                    retry_after_ms: u32::try_from(self.round_ms()).unwrap_or(u32::MAX),
                }),
                LedgerEntry::Ask {
                    key,
                    window_ms,
                    buckets,
                    limit,
                    want,
                    deadline_ms,
                    held,
                } => answers.push(self.answer_ask(
                    now,
                    header,
                    key,
                    (window_ms, buckets),
                    (limit, want, deadline_ms),
                    held,
                )),
            }
        }
        if woke {
            self.view.leases_arrived();
        }
        if !answers.is_empty() && self.liveness.address_of(header.sender) == Some(from) {
            self.send_ledger(now, to, Vec::new(), answers);
        }
    }

    /// This node's answer to an ask for `want` tokens of `key`, under the asker's `limit`,
    /// spendable before `deadline_ms` (cluster time; no further off than the longest wait a
    /// configuration allows); `held` is what the asker has of this node's lease.
    fn answer_ask(
        &mut self,
        now: Now,
        header: &Header,
        key: KeyId,
        (window_ms, buckets): (u64, u16),
        (limit, want, deadline_ms): (u32, u32, u64),
        held: Option<crate::ledger::HeldLease>,
    ) -> LedgerEntry {
        let refused = |retry_after_ms: u64| LedgerEntry::Refused {
            key,
            retry_after_ms: u32::try_from(retry_after_ms.max(1)).unwrap_or(u32::MAX),
        };
        let round = self.round_ms();
        let Ok(spec) = WindowSpec::new(window_ms, buckets, EstimateMode::Interpolated) else {
            return refused(round);
        };
        let Some(owner) = self.leases(key) else {
            // Not this node's to lease (the views of the ring differ).
            return refused(round);
        };
        let deadline = deadline_ms.min(now.cluster_ms.saturating_add(ASK_WAIT_MAX_MS));
        // When the ask was sent, in cluster time: its deadline less the wait members are
        // configured with (the datagram's own send time is on the sender's wall clock).
        let sent = deadline_ms.saturating_sub(self.limiter.config().ledger.ask_wait_ms);
        match self.limiter.owner_ask(
            header.sender,
            key,
            &spec,
            limit,
            want,
            held,
            (sent, deadline),
            now.cluster_ms,
            &owner,
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
}
