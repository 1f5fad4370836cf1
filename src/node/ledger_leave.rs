//! A ledger owner that leaves gracefully: it hands each window to its next owner, and its
//! users send what they spend there to that owner from its word on (ALGORITHM.md, L4).

use std::collections::BTreeMap;

use super::core::NodeCore;
use super::ledger::Outgoing;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::LedgerEntry;
use crate::gossip::wire::Destination;
use crate::limiter::KeyId;

impl<T: TimeSource> NodeCore<T> {
    /// Each window this node leased goes to its next owner (the first other member on the
    /// ring) with the end of its last lease (`Limiter::lease_ends`): that member may lease it
    /// once the users of those leases have reported (`ledger_view.rs`, `LedgerNode::handed`).
    /// Read after the last round this node runs, so no lease comes after it. Only to a member
    /// that reads it: a build before it would drop the datagram, which is all this one holds.
    pub(super) fn hand_over(&mut self, now: Now) {
        let Some(ownership) = self.ownership.as_ref() else {
            return;
        };
        let (ring, _) = ownership.ring();
        let me = self.params.node_id.as_u128();
        let mut by_owner: BTreeMap<Destination, Vec<(KeyId, u64)>> = BTreeMap::new();
        for (key, end) in self.limiter.lease_ends() {
            let next = ring
                .owners(key)
                .and_then(|o| o.into_iter().find(|m| m.id != me));
            if let Some(next) = next.filter(|m| self.features.reads_handoff(m.id, now.at)) {
                by_owner
                    .entry(next.destination())
                    .or_default()
                    .push((key, end));
            }
        }
        let mut out = Outgoing::new();
        // What this node spent of the windows it owns is in no one else's books: its
        // registers go to the next owners too.
        self.registers_to_next_owners(now, |first| first == me, &mut out);
        for (to, ends) in by_owner {
            let (_, entries) = out.entry(to).or_default();
            for part in ends.chunks(crate::gossip::ledger_message::MOST_HANDED) {
                entries.push(LedgerEntry::Handoff {
                    ends: part.to_vec(),
                });
            }
        }
        self.send_outgoing(now, out);
    }

    /// The member that leases `key` in this node's view: its first owner, or the next if the
    /// first said it is leaving.
    pub(super) fn leasing_owner(
        &mut self,
        now: Now,
        key: KeyId,
    ) -> Option<super::placement::Member> {
        let [first, next] = self.ownership.as_mut()?.owners(key)?;
        Some(if self.member_log.said_leaving(first.id, now.at) {
            next
        } else {
            first
        })
    }

    /// The registers of the windows whose owners said they are leaving since the last round
    /// (`Ownership::resend_windows_of`) go to each window's next owner, once: its books must
    /// count what this node spent there before the word, and it may lease soon (`hand_over`).
    /// Only those: every other register stays where it went.
    pub(super) fn resend_to_next_owners(&mut self, now: Now, out: &mut Outgoing) {
        let Some(leavers) = self.ownership.as_mut().map(|o| o.take_resend_of()) else {
            return;
        };
        if leavers.is_empty() {
            return;
        }
        self.registers_to_next_owners(now, |first| leavers.contains(&first), out);
    }

    /// Adds this node's registers of the windows whose first owner `leaving` names to what
    /// goes to each window's next owner (another member).
    fn registers_to_next_owners(
        &mut self,
        now: Now,
        leaving: impl Fn(u128) -> bool,
        out: &mut Outgoing,
    ) {
        let me = self.params.node_id.as_u128();
        for update in self.limiter.snapshot_local(now.cluster_ms).updates {
            let owners = self.ownership.as_mut().and_then(|o| o.owners(update.key));
            if let Some([_, next]) = owners.filter(|[first, n]| leaving(first.id) && n.id != me) {
                out.entry(next.destination())
                    .or_default()
                    .0
                    .push((update, None));
            }
        }
    }
}
