//! Under the ledger's `strict` policy, each member pushes to one other member a round, in turn,
//! every member its side heard from within the horizon
//! (`ledger::tuning::present_within_rounds`), and when. An owner then counts on its side every
//! member someone on its side heard from lately, not only those it hears from itself: in a
//! large cluster an owner hears directly from few members, and its part of each limit would
//! fall whenever a partition is possible (a member suspected: a crash, most often).

use super::core::NodeCore;
use super::liveness::relayed::short_id;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::{LedgerEntry, MOST_HEARD};
use crate::ledger::tuning::present_within_rounds;

/// The member `me` pushes to in `round`, of `ring` (the members SWIM does not suspect, `me`
/// among them, in id order): the one `2^(round mod ⌈log2 n⌉)` places after `me`. In a round
/// every member pushes to a different one, and over any `⌈log2 n⌉` rounds in a row the
/// distances sum, in some subset, to every distance on the ring, so what one member heard
/// reaches every other within `⌈log2 n⌉ + 1` rounds when nothing is lost.
pub fn relay_target(me: u128, round: u64, ring: &[u128]) -> Option<u128> {
    let n = ring.len();
    let mine = ring.binary_search(&me).ok()?;
    if n < 2 {
        return None;
    }
    let doublings = u64::from(usize::BITS - (n - 1).leading_zeros());
    let step = 1usize << (round % doublings);
    ring.get((mine + step % n) % n).copied()
}

/// Most bytes a member takes in a `Heard` entry: its short id and a distance of up to five
/// varint bytes.
const MOST_BYTES_A_MEMBER: usize = 9;
/// Most bytes of a datagram body around one `Heard` entry's members: the register batch's
/// empty head, the section's and the entry's tags and counts, the newest time.
const HEARD_OVERHEAD: usize = 48;

/// How many members one `Heard` entry may name so that it fits a body of `max_body` bytes on
/// its own, whatever the times.
pub fn heard_chunk(max_body: usize) -> usize {
    (max_body.saturating_sub(HEARD_OVERHEAD) / MOST_BYTES_A_MEMBER).clamp(1, MOST_HEARD)
}

impl<T: TimeSource> NodeCore<T> {
    /// How long a member this node's side heard from counts as present on it, in ms.
    pub(super) fn present_within_ms(&self) -> u64 {
        let round = self.params.gossip_interval.as_millis() as u64;
        let members = self.membership.num_members() + 1;
        present_within_rounds(members).saturating_mul(round)
    }

    /// This round's push: what this node's side heard within the horizon, itself heard now,
    /// to the round's member, in datagrams of their own.
    pub(super) fn relay_heard(&mut self, now: Now) {
        let me = self.params.node_id.as_u128();
        let mut ring: Vec<u128> = self
            .membership
            .member_ids()
            .into_iter()
            .filter(|id| !self.suspects.contains(id))
            .chain([me])
            .collect();
        ring.sort_unstable();
        ring.dedup();
        let round = (self.params.gossip_interval.as_millis() as u64).max(1);
        let Some(target) = relay_target(me, now.cluster_ms / round, &ring) else {
            return;
        };
        let Some(member) = self.membership.member_by_id(uuid::Uuid::from_u128(target)) else {
            return;
        };
        let since = now.cluster_ms.saturating_sub(self.present_within_ms());
        let mut heard = self.liveness.side_heard_since(since);
        heard.push((short_id(me), now.cluster_ms));
        let entries = heard
            .chunks(heard_chunk(self.max_batch_body()))
            .map(|chunk| LedgerEntry::Heard {
                members: chunk.to_vec(),
            })
            .collect();
        let to = super::core::destination(&member);
        if self.may_send_state(now, to) {
            self.send_ledger(now, to, Vec::new(), entries);
        }
    }

    /// `sender` (a member SWIM does not suspect, so on this node's side, at the address SWIM
    /// holds for it) relays whom its side heard from, and when. A short id that is this node's
    /// own is passed over: the sender may mean this node by it, and a member this node knows
    /// with the same short id would be credited with this node's time.
    pub(super) fn heard_from_side(
        &mut self,
        sender: u128,
        from: std::net::SocketAddr,
        members: &[(u32, u64)],
        now: Now,
    ) {
        if self.liveness.address_of(sender) != Some(from) || self.suspects.contains(&sender) {
            return;
        }
        let mine = short_id(self.params.node_id.as_u128());
        for (short, at_ms) in members.iter().filter(|(s, _)| *s != mine) {
            self.liveness.heard_relayed(*short, *at_ms, now.cluster_ms);
        }
    }
}

#[cfg(test)]
mod tests;
