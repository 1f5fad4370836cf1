//! The bodies this node sends a member, and their sealing: the prefix every register and
//! heartbeat body starts with, heartbeats with this build's flags, batches laid out for the
//! header each peer reads and split to fit a datagram, and registers with sums in one exchange.

use super::core::NodeCore;
use super::return_route;
use crate::clock::{Now, TimeSource};
use crate::gossip::message::{Stamp, encode_batch_stamped, members_count};
use crate::gossip::wire::{Destination, Kind, Layout, SenderCluster};
use crate::limiter::Batch;

impl<T: TimeSource> NodeCore<T> {
    /// The front of every register and heartbeat body to `to`: the members count, and the
    /// cookies when return routability is checked.
    pub(super) fn body_prefix(&self, to: Destination) -> Vec<u8> {
        let mut prefix = members_count::encode(self.members_counted());
        if let Some(route) = &self.return_route {
            prefix.extend_from_slice(&route.cookies(to.addr, to.node));
        }
        prefix
    }

    /// A heartbeat to `to` with `flags` after its prefix (`features.rs`), which older builds
    /// read no further than the prefix, and then the digest of this node's rules
    /// (`rules_digest.rs`), which they do not read.
    pub(super) fn send_flags(&mut self, now: Now, to: Destination, flags: u8) {
        let body = self.heartbeat_body(to, Some(flags));
        self.seal(now, Kind::Heartbeat, &body, to);
    }

    /// A heartbeat's body to `to`: the prefix, and `flags` with this node's rules digest.
    pub(super) fn heartbeat_body(&self, to: Destination, flags: Option<u8>) -> Vec<u8> {
        let mut body = self.body_prefix(to);
        if let Some(flags) = flags {
            body.push(flags);
            let digest = self.params.rules_digest.get();
            if digest != 0 {
                body.extend_from_slice(&digest.to_le_bytes());
            }
        }
        body
    }

    /// Whether a datagram to `to` goes under the compact header: once `to` said it reads one
    /// (`features.rs`).
    pub(super) fn compact_to(&self, now: Now, to: Destination) -> bool {
        self.outbox.compact_possible()
            && to
                .node
                .is_some_and(|n| self.features.reads_compact(n, now.at))
    }

    /// Seals `body` (one that carries no batch) for `to`, under the header `to` reads.
    pub(super) fn seal(&mut self, now: Now, kind: Kind, body: &[u8], to: Destination) {
        let compact = self.compact_to(now, to);
        self.seal_as(now, kind, body, to, compact);
    }

    /// Seals `body` for `to` under the full header, or (`compact`, see [`Self::compact_to`])
    /// the compact one: the timed one where `to` said it reads this node's cluster time.
    pub(super) fn seal_as(
        &mut self,
        now: Now,
        kind: Kind,
        body: &[u8],
        to: Destination,
        compact: bool,
    ) {
        let layout = if !compact {
            Layout::Full
        } else if to
            .node
            .is_some_and(|n| self.features.reads_cluster_time(n, now.at))
        {
            Layout::Timed(self.cluster_word(now))
        } else {
            Layout::Compact
        };
        self.outbox.seal(kind, now.wall_ms, body, to, layout);
    }

    /// What this node says of its cluster time: it vouches for it once it serves on a
    /// cluster time its peers steered (`ClockSync::vouches`), and nothing while it hears
    /// senders a minute off (it may be the one that is off). It says the time it steers to,
    /// not a reading held still after a move back (`cluster.rs`), which is ahead of the
    /// cluster's until real time catches up.
    fn cluster_word(&self, now: Now) -> SenderCluster {
        if self.warmup.is_some() || self.far_fenced || !self.clock_sync.vouches() {
            return SenderCluster::Unvouched;
        }
        now.mono_ms
            .checked_add_signed(self.clock.base())
            .map_or(SenderCluster::Unvouched, SenderCluster::At)
    }

    /// Tells `to` what this build reads, unless it was told lately (`features.rs`).
    pub(super) fn announce_features(&mut self, now: Now, to: Destination) {
        if self.announce_due(now, to) {
            self.send_flags(now, to, super::features::READS);
        }
    }

    /// Whether `to` is a member due this node's flags (`features.rs`); if so, counts them as
    /// told.
    pub(super) fn announce_due(&mut self, now: Now, to: Destination) -> bool {
        to.node
            .filter(|m| self.liveness.is_member(*m))
            .is_some_and(|m| self.features.announce_due(m, now.at))
    }

    /// Sends `to` this node's `registers` of windows it owns and this node's `sums` of windows
    /// it uses: in one datagram (`Kind::Exchange`) when both fit and `to` reads one, as a
    /// summary and an aggregate otherwise. A datagram costs its envelope (64 bytes) and prefix
    /// whatever it carries.
    pub(super) fn send_registers_and_sums(
        &mut self,
        now: Now,
        to: Destination,
        registers: &Batch,
        sums: &Batch,
    ) {
        let max_body = self.max_batch_body();
        let origin = self.limiter.origin();
        let compact = self.compact_to(now, to);
        let stamp = Stamp::for_header(compact, now.wall_ms);
        // A batch with an entry too large for any datagram is not sent, as in `send_batch`.
        let r = encode_batch_stamped(registers, origin, max_body, stamp).unwrap_or_default();
        let s = encode_batch_stamped(sums, origin, max_body, stamp).unwrap_or_default();
        if let ([r], [s]) = (r.as_slice(), s.as_slice())
            && r.len() + s.len() <= max_body
            && to
                .node
                .is_some_and(|n| self.features.reads_exchange(n, now.at))
        {
            let mut body = self.body_prefix(to);
            body.extend_from_slice(r);
            body.extend_from_slice(s);
            self.seal_as(now, Kind::Exchange, &body, to, compact);
            return;
        }
        self.seal_bodies(now, Kind::Summary, &r, to, compact);
        self.seal_bodies(now, Kind::Aggregate, &s, to, compact);
    }

    /// The most a body of registers may take: a datagram's, less the longest prefix.
    pub(super) fn max_batch_body(&self) -> usize {
        let prefix_len = members_count::MAX_LEN + return_route::COOKIES_LEN;
        self.outbox.max_body().saturating_sub(prefix_len)
    }

    /// Encodes `batch` into as many bodies as it takes and seals each for every peer: laid out
    /// once for the peers that read the compact header and once for those that do not.
    pub(super) fn send_batch(
        &mut self,
        now: Now,
        kind: Kind,
        batch: &Batch,
        peers: &[Destination],
    ) {
        if batch.updates.is_empty() {
            return;
        }
        let layouts: Vec<(Destination, bool)> = peers
            .iter()
            .map(|p| (*p, self.compact_to(now, *p)))
            .collect();
        let (origin, max_body) = (self.limiter.origin(), self.max_batch_body());
        let mut bodies: [Vec<Vec<u8>>; 2] = Default::default();
        for compact in [false, true] {
            if layouts.iter().any(|(_, c)| *c == compact) {
                let stamp = Stamp::for_header(compact, now.wall_ms);
                // A batch with an entry too large for any datagram is sent to no one.
                let Ok(encoded) = encode_batch_stamped(batch, origin, max_body, stamp) else {
                    return;
                };
                bodies[usize::from(compact)] = encoded;
            }
        }
        for (peer, compact) in layouts {
            self.seal_bodies(now, kind, &bodies[usize::from(compact)], peer, compact);
        }
    }

    /// Seals each of `bodies` (laid out for the header `compact` says) behind the prefix,
    /// for `to`.
    fn seal_bodies(
        &mut self,
        now: Now,
        kind: Kind,
        bodies: &[Vec<u8>],
        to: Destination,
        compact: bool,
    ) {
        for batch_body in bodies {
            let mut body = self.body_prefix(to);
            body.extend_from_slice(batch_body);
            self.seal_as(now, kind, &body, to, compact);
        }
    }
}
