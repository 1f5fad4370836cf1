use super::*;

#[test]
fn two_batches_end_to_end_decode_as_a_pair_and_nothing_else_does() {
    let sender = OriginId(9);
    let batch = |key: u128, demand: u32| Batch {
        origin: sender,
        updates: vec![RegisterUpdate {
            key: KeyId(key),
            window_ms: 1_000,
            buckets: 10,
            register: Register {
                version: 3,
                hlc: HlcTimestamp::from_bits(1_700_000_000_000 << 16),
                newest_epoch: 17_000_000_000,
                demand,
                admitted: vec![4, 0, 2],
            },
        }],
    };
    let (registers, sums) = (batch(1, 12), batch(2, 30));
    let one = |b: &Batch| encode_batch(b, sender, 1_400).unwrap().remove(0);
    let mut body = one(&registers);
    body.extend_from_slice(&one(&sums));
    let ([r, s], rejects) = decode_batch_pair(&body, sender).unwrap();
    assert_eq!(
        (r, s, rejects.bad_shape),
        (registers.clone(), sums.clone(), 0)
    );
    // A pair is not one batch, one batch is not a pair, and nothing may trail the second.
    assert_eq!(
        decode_batch(&body, sender).unwrap_err(),
        MessageError::Trailing(one(&sums).len())
    );
    assert!(decode_batch_pair(&one(&registers), sender).is_err());
    let mut trailing = body.clone();
    trailing.push(0);
    assert_eq!(
        decode_batch_pair(&trailing, sender).unwrap_err(),
        MessageError::Trailing(1)
    );
    // Cut anywhere, it fails whole.
    for cut in 0..body.len() {
        assert!(
            decode_batch_pair(&body[..cut], sender).is_err(),
            "cut at {cut}"
        );
    }
}

const T0: u64 = 1_700_000_000_000;

fn update(key: u128, version: u64, hlc_ms: u64, lag: u64, admitted: Vec<u32>) -> RegisterUpdate {
    RegisterUpdate {
        key: KeyId(key),
        window_ms: 1_000,
        buckets: 10,
        register: Register {
            version,
            hlc: HlcTimestamp::new(hlc_ms, 3),
            newest_epoch: hlc_ms / 100 - lag,
            demand: 400,
            admitted,
        },
    }
}

#[test]
fn batches_round_trip_across_datagrams() {
    let mut updates: Vec<_> = (0..200u128)
        .map(|k| {
            update(
                k.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834),
                9,
                T0,
                0,
                vec![20; 11],
            )
        })
        .collect();
    // A relayed register with its own stamp and an older newest bucket.
    updates.push(update(5, 3, T0 - 250, 2, vec![1, 0, 7]));
    let batch = Batch {
        origin: OriginId(42),
        updates,
    };
    let bodies = encode_batch(&batch, OriginId(7), 1_340).unwrap();
    assert!(bodies.len() > 1);
    assert!(bodies.iter().all(|b| b.len() <= 1_340));
    let mut decoded = Vec::new();
    for b in &bodies {
        let (part, rejects) = decode_batch(b, OriginId(7)).unwrap();
        assert_eq!(
            part.origin,
            OriginId(42),
            "a relayed batch names its origin"
        );
        assert_eq!(rejects, EntryRejects::default());
        decoded.extend(part.updates);
    }
    assert_eq!(decoded, batch.updates);
}

#[test]
fn a_typical_register_costs_under_forty_bytes() {
    let batch = Batch {
        origin: OriginId(1),
        updates: (0..30u128)
            .map(|k| update(k << 100 | k, 9, T0, 0, vec![20; 11]))
            .collect(),
    };
    let bodies = encode_batch(&batch, OriginId(1), 1_340).unwrap();
    assert_eq!(bodies.len(), 1);
    let (decoded, _) = decode_batch(&bodies[0], OriginId(1)).unwrap();
    assert_eq!(
        decoded, batch,
        "the sender's own batch leaves its origin implicit"
    );
    let per_entry = bodies[0].len() as f64 / 30.0;
    assert!(per_entry < 40.0, "{per_entry} bytes per register");
}

#[test]
fn a_round_of_aggregates_states_its_stamp_once() {
    use crate::limiter::{CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig};
    // An owner's sums of 30 windows for one subscriber, as one round sends them.
    let owner = Limiter::new(
        LimiterConfig::default(),
        OriginId(1),
        KeyHasher::from_secret(b"test cluster"),
    );
    let limit = Limit {
        max: 1_000,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    };
    let names: Vec<String> = (0..30).map(|i| format!("tenant={i}")).collect();
    for name in &names {
        let items = [CheckItem {
            key: name.as_bytes(),
            limit,
            cost: 1,
        }];
        let req = CheckRequest {
            items: &items,
            dry_run: false,
        };
        assert!(owner.check(&req, T0).unwrap().allowed);
    }
    let keys: Vec<KeyId> = names
        .iter()
        .map(|n| owner.key_id(n.as_bytes(), &limit.window))
        .collect();
    let stamp = owner.aggregate_stamp(T0);
    let one_stamp: Vec<RegisterUpdate> = keys
        .iter()
        .flat_map(|k| owner.aggregates_for(*k, &[OriginId(2)], stamp, T0))
        .collect();
    let stamp_each: Vec<RegisterUpdate> = keys
        .iter()
        .flat_map(|k| owner.aggregates_for(*k, &[OriginId(2)], owner.aggregate_stamp(T0), T0))
        .collect();
    assert_eq!((one_stamp.len(), stamp_each.len()), (30, 30));
    let bytes = |updates: Vec<RegisterUpdate>| -> usize {
        let batch = Batch {
            origin: OriginId(1),
            updates,
        };
        encode_batch(&batch, OriginId(1), 60_000)
            .unwrap()
            .iter()
            .map(Vec::len)
            .sum()
    };
    let (shared, separate) = (bytes(one_stamp), bytes(stamp_each));
    assert!(
        shared + 30 * 8 <= separate,
        "{shared} bytes with one stamp, {separate} with one each"
    );
}

#[test]
fn impossible_shapes_are_counted_not_fatal() {
    let mut bad = update(1, 9, T0, 0, vec![1]);
    bad.buckets = 7; // 1000 ms does not divide into 7 buckets
    let mut long = update(2, 9, T0, 0, vec![1; 80]);
    long.register.version = 9;
    let good = update(3, 9, T0, 0, vec![1]);
    let body = encode_batch(
        &Batch {
            origin: OriginId(1),
            updates: vec![good.clone(), bad, long],
        },
        OriginId(1),
        60_000,
    )
    .unwrap();
    let (batch, rejects) = decode_batch(&body[0], OriginId(1)).unwrap();
    assert_eq!(batch.updates, vec![good]);
    assert_eq!(rejects.bad_shape, 2);
}

#[test]
fn garbage_and_hostile_lengths_fail_cleanly() {
    let s = OriginId(1);
    assert!(decode_batch(&[], s).is_err());
    // No origin, version 1, stamp 1, then a claim of an enormous entry count.
    let hostile = [
        0u8, 1, 1, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F,
    ];
    assert!(matches!(
        decode_batch(&hostile, s),
        Err(MessageError::Decode(_))
    ));
    let good = encode_batch(
        &Batch {
            origin: OriginId(1),
            updates: vec![update(1, 1, T0, 0, vec![1])],
        },
        s,
        1_340,
    )
    .unwrap();
    let mut trailing = good[0].clone();
    trailing.push(0);
    assert_eq!(decode_batch(&trailing, s), Err(MessageError::Trailing(1)));
}

#[test]
fn a_stamp_from_the_send_time_round_trips_and_saves_seven_bytes() {
    let batch = |hlc_ms: u64| Batch {
        origin: OriginId(1),
        updates: vec![
            update(1, 9, hlc_ms, 0, vec![3, 1]),
            // A relayed register keeps its own stamp whole.
            update(2, 4, T0 - 90_000, 1, vec![7]),
        ],
    };
    for (offset, saved) in [(0i64, 7usize), (-3, 7), (250, 5), (-40_000, 3), (90_000, 3)] {
        let sent = T0.checked_add_signed(-offset).unwrap();
        let b = batch(T0);
        let whole = encode_batch(&b, OriginId(1), 1_340).unwrap();
        let from = encode_batch_stamped(&b, OriginId(1), 1_340, Stamp::FromSent(sent)).unwrap();
        assert_eq!(whole[0].len() - from[0].len(), saved, "offset {offset}");
        let (decoded, rejects) =
            decode_batch_stamped(&from[0], OriginId(1), Stamp::FromSent(sent)).unwrap();
        assert_eq!((decoded, rejects.bad_shape), (b.clone(), 0));
        // The same body read against another send time names another stamp: the send
        // time it is read against is the authenticated one of its datagram.
        let (moved, _) =
            decode_batch_stamped(&from[0], OriginId(1), Stamp::FromSent(sent + 5)).unwrap();
        assert_eq!(moved.updates[0].register.hlc.physical_ms(), T0 + 5);
        assert_eq!(moved.updates[1].register.hlc, b.updates[1].register.hlc);
    }
    // A pair, and an empty body, in the same layout.
    let stamp = Stamp::FromSent(T0);
    let one = |b: &Batch| {
        encode_batch_stamped(b, OriginId(1), 1_340, stamp)
            .unwrap()
            .remove(0)
    };
    let (r, s) = (batch(T0), batch(T0 + 7));
    let mut body = one(&r);
    body.extend_from_slice(&one(&s));
    let ([dr, ds], _) = decode_batch_pair_stamped(&body, OriginId(1), stamp).unwrap();
    assert_eq!((dr, ds), (r, s));
    let (empty, _) = decode_batch_stamped(&empty_batch_body(stamp), OriginId(1), stamp).unwrap();
    assert!(empty.updates.is_empty());
    let (empty, _) =
        decode_batch_stamped(&empty_batch_body(Stamp::Whole), OriginId(1), Stamp::Whole).unwrap();
    assert!(empty.updates.is_empty());
}

#[test]
fn a_stamp_out_of_range_of_the_send_time_is_refused() {
    let head = |offset: i64| {
        let head: FromSentHead = (None, 1, offset, 0);
        let mut body = encode(&head);
        body.extend_from_slice(&encode(&Vec::<WireEntry>::new()));
        body
    };
    let at = |sent: u64, offset: i64| {
        decode_batch_stamped(&head(offset), OriginId(1), Stamp::FromSent(sent))
    };
    assert!(at(T0, 0).is_ok());
    assert_eq!(
        at(T0, -(T0 as i64) - 1).unwrap_err(),
        MessageError::StampOutOfRange
    );
    assert_eq!(at(T0, i64::MIN).unwrap_err(), MessageError::StampOutOfRange);
    assert_eq!(
        at(T0, (HLC_MAX_PHYSICAL_MS - T0) as i64 + 1).unwrap_err(),
        MessageError::StampOutOfRange
    );
    assert_eq!(
        at(u64::MAX, i64::MAX).unwrap_err(),
        MessageError::StampOutOfRange
    );
    // And an encoder never writes one: a stamp too far from the send time is refused.
    let far = Batch {
        origin: OriginId(1),
        updates: vec![update(1, 1, T0, 0, vec![1])],
    };
    assert_eq!(
        encode_batch_stamped(&far, OriginId(1), 1_340, Stamp::FromSent(u64::MAX)),
        Err(MessageError::StampOutOfRange)
    );
}
