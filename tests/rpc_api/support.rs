//! The test server and request builders shared by the RPC tests.

pub(crate) use std::net::SocketAddr;
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;

pub(crate) use limitmesh::clock::ManualClock;
pub(crate) use limitmesh::limiter::{KeyHasher, Limiter, LimiterConfig, OriginId};
pub(crate) use limitmesh::metrics::Metrics;
pub(crate) use limitmesh::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
pub(crate) use limitmesh::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry as EnvoyEntry, RateLimitOverride,
};
pub(crate) use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as EnvoyUnit;
pub(crate) use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
pub(crate) use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
pub(crate) use limitmesh::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
pub(crate) use limitmesh::proto::limitmesh::v1 as own;
pub(crate) use limitmesh::proto::limitmesh::v1::rate_limiter_client::RateLimiterClient;
pub(crate) use limitmesh::rpc::{
    HealthHandle, RateLimitHeaders, RpcContext, RpcError, ServeOptions, SingleNode,
};
pub(crate) use limitmesh::rules::{LoadOptions, RuleSet, RulesHandle, RulesSource};
pub(crate) use tokio::sync::oneshot;
pub(crate) use tokio::task::JoinHandle;
pub(crate) use tonic::transport::Channel;
pub(crate) use tonic::{Code as GrpcCode, Status};

/// A whole second, so that windows start where tests expect.
pub(crate) const T0: u64 = 1_700_000_000_000;
/// The node the test servers say they are.
pub(crate) const NODE_A: uuid::Uuid = uuid::Uuid::from_u128(0xa);
/// Longest a request may run in these tests (a loaded debug build is slow; production is 50 ms).
pub(crate) const TEST_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) const RULES: &str = r#"
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

pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    pub(crate) clock: ManualClock,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) health: HealthHandle,
    pub(crate) channel: Channel,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), RpcError>>>,
}

impl TestServer {
    pub(crate) async fn start() -> Self {
        Self::start_with(RULES, LimiterConfig::default()).await
    }

    pub(crate) async fn start_with(rules: &str, config: LimiterConfig) -> Self {
        Self::start_with_headers(rules, config, RateLimitHeaders::Draft03).await
    }

    pub(crate) async fn start_with_headers(
        rules: &str,
        config: LimiterConfig,
        rate_limit_headers: RateLimitHeaders,
    ) -> Self {
        Self::start_custom(rules, config, rate_limit_headers, LoadOptions::default()).await
    }

    /// A server on `rules` read with `options` (the global shadow and quota switches).
    pub(crate) async fn start_with_options(rules: &str, options: LoadOptions) -> Self {
        Self::start_custom(
            rules,
            LimiterConfig::default(),
            RateLimitHeaders::Draft03,
            options,
        )
        .await
    }

    async fn start_custom(
        rules: &str,
        config: LimiterConfig,
        rate_limit_headers: RateLimitHeaders,
        options: LoadOptions,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let clock = ManualClock::new(T0);
        let metrics = Arc::new(Metrics::new());
        let set = RuleSet::parse("test-rules.yaml", rules, options).unwrap();
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
            members: Arc::new(SingleNode::new(
                NODE_A,
                "127.0.0.1:7946".parse().unwrap(),
                T0 - 5_000,
            )),
            metrics: Arc::clone(&metrics),
            tokens: None,
        };
        let health = HealthHandle::new();
        let (stop, stopped) = oneshot::channel::<()>();
        // Rate limit headers on, so that the Envoy tests can see them (the default is none;
        // `the_embedded_demo_config_and_rules_serve_a_node` and the process test check that).
        let options = ServeOptions {
            request_timeout: TEST_TIMEOUT,
            rate_limit_headers,
            ..ServeOptions::default()
        };
        let task = tokio::spawn(limitmesh::rpc::serve_with_options(
            limitmesh::rpc::tcp_incoming(listener),
            ctx,
            options,
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

    pub(crate) fn own(&self) -> RateLimiterClient<Channel> {
        RateLimiterClient::new(self.channel.clone())
    }

    pub(crate) fn envoy(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel.clone())
    }

    /// Stops the server and checks that it ended cleanly.
    pub(crate) async fn stop(mut self) {
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
    pub(crate) fn metric(&self, series: &str) -> u64 {
        let text = self.metrics.encode();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .map_or(0, |v| v.trim().parse().unwrap())
    }
}

pub(crate) fn own_entry(key: &str, value: &str) -> own::Entry {
    own::Entry {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

pub(crate) fn own_descriptor(entries: &[(&str, &str)]) -> own::Descriptor {
    own::Descriptor {
        entries: entries.iter().map(|(k, v)| own_entry(k, v)).collect(),
    }
}

pub(crate) fn own_check(domain: &str, descriptors: &[&[(&str, &str)]]) -> own::CheckRequest {
    own::CheckRequest {
        domain: domain.to_owned(),
        descriptors: descriptors.iter().map(|d| own_descriptor(d)).collect(),
        ..Default::default()
    }
}

pub(crate) fn inline(requests: u32, window_ms: u64) -> own::Limit {
    own::Limit {
        requests,
        window_ms,
        name: "inline".to_owned(),
        ..Default::default()
    }
}

pub(crate) fn envoy_descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
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

pub(crate) fn envoy_request(
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

pub(crate) async fn envoy_call(server: &TestServer, req: RateLimitRequest) -> RateLimitResponse {
    server
        .envoy()
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit succeeds")
        .into_inner()
}

pub(crate) async fn own_call(server: &TestServer, req: own::CheckRequest) -> own::CheckResponse {
    server
        .own()
        .check(req)
        .await
        .expect("Check succeeds")
        .into_inner()
}

pub(crate) fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap()
}

pub(crate) fn overall(resp: &RateLimitResponse) -> Code {
    Code::try_from(resp.overall_code).unwrap()
}

pub(crate) fn header<'a>(resp: &'a RateLimitResponse, key: &str) -> Option<&'a str> {
    resp.response_headers_to_add
        .iter()
        .find(|h| h.key == key)
        .map(|h| h.value.as_str())
}

pub(crate) fn millis(d: &prost_types::Duration) -> u64 {
    d.seconds as u64 * 1_000 + d.nanos as u64 / 1_000_000
}

/// Asserts INVALID_ARGUMENT whose message starts with the field at fault.
pub(crate) fn assert_invalid(result: Result<impl std::fmt::Debug, Status>, field: &str) {
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
pub(crate) async fn assert_full_limit(server: &TestServer, client: &str) {
    let mut allowed = 0;
    for _ in 0..4 {
        let resp = own_call(server, own_check("test", &[&[("client", client)]])).await;
        allowed += u32::from(resp.allowed);
    }
    assert_eq!(allowed, 3, "client `{client}` should have its whole limit");
}
