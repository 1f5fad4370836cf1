//! The books' promise, tested as an adversary would: users that spend whenever they can,
//! messages and reports delayed, reordered or lost, rounds and asks at any moment. Whatever
//! happens, no sliding window holds more than `L` spends.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::*;
use crate::ledger::ClockShape;

/// A spend clock of 100 ms buckets.
const SHAPE: ClockShape = ClockShape {
    bucket_ms: 100,
    buckets: 4,
};
use crate::ledger::Holdings;

const W: u64 = 1_000;
const BUCKET: u64 = 100;
const OWNER: u128 = 99;

fn params(limit: u64) -> LedgerParams {
    LedgerParams {
        limit,
        window_ms: W,
        lease_ms: 400,
        round_ms: 200,
        margin_ms: 0,
        start_step_ms: 25,
        horizon_ms: 400,
        quiet_until_ms: 0,
    }
}

/// A user: its tokens, and every spend it made.
#[derive(Default)]
struct User {
    holdings: Holdings,
    spends: Vec<u64>,
}

/// The spans of `spends` (as of an emission at `at_ms`) the way a register reports them: by
/// bucket, each until its bucket's end plus `W`.
fn spans_of(spends: &[u64], at_ms: u64) -> Vec<Span> {
    let mut by_bucket: BTreeMap<u64, u64> = Default::default();
    for t in spends.iter().filter(|t| **t <= at_ms) {
        *by_bucket.entry(t / BUCKET).or_default() += 1;
    }
    by_bucket
        .into_iter()
        .map(|(b, count)| Span {
            from_ms: 0,
            until_ms: (b + 1) * BUCKET + W,
            count,
        })
        .collect()
}

fn busiest_window(mut spends: Vec<u64>) -> usize {
    spends.sort_unstable();
    let mut worst = 0;
    let mut j = 0;
    for i in 0..spends.len() {
        while spends[i] - spends[j] >= W {
            j += 1;
        }
        worst = worst.max(i + 1 - j);
    }
    worst
}

#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Wait(u64),
    /// User `u` tries to spend `cost` tokens.
    Spend(usize, u32),
    /// The owner's round, wanting this many more for each user.
    Round(Vec<u64>),
    /// User `u` asks for `want`, with a deadline this far ahead.
    Ask(usize, u64, u64),
    /// User `u` emits: its report and register go out.
    Emit(usize),
    /// The oldest message in flight to (true) or from (false) user `u` arrives, or is lost.
    Deliver(usize, bool, bool),
}

fn step(users: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u64..120).prop_map(Step::Wait),
        6 => (0..users, 1u32..3).prop_map(|(u, c)| Step::Spend(u, c)),
        1 => proptest::collection::vec(0u64..12, users).prop_map(Step::Round),
        1 => (0..users, 1u64..6, 0u64..300).prop_map(|(u, w, d)| Step::Ask(u, w, d)),
        2 => (0..users).prop_map(Step::Emit),
        4 => (0..users, any::<bool>(), proptest::bool::weighted(0.85))
            .prop_map(|(u, to, ok)| Step::Deliver(u, to, ok)),
    ]
}

/// What the owner's registers say was spent: each user's spends up to its last emission the
/// owner heard. (A register and its report travel together; a lost one loses both.)
fn owner_spends(us: &[User], known_at: &[u64]) -> Vec<Span> {
    us.iter()
        .zip(known_at)
        .flat_map(|(u, at)| spans_of(&u.spends, *at))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn no_sliding_window_holds_more_than_the_limit(
        limit in 1u64..12,
        users in 1usize..5,
        steps in proptest::collection::vec(step(4), 1..400),
    ) {
        let p = params(limit);
        let mut books = Books::new(OWNER);
        let mut now = 1_000_000u64;
        let us: Vec<User> = (0..users).map(|_| User::default()).collect();
        let mut us = us;
        // In flight: messages to each user; (report, version, spends-as-of) from each user.
        let mut to_user: Vec<VecDeque<Lease>> = vec![VecDeque::new(); users];
        let mut from_user: Vec<VecDeque<(HoldingsReport, u64, u64)>> =
            vec![VecDeque::new(); users];
        // What the owner knows of each user's spends: as of the emission time it last heard.
        let mut known_at = vec![0u64; users];
        let mut version = vec![0u64; users];
        for s in steps {
            match s {
                Step::Wait(ms) => now += ms,
                Step::Spend(u, cost) => {
                    if let Some(u) = us.get_mut(u)
                        && u.holdings.try_spend(now, cost, p.margin_ms).is_some()
                    {
                        u.spends.extend(std::iter::repeat_n(now, cost as usize));
                    }
                }
                Step::Round(wants) => {
                    let spends = owner_spends(&us, &known_at);
                    let renewals: Vec<Renewal> = (0..users)
                        .map(|u| Renewal { user: u as u128, want: wants[u], extend: true })
                        .collect();
                    for (u, lease) in books.grant_round(&renewals, &spends, now, &p) {
                        to_user[u as usize].push_back(lease);
                    }
                }
                Step::Ask(u, want, ahead) => {
                    if u < users {
                        let spends = owner_spends(&us, &known_at);
                        // An ask says what the user spent, as of now: fresher than any report.
                        let word = us[u].holdings.report(now, p.margin_ms).of(OWNER).cloned();
                        if let AskAnswer::Granted(lease) =
                            books.ask(ask(u as u128, want, word, now + ahead), &spends, now, &p)
                        {
                            to_user[u].push_back(lease);
                        }
                    }
                }
                Step::Emit(u) => {
                    if u < users {
                        // The report first, then the register: the order the limiter keeps.
                        let report = us[u].holdings.report(now, p.margin_ms);
                        version[u] += 1;
                        from_user[u].push_back((report, version[u], now));
                    }
                }
                Step::Deliver(u, to, arrives) => {
                    if u >= users {
                        continue;
                    }
                    if to {
                        if let Some(lease) = to_user[u].pop_front() && arrives {
                            us[u].holdings.accept(&lease, SHAPE);
                        }
                    } else if let Some((report, v, at)) = from_user[u].pop_front() && arrives {
                        known_at[u] = known_at[u].max(at);
                        // Any demand: it sizes what an ask grants, never whether it fits.
                        let demand = (us[u].spends.len() % 40) as u32 * 7;
                        let heard = Heard { report, demand, limit: limit as u32 };
                        books.heard(u as u128, v, heard, now);
                    }
                }
            }
        }
        let all: Vec<u64> = us.iter().flat_map(|u| u.spends.iter().copied()).collect();
        let worst = busiest_window(all);
        prop_assert!(worst as u64 <= limit, "{worst} spends in one window of limit {limit}");
    }
}

fn renew(user: u128, want: u64) -> Renewal {
    Renewal {
        user,
        want,
        extend: true,
    }
}

#[test]
fn segments_are_sized_by_want_and_start_when_slots_free() {
    let p = params(10);
    let mut books = Books::new(1);
    let now = 10_000;
    // 8 slots taken until 10 200 (spent in the bucket ending at 9 200), 2 free.
    let spends = [Span {
        from_ms: 0,
        until_ms: now + 200,
        count: 8,
    }];
    let leases = books.grant_round(&[renew(2, 6), renew(3, 2)], &spends, now, &p);
    let segments: Vec<Segment> = leases
        .iter()
        .flat_map(|(_, l)| l.segments.clone())
        .collect();
    let now_granted: u32 = segments
        .iter()
        .filter(|s| s.valid_from_ms == now)
        .map(|s| s.count)
        .sum();
    assert_eq!(now_granted, 2, "two free now");
    assert!(
        segments
            .iter()
            .filter(|s| s.valid_from_ms > now)
            .all(|s| s.valid_from_ms == now + 200),
        "{segments:?}"
    );
    let of = |u: u128| -> u64 {
        leases
            .iter()
            .filter(|(w, _)| *w == u)
            .map(|(_, l)| l.count())
            .sum()
    };
    assert_eq!((of(2), of(3)), (6, 2), "every want met, in proportion");
}

/// A slot freed on the start grid (a fine slot's end plus the spend tail, with a clock margin)
/// starts its post-dated segment right then, not at the next multiple of the step.
#[test]
fn a_slot_freed_on_the_grid_is_leased_from_that_moment() {
    let p = LedgerParams {
        margin_ms: 10,
        ..params(1)
    };
    let now = 10_000;
    // The one slot frees at a spend's fine slot end (9 150) plus the tail (1 020).
    let free = 9_150 + p.spend_tail_ms();
    let spends = [Span {
        from_ms: 0,
        until_ms: free,
        count: 1,
    }];
    let leases = Books::new(1).grant_round(&[renew(2, 1)], &spends, now, &p);
    let starts: Vec<u64> = leases
        .iter()
        .flat_map(|(_, l)| l.segments.iter().map(|s| s.valid_from_ms))
        .collect();
    assert_eq!(starts, vec![free]);
}

/// A renewal moves the end of what the user still holds rather than adding to it: the books
/// count its unspent tokens once.
#[test]
fn a_renewal_does_not_double_book_what_the_user_still_holds() {
    let p = params(10);
    let mut books = Books::new(1);
    let (_, first) = books.grant_round(&[renew(2, 6)], &[], 10_000, &p).remove(0);
    let user = Holdings::default();
    user.accept(&first, SHAPE);
    user.try_spend(10_010, 2, 0).unwrap();
    books.heard(
        2,
        1,
        Heard {
            report: user.report(10_020, 0),
            demand: 0,
            limit: 10,
        },
        10_020,
    );
    // Four unspent; renewed with two more: six reserved, not ten.
    let (_, second) = books.grant_round(&[renew(2, 2)], &[], 10_200, &p).remove(0);
    assert_eq!(second.expires_ms, 10_600, "the end moved");
    assert_eq!(books.held_by(2), 6);
    assert_eq!(books.occupancy(&[], 10_200, &p).at(10_300), 6);
    user.accept(&second, SHAPE);
    assert_eq!(user.available(10_300, 0), 6);
}

/// A report that says the lease ended counts nothing unspent only if no newer message of it
/// is on its way: one could revive what was left.
#[test]
fn a_lapsed_lease_is_free_only_once_no_newer_message_can_revive_it() {
    let p = params(10);
    let mut books = Books::new(1);
    let (_, first) = books.grant_round(&[renew(2, 5)], &[], 10_000, &p).remove(0);
    let user = Holdings::default();
    user.accept(&first, SHAPE);
    // The owner renews (the user does not have it yet); the user's lease ends.
    books.grant_round(&[renew(2, 0)], &[], 10_300, &p);
    let lapsed = user.report(10_450, 0);
    assert!(lapsed.of(1).unwrap().lapsed);
    books.heard(
        2,
        1,
        Heard {
            report: lapsed,
            demand: 0,
            limit: 10,
        },
        10_460,
    );
    assert_eq!(books.held_by(2), 5, "the renewal in flight may revive them");
    // The user got the renewal after all, and says so.
    let renewal = Lease {
        owner: 1,
        seq: 2,
        expires_ms: 10_700,
        segments: first.segments.clone(),
    };
    user.accept(&renewal, SHAPE);
    assert_eq!(
        user.available(10_470, 0),
        5,
        "revived, with what it spent kept"
    );
}

#[test]
fn an_ask_waits_for_the_next_free_slot_and_is_refused_past_its_deadline() {
    let p = params(1);
    let mut books = Books::new(1);
    let now = 10_000;
    let spends = [Span {
        from_ms: 0,
        until_ms: now + 50,
        count: 1,
    }];
    assert_eq!(
        books.ask(ask(2, 1, None, now + 20), &spends, now, &p),
        AskAnswer::Refused { retry_after_ms: 50 }
    );
    let AskAnswer::Granted(lease) = books.ask(ask(2, 1, None, now + 60), &spends, now, &p) else {
        panic!("a slot frees at +50");
    };
    assert_eq!(lease.segments[0].valid_from_ms, now + 50);
    // The one slot is now leased: another user waits for the lease's whole span.
    assert!(matches!(
        books.ask(ask(3, 1, None, now + 60), &spends, now, &p),
        AskAnswer::Refused { .. }
    ));
}

#[test]
fn a_quiet_owner_leases_nothing_until_its_time() {
    let p = LedgerParams {
        quiet_until_ms: 5_000,
        ..params(10)
    };
    let mut books = Books::new(1);
    assert!(books.grant_round(&[renew(2, 5)], &[], 4_999, &p).is_empty());
    assert!(matches!(
        books.ask(ask(2, 1, None, 4_500), &[], 4_000, &p),
        AskAnswer::Refused { .. }
    ));
    assert!(!books.grant_round(&[renew(2, 5)], &[], 5_000, &p).is_empty());
}

#[test]
fn a_closed_report_frees_what_it_hands_back_at_once() {
    let p = params(4);
    let mut books = Books::new(1);
    let leases = books.grant_round(&[renew(2, 4)], &[], 10_000, &p);
    assert_eq!(leases.len(), 1);
    assert_eq!(books.occupancy(&[], 10_000, &p).at(10_000), 4);
    let h = Holdings::default();
    h.accept(&leases[0].1, SHAPE);
    h.try_spend(10_010, 1, 0).unwrap();
    books.heard(
        2,
        1,
        Heard {
            report: h.close(0),
            demand: 0,
            limit: 4,
        },
        10_020,
    );
    // The one spent is in the user's register (here: the spends passed in); three are back.
    let spent = [Span {
        from_ms: 0,
        until_ms: 10_100 + W,
        count: 1,
    }];
    assert_eq!(books.occupancy(&spent, 10_020, &p).at(10_020), 1);
    assert!(books.is_empty());
}

/// An ask with a wait of 15 ms.
fn ask(user: u128, want: u64, held: Option<HeldLease>, deadline_ms: u64) -> Ask {
    Ask {
        user,
        want,
        held,
        sent_ms: deadline_ms.saturating_sub(15),
        deadline_ms,
    }
}

/// A user that never checked the window (it reports a limit of 0: its registers or leases
/// made the window there) says nothing of the window's limit; the others' limits stand.
#[test]
fn a_limit_of_zero_is_no_word_on_the_windows_limit() {
    let mut books = Books::new(1);
    let heard = |limit: u32| Heard {
        limit,
        ..Heard::default()
    };
    books.heard(2, 1, heard(0), 10_000);
    assert_eq!(books.limit(0), None);
    books.heard(3, 1, heard(100), 10_000);
    books.heard(4, 1, heard(80), 10_000);
    assert_eq!(books.limit(0), Some(80), "the least of those that know it");
}

/// An ask serves one request: all of its tokens or none (a part would idle at the user);
/// the books keep the most one of the user's asks wanted as its request size.
#[test]
fn an_ask_is_granted_whole_or_refused() {
    let p = params(10);
    let mut books = Books::new(1);
    let AskAnswer::Granted(_) = books.ask(ask(2, 7, None, 10_015), &[], 10_000, &p) else {
        panic!("ten free");
    };
    assert_eq!(books.cost_of(2), 7);
    assert!(
        matches!(
            books.ask(ask(3, 4, None, 10_015), &[], 10_001, &p),
            AskAnswer::Refused { .. }
        ),
        "three free, not four"
    );
    assert_eq!(books.cost_of(3), 4);
    assert_eq!(books.cost_of(4), 1, "never asked: a token");
}

/// A user is near once its last two asks each came in a quarter of their wait or less (the
/// round trip in half of it), answered or not; one slower ask and it is far until two more.
#[test]
fn a_user_is_near_after_two_quick_asks_running() {
    let p = params(10);
    let mut books = Books::new(1);
    let at = |sent_ms: u64| Ask {
        user: 2,
        want: 1,
        held: None,
        sent_ms,
        deadline_ms: sent_ms + 16,
    };
    assert!(!books.is_near(2), "never asked");
    let ask_at = |books: &mut Books, sent: u64, took: u64| {
        books.ask(at(sent), &[], sent + took, &p);
        books.is_near(2)
    };
    assert!(!ask_at(&mut books, 10_000, 4), "one quick ask");
    assert!(ask_at(&mut books, 10_100, 4));
    assert!(!ask_at(&mut books, 10_200, 5), "a quarter of 16 is 4");
    assert!(!ask_at(&mut books, 10_300, 0));
    assert!(ask_at(&mut books, 10_400, 1));
    // Refused for want of room, the ask still says how near the user is.
    assert!(ask_at(&mut books, 10_500, 2));
    // A send time far in the past reads as a slow ask, without overflow.
    assert!(!ask_at(&mut books, 0, 10_700));
}

/// A round's split of scarce room gives each user whole requests of its size, never more
/// than the room.
#[test]
fn scarce_room_is_split_in_whole_requests() {
    let wants = [(2u128, 10u64), (3, 10)];
    assert_eq!(
        super::proportional(&wants, &[0, 0], 12, &[5, 5]),
        vec![5, 5]
    );
    assert_eq!(
        super::proportional(&wants, &[0, 0], 12, &[1, 5]),
        vec![7, 5]
    );
    assert_eq!(super::proportional(&wants, &[0, 0], 4, &[5, 5]), vec![0, 0]);
    assert_eq!(
        super::proportional(&wants, &[0, 0], 30, &[5, 5]),
        vec![10, 10]
    );
}

/// An ask is granted its request's tokens and, where the room holds them, what the user's
/// demand wants until its next round's lease (one summary round), in whole requests: one ask
/// serves the requests until the round instead of one each.
#[test]
fn an_ask_serves_the_users_demand_until_its_next_round_where_the_room_holds_it() {
    let granted = |limit: u64, want: u64, demand: u32| {
        let mut books = Books::new(1);
        let heard = Heard {
            demand,
            limit: limit as u32,
            ..Heard::default()
        };
        books.heard(2, 1, heard, 10_000);
        match books.ask(ask(2, want, None, 10_015), &[], 10_000, &params(limit)) {
            AskAnswer::Granted(lease) => lease.segments.iter().map(|s| s.count).sum::<u32>(),
            AskAnswer::Refused { .. } => 0,
        }
    };
    // 50 a window of 1 s: 10 over the 200 ms to the next round.
    assert_eq!(granted(100, 1, 50), 10);
    assert_eq!(granted(4, 1, 50), 4, "no more than the room");
    assert_eq!(granted(7, 3, 50), 6, "whole requests of 3 within 7");
    assert_eq!(
        granted(100, 1, 0),
        1,
        "no demand heard: the request's tokens"
    );
    assert_eq!(granted(100, 5, 1), 5, "the request's tokens at least");
}
