//! An owner's answer to a user's ask for tokens, on the request path: a lease from the window's
//! room now or in time for the ask's deadline, or a refusal with when to ask again.

use super::ledger_owner::Owned;
use super::{KeyId, Limiter, OwnerOf};
use crate::ledger::{Ask, AskAnswer, HeldLease};
use crate::window::WindowSpec;

impl Limiter {
    /// `user` asks, sent at `sent_ms` (cluster time), for `want` tokens of window `key` (shape
    /// `spec`, limit `limit` by its rules), to be spendable before `deadline_ms`; `held` is what it
    /// says of this owner's lease. `owner`: this node as the window's owner in its view,
    /// [`OwnerOf`], as the caller found it; looked up again under the books' lock, and refused
    /// if the view since installed says otherwise: a ring change hands the window over with
    /// the books' last lease end ([`Limiter::lease_ends`], under the same lock), and no lease
    /// may come after it.
    #[allow(clippy::too_many_arguments)]
    pub fn owner_ask(
        &self,
        user: u128,
        key: KeyId,
        spec: &WindowSpec,
        limit: u32,
        want: u32,
        held: Option<HeldLease>,
        (sent_ms, deadline_ms): (u64, u64),
        now_ms: u64,
        owner: &OwnerOf,
    ) -> AskAnswer {
        let guard = self.table.guard();
        let state = match self.table.get_or_insert_sent(key, spec, now_ms, &guard) {
            Ok(Some(state)) => state,
            // Held in another shape (the ask or the window came from a faulty or forged
            // datagram), or the table is full: refused for a round, as any ask it cannot serve.
            Ok(None) | Err(_) => {
                return AskAnswer::Refused {
                    retry_after_ms: self.config.gossip_interval_ms,
                };
            }
        };
        let mut owned = self.lock_owned();
        let fresh = match self.owner_view.load().as_ref() {
            // The caller's own view stands where the limiter has none (no ring: alone).
            None => Some(*owner),
            Some(_) => self.leases_here(key),
        };
        let Some(owner) = fresh else {
            return AskAnswer::Refused {
                retry_after_ms: self.config.gossip_interval_ms,
            };
        };
        let owner = &owner;
        let super::ledger_owner::OwnedWindows {
            windows,
            handed,
            sealed,
            ..
        } = &mut *owned;
        if *sealed {
            return AskAnswer::Refused {
                retry_after_ms: self.config.gossip_interval_ms,
            };
        }
        let entry = windows
            .entry(key)
            .or_insert_with(|| Owned::new(self.origin.0, *spec));
        let since = now_ms.saturating_sub(2 * self.config.ledger.lease_ms);
        let limit = entry.books.limit(since).map_or(limit, |l| l.min(limit));
        let params = self.ledger_params(spec, limit, owner);
        let mut spends = self.spends_of(state, spec, &entry.marks, now_ms);
        self.add_handed(&mut spends, handed.get(&key), spec, owner.handed_by);
        let ask = Ask {
            user,
            want: u64::from(want),
            held,
            sent_ms,
            deadline_ms,
        };
        entry.books.ask(ask, &spends, now_ms, &params)
    }
}
