//! Envoy's `ShouldRateLimit` request as the server decodes it: the field numbers and wire
//! types of Envoy's `rls.proto` and `ratelimit.proto`, with the domain and each descriptor
//! entry's key and value read as bytes.
//!
//! Envoy fills entries from request headers and serialises their bytes as they are, so a value
//! need not be UTF-8. `string` and `bytes` are the same on the wire, but prost refuses a
//! `string` that is not UTF-8 and fails the whole message: one such header would fail the
//! call, and Envoy's default `failure_mode_deny: false` would then let the request through
//! every limit. Read as bytes, every descriptor is decided, and the bytes name its counter.
//!
//! The server that decodes these is generated in `build.rs`; clients, responses and
//! reflection use the generated messages of Envoy's protos ([`super::envoy`]).

use super::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawRateLimitRequest {
    /// `string domain = 1`.
    #[prost(bytes = "vec", tag = "1")]
    pub domain: Vec<u8>,
    /// `repeated RateLimitDescriptor descriptors = 2`.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RawDescriptor>,
    /// `uint32 hits_addend = 3`.
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawDescriptor {
    /// `repeated Entry entries = 1`.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<RawEntry>,
    /// `RateLimitOverride limit = 2` (no strings in it: Envoy's generated message).
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// `google.protobuf.UInt64Value hits_addend = 3`.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<u64>,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RawEntry {
    /// `string key = 1`.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// `string value = 2`.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// The `envoy.service.ratelimit.v3.RateLimitService` server, decoding [`RawRateLimitRequest`]s.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    missing_debug_implementations
)]
pub mod server {
    include!(concat!(
        env!("OUT_DIR"),
        "/envoy.service.ratelimit.v3.RateLimitService.rs"
    ));
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use crate::proto::envoy::service::ratelimit::v3::RateLimitRequest;

    /// Whatever Envoy's generated messages encode, the raw ones decode field for field.
    #[test]
    fn envoys_messages_decode_into_the_raw_ones_field_for_field() {
        let request = RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![
                RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "route".to_owned(),
                        value: "/login".to_owned(),
                    }],
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 9,
                        unit: 2,
                    }),
                    hits_addend: Some(0),
                },
                RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "tenant".to_owned(),
                        value: String::new(),
                    }],
                    limit: None,
                    hits_addend: None,
                },
            ],
            hits_addend: 4,
        };
        let raw = RawRateLimitRequest::decode(request.encode_to_vec().as_slice()).unwrap();
        assert_eq!(raw.domain, b"edge");
        assert_eq!(raw.hits_addend, 4);
        assert_eq!(raw.descriptors.len(), 2);
        let first = &raw.descriptors[0];
        assert_eq!(first.entries[0].key, b"route");
        assert_eq!(first.entries[0].value, b"/login");
        assert_eq!(first.limit, request.descriptors[0].limit);
        assert_eq!(first.hits_addend, Some(0));
        assert_eq!(raw.descriptors[1].entries[0].value, b"");
        assert_eq!(raw.descriptors[1].hits_addend, None);
        // And back: the same bytes.
        assert_eq!(raw.encode_to_vec(), request.encode_to_vec());
    }

    /// Header bytes that are not UTF-8 fail Envoy's generated message, and so would fail the
    /// call; the raw message holds them as they are.
    #[test]
    fn bytes_that_are_not_utf8_decode_as_they_are() {
        let raw = RawRateLimitRequest {
            domain: b"edge".to_vec(),
            descriptors: vec![RawDescriptor {
                entries: vec![RawEntry {
                    key: b"x-tenant".to_vec(),
                    value: b"caf\xe9".to_vec(),
                }],
                limit: None,
                hits_addend: None,
            }],
            hits_addend: 0,
        };
        let bytes = raw.encode_to_vec();
        assert!(RateLimitRequest::decode(bytes.as_slice()).is_err());
        let decoded = RawRateLimitRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded.descriptors[0].entries[0].value, b"caf\xe9");
    }
}
