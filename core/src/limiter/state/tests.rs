use super::*;
use crate::limiter::bound_cache::BoundKey;
use crate::window::EstimateMode;

#[test]
fn published_demand_lasts_while_the_ring_is_active_and_a_change_forgets_the_cached_bound() {
    let spec = WindowSpec::with_default_buckets(1_000).unwrap();
    let state = WindowState::new(spec);
    let t = 1_700_000_000_050;
    assert_eq!(state.published_demand(true), None);
    state.establish();
    assert!(
        !state.established(true),
        "not before a demand is recorded (a check racing a forget)"
    );
    let key = BoundKey {
        epoch: spec.epoch(t),
        limit: 100,
        mode: EstimateMode::Interpolated,
        generation: 0,
    };
    state.bound.store(state.bound.seen(), &key, 7);
    state.publish_demand(40, t + 200, false);
    assert_eq!(state.bound.get(&key), None, "a first demand is a change");
    state.bound.store(state.bound.seen(), &key, 7);
    state.publish_demand(40, t + 400, false);
    assert_eq!(
        state.bound.get(&key),
        Some(7),
        "the same demand changes nothing"
    );
    state.publish_demand(41, t + 600, false);
    assert_eq!(state.bound.get(&key), None);
    assert_eq!(state.published_demand(true), Some(41));
    // Established traffic stays so across emissions, while the window has traffic.
    assert!(!state.established(true));
    state.establish();
    state.publish_demand(42, t + 800, false);
    assert_eq!(state.published_demand(true), Some(42));
    assert!(state.established(true));
    assert!(!state.established(false), "not without traffic");
    state.publish_demand(41, t + 1000, false);
    // A window with no traffic left: peers have stopped counting that register.
    state.bound.store(state.bound.seen(), &key, 7);
    assert_eq!(state.published_demand(false), None);
    assert_eq!(state.bound.get(&key), None);
    assert_eq!(state.published_demand(true), None, "forgotten");
    assert!(!state.established(true), "forgotten with it");
    state.publish_demand(u32::MAX, t + 1200, false);
    assert_eq!(
        state.published_demand(true),
        Some(crate::window::MAX_PUBLISHED)
    );
    // 128 bytes, and the ledger's holdings (one pointer).
    assert!(
        std::mem::size_of::<WindowState>() <= 136,
        "a window stays 136 bytes"
    );
}

#[test]
fn a_binding_share_counts_the_demand_the_owners_sum_was_made_with() {
    let spec = WindowSpec::with_default_buckets(1_000).unwrap();
    let state = WindowState::new(spec);
    let t = 1_700_000_000_050;
    let key = BoundKey {
        epoch: spec.epoch(t),
        limit: 100,
        mode: EstimateMode::Interpolated,
        generation: 0,
    };
    state.publish_demand(40, t, true);
    state.publish_demand(60, t + 200, true);
    assert_eq!(state.counted_demand(true, None), Some(60), "no sum");
    assert_eq!(state.counted_demand(true, Some(t + 100)), Some(40));
    assert_eq!(state.counted_demand(true, Some(t + 250)), Some(60));
    // The same demand again moves the one before it, which a bound may have counted.
    state.bound.store(state.bound.seen(), &key, 7);
    state.publish_demand(60, t + 400, true);
    assert_eq!(
        state.bound.get(&key),
        None,
        "the one before moved: 40 to 60"
    );
    state.bound.store(state.bound.seen(), &key, 7);
    state.publish_demand(60, t + 600, true);
    assert_eq!(state.bound.get(&key), Some(7), "nothing moved");
    state.publish_demand(60, t + 800, false);
    assert_eq!(state.bound.get(&key), None, "no longer binding");
    assert_eq!(state.counted_demand(true, Some(t + 700)), Some(60));
    assert_eq!(
        state.counted_demand(false, Some(t + 700)),
        None,
        "no traffic"
    );
}

#[test]
fn the_last_emission_shares_the_shape_word_without_touching_the_shape_or_the_flags() {
    let largest =
        WindowSpec::new(crate::window::MAX_WINDOW_MS, 64, EstimateMode::Interpolated).unwrap();
    for spec in [largest, WindowSpec::with_default_buckets(1_000).unwrap()] {
        let state = WindowState::new(spec);
        assert!(state.mark_dirty(), "queued once");
        state.set_last_emission(LastEmission::from_bits(u32::MAX));
        assert_eq!(state.last_emission().bits(), (1 << EMISSION_BITS) - 1);
        assert_eq!(state.spec(), spec);
        assert!(state.has_shape(&spec));
        assert!(state.take_dirty(), "the flags survive");
        state.publish_demand(10, 1_700_000_000_000, true);
        assert_eq!(state.spec(), spec);
        assert!(!state.take_dirty(), "an emission marks nothing");
    }
}
