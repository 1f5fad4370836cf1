//! The server around the APIs: health, reflection, shutdown, a full key table.

use crate::support::*;

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

#[tokio::test]
async fn a_full_key_table_denies_new_keys_and_keeps_the_used_one() {
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
    assert!(own_call(&server, keyed("used")).await.allowed);
    // The only window holds an admission: a new key is denied, with a time to retry, and
    // the used key is not reset to make room.
    let denied = own_call(&server, keyed("new")).await;
    assert!(!denied.allowed);
    assert!(denied.retry_after_ms > 0, "{denied:?}");
    assert!(!own_call(&server, keyed("used")).await.allowed);
    server.stop().await;
}

#[tokio::test]
async fn a_full_key_table_is_resource_exhausted_under_the_error_policy() {
    let config = LimiterConfig {
        max_keys: 1,
        when_full: limitmesh::limiter::TableFullPolicy::Error,
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

/// Nagle's algorithm holds a response's frames back until the client's delayed ACK (40 ms on
/// Linux) once a connection carries a few dozen requests in flight: every connection the gRPC
/// server accepts has it off, as tonic's own `serve` would.
#[tokio::test]
async fn grpc_connections_have_tcp_nodelay() {
    use tokio_stream::StreamExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut incoming = limitmesh::rpc::tcp_incoming(listener);
    let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let accepted = incoming.next().await.unwrap().unwrap();
    assert!(
        accepted.nodelay().unwrap(),
        "Nagle is on for gRPC connections"
    );
}

#[tokio::test]
async fn the_embedded_demo_config_and_rules_serve_a_node() {
    use limitmesh::config::Config;

    let config = Config::demo().expect("the demo config is valid");
    assert!(config.grpc.listen.ip().is_loopback());
    let rules = RulesHandle::load(config.rules_source(), config.rules_load_options())
        .expect("the demo rules are valid");
    let ctx = RpcContext {
        limiter: Arc::new(Limiter::new(
            config.limiter_config(),
            OriginId(7),
            KeyHasher::from_secret(b"demo"),
        )),
        rules: Arc::new(rules),
        clock: Arc::new(ManualClock::new(T0)),
        members: Arc::new(SingleNode::new(
            uuid::Uuid::from_u128(0xde30),
            config.cluster.bind,
            T0,
        )),
        metrics: Arc::new(Metrics::new()),
        tokens: None,
    };
    // The demo's own port may be taken on a test machine; the same services on port 0.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(limitmesh::rpc::serve(
        limitmesh::rpc::tcp_incoming(listener),
        ctx,
        Duration::from_millis(config.grpc.request_timeout_ms).max(TEST_TIMEOUT),
        HealthHandle::new(),
        async move {
            let _ = stopped.await;
        },
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let mut allowed = 0;
    for _ in 0..11 {
        let resp = client
            .should_rate_limit(envoy_request(
                "demo",
                vec![envoy_descriptor(&[("client", "someone")])],
            ))
            .await
            .unwrap()
            .into_inner();
        allowed += u32::from(overall(&resp) == Code::Ok);
        assert!(
            resp.response_headers_to_add.is_empty(),
            "no rate limit headers by default (as envoyproxy/ratelimit and Limitador): {:?}",
            resp.response_headers_to_add
        );
    }
    assert_eq!(allowed, 10, "the demo allows 10 per second per client");
    assert_eq!(
        config.serve_options().rate_limit_headers,
        RateLimitHeaders::None
    );
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
}
