use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{heard_chunk, relay_target};
use crate::gossip::ledger_message::{LedgerEntry, MOST_HEARD, encode_ledger};
use crate::gossip::message::{Stamp, empty_batch_body};

/// The oldest news any member holds of any other, over `rounds` rounds after the first
/// `rounds / 2`, when each of `n` members (ids drawn from `seed`) pushes everything it heard to
/// its round's target and every push arrives within the round.
fn oldest_news(n: usize, seed: u64, rounds: u64) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ids: Vec<u128> = (0..n).map(|_| rng.random()).collect();
    ids.sort_unstable();
    // heard[i][j]: the latest round member i knows member j was heard in.
    let mut heard = vec![vec![0u64; n]; n];
    let mut oldest = 0;
    for round in 1..=rounds {
        let before = heard.clone();
        for (i, me) in ids.iter().enumerate() {
            let target = relay_target(*me, round, &ids).expect("a member to push to");
            let t = ids.binary_search(&target).expect("a member");
            for j in 0..n {
                heard[t][j] = heard[t][j].max(before[i][j]);
            }
            heard[t][i] = round;
        }
        for (i, row) in heard.iter_mut().enumerate() {
            row[i] = round;
        }
        if round > rounds / 2 {
            let worst = heard.iter().flatten().map(|h| round - h).max().unwrap_or(0);
            oldest = oldest.max(worst);
        }
    }
    oldest
}

#[test]
fn what_a_member_heard_reaches_every_member_within_the_rounds() {
    for n in [2, 3, 5, 8, 16, 17, 40, 100, 200, 500] {
        for seed in 1..=3 {
            let oldest = oldest_news(n, seed, 80);
            let log2 = u64::from(usize::BITS - (n - 1).leading_zeros());
            let spread = log2 + 1;
            println!("{n} members, seed {seed}: oldest news {oldest} rounds, spread {spread}");
            assert!(
                oldest <= spread,
                "{n} members, seed {seed}: news {oldest} rounds old, past the spread of {spread}"
            );
        }
    }
}

#[test]
fn in_a_round_every_member_pushes_to_a_different_one() {
    for n in [2usize, 3, 7, 40] {
        let ring: Vec<u128> = (0..n as u128).map(|i| i * 1_000 + 7).collect();
        for round in 0..12 {
            let mut targets: Vec<u128> = ring
                .iter()
                .map(|me| relay_target(*me, round, &ring).expect("a target"))
                .collect();
            assert!(
                ring.iter().zip(&targets).all(|(me, t)| me != t),
                "not itself"
            );
            targets.sort_unstable();
            targets.dedup();
            assert_eq!(targets.len(), n, "{n} members, round {round}");
        }
    }
    assert_eq!(relay_target(7, 0, &[7]), None, "alone");
    assert_eq!(relay_target(8, 0, &[7, 9]), None, "not on the ring");
}

/// A `Heard` entry of as many members as `heard_chunk` allows fits a datagram body on its own,
/// at the least packet size a cluster may configure and at the default, whatever the times.
#[test]
fn a_heard_chunk_fits_a_datagram_at_every_packet_size() {
    const SENT: u64 = 1_700_000_000_000;
    for max_body in [491, 700, 1_255, 8_000] {
        let n = heard_chunk(max_body);
        assert!((1..=MOST_HEARD).contains(&n));
        // Distances of 2^31 units take the most varint bytes.
        let members: Vec<(u32, u64)> = (0..n as u32)
            .map(|i| (u32::MAX - i, SENT - (u64::from(i % 2) << 35)))
            .collect();
        let mut body = empty_batch_body(Stamp::Whole);
        body.extend(encode_ledger(&[LedgerEntry::Heard { members }], 1, SENT));
        assert!(
            body.len() <= max_body,
            "{n} members: {} > {max_body}",
            body.len()
        );
    }
    assert_eq!(heard_chunk(0), 1);
}
