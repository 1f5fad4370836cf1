//! Between protobuf messages and the domain: requests in (checking their form and naming the
//! field at fault), decisions out. The only place in limitmesh that reads or builds prost
//! types for the services.

use smallvec::SmallVec;

use super::decide::{
    Applied, Cost, CostField, DescriptorQuery, LimitSource, LimitedItem, MAX_DESCRIPTORS, Outcome,
    Planned, Query, Request, Verdict,
};
use super::invalid::InvalidRequest;
use super::members::{MemberInfo, MemberState};
use crate::limiter::{Inspection, Limit, LimitStatus};
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit, rate_limit::Unit as EnvoyUnit,
};
use crate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::proto::envoy::r#type::v3::RateLimitUnit;
use crate::proto::limitmesh::v1 as own;
use crate::rules::{DescriptorEntry, RuleLimit, Unit};
use crate::window::{EstimateMode, MAX_BUCKETS, WindowError, WindowSpec};

// ---- shared ----

fn check_domain(domain: &str) -> Result<(), InvalidRequest> {
    if domain.is_empty() {
        return Err(InvalidRequest::new("domain", "must not be empty"));
    }
    Ok(())
}

fn check_descriptor_count(count: usize) -> Result<(), InvalidRequest> {
    if count > MAX_DESCRIPTORS {
        return Err(InvalidRequest::new(
            "descriptors",
            format!("{count} given; the maximum is {MAX_DESCRIPTORS}"),
        ));
    }
    Ok(())
}

/// A descriptor's entries, checked: at least one, no empty key.
fn entries<'q>(
    i: usize,
    pairs: impl ExactSizeIterator<Item = (&'q str, &'q str)>,
) -> Result<SmallVec<[DescriptorEntry<'q>; 4]>, InvalidRequest> {
    if pairs.len() == 0 {
        return Err(InvalidRequest::new(
            format!("descriptors[{i}].entries"),
            "must not be empty",
        ));
    }
    pairs
        .enumerate()
        .map(|(j, (key, value))| {
            if key.is_empty() {
                Err(InvalidRequest::new(
                    format!("descriptors[{i}].entries[{j}].key"),
                    "must not be empty",
                ))
            } else {
                Ok(DescriptorEntry::new(key, value))
            }
        })
        .collect()
}

fn millis(ms: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ms / 1_000).unwrap_or(i64::MAX),
        // Below 1e9, so it fits.
        nanos: ((ms % 1_000) * 1_000_000) as i32,
    }
}

/// Whole seconds, rounded up: a client that waits this long is never early.
fn ceil_seconds(ms: u64) -> u64 {
    ms.div_ceil(1_000)
}

// ---- own API ----

/// An inline limit, checked; `buckets: 0` takes `default_buckets`.
fn inline_limit(limit: &own::Limit, default_buckets: u16) -> Result<Limit, InvalidRequest> {
    let mode = match own::limit::Mode::try_from(limit.mode) {
        Ok(own::limit::Mode::Interpolated) => EstimateMode::Interpolated,
        Ok(own::limit::Mode::Exact) => EstimateMode::Exact,
        Err(_) => {
            return Err(InvalidRequest::new(
                "limit.mode",
                format!("unknown mode {}", limit.mode),
            ));
        }
    };
    let buckets = match limit.buckets {
        0 => default_buckets,
        b => u16::try_from(b).map_err(|_| {
            InvalidRequest::new(
                "limit.buckets",
                format!("{b} exceeds the maximum of {MAX_BUCKETS}"),
            )
        })?,
    };
    let window = WindowSpec::new(limit.window_ms, buckets, mode).map_err(|e| {
        let field = match e {
            WindowError::ZeroWindow | WindowError::WindowTooLong { .. } => "limit.window_ms",
            WindowError::ZeroBuckets
            | WindowError::TooManyBuckets { .. }
            | WindowError::BucketsExceedWindow { .. }
            | WindowError::NotDivisible { .. } => "limit.buckets",
        };
        InvalidRequest::new(field, e.to_string())
    })?;
    Ok(Limit {
        limit: limit.requests,
        window,
    })
}

/// The domain request of an own-API check or inspection (`hits`: `None` is 1).
fn own_request<'q>(
    domain: &'q str,
    descriptors: &'q [own::Descriptor],
    key: &'q str,
    limit: Option<&'q own::Limit>,
    hits: Option<u32>,
    dry_run: bool,
    default_buckets: u16,
) -> Result<Request<'q>, InvalidRequest> {
    check_domain(domain)?;
    let hits = match hits {
        None => 1,
        Some(0) => {
            return Err(InvalidRequest::new(
                "hits",
                "must be at least 1 (omit it for 1)",
            ));
        }
        Some(h) => u64::from(h),
    };
    let inline = limit
        .map(|l| inline_limit(l, default_buckets).map(|limit| (limit, l.name.as_str())))
        .transpose()?;
    let query = match (descriptors.is_empty(), key.is_empty()) {
        (false, false) => {
            return Err(InvalidRequest::new(
                "key",
                "give descriptors or a key, not both",
            ));
        }
        (true, true) => {
            return Err(InvalidRequest::new(
                "descriptors",
                "give descriptors or a key",
            ));
        }
        (true, false) => {
            let Some((limit, name)) = inline else {
                return Err(InvalidRequest::new(
                    "limit",
                    "required with a key (rules apply to descriptors)",
                ));
            };
            Query::Key {
                key,
                limit,
                name,
                cost: hits,
            }
        }
        (false, true) => {
            check_descriptor_count(descriptors.len())?;
            let source = match inline {
                Some((limit, name)) => LimitSource::Inline { limit, name },
                None => LimitSource::Rules,
            };
            let queries = descriptors
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    Ok(DescriptorQuery {
                        entries: entries(
                            i,
                            d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
                        )?,
                        source,
                        cost: Cost::Units(hits),
                        cost_field: CostField::Request("hits"),
                    })
                })
                .collect::<Result<_, InvalidRequest>>()?;
            Query::Descriptors(queries)
        }
    };
    Ok(Request {
        domain,
        query,
        dry_run,
    })
}

pub(crate) fn own_check(
    req: &own::CheckRequest,
    default_buckets: u16,
) -> Result<Request<'_>, InvalidRequest> {
    own_request(
        &req.domain,
        &req.descriptors,
        &req.key,
        req.limit.as_ref(),
        req.hits,
        req.dry_run,
        default_buckets,
    )
}

pub(crate) fn own_inspect(
    req: &own::InspectRequest,
    default_buckets: u16,
) -> Result<Request<'_>, InvalidRequest> {
    own_request(
        &req.domain,
        &req.descriptors,
        &req.key,
        req.limit.as_ref(),
        None,
        true,
        default_buckets,
    )
}

fn applied_label(applied: &Applied<'_, '_>) -> String {
    match applied {
        Applied::Rule(rule) => rule.label().to_owned(),
        Applied::Inline { name } => (*name).to_owned(),
        Applied::Override { .. } => String::new(),
    }
}

fn own_status(verdict: &Verdict<'_, '_>) -> own::LimitStatus {
    let unlimited = |rule: String, matched: bool| own::LimitStatus {
        allowed: true,
        unlimited: true,
        matched,
        rule,
        ..Default::default()
    };
    match (&verdict.planned, &verdict.status) {
        (Planned::Limited(item), Some(s)) => own::LimitStatus {
            allowed: s.allowed,
            limit: s.limit,
            remaining: s.remaining,
            reset_after_ms: s.reset_after_ms,
            retry_after_ms: s.retry_after_ms,
            rule: applied_label(&item.applied),
            window_ms: item.limit.window.window_ms(),
            unlimited: false,
            shadow: item.shadow,
            matched: true,
        },
        (Planned::Unlimited(rule), _) => unlimited(rule.label().to_owned(), true),
        (Planned::Replaced(rule), _) => unlimited(rule.label().to_owned(), false),
        (Planned::Unmatched, _) | (Planned::Limited(_), None) => unlimited(String::new(), false),
    }
}

pub(crate) fn own_check_response(outcome: &Outcome<'_, '_>) -> own::CheckResponse {
    let retry_after_ms = outcome
        .verdicts
        .iter()
        .filter_map(Verdict::limited)
        .filter(|(item, _)| !item.shadow)
        .map(|(_, s)| s.retry_after_ms)
        .max()
        .unwrap_or(0);
    own::CheckResponse {
        allowed: outcome.allowed,
        retry_after_ms,
        statuses: outcome.verdicts.iter().map(own_status).collect(),
    }
}

/// One window's explanation. `key_id` names the window even when this node holds nothing for
/// it (`inspection` is `None`).
pub(crate) fn own_window(
    planned: &Planned<'_, '_>,
    key_id: Option<String>,
    inspection: Option<&Inspection>,
) -> own::WindowInspection {
    match planned {
        Planned::Unmatched => own::WindowInspection {
            unlimited: true,
            ..Default::default()
        },
        Planned::Unlimited(rule) => own::WindowInspection {
            matched: true,
            unlimited: true,
            rule: rule.label().to_owned(),
            ..Default::default()
        },
        Planned::Replaced(rule) => own::WindowInspection {
            unlimited: true,
            rule: rule.label().to_owned(),
            ..Default::default()
        },
        Planned::Limited(item) => own::WindowInspection {
            matched: true,
            unlimited: false,
            rule: applied_label(&item.applied),
            shadow: item.shadow,
            limit: item.limit.limit,
            window_ms: item.limit.window.window_ms(),
            found: inspection.is_some(),
            key_id: key_id.unwrap_or_default(),
            global_admitted: inspection.map_or(0.0, |i| i.global_admitted),
            allowance: inspection.map_or(0.0, |i| i.allowance),
            origins: inspection
                .map(|i| {
                    i.origins
                        .iter()
                        .map(|o| own::OriginUsage {
                            origin: o.origin.to_string(),
                            is_local: o.is_local,
                            admitted: o.admitted,
                            demand: o.demand,
                            version: o.version,
                            age_ms: o.age_ms,
                        })
                        .collect()
                })
                .unwrap_or_default(),
        },
    }
}

pub(crate) fn own_member(m: &MemberInfo) -> own::Member {
    let state = match m.state {
        MemberState::Alive => own::member::State::Alive,
        MemberState::Suspect => own::member::State::Suspect,
        MemberState::Down => own::member::State::Down,
    };
    own::Member {
        id: m.id.clone(),
        address: m.address.clone(),
        state: state as i32,
        is_self: m.is_self,
        boot_ms: m.boot_ms,
        clock_offset_ms: m.clock_offset_ms,
    }
}

// ---- Envoy RLS ----

/// A descriptor override's unit. `envoy.type.v3.RateLimitUnit` has no WEEK; 7 is WEEK in the
/// response's unit enum, and is accepted here too.
fn override_unit(value: i32) -> Option<Unit> {
    match RateLimitUnit::try_from(value) {
        Ok(RateLimitUnit::Second) => Some(Unit::Second),
        Ok(RateLimitUnit::Minute) => Some(Unit::Minute),
        Ok(RateLimitUnit::Hour) => Some(Unit::Hour),
        Ok(RateLimitUnit::Day) => Some(Unit::Day),
        Ok(RateLimitUnit::Month) => Some(Unit::Month),
        Ok(RateLimitUnit::Year) => Some(Unit::Year),
        Ok(RateLimitUnit::Unknown) => None,
        Err(_) if value == EnvoyUnit::Week as i32 => Some(Unit::Week),
        Err(_) => None,
    }
}

fn envoy_unit(unit: Unit) -> EnvoyUnit {
    match unit {
        Unit::Second => EnvoyUnit::Second,
        Unit::Minute => EnvoyUnit::Minute,
        Unit::Hour => EnvoyUnit::Hour,
        Unit::Day => EnvoyUnit::Day,
        Unit::Week => EnvoyUnit::Week,
        Unit::Month => EnvoyUnit::Month,
        Unit::Year => EnvoyUnit::Year,
    }
}

fn envoy_descriptor<'q>(
    i: usize,
    d: &'q RateLimitDescriptor,
    request_hits: u64,
) -> Result<DescriptorQuery<'q>, InvalidRequest> {
    let source = match &d.limit {
        None => LimitSource::Rules,
        Some(o) => LimitSource::Override {
            requests_per_unit: o.requests_per_unit,
            unit: override_unit(o.unit).ok_or_else(|| {
                InvalidRequest::new(
                    format!("descriptors[{i}].limit.unit"),
                    format!("unknown unit {}", o.unit),
                )
            })?,
        },
    };
    let (cost, cost_field) = match d.hits_addend {
        Some(0) => (Cost::Peek, CostField::Descriptor("hits_addend")),
        Some(n) => (Cost::Units(n), CostField::Descriptor("hits_addend")),
        None => (Cost::Units(request_hits), CostField::Request("hits_addend")),
    };
    Ok(DescriptorQuery {
        entries: entries(
            i,
            d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
        )?,
        source,
        cost,
        cost_field,
    })
}

/// The domain request of a `ShouldRateLimit` call. A request `hits_addend` of 0 means 1; a
/// descriptor's, when present, replaces it, and 0 there checks without consuming.
pub(crate) fn envoy_request(req: &RateLimitRequest) -> Result<Request<'_>, InvalidRequest> {
    check_domain(&req.domain)?;
    if req.descriptors.is_empty() {
        return Err(InvalidRequest::new("descriptors", "must not be empty"));
    }
    check_descriptor_count(req.descriptors.len())?;
    let request_hits = u64::from(req.hits_addend.max(1));
    let queries = req
        .descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| envoy_descriptor(i, d, request_hits))
        .collect::<Result<_, _>>()?;
    Ok(Request {
        domain: &req.domain,
        query: Query::Descriptors(queries),
        dry_run: false,
    })
}

fn envoy_current_limit(item: &LimitedItem<'_, '_>) -> RateLimit {
    let (requests_per_unit, unit, name) = match &item.applied {
        Applied::Rule(rule) => match &rule.limit {
            RuleLimit::Limited {
                requests_per_unit,
                unit,
                ..
            } => (
                *requests_per_unit,
                envoy_unit(*unit),
                rule.name.clone().unwrap_or_default(),
            ),
            RuleLimit::Unlimited => (item.limit.limit, EnvoyUnit::Unknown, String::new()),
        },
        Applied::Override {
            requests_per_unit,
            unit,
        } => (*requests_per_unit, envoy_unit(*unit), String::new()),
        Applied::Inline { name } => {
            let unit = Unit::ALL
                .into_iter()
                .find(|u| u.window_ms() == item.limit.window.window_ms())
                .map_or(EnvoyUnit::Unknown, envoy_unit);
            (item.limit.limit, unit, (*name).to_owned())
        }
    };
    RateLimit {
        name,
        requests_per_unit,
        unit: unit as i32,
    }
}

/// Milliseconds until a descriptor "resets": when refused, until a request of its cost fits
/// again; when allowed, until everything counted has left the sliding window.
fn reset_ms(status: &LimitStatus) -> u64 {
    if status.allowed {
        status.reset_after_ms
    } else {
        status.retry_after_ms
    }
}

fn envoy_status(verdict: &Verdict<'_, '_>) -> DescriptorStatus {
    match (&verdict.planned, &verdict.status) {
        (Planned::Limited(item), Some(s)) => DescriptorStatus {
            code: if s.allowed || item.shadow {
                Code::Ok
            } else {
                Code::OverLimit
            } as i32,
            current_limit: Some(envoy_current_limit(item)),
            limit_remaining: u32::try_from(s.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(millis(reset_ms(s))),
            quota: None,
        },
        // As envoyproxy/ratelimit reports them: an unlimited rule with all the room there is,
        // no rule (or a replaced one) with no limit at all.
        (Planned::Unlimited(_), _) => DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..Default::default()
        },
        (Planned::Unmatched | Planned::Replaced(_), _) | (Planned::Limited(_), None) => {
            DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            }
        }
    }
}

/// `x-ratelimit-limit`, `-remaining` and `-reset` (in the style of draft-ietf-httpapi-ratelimit-
/// headers), describing one non-shadow limited descriptor: among those over their limit, the
/// one that asks the longest wait; if none is, the one with the least room left (the first, on
/// ties). The limit carries its window as a quota policy (`10, 10;w=60`); the reset is in whole
/// seconds, rounded up (see [`reset_ms`]). No headers when no limit applied.
fn rate_limit_headers(outcome: &Outcome<'_, '_>) -> Vec<HeaderValue> {
    let candidates = outcome
        .verdicts
        .iter()
        .filter_map(Verdict::limited)
        .filter(|(item, _)| !item.shadow);
    let mut chosen: Option<(&LimitedItem<'_, '_>, &LimitStatus)> = None;
    for (item, status) in candidates {
        let better = match chosen {
            None => true,
            Some((_, best)) => match (status.allowed, best.allowed) {
                (false, true) => true,
                (false, false) => status.retry_after_ms > best.retry_after_ms,
                (true, true) => status.remaining < best.remaining,
                (true, false) => false,
            },
        };
        if better {
            chosen = Some((item, status));
        }
    }
    let Some((item, status)) = chosen else {
        return Vec::new();
    };
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    let window_s = ceil_seconds(item.limit.window.window_ms());
    vec![
        header(
            "x-ratelimit-limit",
            format!("{}, {};w={window_s}", status.limit, status.limit),
        ),
        header("x-ratelimit-remaining", status.remaining.to_string()),
        header(
            "x-ratelimit-reset",
            ceil_seconds(reset_ms(status)).to_string(),
        ),
    ]
}

pub(crate) fn envoy_response(outcome: &Outcome<'_, '_>) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: if outcome.allowed {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        statuses: outcome.verdicts.iter().map(envoy_status).collect(),
        response_headers_to_add: rate_limit_headers(outcome),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_split_seconds_and_nanos() {
        assert_eq!(
            millis(1_234),
            prost_types::Duration {
                seconds: 1,
                nanos: 234_000_000
            }
        );
        assert_eq!(millis(0), prost_types::Duration::default());
        assert_eq!(ceil_seconds(0), 0);
        assert_eq!(ceil_seconds(1), 1);
        assert_eq!(ceil_seconds(1_000), 1);
        assert_eq!(ceil_seconds(1_001), 2);
    }

    #[test]
    fn override_units_follow_envoys_numbers() {
        let expected = [
            (0, None),
            (1, Some(Unit::Second)),
            (2, Some(Unit::Minute)),
            (3, Some(Unit::Hour)),
            (4, Some(Unit::Day)),
            (5, Some(Unit::Month)),
            (6, Some(Unit::Year)),
            (7, Some(Unit::Week)),
            (8, None),
            (-1, None),
        ];
        for (value, unit) in expected {
            assert_eq!(override_unit(value), unit, "{value}");
        }
    }

    #[test]
    fn response_units_follow_envoys_numbers() {
        let numbers: Vec<i32> = Unit::ALL.iter().map(|u| envoy_unit(*u) as i32).collect();
        // SECOND..DAY are 1..4, WEEK was added later as 7, MONTH and YEAR are 5 and 6.
        assert_eq!(numbers, [1, 2, 3, 4, 7, 5, 6]);
    }
}
