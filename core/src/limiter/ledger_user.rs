//! A check under the ledger: a request is admitted with tokens this node holds for each of its
//! windows, spent without a lock. A window with no token is asked of its owner: at once where
//! this node is the owner, by the caller otherwise ([`TokenNeed`]).

use smallvec::SmallVec;

use super::decision::{CheckError, CheckItem, Decision, LimitStatus};
use super::state::WindowState;
use super::{KeyId, Limiter, OwnerOf};
use crate::ledger::AskAnswer;

/// A window a refused request found no token for, and what to do about it; or
/// ([`TokenNeed::ahead`]) a window an admitted request left short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenNeed {
    /// The item of the request.
    pub index: usize,
    pub key: KeyId,
    pub window_ms: u64,
    pub buckets: u16,
    /// The limit the request names for the window.
    pub limit: u32,
    /// Tokens to ask for.
    pub want: u32,
    /// This node holds tokens of the window that become spendable then (ms): wait for them.
    pub valid_at_ms: Option<u64>,
    /// Ask the window's owner (it is another member, and it has not refused lately).
    pub ask: bool,
    /// The owner refused an ask lately: waiting for it is in vain.
    pub refused: bool,
    /// The request was admitted, and left the window with less than its demand until the
    /// next round's lease: ask its owner now, so that the tokens come before the next
    /// request finds none; nothing waits for the answer.
    pub ahead: bool,
}

impl TokenNeed {
    /// Waiting for this window is in vain: its cost is above its limit, or its owner refused
    /// and no token this node holds becomes valid. A request all of whose lacking windows
    /// (those not [`TokenNeed::ahead`]) are so is refused at once.
    pub fn in_vain(&self) -> bool {
        self.want > self.limit || (self.refused && self.valid_at_ms.is_none())
    }

    /// Waiting is in vain for a refused request with `needs`: every window it lacks is (those
    /// not [`TokenNeed::ahead`]).
    pub fn waiting_in_vain(needs: &[TokenNeed]) -> bool {
        needs.iter().filter(|n| !n.ahead).all(TokenNeed::in_vain)
    }
}

struct Item<'g> {
    id: KeyId,
    state: &'g WindowState,
    cost: u32,
    /// Whether this node leases the window, where the check looked it up.
    leased_here: Option<bool>,
}

impl Item<'_> {
    /// This window's need, as the request's item `index` (`item`) names it: one that lacks
    /// and one ahead differ only in the rest.
    fn need(
        &self,
        index: usize,
        item: &CheckItem<'_>,
        valid_at_ms: Option<u64>,
        ask: bool,
        refused: bool,
        ahead: bool,
    ) -> TokenNeed {
        let spec = &item.limit.window;
        TokenNeed {
            index,
            key: self.id,
            window_ms: spec.window_ms(),
            buckets: spec.buckets(),
            limit: item.limit.max,
            want: self.cost,
            valid_at_ms,
            ask,
            refused,
            ahead,
        }
    }
}

impl Limiter {
    /// Decides again a request that [`Limiter::check`] refused for want of ledger tokens and
    /// that waited for them: it was counted refused then, so a refusal now counts nothing.
    /// What a window is offered (the demand that sizes its leases) counts a request that waits
    /// once however often it is refused, and twice if it is admitted in the end (its refusal
    /// stays: taking it back from the bucket it was counted in could take another's).
    pub fn check_again(
        &self,
        req: &super::CheckRequest<'_>,
        now_ms: u64,
    ) -> Result<Decision, CheckError> {
        self.check_counting(req, now_ms, true)
    }

    /// Decides a request from the tokens held (see the module documentation); `again`: see
    /// [`Limiter::check_again`].
    pub(super) fn check_ledger(
        &self,
        items: &[CheckItem<'_>],
        dry_run: bool,
        again: bool,
        now_ms: u64,
        guard: &impl papaya::Guard,
    ) -> Result<Decision, CheckError> {
        let margin = self.config.ledger.margin_ms;
        let mut held: SmallVec<[Item<'_>; 2]> = SmallVec::new();
        for item in items {
            let spec = &item.limit.window;
            let id = self.hasher.key_id(item.key, spec);
            let state = self.table.get_or_insert(id, spec, now_ms, guard)?;
            if !dry_run {
                state.bound.note_limit(item.limit.max);
            }
            held.push(Item {
                id,
                state,
                cost: item.cost,
                leased_here: None,
            });
        }
        if let ([h], [item]) = (&held[..], items)
            && !dry_run
            && let Some(decision) = self.spend_held(h, item, now_ms)
        {
            return Ok(decision);
        }
        for (h, item) in held.iter_mut().zip(items) {
            // Whether this node leases the window, looked up once where a token lacks.
            if h.state.holdings.available(now_ms, margin) < u64::from(h.cost) {
                let owner = self.leases_here(h.id);
                if let Some(owner) = &owner {
                    self.ask_here(h.id, h.state, item, owner, now_ms);
                }
                h.leased_here = Some(owner.is_some());
            }
        }
        // Which items hold their tokens, before any spend: a dry run's answer, and of a
        // refused request of several items, which lacked. A single item refused is reported
        // refused (it lacked, or lost its tokens to another check at that moment).
        let fits: Option<SmallVec<[bool; 2]>> = (dry_run || held.len() > 1).then(|| {
            held.iter()
                .map(|h| h.state.holdings.available(now_ms, margin) >= u64::from(h.cost))
                .collect()
        });
        // What each admitted item's spend left it (none for a dry run or a refusal).
        let left = if dry_run {
            None
        } else {
            self.spend_all(&held, items, again, now_ms)
        };
        let allowed = if dry_run {
            fits.iter().flatten().all(|f| *f)
        } else {
            left.is_some()
        };
        let mut limits = SmallVec::new();
        let mut needs = SmallVec::new();
        for (index, (h, item)) in held.iter().zip(items).enumerate() {
            let spec = &item.limit.window;
            let available = match &left {
                Some(left) => left[index],
                None => h.state.holdings.available(now_ms, margin),
            };
            let lacks = !allowed && available < u64::from(h.cost);
            let valid_at = lacks
                .then(|| h.state.holdings.next_valid_after(now_ms, margin))
                .flatten();
            let retry_after_ms = if !lacks {
                0
            } else {
                valid_at
                    .map(|t| t - now_ms)
                    .unwrap_or(self.config.gossip_interval_ms)
                    .max(1)
            };
            let offered = h.state.ring.offered_totals(spec, now_ms);
            let newest = offered.newest_epoch;
            limits.push(LimitStatus {
                allowed: allowed || fits.as_ref().is_some_and(|f| f[index]),
                limit: item.limit.max,
                remaining: available,
                reset_after_ms: newest.map_or(0, |e| spec.expiry_ms(e).saturating_sub(now_ms)),
                retry_after_ms,
            });
            if lacks {
                // A cost above the limit can never be met: nothing to ask for.
                let here = h
                    .leased_here
                    .unwrap_or_else(|| self.leases_here(h.id).is_some());
                let ask = !here && h.cost <= item.limit.max && h.state.holdings.may_ask(now_ms);
                needs.push(h.need(
                    index,
                    item,
                    valid_at.filter(|t| *t <= now_ms + self.config.ledger.ask_wait_ms),
                    ask,
                    h.state.holdings.is_refused(now_ms),
                    false,
                ));
            } else if allowed
                && !dry_run
                && self.asks_ahead(h, Some(offered.total), available, now_ms)
            {
                needs.push(h.need(index, item, None, true, false, true));
            }
        }
        Ok(Decision {
            allowed,
            limits,
            needs,
        })
    }

    /// Spends every item's tokens, or none: each spend is recorded in the ring before the
    /// tokens are taken (see `ledger::holdings`). A request whose items do not all hold
    /// tokens takes none; one that loses a race for a later item's tokens cancels the
    /// earlier items' spends, whose tokens are then spent by no one until their owner frees
    /// them ([`Charge::cancel`](crate::ledger::Charge::cancel)). A refusal is counted once
    /// per request: not `again`. Returns, if admitted, the tokens each item's window holds
    /// after the spends (`None`: refused).
    fn spend_all(
        &self,
        held: &[Item<'_>],
        items: &[CheckItem<'_>],
        again: bool,
        now_ms: u64,
    ) -> Option<SmallVec<[u64; 2]>> {
        let margin = self.config.ledger.margin_ms;
        let mut charges = SmallVec::<[_; 2]>::new();
        // Items of one window (a request may name it twice) need their costs together.
        let mut refused = held.len() > 1
            && held.iter().any(|h| {
                let together: u64 = held
                    .iter()
                    .filter(|o| std::ptr::eq(o.state, h.state))
                    .map(|o| u64::from(o.cost))
                    .sum();
                h.state.holdings.available(now_ms, margin) < together
            });
        let spending = if refused { &held[..0] } else { held };
        for (h, item) in spending.iter().zip(items) {
            let epoch = item.limit.window.epoch(now_ms);
            let _ = h.state.ring.admit(epoch, h.cost, u64::MAX);
            match h.state.holdings.try_spend(now_ms, h.cost, margin) {
                Some(charge) => charges.push((h, epoch, charge)),
                None => {
                    h.state.ring.refund(epoch, h.cost);
                    refused = true;
                    break;
                }
            }
        }
        // Of a window named twice, its last spend read what both left.
        let left: Option<SmallVec<[u64; 2]>> = (!refused).then(|| {
            held.iter()
                .map(|h| {
                    charges
                        .iter()
                        .filter(|(o, _, _)| std::ptr::eq(o.state, h.state))
                        .map(|(_, _, c)| c.left())
                        .min()
                        .unwrap_or(0)
                })
                .collect()
        });
        if refused {
            for (h, epoch, charge) in charges {
                h.state.ring.refund(epoch, h.cost);
                charge.cancel();
            }
        }
        for (h, item) in held.iter().zip(items) {
            let epoch = item.limit.window.epoch(now_ms);
            if refused && !again {
                h.state.ring.reject(epoch, h.cost);
            }
            if h.state.mark_dirty() {
                self.dirty.push(h.id);
            }
        }
        left
    }

    /// A request of one window that holds its tokens: spent, and decided, with no buffer of
    /// items (the common case, timed by the hot-path benchmark). `None` where the tokens lack
    /// or another check took them first: nothing is counted, and the whole path decides.
    fn spend_held(&self, h: &Item<'_>, item: &CheckItem<'_>, now_ms: u64) -> Option<Decision> {
        let margin = self.config.ledger.margin_ms;
        let spec = &item.limit.window;
        let held = h.state.holdings.now();
        if held.available(now_ms, margin) < u64::from(h.cost) {
            return None;
        }
        // As `spend_all`: the ring counts the spend before its tokens are taken.
        let epoch = spec.epoch(now_ms);
        let _ = h.state.ring.admit(epoch, h.cost, u64::MAX);
        let Some(charge) = held.try_spend(now_ms, h.cost, margin) else {
            h.state.ring.refund(epoch, h.cost);
            return None;
        };
        let available = charge.left();
        drop(charge);
        if h.state.mark_dirty() {
            self.dirty.push(h.id);
        }
        let mut needs = SmallVec::new();
        if self.asks_ahead(h, None, available, now_ms) {
            needs.push(h.need(0, item, None, true, false, true));
        }
        let mut limits = SmallVec::new();
        limits.push(LimitStatus {
            allowed: true,
            limit: item.limit.max,
            remaining: available,
            // The spend is the window's newest traffic.
            reset_after_ms: spec.expiry_ms(epoch).saturating_sub(now_ms),
            retry_after_ms: 0,
        });
        Some(Decision {
            allowed: true,
            limits,
            needs,
        })
    }

    /// Whether a request admitted with `available` tokens left asks window `h`'s owner
    /// ahead, claiming the window's ask ahead if so: the owner is another member, an ask may
    /// go, and the window is [short of a round](Limiter::short_of_a_round). `offered`: what the
    /// window is offered at this node, where the caller read it.
    fn asks_ahead(&self, h: &Item<'_>, offered: Option<u64>, available: u64, now_ms: u64) -> bool {
        h.state.holdings.may_ask(now_ms)
            && self.short_of_a_round(
                h.state,
                offered
                    .unwrap_or_else(|| h.state.ring.offered_totals(&h.state.spec(), now_ms).total),
                h.cost,
                available,
                now_ms,
            )
            && !h
                .leased_here
                .unwrap_or_else(|| self.leases_here(h.id).is_some())
            && h.state
                .holdings
                .claim_ahead(now_ms, now_ms + self.config.gossip_interval_ms)
    }

    /// Whether `available` tokens leave the window short, so that an admitted request asks its
    /// owner ahead: fewer than the window is offered at this node over a round, by its count over
    /// the window (at least one request of `cost`), which it spends before the next round's lease
    /// comes; an ask's answer comes in a round trip. Not where the window ran dry within its length
    /// ([`Limiter::ran_dry`]): a request found no token there, and none came within its wait, so
    /// the window is at its limit, and an ask ahead would only move tokens between its users. A
    /// request that waited and was then admitted does not close it: its ask was answered. A node
    /// that leases the window itself asks its books when it runs out, with no trip to wait for. One
    /// ask ahead goes per window a round
    /// ([`Holdings::claim_ahead`](crate::ledger::Holdings::claim_ahead)): the owner answers with
    /// what the user's demand wants until its next round's lease, and a user the room leaves short
    /// of that waits for the round rather than ask again at each request.
    pub(super) fn short_of_a_round(
        &self,
        state: &WindowState,
        offered: u64,
        cost: u32,
        available: u64,
        now_ms: u64,
    ) -> bool {
        let window_ms = state.spec().window_ms();
        let per_round = offered
            .saturating_mul(self.config.gossip_interval_ms)
            .div_ceil(window_ms.max(1))
            .max(u64::from(cost));
        available < per_round
            && !state
                .holdings
                .ran_dry_since(now_ms.saturating_sub(window_ms))
    }

    /// This node leases the window itself (`owner`): it asks its own books for what `item`
    /// needs, with the same wait any request gets.
    fn ask_here(
        &self,
        id: KeyId,
        state: &WindowState,
        item: &CheckItem<'_>,
        owner: &OwnerOf,
        now_ms: u64,
    ) {
        if !state.holdings.may_ask(now_ms) {
            return;
        }
        let deadline = now_ms + self.config.ledger.ask_wait_ms;
        let spec = &item.limit.window;
        let held = state
            .holdings
            .word_of(self.origin.0, now_ms, self.config.ledger.margin_ms);
        match self.owner_ask(
            self.origin.0,
            id,
            spec,
            item.limit.max,
            item.cost,
            held,
            (now_ms, deadline),
            now_ms,
            owner,
        ) {
            AskAnswer::Granted(lease) => {
                let accepted = {
                    let _writer = self.lock_holdings();
                    state.holdings.accept(&lease, self.clock_shape(spec))
                };
                if accepted {
                    self.lock_holding().insert(id);
                }
            }
            AskAnswer::Refused { retry_after_ms } => {
                state.holdings.refused(now_ms + retry_after_ms);
            }
        }
    }
}
