//! Executing a plan: the limiter is asked
//!
//! - every non-shadow descriptor in **one** check, so that they are admitted all together or
//!   not at all;
//! - descriptors whose cost is 0 (Envoy's "check without consuming") first, in one dry run of
//!   one unit each: if one of them has no room, the request is refused and the others are only
//!   dry-run too;
//! - each shadow descriptor in its own check: it counts like its rule would, and never changes
//!   the answer;
//! - quota-mode descriptors (envoyproxy/ratelimit's `quota_mode`) each in its own dry run
//!   first: the request is refused if every one of them is over its limit (or if any other
//!   descriptor is); once it is admitted, those that had room consume. So a refused request
//!   still consumes nothing.
//!
//! A descriptor whose cost exceeds its limit can never be allowed: it is not asked to consume,
//! only to report its window (a dry run of one unit, grouped with the others like it), and is
//! answered over its limit with the whole window as its wait. It refuses the request as any
//! descriptor over its limit does (unless it is a shadow one, or in quota mode and another
//! quota descriptor has room), and consumes nothing.
//!
//! With the global shadow switch (`rules.shadow_mode`) a refused request is answered OK
//! all the same; its descriptors report what the limits said.

use std::cell::RefCell;

use smallvec::SmallVec;

use super::plan::{LimitedItem, Planned};
use crate::limiter::{
    CheckError, CheckItem, CheckRequest, Decision, LimitStatus, Limiter, TokenNeed,
};

/// A planned item and, if limited, its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict<'r, 'q> {
    pub planned: Planned<'r, 'q>,
    pub status: Option<LimitStatus>,
}

impl Verdict<'_, '_> {
    pub fn limited(&self) -> Option<(&LimitedItem<'_, '_>, &LimitStatus)> {
        match (&self.planned, &self.status) {
            (Planned::Limited(item), Some(status)) => Some((item, status)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome<'r, 'q> {
    /// Every non-shadow limit allowed (or the global shadow switch let the request through).
    pub allowed: bool,
    /// Refused by the limits, answered OK by the global shadow switch.
    pub shadowed: bool,
    /// One per descriptor (or one for the key), in request order.
    pub verdicts: Vec<Verdict<'r, 'q>>,
    /// Under the ledger: the windows a check found no token for (empty otherwise), for the
    /// caller to ask their owners and wait (`token_wait.rs`), and those an admitted check
    /// left short, to ask ahead (`TokenNeed::ahead`).
    pub needs: SmallVec<[TokenNeed; 1]>,
}

/// A peek is a dry run of one unit, and a dry run that fits reports what would remain after
/// it; a check of 0 reports the room there is.
fn peek_status(mut status: LimitStatus) -> LimitStatus {
    if status.allowed {
        status.remaining = status.remaining.saturating_add(1);
    }
    status
}

/// A descriptor whose cost exceeds its limit, from the dry run of one unit on its window: over
/// the limit, with what room there is, and a wait of the whole window (no wait makes it fit).
fn exceeding_status(status: LimitStatus, window_ms: u64) -> LimitStatus {
    LimitStatus {
        allowed: false,
        retry_after_ms: window_ms,
        ..peek_status(status)
    }
}

/// Runs a plan against the limiter at `now_ms` (see the module docs for the grouping). With
/// `global_shadow`, a refused request is answered OK (`Outcome::shadowed`).
pub(crate) fn execute<'r, 'q>(
    limiter: &Limiter,
    planned: Vec<Planned<'r, 'q>>,
    dry_run: bool,
    global_shadow: bool,
    now_ms: u64,
) -> Result<Outcome<'r, 'q>, CheckError> {
    execute_counting(limiter, planned, dry_run, global_shadow, now_ms, false)
}

/// [`execute`] of a request decided again after waiting for tokens
/// (`Limiter::check_again`): its refusal was counted the first time.
pub(crate) fn execute_again<'r, 'q>(
    limiter: &Limiter,
    planned: Vec<Planned<'r, 'q>>,
    global_shadow: bool,
    now_ms: u64,
) -> Result<Outcome<'r, 'q>, CheckError> {
    execute_counting(limiter, planned, false, global_shadow, now_ms, true)
}

fn execute_counting<'r, 'q>(
    limiter: &Limiter,
    planned: Vec<Planned<'r, 'q>>,
    dry_run: bool,
    global_shadow: bool,
    now_ms: u64,
    again: bool,
) -> Result<Outcome<'r, 'q>, CheckError> {
    let needs: RefCell<SmallVec<[TokenNeed; 1]>> = RefCell::new(SmallVec::new());
    let check = |req: &CheckRequest<'_>| -> Result<Decision, CheckError> {
        let decision = if again {
            limiter.check_again(req, now_ms)?
        } else {
            limiter.check(req, now_ms)?
        };
        needs.borrow_mut().extend(decision.needs.iter().copied());
        Ok(decision)
    };
    let mut statuses: Vec<Option<LimitStatus>> = vec![None; planned.len()];
    let mut peeks: SmallVec<[usize; 4]> = SmallVec::new();
    let mut consuming: SmallVec<[usize; 4]> = SmallVec::new();
    let mut shadows: SmallVec<[usize; 4]> = SmallVec::new();
    let mut quotas: SmallVec<[usize; 4]> = SmallVec::new();
    let mut exceeding: SmallVec<[usize; 4]> = SmallVec::new();
    // A plain descriptor whose cost exceeds its limit refuses the request, whatever tokens
    // come: nothing to wait for.
    let mut allowed = true;
    let mut hopeless = false;
    for (i, p) in planned.iter().enumerate() {
        if let Planned::Limited(item) = p {
            if item.exceeds_limit {
                exceeding.push(i);
            }
            match (item.exceeds_limit, item.shadow, item.quota, item.peek) {
                (true, true, _, _) => {}
                (true, false, true, _) => quotas.push(i),
                (true, false, false, _) => {
                    allowed = false;
                    hopeless = true;
                }
                (false, true, _, _) => shadows.push(i),
                (false, false, true, _) => quotas.push(i),
                (false, false, false, true) => peeks.push(i),
                (false, false, false, false) => consuming.push(i),
            }
        }
    }
    let item = |i: usize| match &planned[i] {
        Planned::Limited(l) => Some(CheckItem {
            key: &l.key,
            limit: l.limit,
            cost: l.cost,
        }),
        _ => None,
    };
    let is_peek = |i: usize| matches!(&planned[i], Planned::Limited(l) if l.peek);
    let exceeds = |i: usize| matches!(&planned[i], Planned::Limited(l) if l.exceeds_limit);
    let group = |indices: &[usize]| -> SmallVec<[CheckItem<'_>; 4]> {
        indices.iter().filter_map(|&i| item(i)).collect()
    };
    let check_one = |i: usize, dry: bool| -> Result<Option<LimitStatus>, CheckError> {
        let items = group(&[i]);
        let decision = check(&CheckRequest {
            items: &items,
            dry_run: dry,
        })?;
        Ok(decision
            .limits
            .first()
            .map(|s| if is_peek(i) { peek_status(*s) } else { *s }))
    };

    if !exceeding.is_empty() {
        let decision = check(&CheckRequest {
            items: &group(&exceeding),
            dry_run: true,
        })?;
        for (&i, status) in exceeding.iter().zip(decision.limits) {
            if let Planned::Limited(item) = &planned[i] {
                statuses[i] = Some(exceeding_status(status, item.limit.window.window_ms()));
            }
        }
    }
    if !peeks.is_empty() {
        let items = group(&peeks);
        let decision = check(&CheckRequest {
            items: &items,
            dry_run: true,
        })?;
        allowed &= decision.allowed;
        for (&i, status) in peeks.iter().zip(decision.limits) {
            statuses[i] = Some(peek_status(status));
        }
    }
    // A shadow descriptor consumes once per request: a request decided again after waiting
    // for tokens consumed it the first time, and now only reports what it says.
    for &i in &shadows {
        statuses[i] = check_one(i, dry_run || again || is_peek(i))?;
    }
    // Quota-mode descriptors: the request needs one of them with room, if it has any.
    for &i in quotas.iter().filter(|&&i| !exceeds(i)) {
        statuses[i] = check_one(i, true)?;
    }
    let quota_room = quotas.is_empty()
        || quotas
            .iter()
            .any(|&i| statuses[i].is_some_and(|s| s.allowed));
    allowed &= quota_room;
    if dry_run || !allowed {
        // Refused already (or only asked): the consuming descriptors report what they would
        // say, and consume nothing.
        if !consuming.is_empty() {
            let decision = check(&CheckRequest {
                items: &group(&consuming),
                dry_run: true,
            })?;
            allowed &= decision.allowed;
            for (&i, status) in consuming.iter().zip(decision.limits) {
                statuses[i] = Some(status);
            }
        }
    } else {
        // The consuming descriptors and one quota-mode descriptor that had room go in one
        // check, all or nothing: a quota descriptor whose room another request took since
        // its dry run must not let this one through on its word. The next one with room is
        // tried; a peek with room (it consumes nothing) is room enough on its own.
        let peek_room = quotas
            .iter()
            .any(|&i| is_peek(i) && statuses[i].is_some_and(|s| s.allowed));
        let with_room: SmallVec<[usize; 4]> = quotas
            .iter()
            .copied()
            .filter(|&i| !is_peek(i) && statuses[i].is_some_and(|s| s.allowed))
            .collect();
        let tries: SmallVec<[Option<usize>; 4]> = if quotas.is_empty() || peek_room {
            smallvec::smallvec![None]
        } else {
            with_room.iter().map(|&i| Some(i)).collect()
        };
        let mut admitted_by = None;
        allowed = false;
        for quota in tries {
            let mut indices = consuming.clone();
            indices.extend(quota);
            if indices.is_empty() {
                allowed = true;
                break;
            }
            let decision = check(&CheckRequest {
                items: &group(&indices),
                dry_run: false,
            })?;
            for (&i, status) in indices.iter().zip(&decision.limits) {
                statuses[i] = Some(*status);
            }
            if decision.allowed {
                allowed = true;
                admitted_by = quota;
                break;
            }
            if consuming
                .iter()
                .any(|&i| statuses[i].is_some_and(|s| !s.allowed))
            {
                // A plain descriptor is over: no quota descriptor can help.
                break;
            }
        }
        if allowed {
            // The other quota-mode descriptors that had room consume too, as far as they
            // still can, each reporting what its limit says now.
            for &i in with_room.iter().filter(|&&i| Some(i) != admitted_by) {
                statuses[i] = check_one(i, false)?.or(statuses[i]);
            }
        }
    }
    let shadowed = !allowed && global_shadow;
    let verdicts = planned
        .into_iter()
        .zip(statuses)
        .map(|(planned, status)| Verdict { planned, status })
        .collect();
    Ok(Outcome {
        allowed: allowed || shadowed,
        shadowed,
        verdicts,
        needs: if hopeless {
            SmallVec::new()
        } else {
            needs.into_inner()
        },
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;
    use crate::limiter::{KeyHasher, Limit, LimiterConfig, OriginId};
    use crate::rpc::plan::Applied;
    use crate::window::WindowSpec;

    const NOW: u64 = 1_700_000_000_000;

    fn quota_item(key: String, max: u32) -> Planned<'static, 'static> {
        Planned::Limited(LimitedItem {
            key: key.into_bytes(),
            limit: Limit {
                max,
                window: WindowSpec::with_default_buckets(3_600_000).unwrap(),
            },
            applied: Applied::Inline { name: "q" },
            shadow: false,
            quota: true,
            peek: false,
            cost: 1,
            exceeds_limit: false,
        })
    }

    /// A request that waits for tokens is decided again each time tokens may have come: its
    /// shadow descriptors count it once, not once a decision.
    #[test]
    fn a_request_decided_again_counts_once_in_its_shadow_descriptors() {
        let limiter = Limiter::new(
            LimiterConfig::default(),
            OriginId(1),
            KeyHasher::from_secret(b"shadow"),
        );
        let limit = Limit {
            max: 100,
            window: WindowSpec::with_default_buckets(60_000).unwrap(),
        };
        let shadow = || {
            vec![Planned::Limited(LimitedItem {
                key: b"s".to_vec(),
                limit,
                applied: Applied::Inline { name: "s" },
                shadow: true,
                quota: false,
                peek: false,
                cost: 1,
                exceeds_limit: false,
            })]
        };
        assert!(
            execute(&limiter, shadow(), false, false, NOW)
                .unwrap()
                .allowed
        );
        for ms in 1..4 {
            let again = execute_again(&limiter, shadow(), false, NOW + ms).unwrap();
            assert!(again.verdicts[0].status.is_some_and(|s| s.allowed));
        }
        let admitted = limiter
            .inspect(b"s", &limit, NOW + 4)
            .expect("the shadow window")
            .global_admitted;
        assert!((admitted - 1.0).abs() < 1e-9, "counted {admitted} times");
    }

    /// Requests racing for the last unit of a quota-mode limit: its dry run may find room that
    /// another request takes before this one consumes it. Only one may be answered OK.
    #[test]
    fn racing_requests_never_share_the_last_unit_of_a_quota_limit() {
        const THREADS: usize = 4;
        const ROUNDS: usize = 3_000;
        let limiter = Arc::new(Limiter::new(
            LimiterConfig::default(),
            OriginId(1),
            KeyHasher::from_secret(b"race"),
        ));
        let start = Arc::new(Barrier::new(THREADS));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (limiter, start) = (limiter.clone(), start.clone());
                std::thread::spawn(move || {
                    let mut allowed = vec![false; ROUNDS];
                    for (round, ok) in allowed.iter_mut().enumerate() {
                        start.wait();
                        let planned = vec![quota_item(format!("k{round}"), 1)];
                        *ok = execute(&limiter, planned, false, false, NOW)
                            .unwrap()
                            .allowed;
                    }
                    allowed
                })
            })
            .collect();
        let results: Vec<Vec<bool>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let mut over = 0;
        for round in 0..ROUNDS {
            let n = results.iter().filter(|r| r[round]).count();
            assert!(n >= 1, "round {round}: nobody got the unit");
            over += n.saturating_sub(1);
        }
        assert_eq!(over, 0, "requests admitted past a limit of 1");
    }
}
