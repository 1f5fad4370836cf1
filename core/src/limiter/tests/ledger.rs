//! The ledger end to end in the limiter: a window's owner and its users exchanging reports,
//! leases and asks by hand, with time as a plain number.

use super::*;
use crate::ledger::AskAnswer;

/// The owner, in a test where who it is does not matter, leasing at once.
const LEASES_AT_ONCE: OwnerOf = OwnerOf {
    owner: 0,
    quiet_until_ms: 0,
    blind_since_ms: 0,
    handed_by: None,
};

/// Every window is owned by `0`, leasing at once.
#[derive(Debug)]
pub(super) struct OwnedBy(pub(super) u128);

impl OwnerView for OwnedBy {
    fn owner_of(&self, _key: KeyId) -> Option<OwnerOf> {
        Some(OwnerOf::quiet_until(self.0, 0))
    }

    fn lease_part(&self) -> (u64, u64) {
        (1, 1)
    }
}

/// Node 0 owns every window; nodes 1.. use them. Ids are `index + 1`.
pub(super) struct Cluster {
    pub(super) nodes: Vec<Limiter>,
}

impl Cluster {
    pub(super) fn new(n: usize) -> Self {
        let config = LimiterConfig {
            policy: Policy::Ledger(PartitionPolicy::Strict),
            ..LimiterConfig::default()
        };
        let nodes: Vec<Limiter> = (0..n)
            .map(|i| {
                let l = limiter_with(config.clone(), i as u128 + 1);
                l.set_owner_view(Box::new(OwnedBy(1)));
                l
            })
            .collect();
        Self { nodes }
    }

    pub(super) fn owner(&self) -> &Limiter {
        &self.nodes[0]
    }

    /// Every node's emission reaches the owner; then the owner's round reaches every node.
    /// Returns the windows each node reported.
    pub(super) fn round(&self, now: u64) -> Vec<Vec<KeyId>> {
        let mut reported = vec![Vec::new(); self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some((batch, reports)) = node.collect_with_reports(now) {
                reported[i] = batch.updates.iter().map(|u| u.key).collect();
                if i != 0 {
                    self.owner().merge(&batch, now);
                    self.owner()
                        .owner_heard(&batch, &reports, now, |_| Some(LEASES_AT_ONCE));
                }
            }
        }
        for grant in self.owner().owner_round(now, |_| Some(LEASES_AT_ONCE)) {
            self.nodes[grant.user as usize - 1].accept_lease(&grant, now);
        }
        reported
    }

    /// A check at node `i`; where it lacks a token it may ask for, the owner is asked and
    /// the check made again.
    pub(super) fn check(&self, i: usize, key: &str, limit: Limit, now: u64) -> bool {
        self.check_costing(i, key, limit, 1, now)
    }

    /// [`Cluster::check`] of a request costing `cost` tokens.
    fn check_costing(&self, i: usize, key: &str, limit: Limit, cost: u32, now: u64) -> bool {
        let node = &self.nodes[i];
        let d = check(node, key, &[limit], cost, now);
        if d.allowed {
            return true;
        }
        let Some(need) = d.needs.first().filter(|n| n.ask) else {
            return false;
        };
        match self.ask(i, need, limit, now) {
            // Waits for the token if it is post-dated within the wait.
            Some(valid_from) => check(node, key, &[limit], cost, now.max(valid_from)).allowed,
            None => false,
        }
    }

    /// Node `i` asks the owner for what `need` says; the lease granted is taken. Returns when
    /// its last segment becomes valid, or `None` if the owner refused.
    fn ask(&self, i: usize, need: &TokenNeed, limit: Limit, now: u64) -> Option<u64> {
        let node = &self.nodes[i];
        let spec = limit.window;
        let held = node.held_word(need.key, 1, now);
        match self.owner().owner_ask(
            node.origin().0,
            need.key,
            &spec,
            need.limit,
            need.want,
            held,
            (now, now + node.config().ledger.ask_wait_ms),
            now,
            &LEASES_AT_ONCE,
        ) {
            AskAnswer::Granted(lease) => {
                let valid_from = lease.segments.last().map_or(now, |s| s.valid_from_ms);
                node.accept_lease(
                    &LeaseGrant {
                        user: node.origin().0,
                        key: need.key,
                        window_ms: spec.window_ms(),
                        buckets: spec.buckets(),
                        lease,
                    },
                    now,
                );
                Some(valid_from)
            }
            AskAnswer::Refused { retry_after_ms } => {
                node.ask_refused(need.key, retry_after_ms, now);
                None
            }
        }
    }
}

fn day(limit: u32) -> Limit {
    Limit {
        max: limit,
        window: WindowSpec::with_default_buckets(86_400_000).unwrap(),
    }
}

fn busiest(mut at: Vec<u64>, window_ms: u64) -> usize {
    at.sort_unstable();
    let (mut j, mut worst) = (0, 0);
    for i in 0..at.len() {
        while at[i] - at[j] >= window_ms {
            j += 1;
        }
        worst = worst.max(i + 1 - j);
    }
    worst
}

#[test]
fn a_limit_of_one_a_day_admits_exactly_one_however_the_checks_are_spread() {
    let c = Cluster::new(5);
    let limit = day(1);
    let admitted: usize = (0..5).filter(|i| c.check(*i, "tenant", limit, T0)).count();
    assert_eq!(admitted, 1, "five nodes asked at once");
    for r in 1..20 {
        c.round(T0 + r * 200);
        for i in 0..5 {
            assert!(
                !c.check(i, "tenant", limit, T0 + r * 200 + 7),
                "round {r} node {i}"
            );
        }
    }
}

/// Users offered well under the limit: once their demand is known, every round's lease covers
/// them until the next, and no request is refused.
#[test]
fn steady_users_never_run_dry() {
    let c = Cluster::new(6);
    let limit = second(1_000);
    let mut refused_after_warmup = 0;
    for ms in 0..10_000u64 {
        let now = T0 + ms;
        if ms.is_multiple_of(200) {
            c.round(now);
        }
        // Each user checks every 10 ms: 100 a second each, 500 in all, half the limit.
        if ms.is_multiple_of(10) {
            for i in 1..6 {
                if !c.check(i, "tenant", limit, now + i as u64) && ms > 1_000 {
                    refused_after_warmup += 1;
                }
            }
        }
    }
    assert_eq!(refused_after_warmup, 0);
}

/// Five users offered twice the limit: no sliding window passes it, and most of it is used.
#[test]
fn an_overloaded_window_never_passes_its_limit() {
    let c = Cluster::new(6);
    let limit = second(100);
    let mut at = Vec::new();
    for ms in 0..20_000u64 {
        let now = T0 + ms;
        if ms.is_multiple_of(200) {
            c.round(now);
        }
        // Every 25 ms each user: 40 a second each, 200 in all.
        if ms.is_multiple_of(25) {
            for i in 1..6 {
                if c.check(i, "tenant", limit, now + i as u64) {
                    at.push(now + i as u64);
                }
            }
        }
    }
    let worst = busiest(at.clone(), 1_000);
    assert!(worst <= 100, "{worst} in one window");
    let steady = at.iter().filter(|t| **t >= T0 + 5_000).count() as f64 / 15.0;
    println!("steady {steady} a second, busiest {worst}");
    assert!(steady > 80.0, "only {steady} a second used");
}

/// Users whose clocks are behind or ahead of the owner's by less than the margin: windows on
/// the owner's clock (the truth here) still hold at most the limit. Checks come at uneven
/// moments, so that spends land at every point of the buckets and of the leases.
#[test]
fn a_user_whose_clock_is_behind_stays_within_the_limit() {
    let c = Cluster::new(4);
    let limit = second(20);
    let off = c.nodes[1].config().ledger.margin_ms as i64 - 1;
    let skew = [0, -off, off, -off];
    let mut at = Vec::new();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for ms in 0..20_000u64 {
        let now = T0 + ms;
        if ms.is_multiple_of(200) {
            c.round(now);
        }
        for (i, skew) in skew.iter().enumerate().skip(1) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed.is_multiple_of(4) && c.check(i, "k", limit, now.saturating_add_signed(*skew)) {
                at.push(now);
            }
        }
    }
    let worst = busiest(at, 1_000);
    assert!(worst <= 20, "{worst} in one window of 20");
}

/// A window far from its limit is reported about once in `CALM_ROUNDS` rounds, and leased for
/// long enough to last until the next report; one that refuses is reported every round.
#[test]
fn a_calm_window_is_reported_and_leased_less_often() {
    use crate::ledger::tuning::CALM_ROUNDS;
    let c = Cluster::new(2);
    let user = &c.nodes[1];
    let reported = |key: &str, limit: Limit, per_round: u64| {
        let id = user.key_id(key.as_bytes(), &limit.window);
        let mut reports = 0;
        let mut refused = 0;
        for r in 0..50u64 {
            let now = T0 + 1_000_000 * per_round + r * 200;
            for k in 0..per_round {
                if !c.check(1, key, limit, now + 1 + k) && r > 5 {
                    refused += 1;
                }
            }
            if c.round(now + 150)[1].contains(&id) {
                reports += 1;
            }
        }
        (reports, refused)
    };
    let (calm_reports, calm_refused) = reported("calm", second(1_000), 2);
    assert_eq!(
        calm_refused, 0,
        "a calm window's leases last until its next report"
    );
    assert!(
        calm_reports <= 50 / CALM_ROUNDS as usize + 3,
        "a calm window reported in {calm_reports} of 50 rounds"
    );
    let (busy_reports, _) = reported("busy", second(5), 4);
    assert!(
        busy_reports >= 45,
        "a refusing window reported in {busy_reports} of 50 rounds"
    );
}

/// Tokens a user of a day's window no longer needs go back to the owner within rounds, not a
/// day later: its renewals shrink to its demand, its report says what it gave up, and the owner
/// leases those tokens again at once.
#[test]
fn unneeded_tokens_of_a_long_window_return_to_the_owner_within_rounds() {
    let c = Cluster::new(3);
    let limit = day(10);
    let spec = limit.window;
    let id = c.nodes[1].key_id(b"tenant", &spec);
    let AskAnswer::Granted(lease) = c.owner().owner_ask(
        2,
        id,
        &spec,
        10,
        4,
        None,
        (T0, T0 + 15),
        T0,
        &LEASES_AT_ONCE,
    ) else {
        panic!("ten free");
    };
    c.nodes[1].accept_lease(
        &LeaseGrant {
            user: 2,
            key: id,
            window_ms: spec.window_ms(),
            buckets: spec.buckets(),
            lease: lease.clone(),
        },
        T0,
    );
    assert!(check(&c.nodes[1], "tenant", &[limit], 1, T0 + 1).allowed);
    // Three left at node 1, leased until the lease ends plus a day: node 2 gets six.
    // What an ask of node 2's is granted: the new segment of its lease's message.
    // An ask is granted whole or not at all.
    let ask = |now: u64, want: u32| match c.owner().owner_ask(
        3,
        id,
        &spec,
        10,
        want,
        None,
        (now, now + 15),
        now,
        &LEASES_AT_ONCE,
    ) {
        AskAnswer::Granted(l) => l.segments.last().map_or(0, |s| s.count),
        AskAnswer::Refused { .. } => 0,
    };
    assert_eq!(ask(T0 + 5, 7), 0, "six are free, not seven");
    assert_eq!(ask(T0 + 5, 6), 6);
    assert_eq!(
        ask(T0 + 6, 1),
        0,
        "one spent, three at node 1, six at node 2"
    );
    // Rounds go on; node 1 spends nothing more, its renewals shrink to what its demand needs,
    // and the round after that reports what it holds.
    let mut given_back = None;
    for r in 0..40u64 {
        let now = T0 + 10 + r * 200;
        let reported = c.round(now);
        let held = c.nodes[1]
            .held_word(id, 1, now)
            .expect("node 1 holds a lease");
        if held.unspent < 3 && reported[1].contains(&id) {
            given_back = Some((now, held.unspent));
            break;
        }
    }
    let (at, kept) = given_back.expect("node 1 gives tokens back and reports it");
    assert!(at < T0 + 5_000, "within rounds, not a day: {}", at - T0);
    assert_eq!(
        ask(at + 2, 3 - kept),
        3 - kept,
        "what node 1 gave up is free again (node 2 holds its six)"
    );
}

/// Users of a minute's window offered a request of five tokens every few seconds, far under
/// the limit, whose owner is too far to ask in time: once each has asked once (the owner
/// learns its request size), every request is admitted from the tokens it holds: each is
/// leased a whole request's cover, not a cover counted in tokens (which would be a part of
/// one request, of no use to it).
#[test]
fn sparse_users_of_a_long_window_hold_a_whole_request_between_their_requests() {
    let c = Cluster::new(5);
    let limit = Limit {
        max: 1_000,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    };
    let (mut first, mut later, mut refused) = (0, 0, 0);
    for ms in 0..120_000u64 {
        let now = T0 + ms;
        if ms.is_multiple_of(200) {
            c.round(now);
        }
        // Node i checks every 7 s (staggered): a few requests a minute each.
        for i in 1..5 {
            if !(ms + 1_700 * i as u64).is_multiple_of(7_000) {
                continue;
            }
            if ms < 7_000 {
                first += 1;
                assert!(
                    c.check_costing(i, "tenant", limit, 5, now),
                    "the first asks"
                );
            } else {
                later += 1;
                // No ask: the owner is out of reach in time.
                refused += usize::from(!check(&c.nodes[i], "tenant", &[limit], 5, now).allowed);
            }
        }
    }
    assert_eq!(first, 4);
    assert!(later > 50, "{later} later requests");
    assert_eq!(
        refused, 0,
        "{refused} of {later} refused with a limit far off"
    );
}

/// A request that found no token, waited and was decided again counts once in what its window
/// is offered (the demand its leases are sized by) however often it is refused, and its
/// admission in the end counts beside that refusal.
#[test]
fn a_request_refused_again_after_waiting_counts_once_in_the_demand() {
    let c = Cluster::new(2);
    let limit = Limit {
        max: 10,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    };
    let node = &c.nodes[1];
    let offered = |now| {
        let inspection = node.inspect(b"k", &limit, now).expect("a known key");
        let local = inspection.origins.iter().find(|o| o.is_local);
        local.expect("this node's register").demand
    };
    assert!(!check(node, "k", &[limit], 1, T0).allowed, "no token yet");
    for ms in 1..5 {
        assert!(!check_again(node, "k", &[limit], 1, T0 + ms).allowed);
    }
    assert_eq!(offered(T0 + 5), 1, "refused five times, offered once");
    let mut now = T0 + 5;
    while !check_again(node, "k", &[limit], 1, now).allowed {
        now += 200;
        assert!(now < T0 + 2_000, "leased within a few rounds");
        c.round(now);
    }
    assert_eq!(offered(now), 2, "refused, then admitted");
    assert!(check(node, "k", &[limit], 1, now).allowed);
    assert_eq!(offered(now), 3, "a new request counts");
}

/// The rounds (one every 200 ms from `T0`, `rounds` of them) in which the owner of a cluster
/// whose other nodes each check `limit` once a round granted a lease, one entry per grant:
/// the owner hears the nodes as `heard_as` says and leases as `rounds_as` says.
fn lease_times(
    c: &Cluster,
    limit: Limit,
    rounds: u64,
    heard_as: OwnerOf,
    rounds_as: OwnerOf,
) -> Vec<u64> {
    let mut granted = Vec::new();
    for step in 0..rounds {
        let now = T0 + step * 200;
        for node in &c.nodes[1..] {
            check(node, "k", &[limit], 1, now);
            if let Some((batch, reports)) = node.collect_with_reports(now) {
                c.owner().merge(&batch, now);
                c.owner()
                    .owner_heard(&batch, &reports, now, |_| Some(heard_as));
            }
        }
        let grants = c.owner().owner_round(now, |_| Some(rounds_as));
        granted.extend(grants.iter().map(|_| now));
    }
    granted
}

/// A window whose previous owner went down without a word is blind to its owner for the
/// window's length past the blind time, whatever its quiet time: a 2 s window blind from
/// `T0 + 1 s` is leased from `T0 + 3 s` and the clock margin, not at the quiet time before.
#[test]
fn an_owner_leases_a_blind_window_only_a_window_past_its_blind_time() {
    let c = Cluster::new(3);
    let limit = Limit {
        max: 100,
        window: WindowSpec::with_default_buckets(2_000).unwrap(),
    };
    let owner = OwnerOf {
        owner: 0,
        quiet_until_ms: T0 + 500,
        blind_since_ms: T0 + 1_000,
        handed_by: None,
    };
    let leases_from = T0 + 3_000 + c.owner().config().ledger.margin_ms;
    assert_eq!(
        owner.leases_from_ms(2_000, c.owner().config().ledger.margin_ms),
        leases_from
    );
    let granted = lease_times(&c, limit, 30, owner, owner);
    assert!(!granted.is_empty(), "leased once the window passed");
    assert!(
        granted.iter().all(|at| *at >= leases_from),
        "leased at {granted:?}, blind until {leases_from}"
    );
}

/// An owner whose view of a window moves its quiet time on after the window's books were
/// opened (a starting node still in its warm-up, a ring that changed) leases nothing before
/// the later time.
#[test]
fn an_owner_leases_nothing_before_its_latest_quiet_time() {
    let c = Cluster::new(3);
    let limit = Limit {
        max: 100,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    };
    let quiet_until = T0 + 5_000;
    // Books opened when the view said the window was free to lease.
    let later = OwnerOf::quiet_until(0, quiet_until);
    let granted = lease_times(&c, limit, 40, LEASES_AT_ONCE, later);
    assert!(!granted.is_empty(), "leased once the quiet time passed");
    assert!(
        granted.iter().all(|at| *at >= quiet_until),
        "leased at {granted:?}, quiet until {quiet_until}"
    );
}

/// A user that refuses seals its buckets (`ledger::SpendClock`), and its owner counts each
/// spend to the end of its fine slot, not of its bucket: a token comes back a slot (an eighth
/// of a bucket) past the moment it leaves the window, plus the clock margins and the step of
/// a post-dated lease. Every token's turn is at least the window, and on average less than a
/// bucket's end would allow (half a bucket more: 50 ms here).
#[test]
fn sealed_spends_free_their_slots_at_the_end_of_their_fine_slot() {
    let c = Cluster::new(2);
    let limit = second(20);
    let mut at = Vec::new();
    for ms in 0..8_000u64 {
        let now = T0 + ms;
        if ms.is_multiple_of(200) {
            c.round(now);
        }
        if c.check(1, "k", limit, now) && ms >= 2_000 {
            at.push(ms);
        }
    }
    let turns: Vec<u64> = at.windows(21).map(|w| w[20] - w[0]).collect();
    assert!(!turns.is_empty(), "admitted {}", at.len());
    let shortest = *turns.iter().min().unwrap();
    assert!(shortest >= 1_000, "a token came back after {shortest} ms");
    let idle = turns.iter().map(|t| t - 1_000).sum::<u64>() as f64 / turns.len() as f64;
    let config = c.owner().config();
    let margins = 2 * config.ledger.margin_ms;
    let slot = limit.window.bucket_ms() / crate::ledger::tuning::FINE_SLOTS as u64;
    let bound = (slot + margins + config.ledger.start_step_ms) as f64;
    assert!(
        idle <= bound,
        "a token idles {idle:.1} ms a turn on average (at most {bound} ms: a slot, the margins, a step)"
    );
}

/// A round leases the slots that free before its next round but one, post-dated, even when
/// every slot is taken at the round itself: a window kept full by its users turns every token
/// over from the rounds alone, without a single ask.
#[test]
fn a_full_window_is_leased_again_by_rounds_as_its_slots_free() {
    let c = Cluster::new(2);
    let limit = second(100);
    let user = &c.nodes[1];
    let mut admitted = Vec::new();
    for ms in 0..8_000u64 {
        let now = T0 + ms;
        if ms.is_multiple_of(200) {
            c.round(now);
        }
        // Ten times the limit, and no ask: only what rounds lease is spent.
        if check(user, "k", &[limit], 1, now).allowed && ms >= 2_000 {
            admitted.push(now);
        }
    }
    assert!(
        admitted.len() >= 540,
        "{} admitted in 6 s of a limit of 100 a second from rounds alone",
        admitted.len()
    );
    let worst = busiest(admitted, 1_000);
    assert!(worst <= 100, "{worst} in one window of 100");
}

/// What `user` holds of window `k` under `limit` at `now`, by a dry run.
pub(super) fn held_of(user: &Limiter, limit: Limit, now: u64) -> u64 {
    let items = items("k", &[limit], 1);
    let request = CheckRequest {
        items: &items,
        dry_run: true,
    };
    user.check(&request, now).unwrap().limits[0].remaining
}

/// Rounds from `T0`, node 1 checking window `k` each, until it holds at least `tokens`: when.
fn lease_at_least(c: &Cluster, limit: Limit, tokens: u64) -> u64 {
    let mut now = T0;
    while held_of(&c.nodes[1], limit, now) < tokens {
        c.round(now);
        let _ = c.check(1, "k", limit, now);
        now += 200;
    }
    now
}

/// A request whose limits do not all hold tokens takes none: not from a limit that holds
/// some, nor from a window it names twice (the costs of one window count together).
#[test]
fn a_refused_request_takes_no_token_from_its_other_limits() {
    let c = Cluster::new(2);
    let user = &c.nodes[1];
    let sec = second(10);
    let min = Limit {
        max: 10,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    };
    let remaining = |now: u64| held_of(user, sec, now);
    let now = lease_at_least(&c, sec, 2);
    while remaining(now) > 1 {
        assert!(check(user, "k", &[sec], 1, now).allowed);
    }
    let d = check(user, "k", &[sec, sec], 1, now);
    assert!(!d.allowed, "two tokens of a window holding one");
    assert_eq!(remaining(now), 1, "the one token is kept");
    let d = check(user, "k", &[sec, min], 1, now);
    assert!(!d.allowed, "the minute window holds no token");
    assert_eq!(remaining(now), 1, "the second's token is kept");
    assert!(check(user, "k", &[sec], 1, now).allowed);
}

/// An admitted request reports what its windows hold after its spends: one token less for a
/// window named once, two for a window named twice (both items say what both spends left).
#[test]
fn an_admitted_request_reports_what_its_spends_left() {
    let c = Cluster::new(2);
    let user = &c.nodes[1];
    let sec = second(10);
    let held = |now: u64| held_of(user, sec, now);
    let now = lease_at_least(&c, sec, 3);
    let before = held(now);
    let d = check(user, "k", &[sec], 1, now);
    assert!(d.allowed);
    assert_eq!(d.limits[0].remaining, before - 1);
    assert_eq!(held(now), before - 1);
    let d = check(user, "k", &[sec, sec], 1, now);
    assert!(d.allowed, "two tokens of a window holding {}", before - 1);
    let left: Vec<u64> = d.limits.iter().map(|l| l.remaining).collect();
    assert_eq!(left, vec![before - 3, before - 3]);
    assert_eq!(held(now), before - 3);
}

/// A request of one window (decided without a buffer of items when it holds its tokens) is
/// decided as a request naming that window and another that always holds tokens: admitted or
/// not, what it left, when its window resets, and whether it asks ahead or waits. Checks run
/// at every millisecond of a round's first tenth, past the moment the window runs short.
#[test]
fn a_request_of_one_window_is_decided_as_one_of_several() {
    let limit = Limit {
        max: 400,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    };
    let open = Limit {
        max: 1_000_000,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    };
    let (one, several) = (Cluster::new(2), Cluster::new(2));
    let (mut admitted, mut ahead, mut refused) = (0, 0, 0);
    // The other window is leased first (checked alone, it leaves `k` untouched).
    let mut now = T0;
    while held_of(&several.nodes[1], open, now) < 50 {
        assert!(now < T0 + 60_000, "the other window is leased");
        one.round(now);
        several.round(now);
        for t in now..now + 100 {
            let _ = check(&several.nodes[1], "k", &[open], 1, t);
        }
        now += 200;
    }
    for _ in 0..40 {
        one.round(now);
        several.round(now);
        for t in now..now + 20 {
            let d1 = check(&one.nodes[1], "k", &[limit], 1, t);
            let d2 = check(&several.nodes[1], "k", &[limit, open], 1, t);
            assert!(d2.limits[1].allowed, "at {t}: {d2:?}");
            assert_eq!(d1.allowed, d2.allowed, "at {t}: {d1:?} {d2:?}");
            assert_eq!(d1.limits[0], d2.limits[0], "at {t}: {d1:?} {d2:?}");
            let first: Vec<_> = d2.needs.iter().filter(|n| n.index == 0).collect();
            assert_eq!(d1.needs.iter().collect::<Vec<_>>(), first, "at {t}");
            admitted += usize::from(d1.allowed);
            refused += usize::from(!d1.allowed);
            ahead += d1.needs.iter().filter(|n| n.ahead).count();
        }
        now += 200;
    }
    assert!(
        admitted > 0 && refused > 0 && ahead > 0,
        "{admitted} {refused} {ahead}"
    );
}

/// An admitted request that leaves a user with fewer tokens than its demand over a round (what
/// it spends before the next round's lease comes) asks the owner ahead, once a round, and one
/// that leaves it enough does not; nor does a request in a window that ran dry (at its
/// limit), a refused request, or the owner, which asks its own books when it runs out.
#[test]
fn a_user_left_short_of_a_rounds_demand_asks_ahead() {
    let c = Cluster::new(2);
    let limit = Limit {
        max: 1_000,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    };
    let spec = limit.window;
    let round = c.nodes[1].config().gossip_interval_ms;
    let node = &c.nodes[1];
    let id = node.key_id(b"k", &spec);
    let (mut ahead, mut enough, mut dry_window) = (0, 0, 0);
    // One ask ahead a round.
    let mut next_ahead = 0;
    // 200 a second for two seconds, then 1 000 a second: the tokens leased for the first
    // rate run short of the second's.
    for i in 0..1_400u64 {
        let now = if i < 400 {
            10_000 + 5 * i
        } else {
            12_000 + (i - 400)
        };
        if now % round == 0 {
            c.round(now);
        }
        let may_ask = node.may_ask(id, now);
        let d = check(node, "k", &[limit], 1, now);
        if !d.allowed {
            assert!(d.needs.iter().all(|n| !n.ahead), "at {now}: {d:?}");
            if let Some(need) = d.needs.first().filter(|n| n.ask) {
                c.ask(1, need, limit, now);
            }
            // Decided again once the answer is in, as the gRPC service would: refused in the
            // end if the answer brought no token.
            let again = check_again(node, "k", &[limit], 1, now);
            if !again.allowed {
                node.ran_dry(&again.needs, now);
            }
            continue;
        }
        let remaining = d.limits[0].remaining;
        // The threshold (at least one request) and whether the window ran dry.
        let (short, low) = {
            let guard = node.table.guard();
            let state = node.table.get(&id, &guard).expect("the window");
            let offered = state.ring.offered_totals(&spec, now).total;
            let short = |n| node.short_of_a_round(state, offered, 1, n, now);
            let refused = !short(0);
            let low = (1..=1_000).find(|n| !short(*n));
            (short(remaining), (!refused).then_some(low.unwrap_or(0)))
        };
        let asks_ahead = d.needs.iter().any(|n| n.ahead && n.ask);
        assert_eq!(
            asks_ahead,
            may_ask && short && now >= next_ahead,
            "at {now}: {remaining} left, ask below {low:?}: {d:?}"
        );
        match low {
            None => dry_window += 1,
            // Offered 200 a second over the last window: a round's demand is about 40.
            Some(l) if (11_100..12_000).contains(&now) => {
                assert!((30..=50).contains(&l), "at {now}: {l}");
            }
            Some(_) => {}
        }
        if asks_ahead {
            ahead += 1;
            next_ahead = now + round;
            c.ask(1, &d.needs[0], limit, now);
        } else if low.is_some() {
            enough += 1;
        }
        let at_owner = check(c.owner(), "k", &[limit], 1, now);
        assert!(at_owner.needs.iter().all(|n| !n.ahead), "{at_owner:?}");
    }
    assert!(
        ahead > 0 && enough > 0 && dry_window > 0,
        "{ahead} ahead, {enough} with enough, {dry_window} in a window that ran dry"
    );
}

/// A request that waited for its owner's answer and was then admitted leaves its window free
/// to ask ahead, though its ring counts the wait as a refusal; one refused in the end
/// (`Limiter::ran_dry`) stops asks ahead for the window's length. A need ahead is no refusal.
#[test]
fn only_a_request_refused_in_the_end_stops_asks_ahead() {
    let c = Cluster::new(2);
    let limit = Limit {
        max: 1_000,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    };
    let spec = limit.window;
    let node = &c.nodes[1];
    let id = node.key_id(b"k", &spec);
    let now = 10_000;
    let first = check(node, "k", &[limit], 1, now);
    assert!(!first.allowed, "{first:?}");
    let need = *first.needs.first().filter(|n| n.ask).expect("an ask");
    c.ask(1, &need, limit, now);
    let again = check_again(node, "k", &[limit], 1, now + 1);
    assert!(again.allowed, "{again:?}");
    // With no token left, whether the window would ask ahead at `at`.
    let short = |at: u64| {
        let guard = node.table.guard();
        let state = node.table.get(&id, &guard).expect("the window");
        let offered = state.ring.offered_totals(&spec, at).total;
        node.short_of_a_round(state, offered, 1, 0, at)
    };
    assert!(short(now + 1));
    node.ran_dry(
        &[TokenNeed {
            ahead: true,
            ..need
        }],
        now + 2,
    );
    assert!(short(now + 2), "a need ahead closed asks ahead");
    node.ran_dry(&first.needs, now + 2);
    assert!(!short(now + 2));
    assert!(!short(now + 2 + spec.window_ms()));
    assert!(short(now + 3 + spec.window_ms()));
}

/// A window this node holds a lease of stays in its table, idle or not, until no token of the
/// lease can count (its end and the spend tail after it): dropped sooner, a message of the
/// lease still on its way would hand out afresh what was spent of it.
#[test]
fn a_window_holding_a_lease_outlives_its_idle_ring_until_the_lease_can_count_no_more() {
    let config = LimiterConfig {
        policy: Policy::Ledger(PartitionPolicy::Strict),
        max_keys: 1,
        ..LimiterConfig::default()
    };
    let margin = config.ledger.margin_ms;
    let user = limiter_with(config, 2);
    let window = second(10).window;
    let grant = LeaseGrant {
        user: 2,
        key: user.key_id(b"k", &window),
        window_ms: window.window_ms(),
        buckets: window.buckets(),
        lease: crate::ledger::Lease {
            owner: 1,
            seq: 1,
            expires_ms: T0 + 400,
            segments: smallvec::smallvec![crate::ledger::Segment {
                id: 1,
                count: 3,
                valid_from_ms: T0,
            }],
        },
    };
    assert!(user.accept_lease(&grant, T0));
    let tail_end = T0 + 400 + crate::ledger::spend_tail_ms(window.window_ms(), margin);
    // A full table evicts it no sooner than GC would collect it.
    let _ = user.check(
        &CheckRequest {
            items: &items("other", &[second(10)], 1),
            dry_run: false,
        },
        tail_end - 100,
    );
    assert_eq!(user.stats().evicted_keys, 0, "not evicted");
    let mut removed_at = None;
    for now in (T0..T0 + 5_000).step_by(50) {
        if user.gc(now, 100).removed > 0 {
            removed_at = Some(now);
            break;
        }
    }
    let removed_at = removed_at.expect("removed in the end");
    assert!(
        removed_at >= tail_end && removed_at < tail_end + 2 * window.window_ms(),
        "removed at T0 + {}, the lease counts until T0 + {}",
        removed_at - T0,
        tail_end - T0
    );
}
