//! One incoming datagram: opened, counted, and handed to membership, the clock or the limiter.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use super::core::{NodeCore, destination};
use crate::clock::{Now, TimeSource};
use crate::gossip::message::{
    Stamp, decode_batch_pair_stamped, decode_batch_stamped, members_count,
};
use crate::gossip::wire::{Destination, DropReason, Header, Kind, TAG_LEN, stale_body};
use crate::limiter::{MergeReport, OriginId};

impl<T: TimeSource> NodeCore<T> {
    /// A datagram arrived from `from`. It is opened in place. Whatever is wrong with it is
    /// counted by reason and dropped; nothing a sender puts in a datagram stops the node.
    pub fn on_datagram(&mut self, now: Now, datagram: &mut [u8], from: SocketAddr) {
        self.receive(now, datagram, from);
        self.settle(now);
    }

    fn receive(&mut self, now: Now, datagram: &mut [u8], from: SocketAddr) {
        let liveness = &self.liveness;
        let opened =
            match self
                .opener
                .open_from(&self.keyring, datagram, now.cluster_ms, from, |sender| {
                    liveness.address_of(sender)
                }) {
                Ok(o) => o,
                Err(reason) => {
                    self.view.wire.dropped(reason);
                    // Where anyone can forge datagrams, only an address that has shown it receives
                    // is answered: a forgery must not make this node send to a victim.
                    let may_answer = self
                        .return_route
                        .as_ref()
                        .is_none_or(|r| r.is_verified(from));
                    let Some(stale) = self.opener.take_stale() else {
                        return;
                    };
                    if !may_answer {
                        // In an insecure cluster, counted only from an address that has shown it
                        // receives, as anything else there could be forged.
                        return;
                    }
                    let sender = stale.sender;
                    // Counted only if sealed for this boot (see `Opener::take_stale`); an
                    // announcement to this node as a seed is only answered, so that its sender
                    // learns of this node and answers with a datagram that is.
                    let tell =
                        self.liveness
                            .far_clock(sender, stale.sent_ms, stale.addressed, now.at);
                    // How many members it counts (which includes this node) is as good a word as
                    // any on the cluster's size: a node a minute off learns it only this way.
                    if stale.addressed
                        && stale.kind != Kind::Membership
                        && let Some((count, _)) = members_count::decode(stale_body(datagram))
                    {
                        self.liveness.far_counted(sender, count);
                    }
                    if tell {
                        // Bound to the sender's boot id, so that only it can open the answer.
                        let to = Destination {
                            addr: from,
                            node: Some(sender),
                        };
                        let body = self.body_prefix(to);
                        self.seal(now, Kind::Heartbeat, &body, to);
                    }
                    return;
                }
            };
        let header = opened.header;
        self.liveness.heard_any(header.sender, now.cluster_ms);
        self.view.wire.received(
            header.kind,
            opened.body.len() + header.encoded_len() + TAG_LEN,
        );
        if header.kind != Kind::Membership {
            // Only registers and heartbeats count as hearing a member: a member that sends this
            // node SWIM traffic but no state (it holds this node as down, or its state is lost
            // on the way) leaves this node blind to its admissions, which is what silence is.
            self.liveness.heard(header.sender, now.at);
            // A member's bootstrap push goes out before anything else it sends this node, so any
            // register or heartbeat says the push has been sent; except where return
            // routability is checked: there heartbeats come first, and the push (which every
            // member opens with an anti-entropy datagram, empty or not) only once this node's
            // address is verified.
            let pushed = header.kind == Kind::AntiEntropy || self.return_route.is_none();
            if pushed && let Some(w) = &mut self.warmup {
                w.heard_state_of(header.sender);
            }
        }
        // Only a member's own datagrams, bound to this node and from its address (and, where
        // anyone can forge datagrams, from an address that has shown it receives), steer this
        // node's clock: a datagram that merely opens could name any sender.
        let steers = header.addressed
            && self.liveness.address_of(header.sender) == Some(from)
            && self
                .return_route
                .as_ref()
                .is_none_or(|r| r.is_verified(from));
        if steers {
            self.clock_sync
                .observe(header.sender, header.sent_ms, now.mono_ms);
            // So does its word on its cluster time, which a warming node may jump to; where
            // anyone can forge datagrams, only from one that echoes this node's cookie (below).
            if self.return_route.is_none() {
                self.heard_cluster(now, &header);
            }
        }
        if let Some(offset) = self.clock_sync.offset_of(header.sender)
            && offset.unsigned_abs() > self.params.offset_warn_ms
        {
            self.view
                .wire
                .clock_offset_warnings
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(sender = %uuid::Uuid::from_u128(header.sender), offset_ms = offset, "peer clock offset");
        }
        if header.kind == Kind::Membership {
            if self.membership.handle_data(opened.body, now.at).is_err() {
                self.view
                    .wire
                    .membership_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        // Heartbeats and registers start with how many members their sender counts.
        let Some((count, rest)) = members_count::decode(opened.body) else {
            self.view.wire.dropped(DropReason::Malformed);
            return;
        };
        // Whether the sender receives at `from`: always taken so in a secure cluster (nobody
        // can seal a datagram without the key); in an insecure one, if it echoes this node's
        // cookie for `from`.
        let mut from_receives = true;
        let rest = match &mut self.return_route {
            None => rest,
            Some(route) => {
                let member = self
                    .membership
                    .member_at(from)
                    .filter(|m| m.node.as_u128() == header.sender);
                let Some((rest, newly, echoes)) =
                    route.observe(rest, from, member.as_ref().map(|m| m.node.as_u128()))
                else {
                    self.view.wire.dropped(DropReason::Malformed);
                    return;
                };
                if newly
                    && route.take_bootstrap(from)
                    && let Some(m) = member
                {
                    self.queue_bootstrap(now, destination(&m));
                }
                from_receives = echoes;
                rest
            }
        };
        // How many members it counts feeds `N_expected`, which scales every share down under
        // `strict`: taken, as the clock's steering is, only from a member's own datagram bound
        // to this node, from its address, and (where anyone can forge datagrams) from an
        // address that has shown it receives. A forged count of 65 536 would otherwise hold
        // every node of an insecure cluster to a sliver of each limit for a minute.
        if steers && from_receives {
            self.liveness.counted(header.sender, count, now.at);
            if self.return_route.is_some() {
                self.heard_cluster(now, &header);
            }
        }
        if header.kind == Kind::Heartbeat {
            // The digest of the sender's rules, after its flags (`rules_digest.rs`): taken from
            // a datagram bound to this node, from a sender shown to receive, whether or not it
            // is a member yet (it announces as soon as it sees this node, often first).
            if header.addressed
                && from_receives
                && let Some(digest) = rest
                    .get(1..1 + super::rules_digest::DIGEST_LEN)
                    .and_then(|d| <[u8; 8]>::try_from(d).ok())
            {
                self.rules
                    .heard(header.sender, u64::from_le_bytes(digest), now.at);
            }
            // Flags past the prefix: what the sender's build reads (`features.rs`). Taken only
            // from a datagram bound to this node and sent from the member's own address.
            if let Some(flags) = rest.first()
                && header.addressed
                && self
                    .membership
                    .member_at(from)
                    .is_some_and(|m| m.node.as_u128() == header.sender)
            {
                // What it reads is taken only from a sender shown to receive here: in an
                // insecure cluster a forged flag could otherwise have this node send a member
                // of an older build datagrams it drops (compact headers, exchanges).
                if from_receives {
                    self.features.heard(header.sender, *flags, now.at);
                    if *flags & super::features::ASKS_CLUSTER_TIME != 0
                        && self.features.may_answer(header.sender)
                    {
                        // One heartbeat, about the request's size, to the member's own
                        // address, at most one a round.
                        let to = Destination {
                            addr: from,
                            node: Some(header.sender),
                        };
                        self.send_flags(now, to, super::features::READS);
                    }
                }
                if *flags & super::features::ASKS_ECHO != 0
                    && self
                        .return_route
                        .as_mut()
                        .is_some_and(|r| r.may_answer(from))
                {
                    // The echo it asks for, in a heartbeat that asks for nothing: at most one
                    // a round, about the request's size, to the member's own address.
                    let to = Destination {
                        addr: from,
                        node: Some(header.sender),
                    };
                    self.send_flags(now, to, super::features::READS);
                }
            }
            return;
        }
        if header.kind == Kind::Ledger {
            self.on_ledger(now, &header, from, rest, steers);
            return;
        }
        let sender = OriginId(header.sender);
        let stamp = Stamp::for_header(header.compact, header.sent_ms);
        // Registers, and an owner's sums.
        let decoded = match header.kind {
            Kind::Exchange => decode_batch_pair_stamped(rest, sender, stamp)
                .map(|([registers, sums], rejects)| (Some(registers), Some(sums), rejects)),
            Kind::Aggregate => decode_batch_stamped(rest, sender, stamp)
                .map(|(sums, rejects)| (None, Some(sums), rejects)),
            _ => decode_batch_stamped(rest, sender, stamp)
                .map(|(registers, rejects)| (Some(registers), None, rejects)),
        };
        let Ok((mut registers, mut sums, rejects)) = decoded else {
            self.view.wire.dropped(DropReason::Malformed);
            return;
        };
        let mut report = MergeReport::default();
        // The sender a datagram names is only as good as the cluster key, which every member
        // holds: a datagram is a member's own only if it also comes from that member's
        // address.
        let from_sender = self.liveness.address_of(header.sender) == Some(from);
        // A live member speaks for itself: its registers relayed by another (or sealed in its
        // name elsewhere) are refused, or any member holding the key could send zero counts
        // for it, or a version no register of its own would rank above. Registers of origins
        // that are not live come relayed (bootstrap pushes of departed and restarted
        // origins). Sums are their sender's own, and a live owner's come from its address.
        if let Some(batch) = &registers
            && self.speaks_for_itself(batch.origin.0)
            && !(batch.origin == sender && from_sender)
        {
            report.not_from_origin += batch.updates.len() as u64;
            // A relay, held until the origin no longer speaks for itself (`held_relays.rs`).
            if batch.origin != sender {
                let capacity = self.limiter.config().max_keys;
                self.held_relays.hold(batch, capacity, now.cluster_ms);
            }
            registers = None;
        }
        if let Some(batch) = &sums
            && (batch.origin != sender || (self.speaks_for_itself(sender.0) && !from_sender))
        {
            report.not_from_origin += batch.updates.len() as u64;
            sums = None;
        }
        // In an insecure cluster, a sender is a subscriber (or an owner registers go to) only
        // at its own address: a forged datagram must not point an owner's sums, or a user's
        // registers, elsewhere.
        let at_own_address =
            self.return_route.is_none() || self.liveness.address_of(header.sender) == Some(from);
        let to = Destination {
            addr: from,
            node: Some(header.sender),
        };
        if let Some(batch) = registers {
            // Only a datagram from the origin's own address speaks for it (supersedes).
            report.add(&if from_sender {
                if batch.origin == sender {
                    self.held_relays.drop_superseded_by(&batch);
                }
                self.limiter.merge_sent_by(&batch, sender, now.cluster_ms)
            } else {
                self.limiter.merge(&batch, now.cluster_ms)
            });
            if matches!(header.kind, Kind::Summary | Kind::Exchange)
                && self.ownership.is_some()
                && at_own_address
            {
                // A member's own registers of windows this node owns: it uses them, and
                // hears of them from here. Only windows the merge kept (what this node keeps
                // per owned window is bounded by its key table).
                let keys = self.held_windows(&batch);
                self.subscribe(header.sender, to, &keys, now);
            }
        }
        if let Some(batch) = sums {
            report.add(&self.limiter.merge_aggregates(&batch, now.cluster_ms));
            if self.ownership.is_some()
                && at_own_address
                && from_receives
                && self.liveness.is_member(header.sender)
                && !batch.updates.is_empty()
            {
                // The sender acts as these windows' owner: it should hold this node's
                // registers too (of the windows this node holds, which its own traffic is),
                // and they are not blind. Where anyone can forge datagrams, only from an
                // address shown to receive: a forged empty sum every 10 s would keep a window
                // from counting as blind.
                self.heard_sums(header.sender, to, &batch, now.at);
            }
        }
        self.view.wire.merged(&report, rejects.bad_shape);
    }

    /// Takes `header`'s word on its sender's cluster time (`ClockSync::heard_cluster`).
    fn heard_cluster(&mut self, now: Now, header: &Header) {
        if let Some(word) = header.cluster {
            self.clock_sync
                .heard_cluster(header.sender, header.counter, word, now.mono_ms);
        }
    }

    /// Whether `origin` is a live member (in the member list as of the last round and now, and
    /// not suspected at the last round): only its own datagrams carry its registers. A member
    /// SWIM took off the list sent its last registers; the members relay what it spent to
    /// its windows' owners as their rings change (`NodeCore::relay_departed`), an owner that
    /// leaves next among them, maybe before this node's next round. (A member's word that it
    /// is leaving does not count here: one that said so may stay, and speak for itself.)
    fn speaks_for_itself(&self, origin: u128) -> bool {
        self.liveness.is_member(origin)
            && !self.suspects.contains(&origin)
            && self
                .membership
                .member_by_id(uuid::Uuid::from_u128(origin))
                .is_some()
    }

    /// Merges the relays held of members that no longer speak for themselves here, as a relay
    /// that arrived then would be (`held_relays.rs`). Runs each round, before the warm-up may
    /// end and before the owners lease.
    pub(super) fn release_held_relays(&mut self, now: Now) {
        let mut held = std::mem::take(&mut self.held_relays);
        let released = held.release(now.cluster_ms, |origin| !self.speaks_for_itself(origin));
        self.held_relays = held;
        let mut report = MergeReport::default();
        for batch in &released {
            report.add(&self.limiter.merge(batch, now.cluster_ms));
        }
        if !released.is_empty() {
            self.view.wire.merged(&report, 0);
        }
    }

    /// The windows of `batch` this node holds.
    fn held_windows(&self, batch: &crate::limiter::Batch) -> Vec<crate::limiter::KeyId> {
        batch
            .updates
            .iter()
            .map(|u| u.key)
            .filter(|k| self.limiter.holds(k))
            .collect()
    }
}
