//! The hot-path ratio to governor, measured interleaved: short slices of each limiter alternate
//! for a few seconds, and the ratio is the median over slice pairs. On a shared, noisy machine
//! this is far steadier than criterion's back-to-back runs, where a neighbour's burst lands on
//! one side only. `cargo bench --bench hot_path_ratio`.

use std::hint::black_box;
use std::num::NonZeroU32;

use governor::{Quota, RateLimiter};
use limitmesh::clock::{Clock, SystemClock, monotonic_now};
use limitmesh::limiter::{CheckItem, CheckRequest, Limiter};

mod common;

use common::{access_order, keys, ledger_limiter, limiter, open_limit};

const SLICE: usize = 1 << 14;
const PAIRS: usize = 300;

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let limit = open_limit();
    let clock = SystemClock::system();
    let keys = keys();
    let share = limiter();
    let ledger = ledger_limiter(&keys, clock.now_ms());
    let governor = RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
    let order = access_order(SLICE);

    let check = |limiter: &Limiter, key: &str| {
        let item = [CheckItem {
            key: black_box(key.as_bytes()),
            limit,
            cost: 1,
        }];
        let req = CheckRequest {
            items: &item,
            dry_run: false,
        };
        limiter.check(&req, clock.now_ms()).expect("valid").allowed
    };
    let ours =
        |ledger_mode: bool, key: &str| check(if ledger_mode { &ledger } else { &share }, key);
    // Every case times the admitted path: a refusal would be timed silently otherwise.
    for key in &keys {
        assert!(ours(false, key) && ours(true, key), "{key} admitted");
    }
    let theirs = |key: &String| governor.check_key(black_box(key)).is_ok();

    println!(
        "{:<16} {:>14} {:>14} {:>8}",
        "case", "limitmesh ns", "governor ns", "ratio"
    );
    // The default admission, then the ledger's (a check spends a token the node holds).
    for (case, hot, ledger_mode) in [
        ("hot_key", true, false),
        ("keys_10k", false, false),
        ("ledger_hot_key", true, true),
        ("ledger_keys_10k", false, true),
    ] {
        let key_of = |i: usize| if hot { &keys[0] } else { &keys[order[i]] };
        let mut ratios = Vec::with_capacity(PAIRS);
        let (mut a_all, mut b_all) = (Vec::new(), Vec::new());
        for round in 0..PAIRS + 20 {
            let start = monotonic_now();
            for i in 0..SLICE {
                black_box(ours(ledger_mode, key_of(i)));
            }
            let a = start.elapsed().as_nanos() as f64 / SLICE as f64;
            let start = monotonic_now();
            for i in 0..SLICE {
                black_box(theirs(key_of(i)));
            }
            let b = start.elapsed().as_nanos() as f64 / SLICE as f64;
            // The first rounds warm caches and the table.
            if round >= 20 {
                ratios.push(a / b);
                a_all.push(a);
                b_all.push(b);
            }
            share.collect_changed(clock.now_ms());
            ledger.collect_changed(clock.now_ms());
        }
        println!(
            "{case:<16} {:>14.1} {:>14.1} {:>8.2}",
            median(&mut a_all),
            median(&mut b_all),
            median(&mut ratios)
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
