//! A ledger owner whose windows move to a member that joined hands each of them over, as a
//! leaving owner does (`ledger_leave.rs`): the joiner may then lease a window once the last
//! lease this node granted there has ended, its own warm-up is over, and both were reported,
//! rather than a quiet period past its warm-up (ALGORITHM.md, L2; `RingView::floor_of`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::core::NodeCore;
use super::placement::Ring;
use crate::clock::{Now, TimeSource};
use crate::gossip::ledger_message::{LedgerEntry, MOST_HANDED};
use crate::gossip::wire::Destination;
use crate::limiter::KeyId;

impl<T: TimeSource> NodeCore<T> {
    /// The ring changed from `before` to `ring`, and this node's limiter leases by `ring`
    /// already (so it leases none of the windows that moved): each window this node owned on
    /// `before` that a member new on `ring` owns now goes to that member with the end of the
    /// last lease this node granted there (`Limiter::lease_ends`). In datagrams of their own: a
    /// joiner's flags are not known yet, and a build that does not read a handoff drops only
    /// them.
    pub(super) fn hand_to_joiners(&mut self, now: Now, before: &Arc<Ring>, ring: &Arc<Ring>) {
        let was: BTreeSet<u128> = before.member_ids();
        let joined: BTreeSet<u128> = ring
            .member_ids()
            .into_iter()
            .filter(|id| !was.contains(id))
            .collect();
        if joined.is_empty() {
            return;
        }
        let me = self.params.node_id.as_u128();
        let mut by_owner: BTreeMap<Destination, Vec<(KeyId, u64)>> = BTreeMap::new();
        for (key, end) in self.limiter.lease_ends() {
            if before.owner(key).map(|o| o.id) != Some(me) {
                continue;
            }
            if let Some(owner) = ring.owner(key).filter(|o| joined.contains(&o.id)) {
                by_owner
                    .entry(owner.destination())
                    .or_default()
                    .push((key, end));
            }
        }
        for (to, ends) in by_owner {
            if !self.may_send_state(now, to) {
                continue;
            }
            for part in ends.chunks(MOST_HANDED) {
                let handoff = LedgerEntry::Handoff {
                    ends: part.to_vec(),
                };
                self.send_ledger(now, to, Vec::new(), vec![handoff]);
            }
        }
    }
}
