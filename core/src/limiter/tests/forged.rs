//! Registers an origin never emitted, as a peer holding the cluster key could send them: a
//! version far ahead of the origin's is refused, and the origin's own registers win over one
//! it cannot have emitted after them.

use super::*;
use crate::crdt::Arbitration;
use crate::crdt::succession::{MAX_VERSION_LEAD, OVERTAKEN_WITHIN_MS};

/// Origin 1's register of window `k` as emitted in its batch, with another stamp and counts.
fn forgery(genuine: &Batch, version: u64, hlc_ms: u64, admitted: u32) -> Batch {
    let mut forged = genuine.clone();
    for u in &mut forged.updates {
        u.register.version = version;
        u.register.hlc = HlcTimestamp::new(hlc_ms, 0);
        u.register.demand = admitted;
        u.register.admitted = vec![admitted];
    }
    forged
}

/// What `l` holds of `origin`'s admissions on `k`.
fn held_of(l: &Limiter, origin: u128, lim: &Limit, now: u64) -> f64 {
    l.inspect(b"k", lim, now).map_or(0.0, |ins| {
        ins.origins
            .iter()
            .filter(|o| o.origin == OriginId(origin))
            .map(|o| o.admitted)
            .sum()
    })
}

#[test]
fn a_version_further_ahead_than_the_origin_could_emit_is_refused_and_counted() {
    let (a, b) = (
        limiter_with(LimiterConfig::default(), 1),
        limiter_with(LimiterConfig::default(), 2),
    );
    let lim = [second(1_000)];
    admitted_in(&a, "k", &lim, 40, T0);
    let genuine = a.collect_changed(T0 + 1).unwrap();
    assert_eq!(b.merge_sent_by(&genuine, OriginId(1), T0 + 2).inserted, 1);
    let v = genuine.updates[0].register.version;
    // Zero counts under the largest version: refused, the origin's 40 stand.
    let report = b.merge(&forgery(&genuine, u64::MAX, T0 + 1, 0), T0 + 2);
    assert_eq!((report.version_jump, report.replaced), (1, 0));
    let beyond = forgery(&genuine, v + MAX_VERSION_LEAD + 101, T0 + 101, 0);
    assert_eq!(b.merge(&beyond, T0 + 102).version_jump, 1);
    assert_eq!(held_of(&b, 1, &lim[0], T0 + 102), 40.0);
    // Within what 100 ms allows, it is taken (it could be the origin's).
    let within = forgery(&genuine, v + MAX_VERSION_LEAD + 100, T0 + 101, 0);
    assert_eq!(b.merge(&within, T0 + 102).replaced, 1);
    assert_eq!(held_of(&b, 1, &lim[0], T0 + 102), 0.0);
    // The origin's digest is not raised by a refused version.
    let digest = b.digest();
    let of_a = digest.iter().find(|(o, _)| *o == OriginId(1)).unwrap().1;
    assert_eq!(of_a, v + MAX_VERSION_LEAD + 100);
}

#[test]
fn the_origins_own_register_replaces_a_forged_one_it_cannot_have_followed() {
    for arbitration in [Arbitration::VectorDominance, Arbitration::MaxTimestamp] {
        the_origin_replaces_a_forgery(LimiterConfig {
            arbitration,
            ..LimiterConfig::default()
        });
    }
}

/// Under either order a forged register ranks above the origin's next: by its version, or
/// by its stamp 5 s ahead.
fn the_origin_replaces_a_forgery(config: LimiterConfig) {
    let (a, b) = (
        limiter_with(config.clone(), 1),
        limiter_with(config.clone(), 2),
    );
    let lim = [second(1_000)];
    admitted_in(&a, "k", &lim, 40, T0);
    let genuine = a.collect_changed(T0 + 1).unwrap();
    b.merge_sent_by(&genuine, OriginId(1), T0 + 2);
    let v = genuine.updates[0].register.version;
    // Relayed while origin 1 was not live: zero counts, a version ahead by as much as the
    // bound takes, a stamp 5 s ahead (within the clock drift allowed).
    let forged = forgery(&genuine, v + MAX_VERSION_LEAD, T0 + 5_000, 0);
    assert_eq!(b.merge(&forged, T0 + 3).replaced, 1);
    assert_eq!(held_of(&b, 1, &lim[0], T0 + 3), 0.0);
    // The origin's next round, from the origin itself: its word wins at once.
    admitted_in(&a, "k", &lim, 5, T0 + 200);
    let next = a.collect_changed(T0 + 200).unwrap();
    let report = b.merge_sent_by(&next, OriginId(1), T0 + 201);
    assert_eq!((report.superseded, report.stale), (1, 0));
    assert_eq!(held_of(&b, 1, &lim[0], T0 + 201), 45.0);
    // Relayed by anyone else, the same register would have been stale.
    let c = limiter_with(config, 3);
    c.merge(&forged, T0 + 3);
    let relayed = c.merge(&next, T0 + 201);
    assert_eq!((relayed.dominated, relayed.superseded), (1, 0));
}

#[test]
fn an_origins_datagrams_that_overtook_each_other_keep_the_later_register() {
    let (a, b) = (
        limiter_with(LimiterConfig::default(), 1),
        limiter_with(LimiterConfig::default(), 2),
    );
    let lim = [second(1_000)];
    admitted_in(&a, "k", &lim, 10, T0);
    let first = a.collect_changed(T0 + 1).unwrap();
    admitted_in(&a, "k", &lim, 10, T0 + 200);
    let second_round = a.collect_changed(T0 + 201).unwrap();
    // The second arrives first; the first, late, is stale: the origin's own order.
    b.merge_sent_by(&second_round, OriginId(1), T0 + 202);
    let late = b.merge_sent_by(&first, OriginId(1), T0 + 203);
    assert_eq!((late.stale + late.dominated, late.superseded), (1, 0));
    assert_eq!(held_of(&b, 1, &lim[0], T0 + 203), 20.0);
    // Overtaken by more than `OVERTAKEN_WITHIN_MS` of the origin's clock, the late one is
    // taken for the origin's word; its next emission brings the count back.
    let much_later = forgery(&second_round, 50, T0 + 2 + OVERTAKEN_WITHIN_MS, 20);
    let c = limiter_with(LimiterConfig::default(), 3);
    c.merge_sent_by(&much_later, OriginId(1), T0 + 203);
    assert_eq!(c.merge_sent_by(&first, OriginId(1), T0 + 204).superseded, 1);
}
