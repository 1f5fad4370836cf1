//! Envoy's rate limit service, ShouldRateLimit, with the semantics of envoyproxy/ratelimit.

use crate::support::*;

#[tokio::test]
async fn envoy_allows_requests_per_unit_then_over_limit() {
    let server = TestServer::start().await;
    for n in 0..3u32 {
        let resp = envoy_call(
            &server,
            envoy_request("test", vec![envoy_descriptor(&[("client", "eve")])]),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok, "request {n}");
        let s = &resp.statuses[0];
        assert_eq!(code(s), Code::Ok);
        assert_eq!(s.limit_remaining, 2 - n);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("per-client", 3, EnvoyUnit::Second as i32)
        );
        let reset = millis(s.duration_until_reset.as_ref().unwrap());
        assert!(reset > 0 && reset <= 1_100, "{reset} ms");
    }
    let over = envoy_call(
        &server,
        envoy_request("test", vec![envoy_descriptor(&[("client", "eve")])]),
    )
    .await;
    assert_eq!(overall(&over), Code::OverLimit);
    assert_eq!(code(&over.statuses[0]), Code::OverLimit);
    assert_eq!(over.statuses[0].limit_remaining, 0);
    let wait = millis(over.statuses[0].duration_until_reset.as_ref().unwrap());
    assert!(wait > 0 && wait <= 1_100, "{wait} ms");
    server.clock.advance(wait);
    let retried = envoy_call(
        &server,
        envoy_request("test", vec![envoy_descriptor(&[("client", "eve")])]),
    )
    .await;
    assert_eq!(
        overall(&retried),
        Code::Ok,
        "room again after the advertised wait"
    );
    server.stop().await;
}

#[tokio::test]
async fn envoy_hits_addend_at_request_level() {
    let server = TestServer::start().await;
    let req = |hits| RateLimitRequest {
        hits_addend: hits,
        ..envoy_request("test", vec![envoy_descriptor(&[("client", "frank")])])
    };
    let first = envoy_call(&server, req(2)).await;
    assert_eq!(overall(&first), Code::Ok);
    assert_eq!(first.statuses[0].limit_remaining, 1);
    assert_eq!(overall(&envoy_call(&server, req(2)).await), Code::OverLimit);
    // 0 means 1.
    let zero = envoy_call(&server, req(0)).await;
    assert_eq!(overall(&zero), Code::Ok);
    assert_eq!(zero.statuses[0].limit_remaining, 0);
    server.stop().await;
}

#[tokio::test]
async fn envoy_descriptor_hits_addend_overrides_the_request_and_zero_only_checks() {
    let server = TestServer::start().await;
    let mut heavy = envoy_descriptor(&[("client", "gina")]);
    heavy.hits_addend = Some(3);
    let resp = envoy_call(
        &server,
        RateLimitRequest {
            hits_addend: 1,
            ..envoy_request("test", vec![heavy, envoy_descriptor(&[("client", "hank")])])
        },
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 0, "gina used 3");
    assert_eq!(
        resp.statuses[1].limit_remaining, 2,
        "hank used the request's 1"
    );

    let peek = |client: &str| {
        let mut d = envoy_descriptor(&[("client", client)]);
        d.hits_addend = Some(0);
        envoy_request("test", vec![d])
    };
    for _ in 0..5 {
        let resp = envoy_call(&server, peek("ivan")).await;
        assert_eq!(overall(&resp), Code::Ok);
        assert_eq!(
            resp.statuses[0].limit_remaining, 3,
            "a check of 0 consumes nothing"
        );
    }
    let gina = envoy_call(&server, peek("gina")).await;
    assert_eq!(overall(&gina), Code::OverLimit, "no room left for gina");
    server.stop().await;
}

#[tokio::test]
async fn envoy_limit_override_replaces_the_rule() {
    let server = TestServer::start().await;
    let overridden = |entries: &[(&str, &str)], unit: i32| {
        let mut d = envoy_descriptor(entries);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 1,
            unit,
        });
        envoy_request("test", vec![d])
    };
    let minute = 2; // envoy.type.v3.RateLimitUnit.MINUTE
    let first = envoy_call(&server, overridden(&[("client", "jill")], minute)).await;
    assert_eq!(overall(&first), Code::Ok);
    let limit = first.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (1, EnvoyUnit::Minute as i32, "")
    );
    assert_eq!(
        overall(&envoy_call(&server, overridden(&[("client", "jill")], minute)).await),
        Code::OverLimit
    );
    // In a domain with rules, an override applies where no rule matches too.
    let unmatched = envoy_call(&server, overridden(&[("no-rule", "x")], minute)).await;
    assert!(unmatched.statuses[0].current_limit.is_some());
    assert_eq!(
        overall(&envoy_call(&server, overridden(&[("no-rule", "x")], minute)).await),
        Code::OverLimit
    );
    // In a domain without rules, nothing applies.
    let mut d = envoy_descriptor(&[("k", "v")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: minute,
    });
    for _ in 0..2 {
        let resp = envoy_call(&server, envoy_request("unconfigured", vec![d.clone()])).await;
        assert_eq!(overall(&resp), Code::Ok);
        assert!(resp.statuses[0].current_limit.is_none());
    }
    server.stop().await;
}

#[tokio::test]
async fn envoy_shadow_rules_count_but_never_refuse() {
    let server = TestServer::start().await;
    for n in 0..3 {
        let resp = envoy_call(
            &server,
            envoy_request("test", vec![envoy_descriptor(&[("watch", "w")])]),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok, "request {n}");
        assert_eq!(code(&resp.statuses[0]), Code::Ok);
        assert_eq!(
            resp.statuses[0].limit_remaining, 0,
            "the shadow rule's 1 is used"
        );
        assert!(
            resp.response_headers_to_add.is_empty(),
            "headers describe enforced limits"
        );
    }
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="shadow_over_limit"}"#),
        2
    );
    // A shadow descriptor does not stop the others either way.
    let mixed = envoy_call(
        &server,
        envoy_request(
            "test",
            vec![
                envoy_descriptor(&[("watch", "w")]),
                envoy_descriptor(&[("client", "kim")]),
            ],
        ),
    )
    .await;
    assert_eq!(overall(&mixed), Code::Ok);
    assert_eq!(mixed.statuses[1].limit_remaining, 2);
    server.stop().await;
}

#[tokio::test]
async fn envoy_adds_rate_limit_headers_for_the_tightest_limit() {
    let server = TestServer::start().await;
    let req = || {
        envoy_request(
            "test",
            vec![
                envoy_descriptor(&[("client", "lena")]),
                envoy_descriptor(&[("tenant", "t"), ("path", "/h")]),
            ],
        )
    };
    let first = envoy_call(&server, req()).await;
    // tenant/path (2 per second, 1 left) is tighter than client (3, 2 left).
    assert_eq!(header(&first, "x-ratelimit-limit"), Some("2, 2;w=1"));
    assert_eq!(header(&first, "x-ratelimit-remaining"), Some("1"));
    assert_eq!(
        header(&first, "x-ratelimit-reset"),
        Some("2"),
        "1.1 s, rounded up"
    );
    envoy_call(&server, req()).await;
    let over = envoy_call(&server, req()).await;
    assert_eq!(overall(&over), Code::OverLimit);
    assert_eq!(header(&over, "x-ratelimit-limit"), Some("2, 2;w=1"));
    assert_eq!(header(&over, "x-ratelimit-remaining"), Some("0"));
    let reset: u64 = header(&over, "x-ratelimit-reset").unwrap().parse().unwrap();
    assert!((1..=2).contains(&reset), "{reset}");
    let none = envoy_call(
        &server,
        envoy_request("test", vec![envoy_descriptor(&[("client", "vip")])]),
    )
    .await;
    assert!(none.response_headers_to_add.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn envoy_adds_the_ietf_ratelimit_fields_when_configured() {
    let rules = format!(
        "{RULES}  - key: odd\n    rate_limit: {{ unit: minute, requests_per_unit: 4, name: 'quote\"and é' }}\n"
    );
    let server =
        TestServer::start_with_headers(&rules, LimiterConfig::default(), RateLimitHeaders::Ietf)
            .await;
    let req = || {
        envoy_request(
            "test",
            vec![
                envoy_descriptor(&[("client", "lena")]),
                envoy_descriptor(&[("tenant", "t"), ("path", "/h")]),
            ],
        )
    };
    let first = envoy_call(&server, req()).await;
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some(r#""tenant-path";q=2;w=1"#)
    );
    assert_eq!(
        header(&first, "ratelimit"),
        Some(r#""tenant-path";r=1;t=2"#)
    );
    assert_eq!(header(&first, "x-ratelimit-limit"), None, "one style only");
    envoy_call(&server, req()).await;
    let over = envoy_call(&server, req()).await;
    assert_eq!(overall(&over), Code::OverLimit);
    let state = header(&over, "ratelimit").unwrap();
    assert!(state.starts_with(r#""tenant-path";r=0;t="#), "{state}");
    // A name a structured-field string cannot hold as is: the quote escaped, the rest made
    // printable ASCII.
    let odd = envoy_call(
        &server,
        envoy_request("test", vec![envoy_descriptor(&[("odd", "x")])]),
    )
    .await;
    assert_eq!(
        header(&odd, "ratelimit-policy"),
        Some(r#""quote\"and _";q=4;w=60"#)
    );
    server.stop().await;
}

#[tokio::test]
async fn envoy_unmatched_and_unlimited_descriptors_are_ok_without_a_limit() {
    let server = TestServer::start().await;
    for _ in 0..5 {
        let resp = envoy_call(
            &server,
            envoy_request(
                "test",
                vec![
                    envoy_descriptor(&[("nothing", "here")]),
                    envoy_descriptor(&[("client", "vip")]),
                    envoy_descriptor(&[("open", "x")]),
                    envoy_descriptor(&[("client", "x"), ("too", "deep")]),
                ],
            ),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok);
        for s in &resp.statuses {
            assert_eq!(code(s), Code::Ok);
            assert!(s.current_limit.is_none(), "{s:?}");
        }
        assert_eq!(resp.statuses[1].limit_remaining, u32::MAX, "unlimited");
    }
    let unknown = envoy_call(
        &server,
        envoy_request("nowhere", vec![envoy_descriptor(&[("client", "x")])]),
    )
    .await;
    assert_eq!(overall(&unknown), Code::Ok);
    assert_eq!(
        server.metric(r#"limitmesh_unmatched_descriptors_total{domain="test"}"#),
        15,
        "3 unmatched descriptors per request (the open one has no rate_limit)"
    );
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="unlimited"}"#),
        20
    );
    server.stop().await;
}

#[tokio::test]
async fn envoy_replaces_drops_the_named_rule_for_the_request() {
    let server = TestServer::start().await;
    let both = || {
        envoy_request(
            "test",
            vec![
                envoy_descriptor(&[("plan", "free")]),
                envoy_descriptor(&[("promo", "p")]),
            ],
        )
    };
    for _ in 0..8 {
        let resp = envoy_call(&server, both()).await;
        assert_eq!(
            overall(&resp),
            Code::Ok,
            "free-plan (5 per hour) is replaced"
        );
        assert!(resp.statuses[0].current_limit.is_none());
        assert_eq!(
            resp.statuses[1].current_limit.as_ref().unwrap().name,
            "promo"
        );
    }
    // The replaced rule's counter was not touched.
    let mut allowed = 0;
    for _ in 0..6 {
        let resp = envoy_call(
            &server,
            envoy_request("test", vec![envoy_descriptor(&[("plan", "free")])]),
        )
        .await;
        allowed += u32::from(overall(&resp) == Code::Ok);
    }
    assert_eq!(allowed, 5);
    server.stop().await;
}

#[tokio::test]
async fn envoy_week_unit_is_reported_as_week() {
    let server = TestServer::start().await;
    let resp = envoy_call(
        &server,
        envoy_request("test", vec![envoy_descriptor(&[("weekly", "w")])]),
    )
    .await;
    let limit = resp.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!((limit.unit, limit.requests_per_unit), (7, 1_000));
    server.stop().await;
}

const QUOTA_RULES: &str = r#"
domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: b
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: c
    rate_limit: { unit: minute, requests_per_unit: 2 }
"#;

fn q_request(descriptors: &[(&str, &str)]) -> RateLimitRequest {
    envoy_request(
        "q",
        descriptors
            .iter()
            .map(|(k, v)| envoy_descriptor(&[(k, v)]))
            .collect(),
    )
}

/// envoyproxy/ratelimit's rule (its `src/service/ratelimit.go`): a request is refused when a
/// descriptor not in quota mode is over its limit, or when every quota-mode descriptor is;
/// each descriptor's status says what its limit says.
#[tokio::test]
async fn envoy_quota_mode_refuses_only_when_every_quota_descriptor_is_over() {
    let server = TestServer::start_with(QUOTA_RULES, LimiterConfig::default()).await;
    let first = envoy_call(&server, q_request(&[("a", "1"), ("b", "1")])).await;
    assert_eq!(overall(&first), Code::Ok);
    // Both used their one: both over now, so the request is refused.
    let both_over = envoy_call(&server, q_request(&[("a", "1"), ("b", "1")])).await;
    assert_eq!(overall(&both_over), Code::OverLimit);
    assert_eq!(code(&both_over.statuses[0]), Code::OverLimit);
    assert_eq!(code(&both_over.statuses[1]), Code::OverLimit);
    // One quota descriptor over, another with room: admitted; the one over says so.
    let one_over = envoy_call(&server, q_request(&[("a", "1"), ("b", "2")])).await;
    assert_eq!(overall(&one_over), Code::Ok);
    assert_eq!(code(&one_over.statuses[0]), Code::OverLimit);
    assert_eq!(code(&one_over.statuses[1]), Code::Ok);
    // b=2 consumed its one, a=1 nothing (it had no room).
    let b2_again = envoy_call(&server, q_request(&[("b", "2")])).await;
    assert_eq!(overall(&b2_again), Code::OverLimit, "b=2 was consumed");
    // A quota descriptor over beside a plain one with room: every quota descriptor of the
    // request is over, so it is refused, and the plain one consumes nothing.
    let with_plain = envoy_call(&server, q_request(&[("a", "1"), ("c", "1")])).await;
    assert_eq!(overall(&with_plain), Code::OverLimit);
    assert_eq!(code(&with_plain.statuses[1]), Code::Ok);
    let c_alone = envoy_call(&server, q_request(&[("c", "1")])).await;
    assert_eq!(
        c_alone.statuses[0].limit_remaining, 1,
        "c consumed once, not twice"
    );
    // A plain descriptor over refuses whatever the quota ones say; a quota one with room
    // then consumes nothing.
    envoy_call(&server, q_request(&[("c", "1")])).await;
    let plain_over = envoy_call(&server, q_request(&[("a", "3"), ("c", "1")])).await;
    assert_eq!(overall(&plain_over), Code::OverLimit);
    let a3 = envoy_call(&server, q_request(&[("a", "3")])).await;
    assert_eq!(overall(&a3), Code::Ok, "a=3 kept its one");
    server.stop().await;
}

#[tokio::test]
async fn envoy_global_quota_mode_puts_every_descriptor_in_quota_mode() {
    let options = LoadOptions {
        quota_mode: true,
        ..LoadOptions::default()
    };
    let server = TestServer::start_with_options(QUOTA_RULES, options).await;
    for _ in 0..2 {
        envoy_call(&server, q_request(&[("c", "1")])).await;
    }
    // c (not in quota mode in the file) is over, a has room: admitted under QUOTA_MODE.
    let r = envoy_call(&server, q_request(&[("c", "1"), ("a", "1")])).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    server.stop().await;
}

#[tokio::test]
async fn envoy_global_shadow_mode_answers_ok_and_counts_what_it_let_through() {
    let options = LoadOptions {
        shadow_mode: true,
        ..LoadOptions::default()
    };
    let server = TestServer::start_with_options(QUOTA_RULES, options).await;
    for i in 0..4 {
        let r = envoy_call(&server, q_request(&[("c", "z")])).await;
        assert_eq!(overall(&r), Code::Ok, "request {i}");
        let want = if i < 2 { Code::Ok } else { Code::OverLimit };
        assert_eq!(
            code(&r.statuses[0]),
            want,
            "request {i}: the limit's own word"
        );
    }
    assert_eq!(
        server.metric(r#"limitmesh_global_shadow_mode_total{domain="q"}"#),
        2
    );
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="q",result="over_limit"}"#),
        2
    );
    server.stop().await;
}

#[tokio::test]
async fn envoy_detailed_metric_counts_each_descriptor_value() {
    let rules = "
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: plain
    rate_limit: { unit: minute, requests_per_unit: 1 }
";
    let server = TestServer::start_with(rules, LimiterConfig::default()).await;
    let call =
        |k: &'static str, v: &'static str| envoy_request("d", vec![envoy_descriptor(&[(k, v)])]);
    envoy_call(&server, call("user", "ann")).await;
    envoy_call(&server, call("user", "ann")).await;
    envoy_call(&server, call("user", "bo")).await;
    envoy_call(&server, call("plain", "x")).await;
    let m = |series: &str| server.metric(series);
    assert_eq!(
        m(
            r#"limitmesh_descriptor_decisions_total{domain="d",descriptor="user_ann",result="allowed"}"#
        ),
        1
    );
    assert_eq!(
        m(
            r#"limitmesh_descriptor_decisions_total{domain="d",descriptor="user_ann",result="over_limit"}"#
        ),
        1
    );
    assert_eq!(
        m(
            r#"limitmesh_descriptor_decisions_total{domain="d",descriptor="user_bo",result="allowed"}"#
        ),
        1
    );
    assert_eq!(
        m(
            r#"limitmesh_descriptor_decisions_total{domain="d",descriptor="plain_x",result="allowed"}"#
        ),
        0,
        "no detailed_metric, no series"
    );
    server.stop().await;
}
