//! A member's word that it leases nothing, on the wire between node cores: taken from the
//! member itself, it leaves the member off the receiver's ring for the word's hold; a copy is
//! not taken again.

use super::ledger_ask::{ledger_nodes, send_to_first};
use super::*;
use crate::gossip::ledger_message::LedgerEntry;

/// Whether node 0's ring names node `id` the owner of any of a few hundred windows.
fn owns_some_here(net: &Net, id: u128) -> bool {
    let spec = limit().window;
    (0..300).any(|i| {
        let key = format!("k{i}").into_bytes();
        let l = net.node(0).limiter();
        l.owner_of(l.key_id(&key, &spec))
            .is_some_and(|o| o.owner == id)
    })
}

#[test]
fn a_members_word_takes_it_off_the_ring_for_its_hold_and_a_copy_is_not_taken_again() {
    let mut net = ledger_nodes(3, |_| 0);
    net.run_ms(3_000);
    assert_eq!(net.members(0), 2, "the three formed a cluster");
    assert!(
        owns_some_here(&net, 3),
        "node 2 owns windows on node 0's ring"
    );
    let word = LedgerEntry::NotLeasing {
        seq: 1,
        holds_ms: 2_000,
    };
    send_to_first(&mut net, 2, vec![word.clone()]);
    net.run_ms(400);
    assert!(
        !owns_some_here(&net, 3),
        "off node 0's ring while the word holds"
    );
    // The word holds 2 s from its sending, less a round; node 2 says nothing more (its clock
    // is fine), so it is back on the ring after that.
    net.run_ms(2_000);
    assert!(owns_some_here(&net, 3), "back once the word lapsed");
    // A copy of the word (a replay) is not taken again.
    send_to_first(&mut net, 2, vec![word]);
    net.run_ms(400);
    assert!(owns_some_here(&net, 3), "a copy is not taken");
    // A newer word is.
    let newer = LedgerEntry::NotLeasing {
        seq: 2,
        holds_ms: 2_000,
    };
    send_to_first(&mut net, 2, vec![newer]);
    net.run_ms(400);
    assert!(!owns_some_here(&net, 3), "a newer word is taken");
}
