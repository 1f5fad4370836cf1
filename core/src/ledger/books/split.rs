//! How a round splits scarce room among its users' wants.

use crate::ledger::targets::whole_units;

/// Splits `room` tokens among `wants` in proportion to each want, given what each was given
/// already: largest remainders first, never past a want; each part a whole number of the
/// user's `units` (a request's tokens: a part of one is of no use to it), what that rounds
/// off going a unit at a time to the users it was rounded off most.
pub(super) fn proportional(
    wants: &[(u128, u64)],
    given: &[u64],
    room: u64,
    units: &[u64],
) -> Vec<u64> {
    let tokens = proportional_tokens(wants, given, room);
    let caps: Vec<u64> = wants
        .iter()
        .zip(given)
        .zip(units)
        .map(|(((_, w), g), u)| w.saturating_sub(*g).next_multiple_of((*u).max(1)))
        .collect();
    whole_units(&tokens, units, &caps, room, 0)
}

/// [`proportional`] in tokens.
fn proportional_tokens(wants: &[(u128, u64)], given: &[u64], room: u64) -> Vec<u64> {
    let left: Vec<u64> = wants
        .iter()
        .zip(given)
        .map(|((_, w), g)| w.saturating_sub(*g))
        .collect();
    let total: u64 = left.iter().sum();
    if total <= room {
        return left;
    }
    let mut out: Vec<u64> = left
        .iter()
        .map(|l| (u128::from(*l) * u128::from(room) / u128::from(total)) as u64)
        .collect();
    let mut spare = room - out.iter().sum::<u64>();
    // The remainders, largest first (ties: the user with less so far, then by order).
    let mut order: Vec<usize> = (0..left.len()).filter(|i| left[*i] > out[*i]).collect();
    order.sort_by_key(|i| {
        let rem = u128::from(left[*i]) * u128::from(room) % u128::from(total);
        (std::cmp::Reverse(rem), given[*i], *i)
    });
    for i in order {
        if spare == 0 {
            break;
        }
        out[i] += 1;
        spare -= 1;
    }
    out
}
