//! Which registers of one origin can follow one another, for registers a peer may have forged.
//!
//! An origin stamps every emission with the next version and a fresh stamp of its hybrid
//! logical clock, under one lock, and both strictly increase: of two genuine registers of
//! one origin, the later has the higher version *and* the later stamp, and versions grow no
//! faster than emissions. A register that breaks these was not emitted by its origin; a member
//! that holds the cluster key could still send one (relaying an origin that is not live), and
//! a version of 2^64 - 1 would otherwise rank above every register the origin ever sends.
//!
//! - [`leads_too_far`]: a register whose version leads the held one of the same window and
//!   origin by more than the origin could have emitted in between is refused.
//! - [`genuinely_later`]: a register that comes from its origin itself (the datagram's
//!   authenticated sender) and ranks below the held one replaces it, unless the held one can
//!   be a later emission that overtook it on the way. So a register forged within the lead
//!   holds the origin's own registers back for at most [`OVERTAKEN_WITHIN_MS`] of its clock.

use super::HlcTimestamp;

/// Versions a register may lead the one held for the same window and origin by, besides what
/// the time between their stamps allows. An origin takes a version per emission: one per
/// summary round, one per owner-mode round for its sums, one per anti-entropy page and one per
/// bootstrap push (one per member that comes up: a fleet of thousands forming). While its
/// cluster time is held still (a clock stepped back) its stamps do not advance and its rounds
/// go on. Thousands of versions cover all of it; a forged register beyond them is refused.
pub const MAX_VERSION_LEAD: u64 = 4_096;

/// Versions an origin may take per millisecond its stamps advance: a round at the shortest
/// `gossip_interval` (10 ms) takes three at most (registers, sums, a page), a thirtieth of
/// this.
pub const VERSIONS_PER_MS: u64 = 1;

/// How far ahead of a register sent by its origin the held one may be stamped and still be
/// taken for a later emission that overtook it on the way (five rounds at the default 200 ms;
/// datagrams reordered by more than that are rare, and then the held register comes back at
/// the origin's next emission). A held register stamped further ahead, or contradicting the
/// origin's own order, is replaced by what the origin sends.
pub const OVERTAKEN_WITHIN_MS: u64 = 1_000;

/// A register's version and stamp, as far as succession goes.
pub type Stamp = (u64, HlcTimestamp);

/// Whether `new` leads `held` (same window, same origin) by more versions than the origin
/// could have emitted between their stamps: [`MAX_VERSION_LEAD`] plus [`VERSIONS_PER_MS`] per
/// millisecond `new` is stamped after `held`.
pub fn leads_too_far(held: Stamp, new: Stamp) -> bool {
    let elapsed_ms = new.1.physical_ms().saturating_sub(held.1.physical_ms());
    let allowed = MAX_VERSION_LEAD.saturating_add(elapsed_ms.saturating_mul(VERSIONS_PER_MS));
    new.0.saturating_sub(held.0) > allowed
}

/// Whether `held` can be a genuine emission of the origin made after `new`: a higher version,
/// a later stamp, and no more than [`OVERTAKEN_WITHIN_MS`] later.
pub fn genuinely_later(held: Stamp, new: Stamp) -> bool {
    held.0 > new.0
        && held.1 > new.1
        && held.1.physical_ms() <= new.1.physical_ms().saturating_add(OVERTAKEN_WITHIN_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000;

    fn at(version: u64, ms: u64, logical: u16) -> Stamp {
        (version, HlcTimestamp::new(ms, logical))
    }

    #[test]
    fn every_emission_sequence_of_an_origin_follows_and_a_jump_does_not() {
        use crate::crdt::Hlc;
        // An origin's emissions, as it makes them: a burst of 4 000 bootstrap pushes in one
        // millisecond, rounds every 10 ms with sums and pages, its clock held still for 10 s.
        let mut hlc = Hlc::new(10_000);
        let mut version = 0u64;
        let mut emit = |ms: u64| {
            version += 1;
            (version, hlc.now(ms))
        };
        let mut sequence = vec![emit(T0)];
        sequence.extend((0..4_000).map(|_| emit(T0 + 1)));
        for round in 0..1_000u64 {
            for _ in 0..3 {
                sequence.push(emit(T0 + 2 + 10 * round));
            }
        }
        let held_still = T0 + 20_000;
        sequence.extend((0..150).map(|_| emit(held_still)));
        sequence.extend((0..150).map(|_| emit(held_still - 10_000)));
        // Any register may be held when any later one arrives; and when an earlier one
        // arrives late, the held one is its genuine successor if it is stamped near enough.
        for (i, earlier) in sequence.iter().enumerate().step_by(97) {
            for later in sequence[i + 1..].iter().step_by(89) {
                assert!(
                    !leads_too_far(*earlier, *later),
                    "{earlier:?} then {later:?}"
                );
                let apart_ms = later.1.physical_ms() - earlier.1.physical_ms();
                assert_eq!(
                    genuinely_later(*later, *earlier),
                    apart_ms <= OVERTAKEN_WITHIN_MS,
                    "{later:?} held, {earlier:?} late"
                );
            }
        }
        let held = at(10, T0, 0);
        assert!(!leads_too_far(held, at(10 + MAX_VERSION_LEAD, T0, 0)));
        assert!(leads_too_far(held, at(11 + MAX_VERSION_LEAD, T0, 0)));
        assert!(!leads_too_far(
            held,
            at(10 + MAX_VERSION_LEAD + 500, T0 + 500, 0)
        ));
        assert!(leads_too_far(held, at(u64::MAX, T0 + 10_000, 0)));
        assert!(
            !leads_too_far(held, at(3, T0 - 5, 0)),
            "an older one is not a lead"
        );
    }

    #[test]
    fn a_held_register_ahead_is_later_only_if_its_stamp_agrees_and_is_near() {
        let new = at(100, T0, 4);
        assert!(genuinely_later(at(101, T0, 5), new));
        assert!(genuinely_later(at(140, T0 + OVERTAKEN_WITHIN_MS, 0), new));
        assert!(!genuinely_later(
            at(140, T0 + OVERTAKEN_WITHIN_MS + 1, 0),
            new
        ));
        // A higher version with an earlier stamp, or the same version: not the origin's.
        assert!(!genuinely_later(at(101, T0, 3), new));
        assert!(!genuinely_later(at(100, T0, 9), new));
        assert!(!genuinely_later(at(99, T0 + 1, 0), new));
    }
}
