//! An owner's books for one window: what it leased to whom, and what each user last said it
//! holds. With the spends the users' registers record, they say which slots are taken at each
//! moment (`occupancy.rs`); a lease is granted only from slots free for its whole span.

use std::collections::BTreeMap;

use super::lease::{HoldingsReport, Lease};
use super::occupancy::{Occupancy, Span};

/// The owner's side of a window's ledger: the window's shape and limit, and the timing of
/// leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerParams {
    pub limit: u64,
    pub window_ms: u64,
    /// How long a lease can be spent from its start.
    pub lease_ms: u64,
    /// Users stop spending this long before a lease ends, and a spend counts this long past
    /// its bucket: how far cluster clocks may disagree.
    pub margin_ms: u64,
    /// Post-dated starts are rounded up to a multiple of this, so that a round grants each
    /// user a few leases rather than one per freed slot.
    pub start_step_ms: u64,
    /// How far ahead a round looks for slots that free.
    pub horizon_ms: u64,
}

impl LedgerParams {
    /// The span over which a token of a lease starting at `from_ms` may occupy the window:
    /// from its start until `W` past the last moment it may be spent, plus the margin.
    pub fn span_of(&self, from_ms: u64, expires_ms: u64) -> (u64, u64) {
        (
            from_ms,
            expires_ms
                .saturating_add(self.window_ms)
                .saturating_add(self.margin_ms),
        )
    }

    fn hold_ms(&self) -> u64 {
        self.lease_ms + self.window_ms + self.margin_ms
    }

    fn round_up(&self, t_ms: u64) -> u64 {
        let step = self.start_step_ms.max(1);
        t_ms.div_ceil(step) * step
    }
}

/// What a user's emission tells the owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heard {
    pub report: HoldingsReport,
    /// Requests per second the user is offered.
    pub demand_per_s: u32,
    /// The window's limit by the user's rules.
    pub limit: u32,
}

/// What an owner answers a user that asked for tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskAnswer {
    Granted(Lease),
    /// None can be had before the ask's deadline: ask again no sooner than this.
    Refused {
        retry_after_ms: u64,
    },
}

#[derive(Debug, Clone, Default)]
struct UserBooks {
    /// The last sequence number granted to this user.
    last_seq: u32,
    /// Leases granted and not yet known spent or lapsed.
    granted: Vec<Lease>,
    /// The user's newest report, and the version of the emission it came with.
    report: Option<(u64, HoldingsReport)>,
    /// Requests per second the user last said it is offered.
    demand_per_s: u32,
    /// The limit the user last said the window has (its rules).
    limit: u32,
    last_heard_ms: u64,
}

/// One window's books at its owner. See the module documentation.
#[derive(Debug, Clone)]
pub struct Books {
    me: u128,
    /// Nothing is leased before this: an owner that took the window over without its
    /// previous owner's books waits until every lease that owner may have granted has lapsed
    /// and the users have reported what they spent and hold.
    quiet_until_ms: u64,
    users: BTreeMap<u128, UserBooks>,
}

impl Books {
    /// The books of a window this node (`me`) owns from now, leasing nothing before
    /// `quiet_until_ms`.
    pub fn new(me: u128, quiet_until_ms: u64) -> Self {
        Self {
            me,
            quiet_until_ms,
            users: BTreeMap::new(),
        }
    }

    pub fn quiet_until_ms(&self) -> u64 {
        self.quiet_until_ms
    }

    /// A user's report, from its emission `version`, with the demand it is offered and the
    /// limit its rules give the window. An older report than the one held changes nothing.
    pub fn heard(&mut self, user: u128, version: u64, heard: Heard, now_ms: u64) {
        let books = self.users.entry(user).or_default();
        books.last_heard_ms = books.last_heard_ms.max(now_ms);
        if books.report.as_ref().is_some_and(|(v, _)| *v >= version) {
            return;
        }
        books.demand_per_s = heard.demand_per_s;
        books.limit = heard.limit;
        books.report = Some((version, heard.report));
    }

    /// The window's limit: the least any user heard from since `since_ms` says (users whose
    /// rules differ get the smaller limit). `None` if none was heard.
    pub fn limit(&self, since_ms: u64) -> Option<u32> {
        self.users
            .values()
            .filter(|b| b.last_heard_ms >= since_ms && b.report.is_some())
            .map(|b| b.limit)
            .min()
    }

    /// Users heard from since `since_ms`, with the demand each last said.
    pub fn demands(&self, since_ms: u64) -> impl Iterator<Item = (u128, u32)> + '_ {
        self.users
            .iter()
            .filter(move |(_, b)| b.last_heard_ms >= since_ms)
            .map(|(u, b)| (*u, b.demand_per_s))
    }

    /// Tokens `user` holds spendable from `from_ms` on, by its last report and what was
    /// granted since.
    pub fn held_by(&self, user: u128, from_ms: u64, params: &LedgerParams) -> u64 {
        let Some(b) = self.users.get(&user) else {
            return 0;
        };
        let report = b.report.as_ref().map(|(_, r)| r);
        let mine: u64 = b
            .granted
            .iter()
            .filter(|l| from_ms.saturating_add(params.margin_ms) < l.expires_ms)
            .map(|l| u64::from(unspent(report, self.me, l)))
            .sum();
        let foreign: u64 = report.map_or(0, |r| {
            r.held
                .iter()
                .filter(|h| h.owner != self.me && from_ms < h.expires_ms)
                .map(|h| u64::from(h.unspent))
                .sum()
        });
        mine + foreign
    }

    /// Slots taken from `now_ms` on: `spends` (what the registers record, each spend to the
    /// end of its span) and every token that may yet be spent: of this owner's leases, what
    /// the user's last report does not show spent; of other owners', what the user says it
    /// holds. Leases known spent, or past any span they could occupy, are forgotten here.
    pub fn occupancy(&mut self, spends: &[Span], now_ms: u64, params: &LedgerParams) -> Occupancy {
        let mut occupancy = Occupancy::default();
        for s in spends {
            occupancy.add(*s);
        }
        let me = self.me;
        for b in self.users.values_mut() {
            let report = b.report.as_ref().map(|(_, r)| r);
            b.granted.retain(|l| {
                let (_, until) = params.span_of(l.valid_from_ms, l.expires_ms);
                until > now_ms && unspent(report, me, l) > 0
            });
            for l in &b.granted {
                let (from_ms, until_ms) = params.span_of(l.valid_from_ms, l.expires_ms);
                occupancy.add(Span {
                    from_ms,
                    until_ms,
                    count: u64::from(unspent(report, me, l)),
                });
            }
            if let Some(r) = report.filter(|r| !r.closed) {
                for h in r.held.iter().filter(|h| h.owner != me) {
                    let (_, until_ms) = params.span_of(now_ms, h.expires_ms);
                    occupancy.add(Span {
                        from_ms: now_ms,
                        until_ms,
                        count: u64::from(h.unspent),
                    });
                }
            }
        }
        occupancy
    }

    /// Records a lease of `count` tokens to `user` from `valid_from_ms`, and returns it.
    fn lease(
        &mut self,
        user: u128,
        count: u32,
        valid_from_ms: u64,
        params: &LedgerParams,
    ) -> Lease {
        let b = self.users.entry(user).or_default();
        b.last_seq += 1;
        let lease = Lease {
            owner: self.me,
            seq: b.last_seq,
            count,
            valid_from_ms,
            expires_ms: valid_from_ms + params.lease_ms,
        };
        b.granted.push(lease);
        lease
    }

    /// A round's leases: `wants` (tokens per user for the coming period) met from the slots
    /// free now and those that free within the horizon, each lease starting when its slots
    /// are free. Where they do not all fit, each user gets its share in proportion to its
    /// want, and every user's tokens spread over the freed slots in time order.
    pub fn grant_round(
        &mut self,
        wants: &[(u128, u64)],
        spends: &[Span],
        now_ms: u64,
        params: &LedgerParams,
    ) -> Vec<(u128, Lease)> {
        if now_ms < self.quiet_until_ms || wants.iter().all(|(_, w)| *w == 0) {
            return Vec::new();
        }
        let mut occupancy = self.occupancy(spends, now_ms, params);
        let starts = std::iter::once(now_ms).chain(
            occupancy
                .frees_between(now_ms, now_ms + params.horizon_ms)
                .into_iter()
                .map(|t| params.round_up(t)),
        );
        let mut starts: Vec<u64> = starts.collect();
        starts.dedup();
        let mut given = vec![0u64; wants.len()];
        let mut out: Vec<(u128, Lease)> = Vec::new();
        for start in starts {
            let (from_ms, until_ms) = params.span_of(start, start + params.lease_ms);
            let room = occupancy.room(params.limit, from_ms, until_ms);
            if room == 0 {
                continue;
            }
            let split = proportional(wants, &given, room);
            let mut granted = 0;
            for (i, n) in split.into_iter().enumerate() {
                if n == 0 {
                    continue;
                }
                given[i] += n;
                granted += n;
                let count = u32::try_from(n).unwrap_or(u32::MAX);
                out.push((wants[i].0, self.lease(wants[i].0, count, start, params)));
            }
            occupancy.add(Span {
                from_ms,
                until_ms,
                count: granted,
            });
            if given.iter().zip(wants).all(|(g, (_, w))| g >= w) {
                break;
            }
        }
        out
    }

    /// A user with a request waiting and no token asks for `want`: granted from the earliest
    /// moment before `deadline_ms` at which a token is free for a lease's whole span (post-dated
    /// if that is later than now); refused otherwise, with when to ask again.
    pub fn ask(
        &mut self,
        user: u128,
        want: u64,
        spends: &[Span],
        now_ms: u64,
        deadline_ms: u64,
        params: &LedgerParams,
    ) -> AskAnswer {
        let start = now_ms.max(self.quiet_until_ms);
        let mut occupancy = self.occupancy(spends, now_ms, params);
        let horizon = now_ms + params.horizon_ms.max(params.window_ms + params.lease_ms);
        match occupancy.earliest_room(params.limit, 1, start, params.hold_ms(), horizon) {
            Some(at) if at < deadline_ms => {
                let room = occupancy.room(params.limit, at, at + params.hold_ms());
                let count = want.clamp(1, room);
                occupancy.add(Span {
                    from_ms: at,
                    until_ms: at + params.hold_ms(),
                    count,
                });
                let count = u32::try_from(count).unwrap_or(u32::MAX);
                AskAnswer::Granted(self.lease(user, count, at, params))
            }
            Some(at) => AskAnswer::Refused {
                retry_after_ms: at.saturating_sub(now_ms).max(1),
            },
            None => AskAnswer::Refused {
                retry_after_ms: params.horizon_ms.max(1),
            },
        }
    }

    /// Forgets users not heard from since `since_ms` that hold nothing of this owner's.
    pub fn forget_idle(&mut self, since_ms: u64) {
        self.users
            .retain(|_, b| b.last_heard_ms >= since_ms || !b.granted.is_empty());
    }

    /// Whether the books hold nothing worth keeping.
    pub fn is_empty(&self) -> bool {
        self.users.values().all(|b| b.granted.is_empty())
    }
}

/// Tokens of `lease` (this owner's) that may still be spent: what the report says, or the
/// whole lease if the report was sent before the user received it.
fn unspent(report: Option<&HoldingsReport>, me: u128, lease: &Lease) -> u32 {
    report
        .and_then(|r| r.unspent_of(me, lease.seq))
        .unwrap_or(lease.count)
        .min(lease.count)
}

/// Splits `room` tokens among `wants` in proportion to each want, given what each was given
/// already: largest remainders first, never past a want.
fn proportional(wants: &[(u128, u64)], given: &[u64], room: u64) -> Vec<u64> {
    let left: Vec<u64> = wants
        .iter()
        .zip(given)
        .map(|((_, w), g)| w.saturating_sub(*g))
        .collect();
    let total: u64 = left.iter().sum();
    if total <= room {
        return left;
    }
    let mut out: Vec<u64> = left
        .iter()
        .map(|l| (u128::from(*l) * u128::from(room) / u128::from(total)) as u64)
        .collect();
    let mut spare = room - out.iter().sum::<u64>();
    // The remainders, largest first (ties: the user with less so far, then by order).
    let mut order: Vec<usize> = (0..left.len()).filter(|i| left[*i] > out[*i]).collect();
    order.sort_by_key(|i| {
        let rem = u128::from(left[*i]) * u128::from(room) % u128::from(total);
        (std::cmp::Reverse(rem), given[*i], *i)
    });
    for i in order {
        if spare == 0 {
            break;
        }
        out[i] += 1;
        spare -= 1;
    }
    out
}

#[cfg(test)]
mod tests;
