//! Books a leaving owner hands over: which windows it hands, that it leases nothing after, and
//! that books count at the next owner only where its view says their sender handed the
//! window.

use super::ledger::{Cluster, OwnedBy, held_of};
use super::*;
use crate::ledger::{AskAnswer, HandedBooks};

/// Every window is owned by `1`, leasing from `quiet_until_ms`, with the books of `handed_by`
/// counted, and the side's part `part`.
#[derive(Debug)]
struct Handing {
    quiet_until_ms: u64,
    handed_by: Option<u128>,
    part: (u64, u64),
}

impl OwnerView for Handing {
    fn owner_of(&self, _key: KeyId) -> Option<OwnerOf> {
        Some(OwnerOf {
            handed_by: self.handed_by,
            ..OwnerOf::quiet_until(1, self.quiet_until_ms)
        })
    }

    fn lease_part(&self) -> (u64, u64) {
        self.part
    }
}

fn per_second(max: u32) -> Limit {
    Limit {
        max,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    }
}

/// Two nodes, the user (node 1) having spent the window of `"k"` under 10 a second to its
/// limit: the cluster, the limit, when the last was admitted, and the window.
fn filled() -> (Cluster, Limit, u64, KeyId) {
    let c = Cluster::new(2);
    let limit = per_second(10);
    let now = fill(&c, "k", limit);
    let id = c.owner().key_id(b"k", &limit.window);
    (c, limit, now, id)
}

/// The user (node 1) asks the owner for a token of window `id` at `at`, as a request would.
fn ask(c: &Cluster, id: KeyId, limit: Limit, at: u64) -> AskAnswer {
    let wait = (at, at + c.owner().config().ledger.ask_wait_ms);
    let owner = OwnerOf::quiet_until(1, 0);
    c.owner()
        .owner_ask(2, id, &limit.window, limit.max, 1, None, wait, at, &owner)
}

/// The user (node 1) spends the window of `key` to its limit: when the last was admitted.
fn fill(c: &Cluster, key: &str, limit: Limit) -> u64 {
    let mut now = T0;
    let mut admitted = 0;
    while admitted < limit.max {
        c.round(now);
        admitted += u32::from(c.check(1, key, limit, now));
        now += 5;
        assert!(now < T0 + 900, "the window filled: {admitted}");
    }
    now
}

/// A leaving owner hands the books of a window it leases with its whole part, counting what
/// its user spent; not of one in its quiet period, nor when its side leases a part of each
/// limit (its books may miss what others leased or spent). From then on it leases nothing:
/// its round grants nothing, and an ask is refused.
#[test]
fn a_leaving_owner_hands_only_the_books_it_leases_whole_and_leases_nothing_after() {
    let (c, limit, now, id) = filled();
    let books_under = |view: Handing| {
        c.owner().set_owner_view(Box::new(view));
        c.owner().handed_books(now)
    };
    let whole = books_under(Handing {
        quiet_until_ms: 0,
        handed_by: None,
        part: (1, 1),
    });
    let (key, spec, books) = whole.first().expect("the books of the window");
    assert_eq!((*key, *spec), (id, limit.window));
    assert_eq!(books.at_ms, now);
    assert!(
        books.steps.first().is_some_and(|(_, count)| *count >= 10),
        "the user's 10 spends are in them: {books:?}"
    );
    let quiet = Handing {
        quiet_until_ms: now + 1,
        handed_by: None,
        part: (1, 1),
    };
    assert!(
        books_under(quiet).is_empty(),
        "a window in its quiet period"
    );
    let part = Handing {
        quiet_until_ms: 0,
        handed_by: None,
        part: (1, 2),
    };
    assert!(books_under(part).is_empty(), "a side leasing a part");
    // Sealed: a window a second later, its slots free again, is leased to no one, by a
    // round or on an ask.
    c.owner().set_owner_view(Box::new(OwnedBy(1)));
    let later = now + 1_100;
    c.round(later);
    assert_eq!(
        held_of(&c.nodes[1], limit, later),
        0,
        "a round leased after the books"
    );
    let answer = ask(&c, id, limit, later);
    assert!(
        matches!(answer, AskAnswer::Refused { .. }),
        "an ask was granted after the books: {answer:?}"
    );
    assert!(
        !c.check(1, "k", limit, later),
        "an ask was granted after the books"
    );
}

/// Books a member handed count at the window's owner only where its view names that member
/// (`OwnerOf::handed_by`): books of any other member, even saying that nothing is taken, do
/// not erase what the owner's registers say was spent.
#[test]
fn handed_books_count_only_where_the_view_says_their_sender_handed_the_window() {
    let (c, limit, now, id) = filled();
    // Read past the bucket of the user's spends (a bucket that ends after the books were
    // read may hold later spends, and is counted from the registers).
    let read_at = now + 200;
    let empty = HandedBooks {
        at_ms: read_at,
        steps: Vec::new(),
    };
    let shape = (limit.window.window_ms(), limit.window.buckets());
    assert!(
        c.owner()
            .take_handed_books((99, id), shape, empty, read_at, 2_000)
    );
    assert!(
        matches!(ask(&c, id, limit, read_at + 5), AskAnswer::Refused { .. }),
        "books of a stranger counted"
    );
    // Where the view says member 99 handed the window, its books are the owner's word.
    c.owner().set_owner_view(Box::new(Handing {
        quiet_until_ms: 0,
        handed_by: Some(99),
        part: (1, 1),
    }));
    assert!(
        matches!(ask(&c, id, limit, read_at + 5), AskAnswer::Granted(_)),
        "the handed books did not count"
    );
}

/// Books that would pin a window (a slot freed later than any owner's token could), with a
/// step of no length, or of a window of another shape here, are not kept; books from later
/// than now count from now, and books of a window this node holds nothing of make it.
#[test]
fn books_that_could_pin_a_window_or_are_malformed_are_not_kept() {
    let (c, limit, now, id) = filled();
    let quiet_ms = 2_000;
    let shape = (limit.window.window_ms(), limit.window.buckets());
    let take_shaped = |from: u128, shape: (u64, u16), at_ms: u64, steps: Vec<(u64, u64)>| {
        let books = HandedBooks { at_ms, steps };
        c.owner()
            .take_handed_books((from, id), shape, books, now, quiet_ms)
    };
    let take =
        |from: u128, at_ms: u64, steps: Vec<(u64, u64)>| take_shaped(from, shape, at_ms, steps);
    let tail = crate::ledger::spend_tail_ms(1_000, c.owner().config().ledger.margin_ms);
    assert!(take(5, now, vec![(now + quiet_ms + tail, 3)]));
    assert!(!take(6, now, vec![(now + quiet_ms + tail + 1, 3)]), "pins");
    assert!(!take(7, now, vec![(now, 3)]), "a step of no length");
    let steps = vec![(now + 10, 3)];
    assert!(
        !take_shaped(8, (2_000, 10), now, steps.clone()),
        "another shape"
    );
    assert!(!take_shaped(8, (0, 0), now, steps), "no shape");
    // From an hour ahead: counted from now, so its step reaches back to now.
    assert!(take(9, now + 3_600_000, vec![(now + 100, 1)]));
    // Two leavers a window at most: a third is not kept.
    assert!(!take(10, now, vec![(now + 100, 1)]), "a third leaver");
    // A window this node holds nothing of is made for its books.
    let books = HandedBooks {
        at_ms: now,
        steps: vec![(now + 100, 1)],
    };
    let other = (5, KeyId(12_345));
    assert!(c.nodes[1].take_handed_books(other, shape, books, now, quiet_ms));
}

/// The books a leaving owner hands are kept by the next owner whatever the window's length:
/// a spend in a bucket its user has not sealed holds its slot from the bucket's end, which
/// for a window of a minute or more lies further ahead than the longest lease.
#[test]
fn the_books_of_a_window_of_any_length_are_kept() {
    for window_ms in [1_000, 10_000, 60_000, 3_600_000] {
        let c = Cluster::new(2);
        let limit = Limit {
            max: 10,
            window: WindowSpec::with_default_buckets(window_ms).unwrap(),
        };
        let now = fill(&c, "k", limit);
        c.owner().set_owner_view(Box::new(Handing {
            quiet_until_ms: 0,
            handed_by: None,
            part: (1, 1),
        }));
        let handed = c.owner().handed_books(now);
        let (key, spec, books) = handed.first().expect("the books of the window");
        let shape = (spec.window_ms(), spec.buckets());
        assert!(
            c.nodes[1].take_handed_books((1, *key), shape, books.clone(), now, 2_000),
            "{window_ms} ms: books {books:?} not kept"
        );
    }
}

/// A lease or an ask naming a window this node holds, in another shape (only a faulty or
/// forged datagram can: ids name a shape), is refused and leaves the window as it is: what
/// its user spent stays counted at the user and at the owner.
#[test]
fn a_lease_or_an_ask_of_another_shape_leaves_the_window_as_it_is() {
    let (c, limit, now, id) = filled();
    let spent = |node: usize| {
        c.nodes[node]
            .inspect(b"k", &limit, now)
            .map_or(0.0, |i| i.global_admitted)
    };
    let (user_before, owner_before) = (spent(1), spent(0));
    assert!(
        user_before >= 9.5 && owner_before >= 5.0,
        "the user spent its window, and its owner counts it: {user_before}, {owner_before}"
    );
    let grant = LeaseGrant {
        user: 2,
        key: id,
        window_ms: 2_000,
        buckets: 10,
        lease: crate::ledger::Lease {
            owner: 1,
            seq: 99,
            expires_ms: now + 400,
            segments: smallvec::smallvec![crate::ledger::Segment {
                id: 1,
                count: 50,
                valid_from_ms: now,
            }],
        },
    };
    assert!(
        !c.nodes[1].accept_lease(&grant, now),
        "a lease of another shape"
    );
    let other = WindowSpec::with_default_buckets(2_000).unwrap();
    let owner = OwnerOf::quiet_until(1, 0);
    let answer = c
        .owner()
        .owner_ask(2, id, &other, 50, 50, None, (now, now + 10), now, &owner);
    assert!(
        matches!(answer, AskAnswer::Refused { .. }),
        "an ask of another shape: {answer:?}"
    );
    assert_eq!(spent(1), user_before, "the user's window was replaced");
    assert_eq!(spent(0), owner_before, "the owner's window was replaced");
}
