//! Executing a plan: the limiter is asked
//!
//! - every non-shadow descriptor in **one** check, so that they are admitted all together or
//!   not at all;
//! - descriptors whose cost is 0 (Envoy's "check without consuming") first, in one dry run of
//!   one unit each: if one of them has no room, the request is refused and the others are only
//!   dry-run too;
//! - each shadow descriptor in its own check: it counts like its rule would, and never changes
//!   the answer.

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
    /// Every non-shadow limit allowed.
    pub allowed: bool,
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

/// Runs a plan against the limiter at `now_ms` (see the module docs for the grouping).
pub(crate) fn execute<'r, 'q>(
    limiter: &Limiter,
    planned: Vec<Planned<'r, 'q>>,
    dry_run: bool,
    now_ms: u64,
) -> Result<Outcome<'r, 'q>, CheckError> {
    let mut statuses: Vec<Option<LimitStatus>> = vec![None; planned.len()];
    let mut peeks: SmallVec<[usize; 4]> = SmallVec::new();
    let mut consuming: SmallVec<[usize; 4]> = SmallVec::new();
    let mut shadows: SmallVec<[usize; 4]> = SmallVec::new();
    for (i, p) in planned.iter().enumerate() {
        if let Planned::Limited(item) = p {
            match (item.shadow, item.peek) {
                (true, _) => shadows.push(i),
                (false, true) => peeks.push(i),
                (false, false) => consuming.push(i),
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
    let group = |indices: &[usize]| -> SmallVec<[CheckItem<'_>; 4]> {
        indices.iter().filter_map(|&i| item(i)).collect()
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
        let items = group(&[i]);
        let peek = matches!(&planned[i], Planned::Limited(l) if l.peek);
        let decision = limiter.check(
            &CheckRequest {
                items: &items,
                dry_run: dry_run || peek,
            },
            now_ms,
        )?;
        statuses[i] = decision
            .limits
            .first()
            .map(|s| if peek { peek_status(*s) } else { *s });
    }
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
    let verdicts = planned
        .into_iter()
        .zip(statuses)
        .map(|(planned, status)| Verdict { planned, status })
        .collect();
    Ok(Outcome { allowed, verdicts })
}
