//! A ledger owner that leaves gracefully: it hands each window to its next owner, and its
//! users send what they spend there to that owner from its word on (ALGORITHM.md, L4).

use std::collections::BTreeMap;

use super::core::NodeCore;
use super::features;
use super::ledger::Outgoing;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::LedgerEntry;
use crate::gossip::wire::Destination;
use crate::ledger::HandedBooks;
use crate::limiter::KeyId;

impl<T: TimeSource> NodeCore<T> {
    /// Each window this node holds books for goes to its next owner (the first other member
    /// on the ring), read after the last round this node runs, so that no lease comes after
    /// it: the end of the last lease it granted there (`Limiter::lease_ends`), and that member
    /// may lease it once the users of those leases have reported (`ledger_view.rs`,
    /// `LedgerNode::handed`); and, where this node leases the window with its whole part and
    /// past its quiet period, its books (`Limiter::handed_books`), which let that member lease
    /// at once what they leave free. Each only to a member that reads it: a build before it
    /// would drop the datagram.
    pub(super) fn hand_over(&mut self, now: Now) {
        if self.ownership.is_none() {
            return;
        }
        let mut out = Outgoing::new();
        let me = self.params.node_id.as_u128();
        // What this node spent of the windows it owns is in no one else's books: its
        // registers go to the next owners too.
        self.registers_to_next_owners(now, |first| first == me, &mut out);
        let mut ends: BTreeMap<Destination, Vec<(KeyId, u64)>> = BTreeMap::new();
        for (key, end) in self.limiter.lease_ends() {
            if let Some(next) = self.next_owner(key, now, features::HANDOFF) {
                ends.entry(next).or_default().push((key, end));
            }
        }
        for (to, ends) in ends {
            let (_, entries) = out.entry(to).or_default();
            for part in ends.chunks(crate::gossip::ledger_message::MOST_HANDED) {
                entries.push(LedgerEntry::Handoff {
                    ends: part.to_vec(),
                });
            }
        }
        for (key, spec, books) in self.limiter.handed_books(now.cluster_ms) {
            if let Some(next) = self.next_owner(key, now, features::BOOKS) {
                let entry = LedgerEntry::Books {
                    key,
                    window_ms: spec.window_ms(),
                    buckets: spec.buckets(),
                    books,
                };
                out.entry(next).or_default().1.push(entry);
            }
        }
        self.send_outgoing(now, out);
    }

    /// Where window `key` goes when this node leaves: the first other member on its ring, if
    /// that member said it reads `flag`.
    fn next_owner(&self, key: KeyId, now: Now, flag: u8) -> Option<Destination> {
        let (ring, _) = self.ownership.as_ref()?.ring();
        let me = self.params.node_id.as_u128();
        let next = ring.owners(key)?.into_iter().find(|m| m.id != me)?;
        self.features
            .reads_flag(next.id, flag, now.at)
            .then(|| next.destination())
    }

    /// Member `from`, leaving, handed this node its books of window `key`. Kept by the
    /// limiter, they let this node, as the window's next owner, lease it at once; else the
    /// window leases as its `Handoff` says.
    pub(super) fn take_books(
        &mut self,
        (from, key): (u128, KeyId),
        shape: (u64, u16),
        books: HandedBooks,
        now: Now,
    ) {
        let timing = (self.quiet_ms(), self.reports_ms());
        let kept =
            self.limiter
                .take_handed_books((from, key), shape, books, now.cluster_ms, timing.0);
        if let Some(ledger) = self.ledger.as_mut().filter(|_| kept) {
            ledger.handed_books(from, key, now.cluster_ms, timing);
        }
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
