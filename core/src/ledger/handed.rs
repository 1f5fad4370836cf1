//! What a leaving owner hands a window's next owner: its books as the slots they say are
//! taken from the moment it stopped leasing on (ALGORITHM.md, L4). Every token it leased is
//! in them, spent or not: a spend it knew of over the span it can occupy a sliding window, a
//! token not yet reported spent until its lease's end plus the window and the margin. The
//! next owner counts them beside its own registers' spends from that moment on, and so may
//! lease at once what they leave free, with no wait for the users to report.

use super::occupancy::{Occupancy, Span};

/// At most this many steps describe one window's handed slots (about 350 bytes on the wire):
/// more are merged, each stretch counted at its most.
pub const MOST_HANDED_STEPS: usize = 64;

/// A window's taken slots from `at_ms` on, as its leaving owner counted them: `steps` are
/// `(until_ms, count)`, each from the end of the one before (the first from `at_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedBooks {
    pub at_ms: u64,
    pub steps: Vec<(u64, u64)>,
}

impl HandedBooks {
    /// The books of `occupancy` (what the leaving owner's books count) from `at_ms` on.
    pub fn of(occupancy: &Occupancy, at_ms: u64) -> Self {
        Self {
            at_ms,
            steps: occupancy.ceiling(at_ms, MOST_HANDED_STEPS),
        }
    }

    /// When the last of the slots they hold frees (`at_ms` if none is taken).
    pub fn until_ms(&self) -> u64 {
        self.steps.last().map_or(self.at_ms, |(until, _)| *until)
    }

    /// Whether the steps follow one another from `at_ms`, there are at most
    /// [`MOST_HANDED_STEPS`], and no count passes any limit (`u32`).
    pub fn is_well_formed(&self) -> bool {
        let mut from = self.at_ms;
        self.steps.len() <= MOST_HANDED_STEPS
            && self.steps.iter().all(|(until, count)| {
                let follows = *until > from && *count <= u64::from(u32::MAX);
                from = *until;
                follows
            })
    }

    /// The slots they hold, as spans.
    pub fn spans(&self) -> impl Iterator<Item = Span> + '_ {
        let starts = std::iter::once(self.at_ms).chain(self.steps.iter().map(|(until, _)| *until));
        starts
            .zip(&self.steps)
            .map(|(from_ms, (until_ms, count))| Span {
                from_ms,
                until_ms: *until_ms,
                count: *count,
            })
    }
}

/// Of `spends` (each until its slot's end plus `tail_ms`, as `Limiter::spends_of` gives them),
/// keeps those the handed books may not hold: every spend whose slot ends after `at_ms` less
/// twice `margin_ms`. A slot that ended before then held only spends made before the books
/// were read, on the leaving owner's clock: the spender's clock and the leaving owner's are
/// each within the margin of the cluster's. The leaving owner counted each such spend, spent
/// or as a token not yet reported. Counting a spend twice only leases less.
pub fn spends_after(spends: &mut Vec<Span>, at_ms: u64, tail_ms: u64, margin_ms: u64) {
    let cut = at_ms
        .saturating_sub(margin_ms.saturating_mul(2))
        .saturating_add(tail_ms);
    spends.retain(|s| s.until_ms > cut);
}

#[cfg(test)]
mod tests {
    use super::super::occupancy::tests::span;
    use super::*;

    #[test]
    fn the_books_give_back_the_slots_they_were_made_from() {
        let mut o = Occupancy::default();
        o.add(span(0, 1_100, 4));
        o.add(span(500, 1_400, 6));
        let books = HandedBooks::of(&o, 300);
        assert!(books.is_well_formed());
        assert_eq!(books.until_ms(), 1_400);
        let mut back = Occupancy::default();
        books.spans().for_each(|s| back.add(s));
        for t in (300..1_500).step_by(50) {
            assert_eq!(back.at(t), o.at(t), "at {t}");
        }
        let empty = HandedBooks::of(&Occupancy::default(), 300);
        assert_eq!((empty.until_ms(), empty.steps.len()), (300, 0));
    }

    #[test]
    fn steps_that_do_not_follow_one_another_are_not_well_formed() {
        let at = |steps: Vec<(u64, u64)>| HandedBooks { at_ms: 100, steps }.is_well_formed();
        assert!(at(vec![(150, 2), (200, 1)]));
        assert!(!at(vec![(100, 2)]));
        assert!(!at(vec![(150, 2), (150, 1)]));
        assert!(!at(vec![(150, u64::from(u32::MAX) + 1)]));
        let many: Vec<(u64, u64)> = (1..=MOST_HANDED_STEPS as u64 + 1)
            .map(|i| (100 + i, 1))
            .collect();
        assert!(!at(many));
    }

    #[test]
    fn only_spends_whose_slot_ends_before_the_books_less_two_margins_are_left_to_them() {
        let (tail, margin) = (1_020, 10);
        let mut spends = vec![
            span(0, 1_970 + tail, 1),
            span(0, 1_980 + tail, 2),
            span(0, 1_981 + tail, 3),
        ];
        spends_after(&mut spends, 2_000, tail, margin);
        assert_eq!(spends, vec![span(0, 1_981 + tail, 3)]);
    }
}
