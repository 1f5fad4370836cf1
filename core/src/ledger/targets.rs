//! What each user of a window should hold after a round: its expected count, then towards
//! the count that covers its demand, in whole requests, within what the window can hold.

/// One user's wants over the coming lease.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cover {
    /// What it is expected to be offered over the lease, in tokens.
    pub expected: f64,
    /// What covers that with `LEASE_QUANTILE`, in tokens.
    pub covered: u64,
    /// The tokens of one of its requests: a part of one is of no use to it.
    pub unit: u64,
}

/// Targets for `users` within `capacity` (the room, and what they hold now): every user its
/// expected count where that fits (else the capacity in proportion to it), then the rest
/// towards each one's cover in proportion to what it lacks (water-filling, so that a window
/// whose covers do not all fit still gives each the most of its cover it can). Each target
/// is then a whole number of the user's requests: what is rounded off goes, a request at a
/// time, to the users it was rounded off most, ties from the `first`-th user on (a caller
/// turning `first` each round shares a scarce request among equal users in turn). The sum
/// never passes `capacity`.
pub fn cover_targets(users: &[Cover], capacity: u64, first: usize) -> Vec<u64> {
    let raw = water_fill(users, capacity);
    let units: Vec<u64> = users.iter().map(|u| u.unit).collect();
    let caps: Vec<u64> = raw
        .iter()
        .zip(&units)
        .map(|(r, u)| r.next_multiple_of((*u).max(1)))
        .collect();
    whole_units(&raw, &units, &caps, capacity, first)
}

/// `targets` of [`cover_targets`] for `users` within `capacity`, with the cushions of the `near`
/// users cut where the covers do not all fit: such a user gets at most its expected count in
/// whole requests, and what that frees stays in the room, for its asks and the others' (see
/// [`NEAR_ASKS`](super::tuning::NEAR_ASKS)). The others' targets do not change.
pub fn cut_near_cushions(
    targets: Vec<u64>,
    users: &[Cover],
    near: &[bool],
    capacity: u64,
) -> Vec<u64> {
    if users.iter().map(|u| u.covered).sum::<u64>() <= capacity {
        return targets;
    }
    targets
        .into_iter()
        .zip(users)
        .zip(near)
        .map(|((target, u), near)| match near {
            true => target.min(
                (u.expected.ceil() as u64)
                    .checked_next_multiple_of(u.unit.max(1))
                    .unwrap_or(u64::MAX),
            ),
            false => target,
        })
        .collect()
}

/// `raw` parts rounded down to whole `units`, then what that frees of `capacity` given back a
/// unit at a time: first to the parts rounded off most (as a share of their unit; ties from
/// the `first`-th part on), one unit each, then to any part it fits; never past a part's cap
/// in `caps`, never past `capacity` in all.
pub(crate) fn whole_units(
    raw: &[u64],
    units: &[u64],
    caps: &[u64],
    capacity: u64,
    first: usize,
) -> Vec<u64> {
    let n = raw.len();
    let unit = |i: usize| units[i].max(1);
    let mut out: Vec<u64> = (0..n).map(|i| raw[i] - raw[i] % unit(i)).collect();
    let mut spare = capacity.saturating_sub(out.iter().sum());
    let mut order: Vec<usize> = (0..n).filter(|i| raw[*i] > out[*i]).collect();
    order.sort_by_key(|i| {
        // The part of a unit rounded off, as a fraction of the unit (scaled).
        let cut = u128::from(raw[*i] - out[*i]) * 1_000_000 / u128::from(unit(*i));
        (
            std::cmp::Reverse(cut),
            (*i + n - first % n.max(1)) % n.max(1),
        )
    });
    let fits = |i: usize, out: &[u64], spare: u64| {
        (unit(i) <= spare && out[i] + unit(i) <= caps[i]).then_some(unit(i))
    };
    for i in order {
        if let Some(u) = fits(i, &out, spare) {
            out[i] += u;
            spare -= u;
        }
    }
    for i in 0..n {
        while let Some(u) = fits(i, &out, spare) {
            out[i] += u;
            spare -= u;
        }
    }
    out
}

fn water_fill(users: &[Cover], capacity: u64) -> Vec<u64> {
    let expected: Vec<u64> = users.iter().map(|u| u.expected.ceil() as u64).collect();
    let base: u64 = expected.iter().sum();
    if base >= capacity {
        return expected
            .iter()
            .map(|e| (u128::from(*e) * u128::from(capacity) / u128::from(base.max(1))) as u64)
            .collect();
    }
    let lack: Vec<u64> = users
        .iter()
        .zip(&expected)
        .map(|(u, e)| u.covered.saturating_sub(*e))
        .collect();
    let total_lack: u64 = lack.iter().sum();
    let spare = capacity - base;
    expected
        .iter()
        .zip(&lack)
        .map(|(e, l)| {
            e + if total_lack <= spare {
                *l
            } else {
                (u128::from(*l) * u128::from(spare) / u128::from(total_lack)) as u64
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(expected: f64, covered: u64, unit: u64) -> Cover {
        Cover {
            expected,
            covered,
            unit,
        }
    }

    #[test]
    fn near_users_of_a_crowded_window_hold_no_cushion() {
        let users = [user(1.2, 8, 1), user(1.2, 8, 1), user(2.5, 20, 5)];
        let near = [true, false, true];
        // The covers fit: nothing is cut.
        let roomy = cover_targets(&users, 36, 0);
        assert_eq!(cut_near_cushions(roomy.clone(), &users, &near, 36), roomy);
        // They do not: the near users get their expected count, in whole requests.
        let crowded = cover_targets(&users, 24, 0);
        assert!(crowded[0] > 2 && crowded[2] > 5, "{crowded:?}");
        let cut = cut_near_cushions(crowded.clone(), &users, &near, 24);
        assert_eq!(cut, vec![2, crowded[1], 5]);
        // A target already under the expected count stays.
        assert_eq!(
            cut_near_cushions(vec![1, 1, 0], &users, &near, 24),
            vec![1, 1, 0]
        );
    }

    #[test]
    fn covers_that_fit_are_given_whole() {
        let users = [user(1.0, 4, 1), user(2.5, 10, 5)];
        assert_eq!(cover_targets(&users, 100, 0), vec![4, 10]);
    }

    #[test]
    fn targets_are_whole_requests_and_never_pass_the_capacity() {
        for capacity in 0..60 {
            for first in 0..4 {
                let users = [
                    user(0.4, 5, 5),
                    user(0.4, 5, 5),
                    user(3.0, 9, 3),
                    user(0.1, 1, 1),
                ];
                let t = cover_targets(&users, capacity, first);
                assert!(t.iter().sum::<u64>() <= capacity, "{capacity}: {t:?}");
                for (t, u) in t.iter().zip(&users) {
                    assert_eq!(t % u.unit, 0, "{capacity}: {t:?}");
                }
            }
        }
    }

    #[test]
    fn a_scarce_request_goes_to_equal_users_in_turn() {
        let users = [user(1.0, 5, 5), user(1.0, 5, 5), user(1.0, 5, 5)];
        let winners: Vec<usize> = (0..3)
            .map(|first| {
                let t = cover_targets(&users, 5, first);
                assert_eq!(t.iter().sum::<u64>(), 5, "one request's tokens are given");
                t.iter().position(|t| *t == 5).expect("one user has them")
            })
            .collect();
        assert_eq!(winners, vec![0, 1, 2]);
    }
}
