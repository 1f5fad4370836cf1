//! limitmesh's own API: Check, CheckBatch, Inspect, Members.

use crate::support::*;

#[tokio::test]
async fn own_check_allows_exactly_the_limit_then_refuses_until_the_window_slides() {
    let server = TestServer::start().await;
    for n in 0..3u64 {
        let resp = own_call(&server, own_check("test", &[&[("client", "alice")]])).await;
        assert!(resp.allowed, "request {n}");
        let s = &resp.statuses[0];
        assert!(s.allowed && s.matched && !s.unlimited && !s.shadow);
        assert_eq!((s.limit, s.remaining), (3, 2 - n));
        assert_eq!((s.rule.as_str(), s.window_ms), ("per-client", 1_000));
        assert!(s.reset_after_ms > 0 && s.reset_after_ms <= 1_100, "{s:?}");
    }
    let refused = own_call(&server, own_check("test", &[&[("client", "alice")]])).await;
    assert!(!refused.allowed);
    let s = &refused.statuses[0];
    assert!(!s.allowed);
    assert!(s.retry_after_ms > 0 && s.retry_after_ms <= 1_100, "{s:?}");
    assert_eq!(refused.retry_after_ms, s.retry_after_ms);

    server.clock.advance(1_100);
    let later = own_call(&server, own_check("test", &[&[("client", "alice")]])).await;
    assert!(
        later.allowed,
        "the window has slid past the earlier requests"
    );
    server.stop().await;
}

#[tokio::test]
async fn own_check_counts_each_value_of_a_key_only_rule_apart() {
    let server = TestServer::start().await;
    for _ in 0..3 {
        own_call(&server, own_check("test", &[&[("client", "alice")]])).await;
    }
    let alice = own_call(&server, own_check("test", &[&[("client", "alice")]])).await;
    let bob = own_call(&server, own_check("test", &[&[("client", "bob")]])).await;
    assert!(!alice.allowed);
    assert!(bob.allowed);
    assert_eq!(bob.statuses[0].remaining, 2);
    server.stop().await;
}

#[tokio::test]
async fn own_check_with_an_inline_limit_on_a_key_or_on_descriptors() {
    let server = TestServer::start().await;
    let keyed = |key: &str| own::CheckRequest {
        domain: "anything".to_owned(),
        key: key.to_owned(),
        limit: Some(inline(2, 500)),
        ..Default::default()
    };
    let results: Vec<bool> = {
        let mut r = Vec::new();
        for _ in 0..3 {
            r.push(own_call(&server, keyed("k1")).await.allowed);
        }
        r
    };
    assert_eq!(results, [true, true, false]);
    let other = own_call(&server, keyed("k2")).await;
    assert!(other.allowed);
    assert_eq!(
        (other.statuses[0].rule.as_str(), other.statuses[0].window_ms),
        ("inline", 500)
    );

    // Instead of the rules: `client` would allow 3 per second.
    let mut req = own_check("test", &[&[("client", "inline-user")]]);
    req.limit = Some(inline(1, 1_000));
    assert!(own_call(&server, req.clone()).await.allowed);
    let second = own_call(&server, req).await;
    assert!(!second.allowed);
    assert_eq!(second.statuses[0].rule, "inline");
    server.stop().await;
}

#[tokio::test]
async fn own_check_dry_run_consumes_nothing() {
    let server = TestServer::start().await;
    for _ in 0..5 {
        let mut req = own_check("test", &[&[("client", "dry")]]);
        req.dry_run = true;
        let resp = own_call(&server, req).await;
        assert!(resp.allowed);
        assert_eq!(
            resp.statuses[0].remaining, 2,
            "what would remain, every time: nothing was taken"
        );
    }
    assert_full_limit(&server, "dry").await;
    server.stop().await;
}

#[tokio::test]
async fn own_check_hits_consume_that_many_units() {
    let server = TestServer::start().await;
    let with_hits = |hits: u32| own::CheckRequest {
        hits: Some(hits),
        ..own_check("test", &[&[("client", "heavy")]])
    };
    let first = own_call(&server, with_hits(2)).await;
    assert!(first.allowed);
    assert_eq!(first.statuses[0].remaining, 1);
    assert!(!own_call(&server, with_hits(2)).await.allowed);
    assert!(own_call(&server, with_hits(1)).await.allowed);
    server.stop().await;
}

#[tokio::test]
async fn own_check_admits_all_descriptors_or_none() {
    let server = TestServer::start().await;
    let both = || {
        own_check(
            "test",
            &[&[("client", "carol")], &[("tenant", "t"), ("path", "/p")]],
        )
    };
    assert!(own_call(&server, both()).await.allowed);
    assert!(own_call(&server, both()).await.allowed);
    // tenant/path (2 per second) is exhausted; client (3 per second) still has room.
    let third = own_call(&server, both()).await;
    assert!(!third.allowed);
    assert!(third.statuses[0].allowed, "client alone had room");
    assert!(!third.statuses[1].allowed);
    assert_eq!(third.statuses[1].rule, "tenant-path");
    // The refused request consumed nothing from `client`: exactly one unit is left of 3.
    let alone = own_call(&server, own_check("test", &[&[("client", "carol")]])).await;
    assert!(alone.allowed);
    assert!(
        !own_call(&server, own_check("test", &[&[("client", "carol")]]))
            .await
            .allowed
    );
    server.stop().await;
}

#[tokio::test]
async fn own_check_reports_unmatched_unlimited_and_shadow_rules() {
    let server = TestServer::start().await;
    let resp = own_call(
        &server,
        own_check(
            "test",
            &[
                &[("nothing", "here")],
                &[("client", "vip")],
                &[("watch", "w")],
            ],
        ),
    )
    .await;
    assert!(resp.allowed);
    let [unmatched, vip, watch] = &resp.statuses[..] else {
        panic!("three statuses");
    };
    assert!(unmatched.allowed && unmatched.unlimited && !unmatched.matched);
    assert!(vip.allowed && vip.unlimited && vip.matched);
    assert_eq!(vip.rule, "vip");
    assert!(watch.allowed && watch.shadow && !watch.unlimited);
    // The shadow rule (1 per second) is over its limit from the second request on, and never
    // refuses.
    for _ in 0..3 {
        let resp = own_call(&server, own_check("test", &[&[("watch", "w")]])).await;
        assert!(resp.allowed);
        assert!(resp.statuses[0].shadow);
        assert!(!resp.statuses[0].allowed, "it would have refused");
        assert_eq!(resp.retry_after_ms, 0, "a shadow rule asks no wait");
    }
    let unknown = own_call(&server, own_check("elsewhere", &[&[("client", "x")]])).await;
    assert!(unknown.allowed && unknown.statuses[0].unlimited);
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="shadow_over_limit"}"#),
        3
    );
    assert_eq!(
        server.metric(r#"limitmesh_unmatched_descriptors_total{domain="test"}"#),
        1
    );
    assert_eq!(
        server.metric(r#"limitmesh_unmatched_descriptors_total{domain="_unconfigured"}"#),
        1
    );
    server.stop().await;
}

#[tokio::test]
async fn own_check_batch_runs_independent_checks() {
    let server = TestServer::start().await;
    let mut exhausting = own_check("test", &[&[("client", "batch")]]);
    exhausting.hits = Some(3);
    let resp = server
        .own()
        .check_batch(own::CheckBatchRequest {
            checks: vec![
                exhausting,
                own_check("test", &[&[("client", "batch")]]),
                own_check("test", &[&[("client", "other")]]),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let allowed: Vec<bool> = resp.results.iter().map(|r| r.allowed).collect();
    assert_eq!(allowed, [true, false, true]);
    let empty = server
        .own()
        .check_batch(own::CheckBatchRequest { checks: vec![] })
        .await
        .unwrap()
        .into_inner();
    assert!(empty.results.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn own_inspect_explains_a_window() {
    let server = TestServer::start().await;
    for _ in 0..2 {
        own_call(&server, own_check("test", &[&[("client", "dave")]])).await;
    }
    let resp = server
        .own()
        .inspect(own::InspectRequest {
            domain: "test".to_owned(),
            descriptors: vec![
                own_descriptor(&[("client", "dave")]),
                own_descriptor(&[("client", "nobody-yet")]),
                own_descriptor(&[("unknown", "x")]),
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((resp.live_members, resp.expected_members), (1, 1));
    let [dave, fresh, unmatched] = &resp.windows[..] else {
        panic!("three windows");
    };
    assert!(dave.found && dave.matched && !dave.unlimited);
    assert_eq!(
        (dave.rule.as_str(), dave.limit, dave.window_ms),
        ("per-client", 3, 1_000)
    );
    assert!((dave.global_admitted - 2.0).abs() < 1e-9, "{dave:?}");
    assert!(
        (dave.allowance - 3.0).abs() < 1e-9,
        "one node holds the whole limit: {dave:?}"
    );
    assert_eq!(dave.key_id.len(), 32);
    let [local] = &dave.origins[..] else {
        panic!("only this node: {dave:?}");
    };
    assert!(local.is_local);
    assert!((local.admitted - 2.0).abs() < 1e-9);
    assert!(!fresh.found && fresh.matched);
    assert_ne!(fresh.key_id, dave.key_id);
    assert!(unmatched.unlimited && !unmatched.matched && !unmatched.found);
    // Inspecting consumed nothing.
    let after = own_call(&server, own_check("test", &[&[("client", "nobody-yet")]])).await;
    assert_eq!(after.statuses[0].remaining, 2);
    server.stop().await;
}

#[tokio::test]
async fn own_members_lists_this_node() {
    let server = TestServer::start().await;
    let resp = server
        .own()
        .members(own::MembersRequest {})
        .await
        .unwrap()
        .into_inner();
    let [me] = &resp.members[..] else {
        panic!("one member: {resp:?}");
    };
    assert_eq!(
        (me.id.as_str(), me.address.as_str()),
        (NODE_A.to_string().as_str(), "127.0.0.1:7946")
    );
    assert!(me.is_self);
    assert_eq!(me.state, own::member::State::Alive as i32);
    assert_eq!((me.boot_ms, me.clock_offset_ms), (T0 - 5_000, Some(0)));
    assert_eq!(me.last_heard_ms, None, "this node is not heard from");
    server.stop().await;
}
