//! Every tuned value of the ledger, with the reason it holds for any traffic and the test that
//! pins it. Nothing else in the ledger is tuned.

/// A lease can be spent for this many summary rounds from its start. A user reports and is
/// leased again every round; a lease must outlast the round, the round trip, and one lost
/// datagram, or a steady user runs dry between two leases. A longer lease only keeps unspent
/// tokens from others longer after a user's demand falls or the user crashes (a lease's slots
/// come back at its end plus the window). Test: `limiter::tests::ledger::steady_users_never_run_dry`.
pub const LEASE_ROUNDS: u64 = 2;

/// The lease lifetime at the default summary round (200 ms).
pub const LEASE_MS: u64 = 400;

/// How far a node's cluster clock may be off the owner's, in ms: nodes that start in agreement
/// stay within it, as cluster time makes no correction within its steering dead band
/// (`DEAD_BAND_MS`, 20 ms either way, wider than this: a correction that small would follow
/// the estimates' latency bias); a node that drifts may rest up to the band from the others
/// before it is corrected. A user stops spending a lease this long before it ends, a
/// lease's tokens take their slots this long past its end plus the window, and a spend takes
/// its slot twice this long past its fine slot's end plus the window (its spender's clock and
/// the next spender's may each be off the owner's the other way), so that every window, on
/// the owner's clock, holds at most `L`. Test:
/// `limiter::tests::ledger::a_user_whose_clock_is_behind_stays_within_the_limit`.
pub const CLOCK_MARGIN_MS: u64 = 10;

/// Post-dated leases start on a grid of this many ms: each round grants a user a few leases
/// (at most `LEASE_MS / START_STEP_MS` of them) instead of one per freed slot, at the cost of a
/// slot idling up to this long. A quarter of a 100 ms bucket. The grid is laid where spends
/// free their slots (a fine slot's end plus the spend tail), so that where slot ends fall on
/// it (every second one at 100 ms buckets) a slot idles not at all. Tests:
/// `ledger::books::tests::segments_are_sized_by_want_and_start_when_slots_free`,
/// `ledger::books::params::tests::starts_lie_where_slots_free`.
pub const START_STEP_MS: u64 = 25;

/// Slots a user counts its spends in per bucket, for the owner (`spend_clock.rs`): the owner
/// counts a spend until its slot's end plus the window, so a token idles at most a slot, a
/// bucket over this, past the moment it leaves the window (on average half of that: 0.6 % of
/// the window at the default 10 buckets, whatever the window or the traffic), where knowing
/// only the bucket idles it half a bucket (5 %). More slots cost a count each on the wire for
/// every bucket a busy window seals. Tests: `ledger::spend_clock::tests`,
/// `limiter::tests::ledger::sealed_spends_free_their_slots_at_the_end_of_their_fine_slot`.
pub const FINE_SLOTS: usize = 8;

/// How long a request that finds no token waits for the owner's answer, in ms: inside Envoy's
/// default 20 ms timeout for the whole call, with room for the rest of it. Where the owner is
/// further than that the request is refused, and the answer serves the next one. The default
/// of `limiter.ask_wait_ms`. Test: `tests/ledger_process.rs`
/// (`a_limit_of_one_a_day_admits_exactly_one_across_five_processes`).
pub const ASK_WAIT_MS: u64 = 15;

/// A user is near its window's owner where its last this many asks each came in a quarter of
/// the ask's wait or less: the answer takes about as long back, so the round trip fits in half
/// the wait, with room for the link to be twice as slow. Where a window's covers do not all
/// fit in its room, an owner gives a near user no cushion past its expected count and keeps
/// the rest in the room, which the user's asks draw from when it runs short; a cushion held
/// at one user is room that another's ask is refused. Two asks, not one: one quick datagram
/// on a jittery link is luck. With links of 1 to 20 ms (the fleet simulator's) about one user
/// in 80 passes, and the figures are those of cushions; with links of 1 to 2 ms, every user
/// does, and the `fleet` traffic's refusals under the limit go from 1.06 % to 0.12 %. Tests:
/// `ledger::books::tests::a_user_is_near_after_two_quick_asks_running`,
/// `ledger::targets::tests::near_users_of_a_crowded_window_hold_no_cushion`.
pub const NEAR_ASKS: u8 = 2;

/// A window far from its limit (its owner's books take less than half of it, counting what its
/// users want) is reported once in this many rounds, and leased for one more than that: what
/// it admits is the same whether its owner hears of it every round or every few, and the
/// datagrams are fewer. A window that refused anything, or whose tokens run low, is reported
/// every round. Test: `limiter::tests::ledger::a_calm_window_is_reported_and_leased_less_often`.
pub const CALM_ROUNDS: u64 = 5;

/// The longest lease a round grants, a calm window's, at a summary round of `round_ms` (an
/// ask's answer may end later: at its deadline plus a lease). A member that becomes a window's
/// owner waits out the longest before it leases, so that every lease of the previous owner has
/// ended, whether or not its user reported it.
pub const fn longest_lease_ms(round_ms: u64) -> u64 {
    (CALM_ROUNDS + 1).saturating_mul(round_ms)
}

/// A lease gives each user, where the window has room, what the user's demand (a Poisson
/// count of what it was offered over the window, scaled to the lease) stays under with this
/// probability: so a user under its limit runs out of tokens before its next lease at most
/// once in a thousand leases, and asks the owner then. Test:
/// `limiter::tests::ledger::steady_users_never_run_dry`, `ledger::quantile::tests`.
pub const LEASE_QUANTILE: f64 = 0.999;

/// An owner counts on its side, for its part of a limit under `strict`, only the members its
/// side heard from within this many rounds, in a cluster of `members`: every member
/// pushes what it heard, and when, to one other member a round (`node/relay.rs`), on a schedule
/// that takes what one member heard to every member of its side within `⌈log2 members⌉ + 1`
/// rounds (the schedule's test checks it), and the horizon is that spread twice (a push lost on
/// the way is made up by the next turn of the schedule) and [`RELAY_SLACK_ROUNDS`]. A member
/// heard by no one on the owner's side counts as away, which holds its part back (never gives
/// it twice); SWIM alone counts the members across a cut as present until it suspects each,
/// over seconds. The horizon is also part of how long a window whose owner went down without a
/// word stays blind (ALGORITHM.md, L3). Tests: `node::relay::tests`,
/// `sim/tests/fleet.rs` (`a_fleet_split_in_two_holds_its_limits_on_both_sides`).
pub const fn present_within_rounds(members: usize) -> u64 {
    let log2 = usize::BITS - members.saturating_sub(1).leading_zeros();
    2 * (log2 as u64 + 1) + RELAY_SLACK_ROUNDS
}

/// Rounds past twice the relay's spread before a member unheard counts as away: the latency
/// of the pushes on the way (a few ms each on a LAN; a round is 200 ms), and the round a push
/// waits to be sent.
pub const RELAY_SLACK_ROUNDS: u64 = 2;

/// A member that leases nothing for its clock says so to every member once in this many rounds
/// (`node/not_leasing.rs`), and its word holds for five sayings (four in a row may be lost):
/// a saying a second at the default round, a word that holds five. A member whose clock is
/// back leases again once its last word has lapsed, and a quiet period after (about seven
/// seconds); its windows' next owners lease them until the word lapses. Each saying is a datagram to every member: once a round would be
/// five a second from that member to each in a fleet of a thousand, for nothing that a word a
/// second does not do. Tests: `node::not_leasing::tests`, `sim/tests/clocks.rs`
/// (`under_the_ledger_a_key_whose_owner_is_cut_off_is_leased_by_the_next_owner`).
pub const NOT_LEASING_SAID_EVERY_ROUNDS: u64 = 5;
