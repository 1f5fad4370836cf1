//! An owner's books for one window: the lease it holds open for each user, and what each user
//! last said it spent of it. With the spends the users' registers record, they say which slots
//! are taken at each moment (`occupancy.rs`); tokens are leased, and a lease's end moved, only
//! where slots stay free for the whole span those tokens could occupy a sliding window.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use super::lease::{HeldLease, HoldingsReport, Lease, Segment};
use super::occupancy::{Occupancy, Span};
use super::tuning::NEAR_ASKS;

mod params;
mod split;
mod user_books;

pub use self::params::{LedgerParams, spend_tail_ms};

use self::split::proportional;
use self::user_books::{Granted, UserBooks};

/// What an owner answers a user that asked for tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskAnswer {
    Granted(Lease),
    /// None can be had before the ask's deadline: ask again no sooner than this.
    Refused {
        retry_after_ms: u64,
    },
}

/// What a user's emission tells the owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heard {
    pub report: HoldingsReport,
    /// What the user was offered over the window (its register's demand).
    pub demand: u32,
    /// The window's limit by the user's rules.
    pub limit: u32,
}

/// What a round renews for a user: `want` tokens more, and its lease moved to end a lease
/// from now if `extend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    pub user: u128,
    pub want: u64,
    pub extend: bool,
}

/// A user's ask, sent at `sent_ms` (cluster time, as the owner reckons it): `want` tokens for a
/// request waiting until `deadline_ms`; `held` is what the user says of this owner's lease (for its
/// numbering only).
#[derive(Debug, Clone)]
pub struct Ask {
    pub user: u128,
    pub want: u64,
    pub held: Option<HeldLease>,
    pub sent_ms: u64,
    pub deadline_ms: u64,
}

/// One window's books at its owner. See the module documentation.
#[derive(Debug, Clone)]
pub struct Books {
    me: u128,
    users: BTreeMap<u128, UserBooks>,
}

impl Books {
    /// The books of a window this node (`me`) owns from now.
    pub fn new(me: u128) -> Self {
        Self {
            me,
            users: BTreeMap::new(),
        }
    }

    /// A user's report, from its emission `version`. An older report than the one held
    /// changes nothing. A user new to these books continues the lease it already has of this
    /// owner (after the books were dropped), so that its spent counts stay right.
    pub fn heard(&mut self, user: u128, version: u64, heard: Heard, now_ms: u64) {
        let me = self.me;
        let books = self.users.entry(user).or_default();
        books.last_heard_ms = books.last_heard_ms.max(now_ms);
        if books.report.as_ref().is_some_and(|(v, _)| *v >= version) {
            return;
        }
        if let Some(mine) = heard.report.of(me) {
            books.seq = books.seq.max(mine.seq);
            let last = mine.spent.iter().map(|(id, _)| *id).max().unwrap_or(0);
            books.last_segment = books.last_segment.max(last);
        }
        books.demand = heard.demand;
        books.limit = heard.limit;
        books.report = Some((version, heard.report));
    }

    /// The window's limit: the least any user heard from since `since_ms` says (users whose
    /// rules differ get the smaller limit). A limit of 0 is no word: it comes from a member
    /// that never checked the window (its registers or leases made the window there), and a
    /// rule of 0 admits nothing at its own user without any token. `None` if none was heard.
    pub fn limit(&self, since_ms: u64) -> Option<u32> {
        self.users
            .values()
            .filter(|b| b.last_heard_ms >= since_ms && b.report.is_some() && b.limit > 0)
            .map(|b| b.limit)
            .min()
    }

    /// Users heard from since `since_ms`, with what each last said it was offered over the
    /// window.
    pub fn demands(&self, since_ms: u64) -> impl Iterator<Item = (u128, u32)> + '_ {
        self.users
            .iter()
            .filter(move |(_, b)| b.last_heard_ms >= since_ms)
            .map(|(u, b)| (*u, b.demand))
    }

    /// Tokens `user` may still spend of its lease from this owner (by its last report).
    pub fn held_by(&self, user: u128) -> u64 {
        self.users
            .get(&user)
            .map_or(0, |b| b.unspent_total(self.me))
    }

    /// The most tokens one of `user`'s requests asked for, or 1 if it never asked.
    pub fn cost_of(&self, user: u128) -> u64 {
        self.users.get(&user).map_or(1, |b| b.cost.max(1))
    }

    /// Whether `user` is near: its last [`NEAR_ASKS`] asks each came in a quarter of their
    /// wait, so that an ask serves its next request without a token. It changes only when an
    /// ask comes: a near user's asks stop coming where this owner refused them (it had no
    /// room, which a cushion would not have had either) or cannot hear them (it cannot lease
    /// to the user either); a user whose books are forgotten is measured afresh.
    pub fn is_near(&self, user: u128) -> bool {
        self.users
            .get(&user)
            .is_some_and(|b| b.asks_in_time >= NEAR_ASKS)
    }

    /// When `user` was last heard from (its last report), or 0.
    pub fn heard_at(&self, user: u128) -> u64 {
        self.users.get(&user).map_or(0, |b| b.last_heard_ms)
    }

    /// When `user`'s lease from this owner ends (0: it has none).
    pub fn lease_end(&self, user: u128) -> u64 {
        self.users.get(&user).map_or(0, |b| b.expires_ms)
    }

    /// Slots taken from `now_ms` on: `spends` (what the registers record, each spend to the
    /// end of its span) and every token that may yet be spent: of this owner's leases, what
    /// the user's last report does not show spent; of other owners', what the user says it
    /// holds. What is known spent, or past any span it could occupy, is forgotten here.
    pub fn occupancy(&mut self, spends: &[Span], now_ms: u64, params: &LedgerParams) -> Occupancy {
        let mut occupancy = Occupancy::default();
        for s in spends {
            occupancy.add(*s);
        }
        let me = self.me;
        for b in self.users.values_mut() {
            b.prune(me, now_ms, params);
            let until_ms = params.tail_of(b.expires_ms);
            for g in &b.segments {
                occupancy.add(Span {
                    from_ms: g.segment.valid_from_ms,
                    until_ms,
                    count: u64::from(b.unspent(me, g)),
                });
            }
            if let Some((_, r)) = b.report.as_ref().filter(|(_, r)| !r.closed) {
                for h in r.held.iter().filter(|h| h.owner != me && !h.lapsed) {
                    occupancy.add(Span {
                        from_ms: now_ms,
                        until_ms: params.tail_of(h.expires_ms),
                        count: u64::from(h.unspent),
                    });
                }
            }
        }
        occupancy
    }

    /// Moves `user`'s lease to end at `expires_ms`, if the slots its unspent tokens would
    /// then hold past the old end are free. Returns whether it did.
    fn extend(
        &mut self,
        user: u128,
        expires_ms: u64,
        occupancy: &mut Occupancy,
        params: &LedgerParams,
    ) -> bool {
        let me = self.me;
        let b = self.users.entry(user).or_default();
        if expires_ms <= b.expires_ms {
            return true;
        }
        let unspent = b.unspent_total(me);
        let (from_ms, until_ms) = (params.tail_of(b.expires_ms), params.tail_of(expires_ms));
        if unspent > 0 {
            if occupancy.room(params.limit, from_ms, until_ms) < unspent {
                return false;
            }
            occupancy.add(Span {
                from_ms,
                until_ms,
                count: unspent,
            });
        }
        b.expires_ms = expires_ms;
        true
    }

    /// A round's renewals: each lease that is extended moves its end a lease from now (where
    /// its unspent tokens fit), and each user's `want` is met from the slots free now and
    /// those that free within the horizon, each segment starting when its slots are free.
    /// Where the wants do not all fit, each user gets its part in proportion to its want, and
    /// every user's tokens spread over the freed slots in time order. Returns each renewed
    /// lease's message.
    pub fn grant_round(
        &mut self,
        renewals: &[Renewal],
        spends: &[Span],
        now_ms: u64,
        params: &LedgerParams,
    ) -> Vec<(u128, Lease)> {
        if now_ms < params.quiet_until_ms {
            return Vec::new();
        }
        let mut occupancy = self.occupancy(spends, now_ms, params);
        let expires_ms = now_ms + params.lease_ms;
        let mut renewed: Vec<Renewal> = Vec::new();
        for r in renewals {
            if (r.extend || r.want > 0) && self.extend(r.user, expires_ms, &mut occupancy, params) {
                renewed.push(*r);
            }
        }
        let wants: Vec<(u128, u64)> = renewed.iter().map(|r| (r.user, r.want)).collect();
        let units: Vec<u64> = wants.iter().map(|(u, _)| self.cost_of(*u)).collect();
        let mut given = vec![0u64; wants.len()];
        let starts = std::iter::once(now_ms).chain(
            occupancy
                .frees_between(now_ms, now_ms + params.horizon_ms)
                .into_iter()
                .map(|t| params.round_up(t)),
        );
        let mut starts: Vec<u64> = starts
            .filter(|t| *t + params.margin_ms < expires_ms)
            .collect();
        starts.dedup();
        let until_ms = params.tail_of(expires_ms);
        let mut new: BTreeMap<u128, SmallVec<[Segment; 2]>> = BTreeMap::new();
        for start in starts {
            if given.iter().zip(&wants).all(|(g, (_, w))| g >= w) {
                break;
            }
            let room = occupancy.room(params.limit, start, until_ms);
            if room == 0 {
                continue;
            }
            let split = proportional(&wants, &given, room, &units);
            let mut granted = 0;
            for (i, n) in split.into_iter().enumerate() {
                if n == 0 {
                    continue;
                }
                given[i] += n;
                granted += n;
                let b = self.users.entry(wants[i].0).or_default();
                b.last_segment += 1;
                let segment = Segment {
                    id: b.last_segment,
                    count: u32::try_from(n).unwrap_or(u32::MAX),
                    valid_from_ms: start,
                };
                new.entry(wants[i].0).or_default().push(segment);
            }
            occupancy.add(Span {
                from_ms: start,
                until_ms,
                count: granted,
            });
        }
        let me = self.me;
        let mut out = Vec::new();
        for r in renewed {
            let b = self.users.entry(r.user).or_default();
            let added = new.remove(&r.user).unwrap_or_default();
            if added.is_empty() && b.unspent_total(me) == 0 {
                continue;
            }
            let sent_in = b.seq + 1;
            b.segments.extend(
                added
                    .into_iter()
                    .map(|segment| Granted { segment, sent_in }),
            );
            out.push((r.user, b.message(me)));
        }
        out
    }

    /// A user with a request waiting and no token asks for `want`: all of it granted from the
    /// earliest moment before `deadline_ms` at which `want` tokens are free for a lease's
    /// whole span (post-dated if that is later than now), with as many more whole requests
    /// as the user's demand wants until its next round's lease and that moment's room holds;
    /// refused otherwise, with when to ask again. The books keep the largest `want` as the
    /// user's request size.
    pub fn ask(
        &mut self,
        ask: Ask,
        spends: &[Span],
        now_ms: u64,
        params: &LedgerParams,
    ) -> AskAnswer {
        let Ask {
            user,
            want,
            held,
            sent_ms,
            deadline_ms,
        } = ask;
        {
            let b = self.users.entry(user).or_default();
            b.cost = b.cost.max(want);
            // The answer takes about as long back as the ask took to come: near if the round
            // trip fits in half the ask's wait.
            let took = now_ms.saturating_sub(sent_ms);
            let wait = deadline_ms.saturating_sub(sent_ms);
            if wait > 0 && took.saturating_mul(4) <= wait {
                b.asks_in_time = b.asks_in_time.saturating_add(1).min(NEAR_ASKS);
            } else {
                b.asks_in_time = 0;
            }
            if let Some(h) = held {
                b.take_word(self.me, h);
            }
        }
        let start = now_ms.max(params.quiet_until_ms);
        let mut occupancy = self.occupancy(spends, now_ms, params);
        let expires_ms = start + params.lease_ms;
        let horizon = now_ms + params.horizon_ms.max(params.window_ms + params.lease_ms);
        let hold = params.tail_of(expires_ms) - start;
        let refused = |retry_after_ms: u64| AskAnswer::Refused {
            retry_after_ms: retry_after_ms.max(1),
        };
        // An ask's request gets all of `want` or nothing (a part would lie idle).
        let Some(at) = occupancy.earliest_room(params.limit, want, start, hold, horizon) else {
            return refused(params.horizon_ms);
        };
        if at >= deadline_ms {
            return refused(at.saturating_sub(now_ms));
        }
        if !self.extend(user, at + params.lease_ms, &mut occupancy, params) {
            return refused(params.horizon_ms);
        }
        let me = self.me;
        let b = self.users.entry(user).or_default();
        let until_ms = params.tail_of(b.expires_ms);
        // The extension may have taken the room found: tokens the user still holds (a lease
        // message it may never have had) come back with it, and count first.
        if occupancy.room(params.limit, at, until_ms) < want {
            return if b.unspent_total(me) > 0 {
                AskAnswer::Granted(b.message(me))
            } else {
                refused(params.horizon_ms)
            };
        }
        // The request's tokens, and what the user's demand wants until its next round's
        // lease, where the room holds them: one ask serves the requests until then.
        let expected = u64::from(b.demand)
            .saturating_mul(params.round_ms)
            .div_ceil(params.window_ms.max(1));
        let room = occupancy.room(params.limit, at, until_ms);
        let unit = want.max(1);
        let grant = want.max(expected.min(room) / unit * unit);
        b.last_segment += 1;
        let segment = Segment {
            id: b.last_segment,
            count: u32::try_from(grant).unwrap_or(u32::MAX),
            valid_from_ms: at,
        };
        b.segments.push(Granted {
            segment,
            sent_in: b.seq + 1,
        });
        AskAnswer::Granted(b.message(me))
    }

    /// Forgets users not heard from since `since_ms` that hold nothing of this owner's.
    pub fn forget_idle(&mut self, since_ms: u64) {
        self.users
            .retain(|_, b| b.last_heard_ms >= since_ms || !b.segments.is_empty());
    }

    /// When the last lease these books granted ends (0: none): no token of theirs is spent
    /// after it.
    pub fn last_lease_end(&self) -> u64 {
        self.users.values().map(|b| b.expires_ms).max().unwrap_or(0)
    }

    /// Whether the books hold nothing worth keeping.
    pub fn is_empty(&self) -> bool {
        self.users.values().all(|b| b.segments.is_empty())
    }
}

#[cfg(test)]
mod tests;
