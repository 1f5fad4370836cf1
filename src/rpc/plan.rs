//! Planning: every descriptor of a request (or its key) resolved to what limits it (a rule, a
//! limit given in the request, or nothing), `replaces` applied, counter keys built and every
//! cost checked. Planning touches no counter, so an invalid request is refused with nothing
//! consumed.

use std::collections::BTreeSet;

use smallvec::SmallVec;

use super::invalid::InvalidRequest;
use super::request::{Cost, CostField, LimitSource, Query, Request};
use crate::limiter::{Limit, MAX_KEY_BYTES};
use crate::rules::{
    Lookup, Rule, RuleLimit, RuleSet, Unit, descriptor_key, descriptor_key_len, plain_key,
    plain_key_len,
};
use crate::window::{EstimateMode, WindowSpec};

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
    /// `quota_mode` (the rule's, or every descriptor's with `rules.quota_mode`).
    pub quota: bool,
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
    if limit.max > 0 && units > u64::from(limit.max) {
        return Err(InvalidRequest::new(
            field(),
            format!(
                "{units} exceeds the limit of {} of {}, so it could never be allowed",
                limit.max,
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
                quota: rules.options().quota_mode,
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
                    max: requests_per_unit,
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
            quota: rules.options().quota_mode
                || matches!(applied, Applied::Rule(rule) if rule.quota),
            peek,
            cost,
        }));
    }
    Ok(planned)
}
