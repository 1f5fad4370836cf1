//! Planning: every descriptor of a request (or its key) resolved to what limits it (a rule, a
//! limit given in the request, or nothing), `replaces` applied, counter keys built and every
//! cost checked. Planning touches no counter, so an invalid request is refused with nothing
//! consumed.

use std::collections::BTreeSet;

use smallvec::SmallVec;

use super::request::{Cost, LimitSource, Malformed, Query, Request};
use crate::limiter::Limit;
use crate::rules::{Lookup, Rule, RuleLimit, RuleSet, Unit, descriptor_key, plain_key};
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
    /// Units consumed (1 for a peek, and for a cost that exceeds the limit).
    pub cost: u32,
    /// The request asks more units than the limit: it can never fit, so it is answered over
    /// the limit, and nothing is consumed for it.
    pub exceeds_limit: bool,
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

/// The units a descriptor uses of `limit`, as (cost, exceeds): a cost above a limit can never
/// fit, and is answered over the limit with one unit checked (see `execute`). A limit of 0
/// refuses every cost already.
fn cost_units(units: u64, limit: &Limit) -> (u32, bool) {
    if limit.max > 0 && units > u64::from(limit.max) {
        (1, true)
    } else {
        (u32::try_from(units.max(1)).unwrap_or(u32::MAX), false)
    }
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

/// Resolves every descriptor (or the key) of `req` against `rules`. Consumes nothing.
pub(crate) fn plan<'r, 'q>(rules: &'r RuleSet, req: &Request<'q>) -> Vec<Planned<'r, 'q>> {
    let domain = req.domain;
    let descriptors = match &req.query {
        Query::Key {
            key,
            limit,
            name,
            cost,
        } => {
            let (cost, exceeds_limit) = cost_units(*cost, limit);
            return vec![Planned::Limited(LimitedItem {
                key: plain_key(domain, key),
                limit: *limit,
                applied: Applied::Inline { name },
                shadow: false,
                quota: rules.options().quota_mode,
                peek: false,
                cost,
                exceeds_limit,
            })];
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
    for d in descriptors {
        if matches!(d.malformed, Some(Malformed::Entries(_))) {
            // No rule, and no counter: its entries cannot name one.
            resolved.push(None);
            continue;
        }
        let rule = || match rules.lookup(domain, &d.text()) {
            Lookup::UnknownDomain | Lookup::NoMatch => None,
            Lookup::Matched(m) => {
                let limit = match &m.rule.limit {
                    RuleLimit::Unlimited => None,
                    RuleLimit::Limited { limit, .. } => Some(*limit),
                };
                Some((Applied::Rule(m.rule), limit, m.shared))
            }
        };
        resolved.push(match d.source {
            LimitSource::Rules => rule(),
            LimitSource::Inline { limit, name } => {
                Some((Applied::Inline { name }, Some(limit), SmallVec::new()))
            }
            LimitSource::Override {
                requests_per_unit,
                unit,
            } if rules.has_domain(domain) => {
                // Every unit's window divides by the configured default buckets; if one did
                // not, the override could not be used and the rules would apply.
                match WindowSpec::new(
                    unit.window_ms(),
                    rules.default_buckets(),
                    EstimateMode::Interpolated,
                ) {
                    Ok(window) => Some((
                        Applied::Override {
                            requests_per_unit,
                            unit,
                        },
                        Some(Limit {
                            max: requests_per_unit,
                            window,
                        }),
                        SmallVec::new(),
                    )),
                    Err(_) => rule(),
                }
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
    for (d, r) in descriptors.iter().zip(resolved) {
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
        let (cost, peek, exceeds_limit) = match d.cost {
            Cost::Peek => (1, true, false),
            Cost::Units(units) => {
                let (cost, exceeds) = cost_units(units, &limit);
                (cost, false, exceeds)
            }
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
            exceeds_limit,
        }));
    }
    planned
}
