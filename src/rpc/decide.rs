//! Deciding a request, in domain terms and the same way for both APIs.
//!
//! Two steps. [`plan`] resolves every descriptor to what limits it (a rule, a limit given in the
//! request, or nothing), applies `replaces`, builds the counter keys and checks every cost; it
//! touches no counter, so an invalid request is refused with nothing consumed. [`execute`]
//! then asks the limiter:
//!
//! - every non-shadow descriptor in **one** check, so that they are admitted all together or
//!   not at all;
//! - descriptors whose cost is 0 (Envoy's "check without consuming") first, in one dry run of
//!   one unit each: if one of them has no room, the request is refused and the others are only
//!   dry-run too;
//! - each shadow descriptor in its own check: it counts like its rule would, and never changes
//!   the answer.

use std::collections::BTreeSet;

use smallvec::SmallVec;

use super::invalid::InvalidRequest;
use crate::limiter::{
    CheckError, CheckItem, CheckRequest, Limit, LimitStatus, Limiter, MAX_ITEMS_PER_CHECK,
    MAX_KEY_BYTES,
};
use crate::metrics::{DecisionResult, Metrics, UNCONFIGURED_DOMAIN};
use crate::rules::{
    DescriptorEntry, Lookup, Rule, RuleLimit, RuleSet, Unit, descriptor_key, descriptor_key_len,
    plain_key, plain_key_len,
};
use crate::window::{EstimateMode, WindowSpec};

/// Most descriptors in one request (one limiter item each).
pub const MAX_DESCRIPTORS: usize = MAX_ITEMS_PER_CHECK;

/// What limits a descriptor, as the request asks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LimitSource<'q> {
    /// The rules of the domain.
    Rules,
    /// A limit given in the request (own API), instead of the rules.
    Inline { limit: Limit, name: &'q str },
    /// Envoy's descriptor `limit`: replaces the rule's limit, and applies even where no rule
    /// matches, as long as the domain has rules (as envoyproxy/ratelimit does).
    Override { requests_per_unit: u32, unit: Unit },
}

/// How much of its limit a descriptor uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cost {
    Units(u64),
    /// Check without consuming: does one more unit fit?
    Peek,
}

/// Which request field a cost came from, for errors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CostField {
    /// A field of the request (`hits`, `hits_addend`).
    Request(&'static str),
    /// A field of the descriptor (`descriptors[i].hits_addend`).
    Descriptor(&'static str),
}

#[derive(Debug, Clone)]
pub(crate) struct DescriptorQuery<'q> {
    pub entries: SmallVec<[DescriptorEntry<'q>; 4]>,
    pub source: LimitSource<'q>,
    pub cost: Cost,
    pub cost_field: CostField,
}

#[derive(Debug, Clone)]
pub(crate) enum Query<'q> {
    Descriptors(Vec<DescriptorQuery<'q>>),
    /// A plain key under a limit given in the request.
    Key {
        key: &'q str,
        limit: Limit,
        name: &'q str,
        cost: u64,
    },
}

/// A request, validated in form by the API layer; `plan` validates the rest.
#[derive(Debug, Clone)]
pub(crate) struct Request<'q> {
    pub domain: &'q str,
    pub query: Query<'q>,
    pub dry_run: bool,
}

/// Where an applied limit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied<'r, 'q> {
    Rule(&'r Rule),
    Inline { name: &'q str },
    Override { requests_per_unit: u32, unit: Unit },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitedItem<'r, 'q> {
    pub key: Vec<u8>,
    pub limit: Limit,
    pub applied: Applied<'r, 'q>,
    pub shadow: bool,
    pub peek: bool,
    /// Units consumed (1 for a peek).
    pub cost: u32,
}

/// What applies to one descriptor (or the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Planned<'r, 'q> {
    /// No rule applies (the domain has none, or none matches).
    Unmatched,
    /// The rule that applies is `unlimited`.
    Unlimited(&'r Rule),
    /// The rule that applies is named in the `replaces` of another rule of the request.
    Replaced(&'r Rule),
    Limited(LimitedItem<'r, 'q>),
}

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

fn check_key_len(field: impl FnOnce() -> String, len: usize) -> Result<(), InvalidRequest> {
    if len > MAX_KEY_BYTES {
        return Err(InvalidRequest::new(
            field(),
            format!("key is {len} bytes in canonical form; the maximum is {MAX_KEY_BYTES}"),
        ));
    }
    Ok(())
}

/// How errors name the source of a limit.
fn describe(applied: &Applied<'_, '_>) -> String {
    match applied {
        Applied::Rule(rule) => format!("rule `{}`", rule.label()),
        Applied::Inline { .. } => "the request's limit".to_owned(),
        Applied::Override { .. } => "the descriptor's limit override".to_owned(),
    }
}

/// Checks `units` against `limit` and narrows it. A limit of 0 refuses everything, so any cost
/// is a verdict there, not an error.
fn cost_units(
    units: u64,
    limit: &Limit,
    field: impl FnOnce() -> String,
    what: impl FnOnce() -> String,
) -> Result<u32, InvalidRequest> {
    if units == 0 {
        return Err(InvalidRequest::new(field(), "must be at least 1"));
    }
    if limit.limit > 0 && units > u64::from(limit.limit) {
        return Err(InvalidRequest::new(
            field(),
            format!(
                "{units} exceeds the limit of {} of {}, so it could never be allowed",
                limit.limit,
                what()
            ),
        ));
    }
    Ok(u32::try_from(units).unwrap_or(u32::MAX))
}

/// The bytes of the keys a plan holds: what planning a request allocated for its keys.
pub(crate) fn planned_key_bytes(plan: &[Planned<'_, '_>]) -> usize {
    plan.iter()
        .map(|p| match p {
            Planned::Limited(item) => item.key.len(),
            _ => 0,
        })
        .sum()
}

/// Resolves every descriptor (or the key) of `req` against `rules`. Fails, with the field at
/// fault, on a key too long or a cost above its limit; consumes nothing.
pub(crate) fn plan<'r, 'q>(
    rules: &'r RuleSet,
    req: &Request<'q>,
) -> Result<Vec<Planned<'r, 'q>>, InvalidRequest> {
    let domain = req.domain;
    let descriptors = match &req.query {
        Query::Key {
            key,
            limit,
            name,
            cost,
        } => {
            check_key_len(|| "key".to_owned(), plain_key_len(domain, key))?;
            let cost = cost_units(
                *cost,
                limit,
                || "hits".to_owned(),
                || "the request's limit".to_owned(),
            )?;
            return Ok(vec![Planned::Limited(LimitedItem {
                key: plain_key(domain, key),
                limit: *limit,
                applied: Applied::Inline { name },
                shadow: false,
                peek: false,
                cost,
            })]);
        }
        Query::Descriptors(descriptors) => descriptors,
    };

    // What applies to each descriptor, before `replaces`: (applied, limit, shared patterns).
    type Resolved<'r, 'q> = Option<(
        Applied<'r, 'q>,
        Option<Limit>,
        SmallVec<[(usize, &'r str); 1]>,
    )>;
    let mut resolved: Vec<Resolved<'r, 'q>> = Vec::with_capacity(descriptors.len());
    for (i, d) in descriptors.iter().enumerate() {
        check_key_len(
            || format!("descriptors[{i}]"),
            descriptor_key_len(domain, &d.entries, &[]),
        )?;
        resolved.push(match d.source {
            LimitSource::Rules => match rules.lookup(domain, &d.entries) {
                Lookup::UnknownDomain | Lookup::NoMatch => None,
                Lookup::Matched(m) => {
                    let limit = match &m.rule.limit {
                        RuleLimit::Unlimited => None,
                        RuleLimit::Limited { limit, .. } => Some(*limit),
                    };
                    Some((Applied::Rule(m.rule), limit, m.shared))
                }
            },
            LimitSource::Inline { limit, name } => {
                Some((Applied::Inline { name }, Some(limit), SmallVec::new()))
            }
            LimitSource::Override {
                requests_per_unit,
                unit,
            } if rules.has_domain(domain) => {
                let window = WindowSpec::new(
                    unit.window_ms(),
                    rules.default_buckets(),
                    EstimateMode::Interpolated,
                )
                .map_err(|e| {
                    InvalidRequest::new(format!("descriptors[{i}].limit"), e.to_string())
                })?;
                let limit = Limit {
                    limit: requests_per_unit,
                    window,
                };
                Some((
                    Applied::Override {
                        requests_per_unit,
                        unit,
                    },
                    Some(limit),
                    SmallVec::new(),
                ))
            }
            LimitSource::Override { .. } => None,
        });
    }

    // A named rule listed in the `replaces` of any rule applying to this request is dropped
    // (the listing rule's own `replaces` count even if it is itself replaced or unlimited).
    let replaced: BTreeSet<&str> = resolved
        .iter()
        .flatten()
        .filter_map(|(applied, _, _)| match applied {
            Applied::Rule(rule) => Some(rule.replaces.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect();

    let mut planned = Vec::with_capacity(descriptors.len());
    for (i, (d, r)) in descriptors.iter().zip(resolved).enumerate() {
        let Some((applied, limit, shared)) = r else {
            planned.push(Planned::Unmatched);
            continue;
        };
        if let Applied::Rule(rule) = applied
            && rule.name.as_deref().is_some_and(|n| replaced.contains(n))
        {
            planned.push(Planned::Replaced(rule));
            continue;
        }
        let Some(limit) = limit else {
            // Only rules can be unlimited.
            if let Applied::Rule(rule) = applied {
                planned.push(Planned::Unlimited(rule));
            } else {
                planned.push(Planned::Unmatched);
            }
            continue;
        };
        let len = descriptor_key_len(domain, &d.entries, &shared);
        check_key_len(|| format!("descriptors[{i}]"), len)?;
        let cost_field = || match d.cost_field {
            CostField::Request(name) => name.to_owned(),
            CostField::Descriptor(name) => format!("descriptors[{i}].{name}"),
        };
        let (cost, peek) = match d.cost {
            Cost::Peek => (1, true),
            Cost::Units(units) => (
                cost_units(units, &limit, cost_field, || {
                    format!("descriptors[{i}] ({})", describe(&applied))
                })?,
                false,
            ),
        };
        planned.push(Planned::Limited(LimitedItem {
            key: descriptor_key(domain, &d.entries, &shared),
            limit,
            applied,
            shadow: matches!(applied, Applied::Rule(rule) if rule.shadow),
            peek,
            cost,
        }));
    }
    Ok(planned)
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

/// The `domain` label of metrics: only domains the rules define, so that requests cannot add
/// series.
pub(crate) fn domain_label<'a>(rules: &RuleSet, domain: &'a str) -> &'a str {
    if rules.has_domain(domain) {
        domain
    } else {
        UNCONFIGURED_DOMAIN
    }
}

/// Counts each verdict of `outcome` under `domain` (a label from [`domain_label`]). A limited
/// descriptor counts by its own verdict: one that had room counts as allowed even if another
/// descriptor refused the request.
pub(crate) fn record(metrics: &Metrics, domain: &str, outcome: &Outcome<'_, '_>) {
    let mut counts = [0u64; 4];
    let mut unmatched = 0;
    for v in &outcome.verdicts {
        let result = match (&v.planned, &v.status) {
            (Planned::Limited(item), Some(status)) => match (item.shadow, status.allowed) {
                (_, true) => 0,
                (false, false) => 1,
                (true, false) => 2,
            },
            (Planned::Unmatched, _) => {
                unmatched += 1;
                3
            }
            _ => 3,
        };
        counts[result] += 1;
    }
    let results = [
        DecisionResult::Allowed,
        DecisionResult::OverLimit,
        DecisionResult::ShadowOverLimit,
        DecisionResult::Unlimited,
    ];
    for (result, n) in results.into_iter().zip(counts) {
        metrics.record_decisions(domain, result, n);
    }
    metrics.record_unmatched(domain, unmatched);
}
