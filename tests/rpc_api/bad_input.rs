//! One test per row of the bad-input table. What is wrong with a request as a whole gets
//! INVALID_ARGUMENT naming the field, and nothing is consumed (a valid request afterwards
//! still has the whole limit). What is wrong with one descriptor is answered for that
//! descriptor alone (`per_descriptor.rs` has those from Envoy's side); the rows here check
//! that the call is answered and the other descriptors are decided.

use crate::support::*;

#[tokio::test]
async fn bad_input_empty_domain() {
    let server = TestServer::start().await;
    let mut own_req = own_check("test", &[&[("client", "u1")]]);
    own_req.domain.clear();
    assert_invalid(server.own().check(own_req).await, "domain");
    let envoy_req = envoy_request("", vec![envoy_descriptor(&[("client", "u1")])]);
    assert_invalid(server.envoy().should_rate_limit(envoy_req).await, "domain");
    assert_full_limit(&server, "u1").await;
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="_unconfigured",result="invalid"}"#),
        2
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_input_empty_descriptor_key() {
    let server = TestServer::start().await;
    let own_req = own_check("test", &[&[("client", "u2")], &[("", "v")]]);
    let resp = own_call(&server, own_req).await;
    assert!(resp.allowed);
    assert_eq!(resp.statuses[0].remaining, 2, "the other descriptor counts");
    assert_eq!(
        resp.statuses[1].invalid,
        "descriptors[1].entries[0].key: must not be empty"
    );
    let envoy_req = envoy_request(
        "test",
        vec![
            envoy_descriptor(&[("client", "u2")]),
            envoy_descriptor(&[("tenant", "t"), ("", "p")]),
        ],
    );
    let resp = envoy_call(&server, envoy_req).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 1);
    assert_eq!(resp.statuses[1].current_limit, None);
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="invalid"}"#),
        2
    );
    server.stop().await;
}

/// A key longer than 4 KiB in canonical form is limited like any other (by a digest of it),
/// on Envoy's API and on both forms of the own API.
#[tokio::test]
async fn bad_input_key_longer_than_4_kib() {
    let server = TestServer::start().await;
    let long = "v".repeat(4_100);
    let own_req = own_check("test", &[&[("client", "u3")], &[("client", &long)]]);
    let resp = own_call(&server, own_req).await;
    assert!(resp.allowed);
    assert_eq!(
        (resp.statuses[0].remaining, resp.statuses[1].remaining),
        (2, 2)
    );
    let envoy_req = envoy_request(
        "test",
        vec![
            envoy_descriptor(&[("client", "u3")]),
            envoy_descriptor(&[("client", &long)]),
        ],
    );
    let resp = envoy_call(&server, envoy_req).await;
    assert_eq!(
        (
            resp.statuses[0].limit_remaining,
            resp.statuses[1].limit_remaining
        ),
        (1, 1)
    );
    let keyed = || own::CheckRequest {
        domain: "test".to_owned(),
        key: long.clone(),
        limit: Some(inline(2, 1_000)),
        ..Default::default()
    };
    let verdicts = [
        own_call(&server, keyed()).await.allowed,
        own_call(&server, keyed()).await.allowed,
        own_call(&server, keyed()).await.allowed,
    ];
    assert_eq!(verdicts, [true, true, false]);
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="invalid"}"#),
        0
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_input_more_than_64_descriptors() {
    let server = TestServer::start().await;
    let many: Vec<own::Descriptor> = (0..65)
        .map(|_| own_descriptor(&[("client", "u4")]))
        .collect();
    let own_req = own::CheckRequest {
        domain: "test".to_owned(),
        descriptors: many,
        ..Default::default()
    };
    assert_invalid(server.own().check(own_req).await, "descriptors");
    let envoy_req = envoy_request(
        "test",
        (0..65)
            .map(|_| envoy_descriptor(&[("client", "u4")]))
            .collect(),
    );
    assert_invalid(
        server.envoy().should_rate_limit(envoy_req).await,
        "descriptors",
    );
    // 64 is allowed.
    let sixty_four = envoy_request(
        "test",
        (0..64)
            .map(|i| envoy_descriptor(&[("nothing", &i.to_string())]))
            .collect(),
    );
    assert_eq!(overall(&envoy_call(&server, sixty_four).await), Code::Ok);
    assert_full_limit(&server, "u4").await;
    server.stop().await;
}

#[tokio::test]
async fn bad_input_hits_zero() {
    let server = TestServer::start().await;
    let own_req = own::CheckRequest {
        hits: Some(0),
        ..own_check("test", &[&[("client", "u5")]])
    };
    assert_invalid(server.own().check(own_req).await, "hits");
    assert_full_limit(&server, "u5").await;
    server.stop().await;
}

/// A cost above a descriptor's limit could never fit: that descriptor is over its limit and
/// refuses the request, and nothing is consumed.
#[tokio::test]
async fn bad_input_hits_above_the_limit() {
    let server = TestServer::start().await;
    let own_req = own::CheckRequest {
        hits: Some(4),
        ..own_check("test", &[&[("client", "u6")]])
    };
    let resp = own_call(&server, own_req).await;
    assert!(!resp.allowed);
    assert_eq!(resp.statuses[0].retry_after_ms, 1_000, "the whole window");
    let envoy_req = RateLimitRequest {
        hits_addend: 4,
        ..envoy_request(
            "test",
            vec![
                envoy_descriptor(&[("open", "x")]),
                envoy_descriptor(&[("client", "u6")]),
            ],
        )
    };
    let resp = envoy_call(&server, envoy_req).await;
    assert_eq!(overall(&resp), Code::OverLimit);
    assert_eq!(code(&resp.statuses[1]), Code::OverLimit);
    let mut heavy = envoy_descriptor(&[("client", "u6")]);
    heavy.hits_addend = Some(u64::from(u32::MAX) + 7);
    let per_descriptor = envoy_request("test", vec![envoy_descriptor(&[("client", "u6")]), heavy]);
    let resp = envoy_call(&server, per_descriptor).await;
    assert_eq!(overall(&resp), Code::OverLimit);
    assert_eq!(code(&resp.statuses[0]), Code::Ok, "it had room");
    assert_eq!(code(&resp.statuses[1]), Code::OverLimit);
    assert_full_limit(&server, "u6").await;
    server.stop().await;
}

/// An override in a unit Envoy does not have is ignored: the rule's limit applies to that
/// descriptor, the others are decided as usual.
#[tokio::test]
async fn bad_input_unknown_unit() {
    let server = TestServer::start().await;
    for (n, unit) in [0, 8, -3].into_iter().enumerate() {
        let mut d = envoy_descriptor(&[("client", "u7")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 1_000,
            unit,
        });
        let req = envoy_request("test", vec![envoy_descriptor(&[("open", "x")]), d]);
        let resp = envoy_call(&server, req).await;
        let limit = resp.statuses[1]
            .current_limit
            .as_ref()
            .expect("the rule's limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit),
            ("per-client", 3)
        );
        assert_eq!(resp.statuses[1].limit_remaining, 2 - n as u32);
    }
    let over = envoy_call(
        &server,
        envoy_request("test", vec![envoy_descriptor(&[("client", "u7")])]),
    )
    .await;
    assert_eq!(overall(&over), Code::OverLimit, "the bad overrides counted");
    server.stop().await;
}

#[tokio::test]
async fn bad_input_descriptor_without_entries() {
    let server = TestServer::start().await;
    let own_req = own::CheckRequest {
        domain: "test".to_owned(),
        descriptors: vec![
            own_descriptor(&[("client", "u8")]),
            own::Descriptor::default(),
        ],
        ..Default::default()
    };
    let resp = own_call(&server, own_req).await;
    assert!(resp.allowed);
    assert_eq!(
        resp.statuses[1].invalid,
        "descriptors[1].entries: must not be empty"
    );
    let envoy_req = envoy_request(
        "test",
        vec![
            envoy_descriptor(&[("client", "u8")]),
            RateLimitDescriptor::default(),
        ],
    );
    let resp = envoy_call(&server, envoy_req).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 1);
    // No descriptors at all is the request's problem.
    let no_descriptors = envoy_request("test", vec![]);
    assert_invalid(
        server.envoy().should_rate_limit(no_descriptors).await,
        "descriptors",
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_input_check_batch_over_1000() {
    let server = TestServer::start().await;
    let checks = (0..1001)
        .map(|_| own_check("test", &[&[("client", "u9")]]))
        .collect();
    assert_invalid(
        server
            .own()
            .check_batch(own::CheckBatchRequest { checks })
            .await,
        "checks",
    );
    assert_full_limit(&server, "u9").await;
    server.stop().await;
}

#[tokio::test]
async fn bad_input_inline_limit_with_zero_window_or_bad_buckets() {
    let server = TestServer::start().await;
    let cases = [
        (inline(5, 0), "limit.window_ms"),
        (
            own::Limit {
                buckets: 3,
                ..inline(5, 1_000)
            },
            "limit.buckets",
        ),
        (
            own::Limit {
                buckets: 65,
                ..inline(5, 1_000)
            },
            "limit.buckets",
        ),
        (
            own::Limit {
                buckets: 70_000,
                ..inline(5, 1_000)
            },
            "limit.buckets",
        ),
        (
            own::Limit {
                mode: 9,
                ..inline(5, 1_000)
            },
            "limit.mode",
        ),
        (inline(5, 400 * 86_400_000), "limit.window_ms"),
    ];
    for (limit, field) in cases {
        let req = own::CheckRequest {
            limit: Some(limit),
            ..own_check("test", &[&[("client", "u10")]])
        };
        assert_invalid(server.own().check(req).await, field);
    }
    assert_full_limit(&server, "u10").await;
    server.stop().await;
}

#[tokio::test]
async fn bad_input_key_and_descriptors_together_or_neither() {
    let server = TestServer::start().await;
    let both = own::CheckRequest {
        key: "k".to_owned(),
        limit: Some(inline(3, 1_000)),
        ..own_check("test", &[&[("client", "u11")]])
    };
    assert_invalid(server.own().check(both).await, "key");
    let neither = own::CheckRequest {
        domain: "test".to_owned(),
        ..Default::default()
    };
    assert_invalid(server.own().check(neither).await, "descriptors");
    let key_without_limit = own::CheckRequest {
        domain: "test".to_owned(),
        key: "k".to_owned(),
        ..Default::default()
    };
    assert_invalid(server.own().check(key_without_limit).await, "limit");
    assert_full_limit(&server, "u11").await;
    server.stop().await;
}

#[tokio::test]
async fn bad_input_domain_longer_than_256_bytes() {
    let server = TestServer::start().await;
    let long = "d".repeat(257);
    assert_invalid(
        server
            .own()
            .check(own_check(&long, &[&[("client", "u10")]]))
            .await,
        "domain",
    );
    let envoy_req = envoy_request(&long, vec![envoy_descriptor(&[("client", "u10")])]);
    assert_invalid(server.envoy().should_rate_limit(envoy_req).await, "domain");
    assert_full_limit(&server, "u10").await;
    server.stop().await;
}

/// A batch whose checks each copy a long domain into many descriptors' keys would cost the
/// node far more than the request's size before anything ran: planning stops at the check that
/// passes the batch's key budget (1 MiB) and names it.
#[tokio::test]
async fn bad_input_check_batch_planning_more_than_a_mebibyte_of_keys() {
    let server = TestServer::start().await;
    let domain = "d".repeat(256);
    let descriptors: Vec<&[(&str, &str)]> = (0..64).map(|_| &[("client", "v")][..]).collect();
    let check = own::CheckRequest {
        // An inline limit applies to every descriptor: each plans a key of about 270 bytes.
        limit: Some(inline(10, 60_000)),
        ..own_check(&domain, &descriptors)
    };
    let checks = vec![check; 1000];
    let status = server
        .own()
        .check_batch(own::CheckBatchRequest { checks })
        .await
        .expect_err("the batch is refused");
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    // 64 keys of about 270 bytes a check: about the 61st check passes 1 MiB.
    let index: usize = status
        .message()
        .strip_prefix("checks[")
        .and_then(|m| m.split(']').next())
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| panic!("the message should name the check: {}", status.message()));
    assert!((50..80).contains(&index), "{}", status.message());
    assert_full_limit(&server, "u11").await;
    server.stop().await;
}
