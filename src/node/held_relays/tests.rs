use super::*;
use crate::crdt::{HlcTimestamp, Register};

const WINDOW_MS: u64 = 1_000;
const BUCKETS: u16 = 10;
/// In epoch 100 of 100 ms buckets: its last slot frees at 11 100 ms.
const NOW_MS: u64 = 10_050;

fn update(key: u128, version: u64, newest_epoch: u64, admitted: u32) -> RegisterUpdate {
    RegisterUpdate {
        key: KeyId(key),
        window_ms: WINDOW_MS,
        buckets: BUCKETS,
        register: Register {
            version,
            hlc: HlcTimestamp::new(newest_epoch * 100, 0),
            newest_epoch,
            demand: admitted,
            admitted: vec![admitted],
        },
    }
}

fn batch(origin: u128, updates: Vec<RegisterUpdate>) -> Batch {
    Batch {
        origin: OriginId(origin),
        updates,
    }
}

#[test]
fn a_relay_is_released_once_its_origin_departed() {
    let mut held = HeldRelays::default();
    held.hold(&batch(7, vec![update(1, 5, 100, 30)]), 10, NOW_MS);
    held.hold(&batch(8, vec![update(1, 2, 100, 4)]), 10, NOW_MS);
    // Held, not released, while both origins are listed.
    assert!(held.release(NOW_MS, |_| false).is_empty());
    assert_eq!(held.len(), 2);
    // Origin 7 departs: its relay comes out, origin 8's stays.
    let out = held.release(NOW_MS, |o| o == 7);
    assert_eq!(out, vec![batch(7, vec![update(1, 5, 100, 30)])]);
    assert_eq!(held.len(), 1);
    held.release(NOW_MS, |_| true);
    assert!(held.is_empty());
}

#[test]
fn the_newest_relay_of_a_window_is_kept_and_the_origins_own_register_drops_it() {
    let mut held = HeldRelays::default();
    held.hold(&batch(7, vec![update(1, 5, 100, 30)]), 10, NOW_MS);
    held.hold(&batch(7, vec![update(1, 4, 100, 20)]), 10, NOW_MS);
    held.hold(&batch(7, vec![update(1, 6, 100, 35)]), 10, NOW_MS);
    // An own register of a lower version than held leaves it.
    held.drop_superseded_by(&batch(7, vec![update(1, 5, 100, 30)]));
    assert_eq!(held.len(), 1);
    let out = held.release(NOW_MS, |_| true);
    assert_eq!(out, vec![batch(7, vec![update(1, 6, 100, 35)])]);
    // One of a version as high drops it.
    held.hold(&batch(7, vec![update(1, 6, 100, 35)]), 10, NOW_MS);
    held.drop_superseded_by(&batch(7, vec![update(1, 6, 100, 35)]));
    assert!(held.is_empty());
}

#[test]
fn what_is_held_is_bounded_and_dropped_once_its_window_slid_past() {
    let mut held = HeldRelays::default();
    let many: Vec<_> = (0..5).map(|k| update(k, 1, 100, 1)).collect();
    held.hold(&batch(7, many), 3, NOW_MS);
    assert_eq!(held.len(), 3, "capacity");
    // A newer version of a held window still replaces it when full.
    held.hold(&batch(7, vec![update(0, 2, 100, 9)]), 3, NOW_MS);
    assert_eq!(held.len(), 3);
    assert!(held.release(11_099, |_| false).is_empty());
    assert_eq!(held.len(), 3, "still in its window");
    assert!(held.release(11_100, |_| true).is_empty());
    assert_eq!(held.len(), 0, "slid out of its window, released to no one");
}

#[test]
fn a_relay_in_no_windows_shape_ahead_of_a_merge_or_past_its_window_is_not_held() {
    let mut held = HeldRelays::default();
    let mut bad_shape = update(1, 1, 100, 1);
    bad_shape.buckets = 0;
    // A merge takes a register up to a window's buckets ahead: 10 here.
    let ahead = update(2, 1, 111, 1);
    let past = update(3, 1, 89, 1);
    held.hold(&batch(7, vec![bad_shape, ahead, past]), 10, NOW_MS);
    assert!(held.is_empty());
    held.hold(&batch(7, vec![update(4, 1, 110, 1)]), 10, NOW_MS);
    assert_eq!(held.len(), 1);
}
