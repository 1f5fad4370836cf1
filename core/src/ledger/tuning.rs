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

/// How far two cluster clocks may disagree, in ms: cluster time keeps nodes within its
/// steering dead band of each other (`DEAD_BAND_MS`, 20 ms, either way of the reference, so a
/// pair is closer than that in the common case). A user stops spending a lease this long before
/// it ends and an owner counts a spend this long past its bucket's end, so that a window on any
/// node's clock holds at most `L`. Test:
/// `limiter::tests::ledger::a_user_whose_clock_is_behind_stays_within_the_limit`.
pub const CLOCK_MARGIN_MS: u64 = 10;

/// Post-dated leases start on multiples of this many ms: each round grants a user a few
/// leases (at most `LEASE_MS / START_STEP_MS` of them) instead of one per freed slot, at the
/// cost of a slot idling up to this long. A quarter of a 100 ms bucket. Test:
/// `ledger::books::tests::segments_are_sized_by_want_and_start_when_slots_free`.
pub const START_STEP_MS: u64 = 25;

/// How long a request that finds no token waits for the owner's answer, in ms: inside Envoy's
/// default 20 ms timeout for the whole call, with room for the rest of it. Where the owner is
/// further than that the request is refused, and the answer serves the next one. The default
/// of `limiter.ask_wait_ms`. Test: `tests/ledger_process.rs`
/// (`a_limit_of_one_a_day_admits_exactly_one_across_five_processes`).
pub const ASK_WAIT_MS: u64 = 15;

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

/// While a partition is possible (a member suspected, or gone down without saying it was
/// leaving), an owner counts on its side, for its part of a limit under `strict`, only the
/// members it heard from within this many rounds: a member that uses any of the owner's windows
/// reports at least every [`CALM_ROUNDS`] rounds, and twice that leaves room for a lost report.
/// A member it hears nothing from counts as away, which holds its part back (never gives it
/// twice); SWIM alone counts the members across a cut as present until it suspects each, over
/// seconds. Test: `sim/tests/fleet.rs`, `a_fleet_split_in_two_holds_its_limits_on_both_sides`.
pub const PRESENT_WITHIN_ROUNDS: u64 = 2 * CALM_ROUNDS;
