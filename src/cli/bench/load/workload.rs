//! What the load sends: pre-encoded gRPC messages for the synthetic keys or for a
//! configuration's own rules.

use prost::Message;

use super::Api;
use crate::cli::CliError;
use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use crate::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use crate::proto::limitmesh::v1::{CheckRequest, Limit};

/// The Envoy request the load sends for descriptor value `value`: domain `demo`, descriptor
/// `client=value`, with a limit override so high that every call is admitted and counted (the
/// node does all its work; nothing is refused).
pub fn envoy_request(value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "demo".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".into(),
                value: value.into(),
            }],
            limit: Some(RateLimitOverride {
                requests_per_unit: u32::MAX,
                unit: Unit::Second as i32,
            }),
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}

/// `request` as one gRPC message on the wire (uncompressed flag, big-endian length, bytes):
/// the body an HTTP/2 load tool posts.
pub fn grpc_frame(request: &impl Message) -> Vec<u8> {
    let body = request.encode_to_vec();
    let mut frame = Vec::with_capacity(5 + body.len());
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// What the calls send: pre-encoded gRPC messages, one per key, walked in turn.
#[derive(Debug)]
pub struct Workload {
    pub api: Api,
    pub(super) bodies: Vec<bytes::Bytes>,
    /// A real configuration refuses calls over its limits: an answer either way is a call
    /// served. The synthetic load is always admitted, so a refusal there is an error.
    pub(super) refusals_ok: bool,
    /// How many of the rules' descriptors the bodies cover (0: the synthetic load).
    pub rules: usize,
}

impl Workload {
    /// `keys` distinct keys under a limit no load reaches (every call admitted and counted).
    pub fn synthetic(api: Api, keys: usize) -> Self {
        let bodies = (0..keys.max(1))
            .map(|k| {
                let key = format!("bench-key-{k}");
                bytes::Bytes::from(match api {
                    Api::Envoy => grpc_frame(&envoy_request(&key)),
                    Api::Own => grpc_frame(&own_request(&key)),
                })
            })
            .collect();
        Self {
            api,
            bodies,
            refusals_ok: false,
            rules: 0,
        }
    }

    /// Envoy requests for a configuration's own rules: `keys` requests in all, one rule's
    /// descriptor after another, each value the rule does not fix (a key alone, a wildcard)
    /// made up from the request's number, so that the calls spread over `keys` windows.
    pub fn from_rules(rules: &crate::rules::RuleSet, keys: usize) -> Result<Self, CliError> {
        let templates = rules.descriptor_templates();
        if templates.is_empty() {
            return Err(CliError::Bench(
                "the configuration's rules have no rate_limit to call".into(),
            ));
        }
        let bodies = (0..keys.max(templates.len()))
            .map(|i| {
                let t = &templates[i % templates.len()];
                let made_up = format!("bench-{}", i / templates.len());
                let request = RateLimitRequest {
                    domain: t.domain.clone(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: t
                            .entries
                            .iter()
                            .map(|(key, value)| Entry {
                                key: key.clone(),
                                value: match value {
                                    None => made_up.clone(),
                                    Some(v) => v.replace('*', &made_up),
                                },
                            })
                            .collect(),
                        limit: None,
                        hits_addend: None,
                    }],
                    hits_addend: 0,
                };
                bytes::Bytes::from(grpc_frame(&request))
            })
            .collect();
        Ok(Self {
            api: Api::Envoy,
            bodies,
            refusals_ok: true,
            rules: templates.len(),
        })
    }
}

/// An own-API request for `key` with an inline limit no load reaches.
fn own_request(key: &str) -> CheckRequest {
    CheckRequest {
        domain: "bench".into(),
        key: key.to_owned(),
        limit: Some(Limit {
            requests: u32::MAX,
            window_ms: 1_000,
            ..Limit::default()
        }),
        ..CheckRequest::default()
    }
}
