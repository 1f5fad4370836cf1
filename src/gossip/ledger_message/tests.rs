use smallvec::smallvec;

use super::*;
use crate::ledger::HoldingsReport;

const SENT: u64 = 1_700_000_000_000;

#[test]
fn every_entry_round_trips_and_owners_implied_by_the_datagram_are_not_written() {
    let (owner, user) = (7u128, 9u128);
    let report = LedgerReport {
        limit: 100,
        holdings: HoldingsReport {
            held: vec![
                HeldLease {
                    owner,
                    seq: 4,
                    expires_ms: SENT + 150,
                    spent: smallvec![(3, 2), (4, 0)],
                    unspent: 5,
                    lapsed: false,
                },
                HeldLease {
                    owner: 3,
                    seq: 1,
                    expires_ms: SENT - 10,
                    spent: smallvec![(1, 1)],
                    unspent: 0,
                    lapsed: true,
                },
            ],
            closed: false,
            sealed: vec![crate::ledger::SealedBucket {
                epoch: 17_000_000_000,
                counts: [3, 0, 1, 0, 0, 0, 0, 9],
            }],
        },
    };
    let entries = vec![
        LedgerEntry::Report { index: 0, report },
        LedgerEntry::Ask {
            key: KeyId(5),
            window_ms: 1_000,
            buckets: 10,
            limit: 100,
            want: 3,
            deadline_ms: SENT + 15,
            held: Some(HeldLease {
                owner,
                seq: 4,
                expires_ms: 0,
                spent: smallvec![(3, 2)],
                unspent: 0,
                lapsed: false,
            }),
        },
    ];
    let body = encode_ledger(&entries, owner, SENT);
    let (back, rejects) = decode_ledger(&body, user, owner, SENT).unwrap();
    assert_eq!(back, entries);
    assert_eq!(rejects, LedgerRejects::default());

    let lease = Lease {
        owner,
        seq: 5,
        expires_ms: SENT + 440,
        segments: smallvec![
            Segment {
                id: 3,
                count: 12,
                valid_from_ms: SENT,
            },
            Segment {
                id: 4,
                count: 2,
                valid_from_ms: SENT + 40,
            },
        ],
    };
    let grants = vec![
        LedgerEntry::Lease {
            key: KeyId(5),
            window_ms: 1_000,
            buckets: 10,
            lease,
        },
        LedgerEntry::Refused {
            key: KeyId(6),
            retry_after_ms: 80,
        },
        LedgerEntry::Leaving,
    ];
    let body = encode_ledger(&grants, user, SENT);
    // A lease is its window (key and shape, 20 bytes), a few numbers, and its segments.
    assert!(body.len() <= 56, "{} bytes", body.len());
    let (back, _) = decode_ledger(&body, owner, user, SENT).unwrap();
    assert_eq!(back, grants);
    // A lease always names its sender as the owner: a datagram cannot lease for another.
    let (forged, _) = decode_ledger(&body, 8, user, SENT).unwrap();
    assert!(matches!(&forged[0], LedgerEntry::Lease { lease, .. } if lease.owner == 8));
}

#[test]
fn malformed_entries_are_dropped_alone_and_garbage_fails_whole() {
    let bad = vec![
        Wire::Lease {
            key: [0; 16],
            window_ms: 1_000,
            buckets: 7,
            seq: 1,
            expires: 400,
            segments: vec![(1, 1, 0)],
        },
        Wire::Lease {
            key: [0; 16],
            window_ms: 1_000,
            buckets: 10,
            seq: 1,
            expires: 400,
            segments: vec![(2, 1, 0), (1, 1, 0)],
        },
        Wire::Refused {
            key: [1; 16],
            retry_after_ms: 5,
        },
        Wire::SealedReport {
            index: 0,
            limit: 10,
            held: vec![],
            closed: false,
            sealed: vec![(5, [1; FINE_SLOTS]); MOST_SEALED + 1],
        },
    ];
    let body = bincode::serde::encode_to_vec(&bad, WIRE).unwrap();
    let (entries, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        rejects.malformed, 3,
        "a bad shape, segments out of order, too many sealed buckets"
    );
    assert!(decode_ledger(&[0xFF; 9], 1, 2, SENT).is_err());
    let mut trailing = body.clone();
    trailing.push(0);
    assert!(matches!(
        decode_ledger(&trailing, 1, 2, SENT),
        Err(MessageError::Trailing(1))
    ));
}

#[test]
fn heard_times_round_trip_never_later_than_written() {
    let members = vec![(1u32, SENT - 3), (u32::MAX, SENT - 1_234), (77, SENT + 5)];
    let entries = vec![LedgerEntry::Heard {
        members: members.clone(),
    }];
    let body = encode_ledger(&entries, 2, SENT);
    let (back, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
    assert_eq!(rejects, LedgerRejects::default());
    let [LedgerEntry::Heard { members: got }] = back.as_slice() else {
        panic!("one heard entry, got {back:?}");
    };
    assert_eq!(got.len(), members.len());
    for ((short, written), (short_back, read)) in members.iter().zip(got) {
        assert_eq!(short, short_back);
        assert!(read <= written, "read {read}, written {written}");
        assert!(
            written - read < HEARD_UNIT_MS,
            "read {read}, written {written}"
        );
    }
    // What one datagram holds fits one.
    let full = vec![LedgerEntry::Heard {
        members: (0..MOST_HEARD as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761), SENT - u64::from(i) * 37))
            .collect(),
    }];
    assert!(encode_ledger(&full, 2, SENT).len() < 1_000);
}

#[test]
fn a_heard_entry_too_long_or_out_of_range_is_dropped_alone() {
    let bad = vec![
        Wire::Heard {
            newest: 0,
            members: vec![([1; 4], 0); MOST_HEARD + 1],
        },
        Wire::Heard {
            newest: 0,
            members: vec![([1; 4], u32::MAX)],
        },
        Wire::Heard {
            newest: i64::MIN,
            members: vec![([1; 4], 0)],
        },
        Wire::Heard {
            newest: -5,
            members: vec![([2; 4], 1)],
        },
    ];
    let body = bincode::serde::encode_to_vec(&bad, WIRE).unwrap();
    let (entries, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
    assert_eq!(
        rejects.malformed, 2,
        "too many members; a newest time before 0"
    );
    assert_eq!(
        entries,
        vec![
            LedgerEntry::Heard {
                members: vec![(0x0101_0101, SENT - 42_949_672_950)]
            },
            LedgerEntry::Heard {
                members: vec![(0x0202_0202, SENT - 15)]
            },
        ]
    );
}

/// The ledger section as a build before sealed buckets wrote and read it (frozen here: a
/// member of that build must read what this one sends it).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum WireBeforeSealed {
    Report {
        index: u32,
        limit: u32,
        held: Vec<WireHeld>,
        closed: bool,
    },
    Lease {
        key: [u8; 16],
        window_ms: u64,
        buckets: u16,
        seq: u32,
        expires: i64,
        segments: Vec<(u32, u32, i64)>,
    },
    Ask {
        key: [u8; 16],
        window_ms: u64,
        buckets: u16,
        limit: u32,
        want: u32,
        deadline: i64,
        held: Option<(u32, Vec<(u32, u32)>)>,
    },
    Refused {
        key: [u8; 16],
        retry_after_ms: u32,
    },
    Leaving,
    Heard {
        newest: i64,
        members: Vec<([u8; 4], u32)>,
    },
}

/// A report without sealed buckets (all a member of an older build is sent) is read by that
/// build, and what that build writes is read here; a report with sealed buckets is not
/// (the section fails whole: it goes only to members that said they read it).
#[test]
fn a_build_before_sealed_buckets_reads_reports_without_them_and_is_read() {
    let report = |sealed: Vec<crate::ledger::SealedBucket>| LedgerEntry::Report {
        index: 3,
        report: LedgerReport {
            limit: 9,
            holdings: HoldingsReport {
                held: vec![HeldLease {
                    owner: 5,
                    seq: 2,
                    expires_ms: SENT + 300,
                    spent: smallvec![(1, 4)],
                    unspent: 6,
                    lapsed: false,
                }],
                closed: false,
                sealed,
            },
        },
    };
    let entries = [report(Vec::new()), LedgerEntry::Leaving];
    let plain = encode_ledger(&entries, 1, SENT);
    let (old, used): (Vec<WireBeforeSealed>, usize) =
        bincode::serde::decode_from_slice(&plain, WIRE).expect("an older build reads it");
    assert_eq!(used, plain.len());
    assert!(
        matches!(
            old[..],
            [
                WireBeforeSealed::Report {
                    index: 3,
                    limit: 9,
                    ..
                },
                WireBeforeSealed::Leaving
            ]
        ),
        "{old:?}"
    );
    let written_before = bincode::serde::encode_to_vec(&old, WIRE).unwrap();
    let (back, rejects) = decode_ledger(&written_before, 2, 1, SENT).unwrap();
    assert_eq!(rejects, LedgerRejects::default());
    assert_eq!(back, entries);
    let sealed = vec![crate::ledger::SealedBucket {
        epoch: 4,
        counts: [1; FINE_SLOTS],
    }];
    let body = encode_ledger(&[report(sealed.clone())], 1, SENT);
    let (back, _) = decode_ledger(&body, 2, 1, SENT).unwrap();
    assert_eq!(back, vec![report(sealed)]);
    assert!(
        bincode::serde::decode_from_slice::<Vec<WireBeforeSealed>, _>(&body, WIRE).is_err(),
        "an older build cannot read sealed buckets"
    );
}

/// A leaving owner's handoff round-trips, its ends before and after the send time; one naming
/// more windows than an entry holds is dropped alone, the datagram's other entries kept.
#[test]
fn a_handoff_round_trips_and_one_too_long_is_dropped_alone() {
    let ends = vec![(KeyId(7), SENT + 400), (KeyId(u128::MAX), SENT - 30)];
    let entries = vec![LedgerEntry::Handoff { ends }, LedgerEntry::Leaving];
    let body = encode_ledger(&entries, 2, SENT);
    let (back, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
    assert_eq!(back, entries);
    assert_eq!(rejects, LedgerRejects::default());

    let too_many = (0..=MOST_HANDED as u128)
        .map(|k| (KeyId(k), SENT))
        .collect();
    let entries = vec![
        LedgerEntry::Handoff { ends: too_many },
        LedgerEntry::Leaving,
    ];
    let body = encode_ledger(&entries, 2, SENT);
    let (back, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
    assert_eq!(back, vec![LedgerEntry::Leaving]);
    assert_eq!(rejects.malformed, 1);
}

/// A leaving owner's books round-trip, from before or after the send time; books with too
/// many steps, a step of no length or an end past time's range are dropped alone, the
/// datagram's other entries kept.
#[test]
fn handed_books_round_trip_and_malformed_ones_are_dropped_alone() {
    use crate::ledger::{HandedBooks, MOST_HANDED_STEPS};
    let books = |at_ms, steps| LedgerEntry::Books {
        key: KeyId(9),
        window_ms: 1_000,
        buckets: 10,
        books: HandedBooks { at_ms, steps },
    };
    let entries = vec![
        books(
            SENT - 5,
            vec![(SENT + 100, 40), (SENT + 1_200, 0), (SENT + 1_400, 7)],
        ),
        books(SENT + 3, Vec::new()),
        LedgerEntry::Leaving,
    ];
    let body = encode_ledger(&entries, 2, SENT);
    let (back, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
    assert_eq!(back, entries);
    assert_eq!(rejects, LedgerRejects::default());

    let long: Vec<(u64, u64)> = (1..=MOST_HANDED_STEPS as u64 + 1)
        .map(|i| (SENT + i, 1))
        .collect();
    for (wire, why) in [
        (
            Wire::Books {
                key: [1; 16],
                window_ms: 1_000,
                buckets: 10,
                at: 0,
                steps: long.iter().map(|_| (1, 1)).collect(),
            },
            "too many steps",
        ),
        (
            Wire::Books {
                key: [1; 16],
                window_ms: 1_000,
                buckets: 10,
                at: 0,
                steps: vec![(5, 1), (0, 2)],
            },
            "a step of no length",
        ),
        (
            Wire::Books {
                key: [1; 16],
                window_ms: 1_000,
                buckets: 10,
                at: 0,
                steps: vec![(u64::MAX, 1)],
            },
            "an end past u64",
        ),
        (
            Wire::Books {
                key: [1; 16],
                window_ms: 1_000,
                buckets: 10,
                at: i64::MIN,
                steps: vec![],
            },
            "a start before 0",
        ),
        (
            Wire::Books {
                key: [1; 16],
                window_ms: 0,
                buckets: 10,
                at: 0,
                steps: vec![],
            },
            "no window shape",
        ),
    ] {
        let body = bincode::serde::encode_to_vec(vec![wire, Wire::Leaving], WIRE).unwrap();
        let (back, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
        assert_eq!(back, vec![LedgerEntry::Leaving], "{why}");
        assert_eq!(rejects.malformed, 1, "{why}");
    }
}

/// A member's word that it leases nothing round-trips with its number, whatever its size.
#[test]
fn a_word_that_the_sender_leases_nothing_round_trips() {
    for (seq, holds_ms) in [(1, 5_000), (300, 0), (u64::MAX, u32::MAX)] {
        let entries = vec![LedgerEntry::NotLeasing { seq, holds_ms }];
        let body = encode_ledger(&entries, 2, SENT);
        let (back, rejects) = decode_ledger(&body, 1, 2, SENT).unwrap();
        assert_eq!(back, entries);
        assert_eq!(rejects, LedgerRejects::default());
    }
}
