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
//! With the global shadow switch (`rules.shadow_mode`) a refused request is answered OK
//! all the same; its descriptors report what the limits said.

use smallvec::SmallVec;

use super::plan::{LimitedItem, Planned};
use crate::limiter::{CheckError, CheckItem, CheckRequest, LimitStatus, Limiter};

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
}

/// A peek is a dry run of one unit, and a dry run that fits reports what would remain after
/// it; a check of 0 reports the room there is.
fn peek_status(mut status: LimitStatus) -> LimitStatus {
    if status.allowed {
        status.remaining = status.remaining.saturating_add(1);
    }
    status
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
    let mut statuses: Vec<Option<LimitStatus>> = vec![None; planned.len()];
    let mut peeks: SmallVec<[usize; 4]> = SmallVec::new();
    let mut consuming: SmallVec<[usize; 4]> = SmallVec::new();
    let mut shadows: SmallVec<[usize; 4]> = SmallVec::new();
    let mut quotas: SmallVec<[usize; 4]> = SmallVec::new();
    for (i, p) in planned.iter().enumerate() {
        if let Planned::Limited(item) = p {
            match (item.shadow, item.quota, item.peek) {
                (true, _, _) => shadows.push(i),
                (false, true, _) => quotas.push(i),
                (false, false, true) => peeks.push(i),
                (false, false, false) => consuming.push(i),
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
    let group = |indices: &[usize]| -> SmallVec<[CheckItem<'_>; 4]> {
        indices.iter().filter_map(|&i| item(i)).collect()
    };
    let check_one = |i: usize, dry: bool| -> Result<Option<LimitStatus>, CheckError> {
        let items = group(&[i]);
        let decision = limiter.check(
            &CheckRequest {
                items: &items,
                dry_run: dry,
            },
            now_ms,
        )?;
        Ok(decision
            .limits
            .first()
            .map(|s| if is_peek(i) { peek_status(*s) } else { *s }))
    };

    let mut allowed = true;
    if !peeks.is_empty() {
        let items = group(&peeks);
        let decision = limiter.check(
            &CheckRequest {
                items: &items,
                dry_run: true,
            },
            now_ms,
        )?;
        allowed &= decision.allowed;
        for (&i, status) in peeks.iter().zip(decision.limits) {
            statuses[i] = Some(peek_status(status));
        }
    }
    for &i in &shadows {
        statuses[i] = check_one(i, dry_run || is_peek(i))?;
    }
    // Quota-mode descriptors: the request needs one of them with room, if it has any.
    for &i in &quotas {
        statuses[i] = check_one(i, true)?;
    }
    let quota_room = quotas.is_empty()
        || quotas
            .iter()
            .any(|&i| statuses[i].is_some_and(|s| s.allowed));
    allowed &= quota_room;
    if !consuming.is_empty() {
        let items = group(&consuming);
        let decision = limiter.check(
            &CheckRequest {
                items: &items,
                dry_run: dry_run || !allowed,
            },
            now_ms,
        )?;
        allowed &= decision.allowed;
        for (&i, status) in consuming.iter().zip(decision.limits) {
            statuses[i] = Some(status);
        }
    }
    if allowed && !dry_run {
        // Admitted: the quota-mode descriptors that had room consume. One that lost its room
        // to another request since keeps the status of its dry run.
        for &i in &quotas {
            if !is_peek(i) && statuses[i].is_some_and(|s| s.allowed) {
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
    })
}
