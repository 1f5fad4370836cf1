//! One descriptor never decides the fate of the others: a value too long, a cost above the
//! limit, bytes that are not UTF-8, entries or an override that are malformed, each is answered
//! for its own descriptor, while the others are decided and counted as usual. Envoy lets a
//! request through every limit when the call fails (`failure_mode_deny: false`), so failing
//! the call for one descriptor would open all of them.

use crate::raw_frames::{RawDescriptor, raw_call, raw_request};
use crate::support::*;

const EDGE_RULES: &str = r#"
domain: edge
descriptors:
  - key: route
    value: /login
    descriptors:
      - key: remote_address
        rate_limit: { unit: minute, requests_per_unit: 3, name: login-per-ip }
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 100, name: per-tenant }
  - key: client
    rate_limit: { unit: day, requests_per_unit: 5, name: per-client-day }
  - key: path
    value: "/files/*"
    rate_limit: { unit: minute, requests_per_unit: 2, name: files }
"#;

async fn edge_server() -> TestServer {
    TestServer::start_with(EDGE_RULES, LimiterConfig::default()).await
}

fn login(ip: &str) -> RateLimitDescriptor {
    envoy_descriptor(&[("route", "/login"), ("remote_address", ip)])
}

fn limit_name(status: &DescriptorStatus) -> Option<(&str, u32)> {
    status
        .current_limit
        .as_ref()
        .map(|l| (l.name.as_str(), l.requests_per_unit))
}

const EXPECTED: [Code; 5] = [
    Code::Ok,
    Code::Ok,
    Code::Ok,
    Code::OverLimit,
    Code::OverLimit,
];

/// The outside test's probe: a per-IP login limit of 3 a minute, next to a tenant descriptor
/// whose value is 5 000 bytes. The IP's window counts and refuses; the long value is limited
/// like any other (its key is a digest), and refused requests consume neither.
#[tokio::test]
async fn a_long_value_next_to_a_per_ip_limit_is_limited_and_refuses_nothing_else() {
    let server = edge_server().await;
    let long = "t".repeat(5_000);
    for (i, expected) in EXPECTED.into_iter().enumerate() {
        let req = envoy_request(
            "edge",
            vec![login("9.9.9.9"), envoy_descriptor(&[("tenant", &long)])],
        );
        let resp = envoy_call(&server, req).await;
        assert_eq!(overall(&resp), expected, "call {i}");
        let (ip, tenant) = (&resp.statuses[0], &resp.statuses[1]);
        assert_eq!(code(ip), expected, "call {i}");
        assert_eq!(limit_name(ip), Some(("login-per-ip", 3)));
        assert_eq!(code(tenant), Code::Ok, "call {i}");
        assert_eq!(limit_name(tenant), Some(("per-tenant", 100)));
        if i < 3 {
            assert_eq!(ip.limit_remaining, 2 - i as u32, "call {i}");
            assert_eq!(tenant.limit_remaining, 99 - i as u32, "call {i}");
        }
    }
    // Three admitted on the long value's window; the refused two took nothing from it.
    let alone = envoy_call(
        &server,
        envoy_request("edge", vec![envoy_descriptor(&[("tenant", &long)])]),
    )
    .await;
    assert_eq!(alone.statuses[0].limit_remaining, 96);
    // A long value that differs in its last byte has a window of its own.
    let other = format!("{}u", &long[1..]);
    let apart = envoy_call(
        &server,
        envoy_request("edge", vec![envoy_descriptor(&[("tenant", &other)])]),
    )
    .await;
    assert_eq!(apart.statuses[0].limit_remaining, 99);
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="edge",result="invalid"}"#),
        0
    );
    server.stop().await;
}

/// The same probe, as Envoy's bytes on an HTTP/2 stream.
#[tokio::test]
async fn a_long_value_next_to_a_per_ip_limit_through_raw_frames() {
    let server = edge_server().await;
    let long = vec![b't'; 5_000];
    let message = raw_request(
        b"edge",
        &[
            RawDescriptor::new()
                .entry(b"route", b"/login")
                .entry(b"remote_address", b"9.9.9.9"),
            RawDescriptor::new().entry(b"tenant", &long),
        ],
    );
    for (i, expected) in EXPECTED.into_iter().enumerate() {
        let resp = raw_call(server.addr, &message).await.expect("answered");
        assert_eq!(overall(&resp), expected, "call {i}");
        assert_eq!(code(&resp.statuses[0]), expected, "call {i}");
        assert_eq!(code(&resp.statuses[1]), Code::Ok, "call {i}");
        assert_eq!(limit_name(&resp.statuses[1]), Some(("per-tenant", 100)));
    }
    server.stop().await;
}

/// A cost above the limit can never fit: that descriptor is OVER_LIMIT, with the whole window
/// as its wait, the request is refused, and nothing is consumed anywhere. On Envoy's API per
/// descriptor and per request, and on the own API's `hits`.
#[tokio::test]
async fn a_cost_above_the_limit_is_over_the_limit_for_that_descriptor_only() {
    let server = edge_server().await;
    let mut heavy = envoy_descriptor(&[("client", "c1")]);
    heavy.hits_addend = Some(6);
    let resp = envoy_call(
        &server,
        envoy_request("edge", vec![heavy, login("1.1.1.1")]),
    )
    .await;
    assert_eq!(overall(&resp), Code::OverLimit);
    let (client, ip) = (&resp.statuses[0], &resp.statuses[1]);
    assert_eq!(code(client), Code::OverLimit);
    assert_eq!(limit_name(client), Some(("per-client-day", 5)));
    assert_eq!(
        client.limit_remaining, 5,
        "the room there is: none of it taken"
    );
    assert_eq!(
        millis(client.duration_until_reset.as_ref().unwrap()),
        86_400_000
    );
    assert_eq!(code(ip), Code::Ok, "the other descriptor had room");

    // Far above, beyond a u32, and at request level.
    let mut huge = envoy_descriptor(&[("client", "c1")]);
    huge.hits_addend = Some(u64::from(u32::MAX) + 7);
    let resp = envoy_call(&server, envoy_request("edge", vec![huge])).await;
    assert_eq!(code(&resp.statuses[0]), Code::OverLimit);
    let request_level = RateLimitRequest {
        hits_addend: 6,
        ..envoy_request(
            "edge",
            vec![envoy_descriptor(&[("client", "c1")]), login("1.1.1.1")],
        )
    };
    let resp = envoy_call(&server, request_level).await;
    assert_eq!(overall(&resp), Code::OverLimit);
    assert_eq!(code(&resp.statuses[0]), Code::OverLimit);
    assert_eq!(code(&resp.statuses[1]), Code::OverLimit, "6 is above 3 too");

    // Own API: `hits` above one descriptor's limit, within the other's.
    let own = own::CheckRequest {
        hits: Some(6),
        ..own_check("edge", &[&[("client", "c1")], &[("tenant", "t1")]])
    };
    let resp = own_call(&server, own).await;
    assert!(!resp.allowed);
    assert!(!resp.statuses[0].allowed);
    assert_eq!(resp.statuses[0].retry_after_ms, 86_400_000);
    assert!(resp.statuses[1].allowed);
    assert_eq!(resp.retry_after_ms, 86_400_000);

    // Through raw frames, next to a descriptor with room.
    let raw = raw_request(
        b"edge",
        &[
            RawDescriptor::new().entry(b"client", b"c1").hits(6),
            RawDescriptor::new().entry(b"tenant", b"t1"),
        ],
    );
    let resp = raw_call(server.addr, &raw).await.expect("answered");
    assert_eq!(overall(&resp), Code::OverLimit);
    assert_eq!(
        (code(&resp.statuses[0]), code(&resp.statuses[1])),
        (Code::OverLimit, Code::Ok)
    );

    // Nothing was consumed: the whole day's 5 (and the IP's 3) are still there.
    let mut five = envoy_descriptor(&[("client", "c1")]);
    five.hits_addend = Some(5);
    let resp = envoy_call(&server, envoy_request("edge", vec![five])).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 0);
    let resp = envoy_call(&server, envoy_request("edge", vec![login("1.1.1.1")])).await;
    assert_eq!(resp.statuses[0].limit_remaining, 2);
    server.stop().await;
}

/// Envoy forwards header bytes as they are. A value that is not UTF-8 is answered: its bytes
/// name its window (two such values are two windows), and the rules see it with U+FFFD in
/// place of what is not UTF-8. A domain that is not UTF-8 is the request's problem, and named.
#[tokio::test]
async fn values_that_are_not_utf8_are_limited_by_their_bytes() {
    let server = edge_server().await;
    let ip = |value: &[u8]| {
        raw_request(
            b"edge",
            &[RawDescriptor::new()
                .entry(b"route", b"/login")
                .entry(b"remote_address", value)],
        )
    };
    for (i, expected) in EXPECTED.into_iter().take(4).enumerate() {
        let resp = raw_call(server.addr, &ip(b"9.9.\xff\xfe"))
            .await
            .expect("answered");
        assert_eq!(overall(&resp), expected, "call {i}");
        assert_eq!(limit_name(&resp.statuses[0]), Some(("login-per-ip", 3)));
    }
    let apart = raw_call(server.addr, &ip(b"9.9.\xfe\xff"))
        .await
        .expect("answered");
    assert_eq!(overall(&apart), Code::Ok);
    assert_eq!(apart.statuses[0].limit_remaining, 2, "a window of its own");

    // A wildcard rule matches the UTF-8 view.
    let files = raw_request(
        b"edge",
        &[RawDescriptor::new().entry(b"path", b"/files/\xc3\x28")],
    );
    let resp = raw_call(server.addr, &files).await.expect("answered");
    assert_eq!(limit_name(&resp.statuses[0]), Some(("files", 2)));
    // A key that is not UTF-8 matches no rule, and is answered OK without a limit.
    let key = raw_request(b"edge", &[RawDescriptor::new().entry(b"ten\xffant", b"x")]);
    let resp = raw_call(server.addr, &key).await.expect("answered");
    assert_eq!(
        (overall(&resp), resp.statuses[0].current_limit.clone()),
        (Code::Ok, None)
    );

    let (status, message) = raw_call(
        server.addr,
        &raw_request(b"ed\xffge", &[RawDescriptor::new().entry(b"k", b"v")]),
    )
    .await
    .expect_err("the domain is the request's");
    assert_eq!(status, "3", "INVALID_ARGUMENT: {message}");
    assert!(message.starts_with("domain: "), "{message}");
    server.stop().await;
}

/// Descriptors without entries, with an entry without a key, or with a limit override in no
/// unit Envoy has, next to limited ones: the limited ones count and refuse as usual. The bad
/// override is ignored, so the rule's limit holds the descriptor that sent it; the malformed
/// ones have no limit, and each counts as invalid.
#[tokio::test]
async fn malformed_descriptors_next_to_limited_ones_change_nothing_for_them() {
    let server = edge_server().await;
    let mut bad_override = login("2.2.2.2");
    bad_override.limit = Some(RateLimitOverride {
        requests_per_unit: 1_000,
        unit: 99,
    });
    let descriptors = vec![
        bad_override,
        RateLimitDescriptor::default(),
        envoy_descriptor(&[("tenant", "m1"), ("", "x")]),
        envoy_descriptor(&[("client", "m1")]),
    ];
    for (i, expected) in EXPECTED.into_iter().enumerate() {
        let resp = envoy_call(&server, envoy_request("edge", descriptors.clone())).await;
        assert_eq!(overall(&resp), expected, "call {i}");
        let s = &resp.statuses;
        assert_eq!(code(&s[0]), expected, "call {i}");
        assert_eq!(
            limit_name(&s[0]),
            Some(("login-per-ip", 3)),
            "the rule, not the override"
        );
        for malformed in &s[1..3] {
            assert_eq!(
                (code(malformed), malformed.current_limit.clone()),
                (Code::Ok, None)
            );
        }
        assert_eq!(code(&s[3]), Code::Ok);
        if i < 3 {
            assert_eq!(s[3].limit_remaining, 4 - i as u32, "call {i}");
        }
    }
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="edge",result="invalid"}"#),
        15,
        "three malformed descriptors in each of five calls"
    );

    // The same through raw frames, with an override unit no enum has.
    let message = raw_request(
        b"edge",
        &[
            RawDescriptor::new(),
            RawDescriptor::new().entry(b"client", b"m2").limit(1, 42),
        ],
    );
    for expected in [Code::Ok, Code::Ok] {
        let resp = raw_call(server.addr, &message).await.expect("answered");
        assert_eq!(overall(&resp), expected);
        assert_eq!(limit_name(&resp.statuses[1]), Some(("per-client-day", 5)));
    }

    // Own API: the malformed descriptor says why, the other counts.
    let resp = own_call(&server, own_check("edge", &[&[("client", "m3")], &[]])).await;
    assert!(resp.allowed);
    assert_eq!(resp.statuses[0].remaining, 4);
    assert_eq!(
        resp.statuses[1].invalid,
        "descriptors[1].entries: must not be empty"
    );
    assert!(resp.statuses[1].unlimited && !resp.statuses[1].matched);
    assert!(resp.statuses[0].invalid.is_empty());
    let inspected = server
        .own()
        .inspect(own::InspectRequest {
            domain: "edge".to_owned(),
            descriptors: vec![own_descriptor(&[("client", "m3")]), own_descriptor(&[])],
            ..Default::default()
        })
        .await
        .expect("Inspect answers")
        .into_inner();
    assert_eq!(inspected.windows[0].limit, 5);
    assert_eq!(
        inspected.windows[1].invalid,
        "descriptors[1].entries: must not be empty"
    );
    server.stop().await;
}

/// Each check of a batch is decided on its own: an invalid one gets its error in its own
/// result, the others run and consume.
#[tokio::test]
async fn each_check_of_a_batch_is_decided_on_its_own() {
    let server = edge_server().await;
    let checks = vec![
        own_check("edge", &[&[("client", "b1")]]),
        own_check("", &[&[("client", "b1")]]),
        own::CheckRequest {
            hits: Some(6),
            ..own_check("edge", &[&[("client", "b1")]])
        },
        own_check("edge", &[&[("client", "b1")]]),
    ];
    let results = server
        .own()
        .check_batch(own::CheckBatchRequest { checks })
        .await
        .expect("the batch is answered")
        .into_inner()
        .results;
    assert_eq!(results.len(), 4);
    assert!(results[0].allowed && results[0].error.is_none());
    let error = results[1]
        .error
        .as_ref()
        .expect("the invalid check says why");
    assert_eq!(error.code, GrpcCode::InvalidArgument as i32);
    assert_eq!(error.message, "domain: must not be empty");
    assert!(!results[1].allowed && results[1].statuses.is_empty());
    assert!(
        !results[2].allowed && results[2].error.is_none(),
        "over its limit"
    );
    assert!(results[3].allowed);
    assert_eq!(results[3].statuses[0].remaining, 3, "two of five consumed");
    server.stop().await;
}

/// A cost above the limit on a shadow rule is counted over its limit and refuses nothing; in
/// quota mode it is one quota descriptor without room, which refuses the request only if every
/// quota descriptor of it is over.
#[tokio::test]
async fn a_cost_above_the_limit_under_shadow_or_quota_mode_refuses_as_the_mode_says() {
    let server = TestServer::start().await;
    let mut watch = envoy_descriptor(&[("watch", "w1")]);
    watch.hits_addend = Some(2);
    let resp = envoy_call(
        &server,
        envoy_request("test", vec![watch, envoy_descriptor(&[("client", "s1")])]),
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(
        code(&resp.statuses[0]),
        Code::Ok,
        "a shadow rule never refuses"
    );
    assert_eq!(resp.statuses[1].limit_remaining, 2, "the other consumed");
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="shadow_over_limit"}"#),
        1
    );
    server.stop().await;

    let options = LoadOptions {
        quota_mode: true,
        ..LoadOptions::default()
    };
    let server = TestServer::start_with_options(RULES, options).await;
    let heavy = || {
        let mut d = envoy_descriptor(&[("client", "q1")]);
        d.hits_addend = Some(4);
        d
    };
    let resp = envoy_call(
        &server,
        envoy_request("test", vec![heavy(), envoy_descriptor(&[("plan", "free")])]),
    )
    .await;
    assert_eq!(
        overall(&resp),
        Code::Ok,
        "the other quota descriptor had room"
    );
    assert_eq!(code(&resp.statuses[0]), Code::OverLimit);
    assert_eq!(resp.statuses[1].limit_remaining, 4);
    let alone = envoy_call(&server, envoy_request("test", vec![heavy()])).await;
    assert_eq!(
        overall(&alone),
        Code::OverLimit,
        "every quota descriptor is over"
    );
    server.stop().await;
}
