//! Envoy's rate limit service: `ShouldRateLimit` requests in, responses (statuses and
//! rate limit headers) out.

use smallvec::SmallVec;

use super::{InvalidRequest, ceil_seconds, check_descriptor_count, check_domain, entries, millis};
use crate::limiter::LimitStatus;
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit, rate_limit::Unit as EnvoyUnit,
};
use crate::proto::envoy::r#type::v3::RateLimitUnit;
use crate::proto::envoy_raw::{RawDescriptor, RawRateLimitRequest};
use crate::rpc::RateLimitHeaders;
use crate::rpc::execute::{Outcome, Verdict};
use crate::rpc::plan::{Applied, LimitedItem, Planned};
use crate::rpc::request::{
    Cost, DescriptorQuery, LimitSource, Malformed, Query, Request, RequestEntry,
};
use crate::rules::{RuleLimit, Unit};

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

fn envoy_descriptor(i: usize, d: &RawDescriptor, request_hits: u64) -> DescriptorQuery<'_> {
    let cost = match d.hits_addend {
        Some(0) => Cost::Peek,
        Some(n) => Cost::Units(n),
        None => Cost::Units(request_hits),
    };
    let mut malformed = None;
    let source = match &d.limit {
        None => LimitSource::Rules,
        Some(o) => match override_unit(o.unit) {
            Some(unit) => LimitSource::Override {
                requests_per_unit: o.requests_per_unit,
                unit,
            },
            None => {
                malformed = Some(Malformed::Override(InvalidRequest::new(
                    format!("descriptors[{i}].limit.unit"),
                    format!("unknown unit {}; the override is ignored", o.unit),
                )));
                LimitSource::Rules
            }
        },
    };
    let pairs = d
        .entries
        .iter()
        .map(|e| RequestEntry::from_bytes(&e.key, &e.value));
    let entries = entries(i, pairs).unwrap_or_else(|e| {
        malformed = Some(e);
        SmallVec::new()
    });
    DescriptorQuery {
        entries,
        source,
        cost,
        malformed,
    }
}

/// The domain request of a `ShouldRateLimit` call. A request `hits_addend` of 0 means 1; a
/// descriptor's, when present, replaces it, and 0 there checks without consuming. Only what
/// concerns the whole request fails it: a domain that is empty, too long or not UTF-8, no
/// descriptors or too many.
pub(crate) fn envoy_request(req: &RawRateLimitRequest) -> Result<Request<'_>, InvalidRequest> {
    let domain = std::str::from_utf8(&req.domain)
        .map_err(|_| InvalidRequest::new("domain", "is not valid UTF-8"))?;
    check_domain(domain)?;
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
        .collect();
    Ok(Request {
        domain,
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
            RuleLimit::Unlimited => (item.limit.max, EnvoyUnit::Unknown, String::new()),
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
            (item.limit.max, unit, (*name).to_owned())
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

/// The limit the rate limit headers describe: among the non-shadow limited descriptors, of
/// those over their limit the one that asks the longest wait; if none is, the one with the
/// least room left (the first, on ties). `None` when no limit applied.
fn headline<'a>(
    outcome: &'a Outcome<'_, '_>,
) -> Option<(&'a LimitedItem<'a, 'a>, &'a LimitStatus)> {
    let candidates = outcome
        .verdicts
        .iter()
        .filter_map(Verdict::limited)
        .filter(|(item, _)| !item.shadow);
    let mut chosen: Option<(&'a LimitedItem<'a, 'a>, &'a LimitStatus)> = None;
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
    chosen
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}

/// `x-ratelimit-limit`, `-remaining` and `-reset` (draft-ietf-httpapi-ratelimit-headers-03, as
/// Envoy's own `enable_x_ratelimit_headers` writes them) for the [`headline`] limit. The
/// limit carries its window as a quota policy (`10, 10;w=60`); the reset is in whole seconds,
/// rounded up (see [`reset_ms`]).
fn draft03_headers(outcome: &Outcome<'_, '_>) -> Vec<HeaderValue> {
    let Some((item, status)) = headline(outcome) else {
        return Vec::new();
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

/// The policy name of a limit in the IETF headers: the rule's name (else its path), the
/// inline limit's name, or `override` for Envoy's descriptor limit. A structured-field string
/// holds printable ASCII only; anything else becomes `_`.
fn policy_name(item: &LimitedItem<'_, '_>) -> String {
    let name = match &item.applied {
        Applied::Rule(rule) => rule.label(),
        Applied::Inline { name } => name,
        Applied::Override { .. } => "override",
    };
    name.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '_' })
        .collect()
}

/// `RateLimit-Policy` and `RateLimit` as structured fields (draft-ietf-httpapi-ratelimit-
/// headers-09) for the [`headline`] limit: `"per-tenant";q=100;w=60` and
/// `"per-tenant";r=37;t=12` (quota, window in seconds; remaining, seconds until reset).
fn ietf_headers(outcome: &Outcome<'_, '_>) -> Vec<HeaderValue> {
    let Some((item, status)) = headline(outcome) else {
        return Vec::new();
    };
    let name = policy_name(item);
    // Printable ASCII always makes a string; integers past 10^15 cannot occur here (a
    // limit is a u32 and windows are at most a year) but are capped, not trusted.
    let Ok(name) = sfv::StringRef::from_str(&name) else {
        return Vec::new();
    };
    let int = |v: u64| sfv::integer(i64::try_from(v.min(999_999_999_999_999)).unwrap_or(0));
    let key = sfv::KeyRef::constant;
    let policy = sfv::ItemSerializer::new()
        .bare_item(name)
        .parameter(key("q"), int(u64::from(status.limit)))
        .parameter(key("w"), int(ceil_seconds(item.limit.window.window_ms())))
        .finish();
    let state = sfv::ItemSerializer::new()
        .bare_item(name)
        .parameter(key("r"), int(status.remaining))
        .parameter(key("t"), int(ceil_seconds(reset_ms(status))))
        .finish();
    vec![
        header("ratelimit-policy", policy),
        header("ratelimit", state),
    ]
}

pub(crate) fn envoy_response(
    outcome: &Outcome<'_, '_>,
    headers: RateLimitHeaders,
) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: if outcome.allowed {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        statuses: outcome.verdicts.iter().map(envoy_status).collect(),
        response_headers_to_add: match headers {
            RateLimitHeaders::None => Vec::new(),
            RateLimitHeaders::Draft03 => draft03_headers(outcome),
            RateLimitHeaders::Ietf => ietf_headers(outcome),
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
