//! limitmesh's own API: check and inspect requests in, decisions and explanations out.

use smallvec::SmallVec;

use super::{InvalidRequest, check_descriptor_count, check_domain, entries};
use crate::limiter::{Inspection, Limit};
use crate::node::{MemberInfo, MemberState};
use crate::proto::limitmesh::v1 as own;
use crate::rpc::execute::{Outcome, Verdict};
use crate::rpc::plan::{Applied, Planned};
use crate::rpc::request::{
    Cost, DescriptorQuery, LimitSource, Malformed, Query, Request, RequestEntry,
};
use crate::window::{EstimateMode, MAX_BUCKETS, WindowError, WindowSpec};

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
        max: limit.requests,
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
                    let pairs = d
                        .entries
                        .iter()
                        .map(|e| RequestEntry::from_str(&e.key, &e.value));
                    let (entries, malformed) = match entries(i, pairs) {
                        Ok(entries) => (entries, None),
                        Err(malformed) => (SmallVec::new(), Some(malformed)),
                    };
                    DescriptorQuery {
                        entries,
                        source,
                        cost: Cost::Units(hits),
                        malformed,
                    }
                })
                .collect();
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

fn own_status(verdict: &Verdict<'_, '_>, malformed: Option<&Malformed>) -> own::LimitStatus {
    let unlimited = |rule: String, matched: bool| own::LimitStatus {
        allowed: true,
        unlimited: true,
        matched,
        rule,
        ..Default::default()
    };
    let mut status = match (&verdict.planned, &verdict.status) {
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
            invalid: String::new(),
        },
        (Planned::Unlimited(rule), _) => unlimited(rule.label().to_owned(), true),
        (Planned::Replaced(rule), _) => unlimited(rule.label().to_owned(), false),
        (Planned::Unmatched, _) | (Planned::Limited(_), None) => unlimited(String::new(), false),
    };
    if let Some(m) = malformed {
        status.invalid = m.problem().to_string();
    }
    status
}

/// The response to a check of `req`, decided as `outcome`.
pub(crate) fn own_check_response(
    outcome: &Outcome<'_, '_>,
    req: &Request<'_>,
) -> own::CheckResponse {
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
        statuses: outcome
            .verdicts
            .iter()
            .enumerate()
            .map(|(i, v)| own_status(v, req.malformed(i)))
            .collect(),
        error: None,
    }
}

/// The result of a check of a batch that was not decided, with the status a `Check` call of it
/// alone would have failed with.
pub(crate) fn own_check_error(status: &tonic::Status) -> own::CheckResponse {
    own::CheckResponse {
        error: Some(own::CheckError {
            code: status.code() as i32,
            message: status.message().to_owned(),
        }),
        ..Default::default()
    }
}

/// One window's explanation. `key_id` names the window even when this node holds nothing for
/// it (`inspection` is `None`).
pub(crate) fn own_window(
    planned: &Planned<'_, '_>,
    key_id: Option<String>,
    inspection: Option<&Inspection>,
    malformed: Option<&Malformed>,
) -> own::WindowInspection {
    let invalid = malformed
        .map(|m| m.problem().to_string())
        .unwrap_or_default();
    match planned {
        Planned::Unmatched => own::WindowInspection {
            unlimited: true,
            invalid,
            ..Default::default()
        },
        Planned::Unlimited(rule) => own::WindowInspection {
            matched: true,
            unlimited: true,
            rule: rule.label().to_owned(),
            invalid,
            ..Default::default()
        },
        Planned::Replaced(rule) => own::WindowInspection {
            unlimited: true,
            rule: rule.label().to_owned(),
            invalid,
            ..Default::default()
        },
        Planned::Limited(item) => own::WindowInspection {
            matched: true,
            unlimited: false,
            rule: applied_label(&item.applied),
            shadow: item.shadow,
            limit: item.limit.max,
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
            invalid,
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
        id: m.id.to_string(),
        address: m.addr.to_string(),
        state: state as i32,
        is_self: m.is_self,
        boot_ms: m.boot_ms,
        clock_offset_ms: m.clock_offset_ms,
        clock_fenced: m.clock_fenced,
        last_heard_ms: m.last_heard_ms,
    }
}
