//! Wire compatibility with Envoy, checked without trusting limitmesh's own `.proto` files:
//! requests are built byte by byte from the field numbers of Envoy's protos (`rls.proto`,
//! `ratelimit.proto`, `base.proto`), and responses are taken apart the same way.

use prost::Message;

use super::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use super::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use super::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

const VARINT: u8 = 0;
const LEN: u8 = 2;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(field: u8, wire: u8, out: &mut Vec<u8>) {
    varint(u64::from(field) << 3 | u64::from(wire), out);
}

fn field_varint(field: u8, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    tag(field, VARINT, &mut out);
    varint(v, &mut out);
    out
}

fn field_bytes(field: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    tag(field, LEN, &mut out);
    varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

/// A decoded field: its number and its varint value or bytes.
#[derive(Debug, PartialEq)]
enum Field {
    Varint(u64),
    Bytes(Vec<u8>),
}

/// The top-level fields of a message, in order (varint and length-delimited only).
fn fields(mut buf: &[u8]) -> Vec<(u64, Field)> {
    fn read_varint(buf: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first().expect("truncated varint");
            *buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        v
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = read_varint(&mut buf);
        let (number, wire) = (key >> 3, (key & 7) as u8);
        let field = match wire {
            VARINT => Field::Varint(read_varint(&mut buf)),
            LEN => {
                let len = read_varint(&mut buf) as usize;
                let (bytes, rest) = buf.split_at(len);
                buf = rest;
                Field::Bytes(bytes.to_vec())
            }
            other => panic!("unexpected wire type {other}"),
        };
        out.push((number, field));
    }
    out
}

fn bytes_of(fields: &[(u64, Field)], number: u64) -> Vec<&[u8]> {
    fields
        .iter()
        .filter_map(|(n, f)| match f {
            Field::Bytes(b) if *n == number => Some(b.as_slice()),
            _ => None,
        })
        .collect()
}

fn varint_of(fields: &[(u64, Field)], number: u64) -> Option<u64> {
    fields.iter().find_map(|(n, f)| match f {
        Field::Varint(v) if *n == number => Some(*v),
        _ => None,
    })
}

#[test]
fn a_request_built_from_envoys_field_numbers_decodes_into_the_right_fields() {
    // RateLimitDescriptor.Entry: key = 1, value = 2.
    let entry = [field_bytes(1, b"client"), field_bytes(2, b"alice")].concat();
    // RateLimitOverride: requests_per_unit = 1, unit = 2 (envoy.type.v3.RateLimitUnit.HOUR = 3).
    let limit = [field_varint(1, 42), field_varint(2, 3)].concat();
    // google.protobuf.UInt64Value: value = 1.
    let hits = field_varint(1, 5);
    // RateLimitDescriptor: entries = 1, limit = 2, hits_addend = 3; plus a field from a
    // future Envoy (number 9), which must be skipped.
    let descriptor = [
        field_bytes(1, &entry),
        field_bytes(2, &limit),
        field_bytes(3, &hits),
        field_varint(9, 1),
    ]
    .concat();
    // RateLimitRequest: domain = 1, descriptors = 2, hits_addend = 3.
    let request = [
        field_bytes(1, b"edge"),
        field_bytes(2, &descriptor),
        field_bytes(2, &field_bytes(1, &field_bytes(1, b"path"))),
        field_varint(3, 7),
    ]
    .concat();

    let decoded = RateLimitRequest::decode(request.as_slice()).expect("decodes");
    assert_eq!(decoded.domain, "edge");
    assert_eq!(decoded.hits_addend, 7);
    assert_eq!(decoded.descriptors.len(), 2);
    let d = &decoded.descriptors[0];
    assert_eq!(
        (d.entries[0].key.as_str(), d.entries[0].value.as_str()),
        ("client", "alice")
    );
    let o = d.limit.as_ref().expect("override");
    assert_eq!((o.requests_per_unit, o.unit), (42, 3));
    assert_eq!(d.hits_addend, Some(5));
    let second = &decoded.descriptors[1];
    assert_eq!(second.entries[0].key, "path");
    assert_eq!(second.entries[0].value, "");
    assert_eq!(second.hits_addend, None, "absent, not zero");
    assert!(second.limit.is_none());
}

#[test]
fn a_zero_descriptor_hits_addend_is_present_not_absent() {
    // An empty UInt64Value message is the value 0, set.
    let descriptor = [field_bytes(1, &field_bytes(1, b"k")), field_bytes(3, &[])].concat();
    let request = [field_bytes(1, b"d"), field_bytes(2, &descriptor)].concat();
    let decoded = RateLimitRequest::decode(request.as_slice()).expect("decodes");
    assert_eq!(decoded.descriptors[0].hits_addend, Some(0));
}

#[test]
fn a_response_carries_envoys_field_numbers() {
    let response = RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![DescriptorStatus {
            code: Code::OverLimit as i32,
            current_limit: Some(RateLimit {
                name: "n".to_owned(),
                requests_per_unit: 3,
                unit: Unit::Week as i32,
            }),
            limit_remaining: 4,
            duration_until_reset: Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000,
            }),
            quota: None,
        }],
        response_headers_to_add: vec![super::envoy::config::core::v3::HeaderValue {
            key: "x-ratelimit-remaining".to_owned(),
            value: "4".to_owned(),
            raw_value: Vec::new(),
        }],
        ..Default::default()
    };
    let top = fields(&response.encode_to_vec());
    // RateLimitResponse: overall_code = 1 (OVER_LIMIT = 2), statuses = 2,
    // response_headers_to_add = 3.
    assert_eq!(varint_of(&top, 1), Some(2));
    let status = fields(bytes_of(&top, 2)[0]);
    // DescriptorStatus: code = 1, current_limit = 2, limit_remaining = 3,
    // duration_until_reset = 4.
    assert_eq!(varint_of(&status, 1), Some(2));
    assert_eq!(varint_of(&status, 3), Some(4));
    let limit = fields(bytes_of(&status, 2)[0]);
    // RateLimit: requests_per_unit = 1, unit = 2 (WEEK = 7), name = 3.
    assert_eq!(varint_of(&limit, 1), Some(3));
    assert_eq!(varint_of(&limit, 2), Some(7));
    assert_eq!(bytes_of(&limit, 3), [b"n".as_slice()]);
    let duration = fields(bytes_of(&status, 4)[0]);
    // google.protobuf.Duration: seconds = 1, nanos = 2.
    assert_eq!(varint_of(&duration, 1), Some(1));
    assert_eq!(varint_of(&duration, 2), Some(500_000_000));
    let header = fields(bytes_of(&top, 3)[0]);
    // config.core.v3.HeaderValue: key = 1, value = 2.
    assert_eq!(bytes_of(&header, 1), [b"x-ratelimit-remaining".as_slice()]);
    assert_eq!(bytes_of(&header, 2), [b"4".as_slice()]);
}

#[test]
fn unit_and_code_numbers_are_envoys() {
    let units = [
        (Unit::Unknown, 0),
        (Unit::Second, 1),
        (Unit::Minute, 2),
        (Unit::Hour, 3),
        (Unit::Day, 4),
        (Unit::Month, 5),
        (Unit::Year, 6),
        (Unit::Week, 7),
    ];
    for (unit, number) in units {
        assert_eq!(unit as i32, number, "{unit:?}");
    }
    assert_eq!(
        [
            Code::Unknown as i32,
            Code::Ok as i32,
            Code::OverLimit as i32
        ],
        [0, 1, 2]
    );
}
