//! The gRPC services end to end: a server on 127.0.0.1 (an ephemeral port) called through the
//! generated clients. Time is a manual clock, so windows move only when a test says so. Every
//! test stops its server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use limitmesh::clock::ManualClock;
use limitmesh::limiter::{KeyHasher, Limiter, LimiterConfig, OriginId};
use limitmesh::metrics::Metrics;
use limitmesh::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use limitmesh::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry as EnvoyEntry, RateLimitOverride,
};
use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as EnvoyUnit;
use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use limitmesh::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use limitmesh::proto::limitmesh::v1 as own;
use limitmesh::proto::limitmesh::v1::rate_limiter_client::RateLimiterClient;
use limitmesh::rpc::{HealthHandle, RpcContext, RpcError, SingleNode};
use limitmesh::rules::{LoadOptions, RuleSet, RulesHandle, RulesSource};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Channel;
use tonic::{Code as GrpcCode, Status};

/// A whole second, so that windows start where tests expect.
const T0: u64 = 1_700_000_000_000;
/// Longest a request may run in these tests (a loaded debug build is slow; production is 50 ms).
const TEST_TIMEOUT: Duration = Duration::from_secs(5);

const RULES: &str = r#"
domain: test
descriptors:
  - key: client
    rate_limit: { unit: second, requests_per_unit: 3, name: per-client }
  - key: client
    value: vip
    rate_limit: { unlimited: true, name: vip }
  - key: tenant
    descriptors:
      - key: path
        rate_limit: { unit: second, requests_per_unit: 2, name: tenant-path }
  - key: watch
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 1, name: watch }
  - key: plan
    value: free
    rate_limit: { unit: hour, requests_per_unit: 5, name: free-plan }
  - key: promo
    rate_limit:
      unit: hour
      requests_per_unit: 50
      name: promo
      replaces:
        - name: free-plan
  - key: weekly
    rate_limit: { unit: week, requests_per_unit: 1000, name: weekly, buckets: 7 }
  - key: open
"#;

struct TestServer {
    addr: SocketAddr,
    clock: ManualClock,
    metrics: Arc<Metrics>,
    health: HealthHandle,
    channel: Channel,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), RpcError>>>,
}

impl TestServer {
    async fn start() -> Self {
        Self::start_with(RULES, LimiterConfig::default()).await
    }

    async fn start_with(rules: &str, config: LimiterConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let clock = ManualClock::new(T0);
        let metrics = Arc::new(Metrics::new());
        let set = RuleSet::parse("test-rules.yaml", rules, LoadOptions::default()).unwrap();
        let ctx = RpcContext {
            limiter: Arc::new(Limiter::new(
                config,
                OriginId(0x1157),
                KeyHasher::from_secret(b"rpc api test"),
            )),
            rules: Arc::new(RulesHandle::with_rule_set(
                RulesSource::Embedded {
                    name: "test-rules.yaml",
                    text: "",
                },
                set,
            )),
            clock: Arc::new(clock.clone()),
            members: Arc::new(SingleNode::new("node-a", "127.0.0.1:7946", T0 - 5_000)),
            metrics: Arc::clone(&metrics),
        };
        let health = HealthHandle::new();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(limitmesh::rpc::serve(
            TcpListenerStream::new(listener),
            ctx,
            TEST_TIMEOUT,
            health.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(TEST_TIMEOUT)
            .connect()
            .await
            .unwrap();
        Self {
            addr,
            clock,
            metrics,
            health,
            channel,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn own(&self) -> RateLimiterClient<Channel> {
        RateLimiterClient::new(self.channel.clone())
    }

    fn envoy(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel.clone())
    }

    /// Stops the server and checks that it ended cleanly.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the server stops on shutdown")
                .expect("the server task does not panic");
            result.expect("the server ends without error");
        }
    }

    /// The value of a metric line `name{labels} value`, 0 if absent.
    fn metric(&self, series: &str) -> u64 {
        let text = self.metrics.encode();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .map_or(0, |v| v.trim().parse().unwrap())
    }
}

fn own_entry(key: &str, value: &str) -> own::Entry {
    own::Entry {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

fn own_descriptor(entries: &[(&str, &str)]) -> own::Descriptor {
    own::Descriptor {
        entries: entries.iter().map(|(k, v)| own_entry(k, v)).collect(),
    }
}

fn own_check(domain: &str, descriptors: &[&[(&str, &str)]]) -> own::CheckRequest {
    own::CheckRequest {
        domain: domain.to_owned(),
        descriptors: descriptors.iter().map(|d| own_descriptor(d)).collect(),
        ..Default::default()
    }
}

fn inline(requests: u32, window_ms: u64) -> own::Limit {
    own::Limit {
        requests,
        window_ms,
        name: "inline".to_owned(),
        ..Default::default()
    }
}

fn envoy_descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| EnvoyEntry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..Default::default()
    }
}

fn envoy_request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

async fn envoy_call(server: &TestServer, req: RateLimitRequest) -> RateLimitResponse {
    server
        .envoy()
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit succeeds")
        .into_inner()
}

async fn own_call(server: &TestServer, req: own::CheckRequest) -> own::CheckResponse {
    server
        .own()
        .check(req)
        .await
        .expect("Check succeeds")
        .into_inner()
}

fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap()
}

fn overall(resp: &RateLimitResponse) -> Code {
    Code::try_from(resp.overall_code).unwrap()
}

fn header<'a>(resp: &'a RateLimitResponse, key: &str) -> Option<&'a str> {
    resp.response_headers_to_add
        .iter()
        .find(|h| h.key == key)
        .map(|h| h.value.as_str())
}

fn millis(d: &prost_types::Duration) -> u64 {
    d.seconds as u64 * 1_000 + d.nanos as u64 / 1_000_000
}

/// Asserts INVALID_ARGUMENT whose message starts with the field at fault.
fn assert_invalid(result: Result<impl std::fmt::Debug, Status>, field: &str) {
    let status = result.expect_err("the request is refused");
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with(&format!("{field}: ")),
        "the message should name `{field}`: {}",
        status.message()
    );
}

/// Asserts that `client` in domain `test` still has its whole limit of 3 (so an earlier
/// refused request consumed nothing): exactly 3 of 4 checks allowed.
async fn assert_full_limit(server: &TestServer, client: &str) {
    let mut allowed = 0;
    for _ in 0..4 {
        let resp = own_call(server, own_check("test", &[&[("client", client)]])).await;
        allowed += u32::from(resp.allowed);
    }
    assert_eq!(allowed, 3, "client `{client}` should have its whole limit");
}

// ---- own API ----

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
        ("node-a", "127.0.0.1:7946")
    );
    assert!(me.is_self);
    assert_eq!(me.state, own::member::State::Alive as i32);
    assert_eq!((me.boot_ms, me.clock_offset_ms), (T0 - 5_000, 0));
    server.stop().await;
}

// ---- Envoy RLS ----

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

// ---- health and reflection ----

#[tokio::test]
async fn health_reports_serving_then_not_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let server = TestServer::start().await;
    let mut client = HealthClient::new(server.channel.clone());
    let services = [
        "",
        "limitmesh.v1.RateLimiter",
        "envoy.service.ratelimit.v3.RateLimitService",
    ];
    for service in services {
        let status = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "`{service}`");
    }
    server.health.set_not_serving().await;
    for service in services {
        let status = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::NotServing as i32, "`{service}`");
    }
    server.stop().await;
}

#[tokio::test]
async fn reflection_lists_every_service_and_resolves_their_files() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

    let server = TestServer::start().await;
    let mut client = ServerReflectionClient::new(server.channel.clone());
    let ask = |request: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let requests = vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "envoy.service.ratelimit.v3.RateLimitService".to_owned(),
        )),
    ];
    let mut responses = client
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut next = async || -> ServerReflectionResponse {
        tokio::time::timeout(TEST_TIMEOUT, responses.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    let Some(MessageResponse::ListServicesResponse(list)) = next().await.message_response else {
        panic!("a service list");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "limitmesh.v1.RateLimiter",
        "envoy.service.ratelimit.v3.RateLimitService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let Some(MessageResponse::FileDescriptorResponse(files)) = next().await.message_response else {
        panic!("file descriptors");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn the_server_stops_and_refuses_new_connections() {
    let server = TestServer::start().await;
    let addr = server.addr;
    server.stop().await;
    let connect = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(1))
        .connect()
        .await;
    assert!(connect.is_err(), "nothing listens after shutdown");
}

// ---- bad input: one test per row of the table; each also shows nothing was consumed ----

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
    assert_invalid(
        server.own().check(own_req).await,
        "descriptors[1].entries[0].key",
    );
    let envoy_req = envoy_request(
        "test",
        vec![
            envoy_descriptor(&[("client", "u2")]),
            envoy_descriptor(&[("tenant", "t"), ("", "p")]),
        ],
    );
    assert_invalid(
        server.envoy().should_rate_limit(envoy_req).await,
        "descriptors[1].entries[1].key",
    );
    assert_full_limit(&server, "u2").await;
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="invalid"}"#),
        2
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_input_key_longer_than_4_kib() {
    let server = TestServer::start().await;
    let long = "v".repeat(4_100);
    let own_req = own_check("test", &[&[("client", "u3")], &[("client", &long)]]);
    assert_invalid(server.own().check(own_req).await, "descriptors[1]");
    let envoy_req = envoy_request(
        "test",
        vec![
            envoy_descriptor(&[("client", "u3")]),
            envoy_descriptor(&[("nothing", &long)]),
        ],
    );
    assert_invalid(
        server.envoy().should_rate_limit(envoy_req).await,
        "descriptors[1]",
    );
    let keyed = own::CheckRequest {
        domain: "test".to_owned(),
        key: long.clone(),
        limit: Some(inline(3, 1_000)),
        ..Default::default()
    };
    assert_invalid(server.own().check(keyed).await, "key");
    // Just under the bound is fine: the canonical form adds the domain and length prefixes.
    let fits = own_call(
        &server,
        own_check("test", &[&[("client", &"v".repeat(4_000))]]),
    )
    .await;
    assert!(fits.allowed);
    assert_full_limit(&server, "u3").await;
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

#[tokio::test]
async fn bad_input_hits_above_the_limit() {
    let server = TestServer::start().await;
    let own_req = own::CheckRequest {
        hits: Some(4),
        ..own_check("test", &[&[("client", "u6")]])
    };
    assert_invalid(server.own().check(own_req).await, "hits");
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
    assert_invalid(
        server.envoy().should_rate_limit(envoy_req).await,
        "hits_addend",
    );
    let mut heavy = envoy_descriptor(&[("client", "u6")]);
    heavy.hits_addend = Some(u64::from(u32::MAX) + 7);
    let per_descriptor = envoy_request("test", vec![envoy_descriptor(&[("client", "u6")]), heavy]);
    assert_invalid(
        server.envoy().should_rate_limit(per_descriptor).await,
        "descriptors[1].hits_addend",
    );
    assert_full_limit(&server, "u6").await;
    server.stop().await;
}

#[tokio::test]
async fn bad_input_unknown_unit() {
    let server = TestServer::start().await;
    for unit in [0, 8, -3] {
        let mut d = envoy_descriptor(&[("client", "u7")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 1,
            unit,
        });
        let req = envoy_request("test", vec![envoy_descriptor(&[("client", "u7")]), d]);
        assert_invalid(
            server.envoy().should_rate_limit(req).await,
            "descriptors[1].limit.unit",
        );
    }
    assert_full_limit(&server, "u7").await;
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
    assert_invalid(server.own().check(own_req).await, "descriptors[1].entries");
    let envoy_req = envoy_request(
        "test",
        vec![
            envoy_descriptor(&[("client", "u8")]),
            RateLimitDescriptor::default(),
        ],
    );
    assert_invalid(
        server.envoy().should_rate_limit(envoy_req).await,
        "descriptors[1].entries",
    );
    let no_descriptors = envoy_request("test", vec![]);
    assert_invalid(
        server.envoy().should_rate_limit(no_descriptors).await,
        "descriptors",
    );
    assert_full_limit(&server, "u8").await;
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
    // One bad check refuses the whole batch before any check runs.
    let checks = vec![
        own_check("test", &[&[("client", "u9")]]),
        own_check("", &[&[("client", "u9")]]),
    ];
    assert_invalid(
        server
            .own()
            .check_batch(own::CheckBatchRequest { checks })
            .await,
        "checks[1].domain",
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
async fn a_full_key_table_is_resource_exhausted() {
    let config = LimiterConfig {
        max_keys: 1,
        ..LimiterConfig::default()
    };
    let server = TestServer::start_with(RULES, config).await;
    let keyed = |key: &str| own::CheckRequest {
        domain: "test".to_owned(),
        key: key.to_owned(),
        limit: Some(inline(1, 60_000)),
        ..Default::default()
    };
    // The only key refuses someone, so it may not be evicted for a new one.
    assert!(own_call(&server, keyed("busy")).await.allowed);
    assert!(!own_call(&server, keyed("busy")).await.allowed);
    let status = server.own().check(keyed("new")).await.unwrap_err();
    assert_eq!(status.code(), GrpcCode::ResourceExhausted, "{status:?}");
    assert_eq!(
        server.metric(r#"limitmesh_decisions_total{domain="test",result="refused"}"#),
        1
    );
    server.stop().await;
}
