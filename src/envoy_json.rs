//! envoyproxy/ratelimit's `/json` endpoint: the same request as `ShouldRateLimit`, as JSON over
//! HTTP, answered 200 when allowed and 429 when over the limit. Request fields may be spelled in
//! snake_case or camelCase; the response is the RLS response in protobuf's JSON mapping.
//!
//! Body that does not map onto the request message (not JSON, a field of the wrong JSON type, a
//! number out of its field's range) is refused whole with 400 naming the field, as a protobuf
//! JSON parser would. Everything else is decided as on the gRPC service: a descriptor that is
//! malformed (no entries, an entry without a key, a limit override in an unknown unit), too
//! long or too costly is answered on its own, never failing the others.

use std::future::Future;
use std::pin::Pin;

use serde_json::{Value, json};

use crate::admin::{JsonCheck, JsonOutcome, JsonRefusal};
use crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use crate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use crate::proto::envoy_raw::server::rate_limit_service_server::RateLimitService;
use crate::proto::envoy_raw::{RawDescriptor, RawEntry, RawRateLimitRequest};
use crate::rpc::{RateLimitHeaders, RateLimitServiceImpl, RpcContext};

/// Longest JSON body accepted.
const MAX_BODY: usize = 256 * 1024;

/// Serves `/json` with the Envoy rate limit service.
pub struct JsonChecker {
    service: RateLimitServiceImpl,
}

impl std::fmt::Debug for JsonChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonChecker")
    }
}

impl JsonChecker {
    pub fn new(ctx: RpcContext, headers: RateLimitHeaders) -> Self {
        Self {
            service: RateLimitServiceImpl::new(ctx, headers),
        }
    }
}

fn bad(message: impl Into<String>) -> JsonRefusal {
    JsonRefusal {
        status: 400,
        message: message.into(),
    }
}

/// A field by its snake_case or camelCase name.
fn field<'v>(obj: &'v Value, snake: &str, camel: &str) -> Option<&'v Value> {
    obj.get(snake).or_else(|| obj.get(camel))
}

fn string(v: &Value, path: &str) -> Result<String, JsonRefusal> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("{path}: expected a string")))
}

fn number(v: &Value, path: &str) -> Result<u64, JsonRefusal> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .ok_or_else(|| bad(format!("{path}: expected a non-negative integer")))
}

/// A unit by number or name. A name no unit has is read as UNKNOWN (0): the override is then
/// ignored for that descriptor, as an unknown unit number is on the gRPC service.
fn unit(v: &Value, path: &str) -> Result<i32, JsonRefusal> {
    if let Some(n) = v.as_i64() {
        return i32::try_from(n).map_err(|_| bad(format!("{path}: not a unit")));
    }
    let name = v
        .as_str()
        .ok_or_else(|| bad(format!("{path}: expected a unit name")))?;
    Ok(Unit::from_str_name(&name.to_ascii_uppercase()).map_or(Unit::Unknown as i32, |u| u as i32))
}

pub(crate) fn parse(body: &[u8]) -> Result<RawRateLimitRequest, JsonRefusal> {
    if body.len() > MAX_BODY {
        return Err(bad(format!(
            "body: {} bytes; the maximum is {MAX_BODY}",
            body.len()
        )));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("body: not JSON: {e}")))?;
    let domain = field(&v, "domain", "domain")
        .map(|d| string(d, "domain"))
        .transpose()?
        .unwrap_or_default();
    let hits_addend = field(&v, "hits_addend", "hitsAddend")
        .map(|h| number(h, "hits_addend"))
        .transpose()?
        .unwrap_or(0);
    let mut descriptors = Vec::new();
    let list = field(&v, "descriptors", "descriptors")
        .map(|d| {
            d.as_array()
                .ok_or_else(|| bad("descriptors: expected an array"))
        })
        .transpose()?;
    for (i, d) in list.into_iter().flatten().enumerate() {
        let at = format!("descriptors[{i}]");
        let mut entries = Vec::new();
        let es = field(d, "entries", "entries")
            .map(|e| {
                e.as_array()
                    .ok_or_else(|| bad(format!("{at}.entries: expected an array")))
            })
            .transpose()?;
        for (j, e) in es.into_iter().flatten().enumerate() {
            let ep = format!("{at}.entries[{j}]");
            entries.push(RawEntry {
                key: field(e, "key", "key")
                    .map(|k| string(k, &format!("{ep}.key")))
                    .transpose()?
                    .unwrap_or_default()
                    .into_bytes(),
                value: field(e, "value", "value")
                    .map(|k| string(k, &format!("{ep}.value")))
                    .transpose()?
                    .unwrap_or_default()
                    .into_bytes(),
            });
        }
        let limit = field(d, "limit", "limit")
            .map(|l| -> Result<RateLimitOverride, JsonRefusal> {
                Ok(RateLimitOverride {
                    requests_per_unit: field(l, "requests_per_unit", "requestsPerUnit")
                        .map(|r| number(r, &format!("{at}.limit.requests_per_unit")))
                        .transpose()?
                        .map_or(Ok(0), u32::try_from)
                        .map_err(|_| bad(format!("{at}.limit.requests_per_unit: too large")))?,
                    unit: field(l, "unit", "unit")
                        .map(|u| unit(u, &format!("{at}.limit.unit")))
                        .transpose()?
                        .unwrap_or(0),
                })
            })
            .transpose()?;
        let hits = field(d, "hits_addend", "hitsAddend")
            .map(|h| number(h, &format!("{at}.hits_addend")))
            .transpose()?;
        descriptors.push(RawDescriptor {
            entries,
            limit,
            hits_addend: hits,
        });
    }
    Ok(RawRateLimitRequest {
        domain: domain.into_bytes(),
        descriptors,
        hits_addend: u32::try_from(hits_addend).map_err(|_| bad("hits_addend: too large"))?,
    })
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).map_or("UNKNOWN", |c| c.as_str_name())
}

fn status_json(s: &DescriptorStatus) -> Value {
    let mut o = json!({ "code": code_name(s.code), "limitRemaining": s.limit_remaining });
    if let Some(l) = &s.current_limit {
        o["currentLimit"] = json!({
            "name": l.name,
            "requestsPerUnit": l.requests_per_unit,
            "unit": Unit::try_from(l.unit).map_or("UNKNOWN", |u| u.as_str_name()),
        });
    }
    if let Some(d) = &s.duration_until_reset {
        let ms = d.seconds * 1_000 + i64::from(d.nanos) / 1_000_000;
        o["durationUntilReset"] = json!(format!("{}.{:03}s", ms / 1_000, ms % 1_000));
    }
    o
}

fn response_json(r: &RateLimitResponse) -> Value {
    json!({
        "overallCode": code_name(r.overall_code),
        "statuses": r.statuses.iter().map(status_json).collect::<Vec<_>>(),
        "responseHeadersToAdd": r
            .response_headers_to_add
            .iter()
            .map(|h| json!({ "key": h.key, "value": h.value }))
            .collect::<Vec<_>>(),
    })
}

impl JsonCheck for JsonChecker {
    fn check_json<'a>(
        &'a self,
        body: &'a [u8],
    ) -> Pin<Box<dyn Future<Output = JsonOutcome> + Send + 'a>> {
        Box::pin(async move {
            let request = parse(body)?;
            match self
                .service
                .should_rate_limit(tonic::Request::new(request))
                .await
            {
                Ok(response) => {
                    let r = response.into_inner();
                    Ok((r.overall_code == Code::OverLimit as i32, response_json(&r)))
                }
                Err(status) => Err(JsonRefusal {
                    status: match status.code() {
                        tonic::Code::InvalidArgument => 400,
                        tonic::Code::ResourceExhausted => 503,
                        _ => 500,
                    },
                    message: status.message().to_owned(),
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_spellings_and_names_bad_fields() {
        let r = parse(
            br#"{"domain":"d","hitsAddend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],
                "limit":{"requests_per_unit":5,"unit":"minute"},"hits_addend":"3"}]}"#,
        )
        .unwrap();
        assert_eq!(r.domain, b"d");
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].entries[0].key, b"k");
        assert_eq!(r.descriptors[0].hits_addend, Some(3));
        assert_eq!(
            r.descriptors[0].limit.as_ref().unwrap().unit,
            Unit::Minute as i32
        );
        let e = parse(br#"{"domain":"d","descriptors":[{"entries":[{"key":7}]}]}"#).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.message.contains("descriptors[0].entries[0].key"), "{e:?}");
        // An unknown unit name is the descriptor's problem, not the body's: read as UNKNOWN,
        // so that the override is ignored for that descriptor alone.
        let r = parse(br#"{"descriptors":[{"limit":{"unit":"fortnight"}}]}"#).unwrap();
        assert_eq!(
            r.descriptors[0].limit.as_ref().unwrap().unit,
            Unit::Unknown as i32
        );
        let e = parse(br#"{"descriptors":[{"limit":{"unit":true}}]}"#).unwrap_err();
        assert!(e.message.contains("descriptors[0].limit.unit"), "{e:?}");
        assert!(parse(b"not json").is_err());
    }
}
