//! The admin HTTP endpoint (default 127.0.0.1:8080): Prometheus metrics, health, readiness, the
//! member list, and a JSON check compatible with envoyproxy/ratelimit's `/json`.
//!
//! The JSON check consumes quota like any check, so it is served only where the configuration
//! says so ([`JsonRoute`]); everything else is always served.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;

use crate::metrics::Metrics;
use crate::node::ClusterView;

/// A JSON check refused: the HTTP status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonRefusal {
    pub status: u16,
    pub message: String,
}

/// The outcome of a JSON check: whether it is over its limit, and the response body.
pub type JsonOutcome = Result<(bool, serde_json::Value), JsonRefusal>;

/// Answers `POST /json`, given the body of an envoyproxy/ratelimit JSON request. Provided by the
/// layer that owns the Envoy semantics.
pub trait JsonCheck: Send + Sync + 'static {
    fn check_json<'a>(
        &'a self,
        body: &'a [u8],
    ) -> std::pin::Pin<Box<dyn Future<Output = JsonOutcome> + Send + 'a>>;
}

/// What `POST /json` does on this listener.
#[derive(Clone)]
pub enum JsonRoute {
    /// Checks the request.
    Serve(Arc<dyn JsonCheck>),
    /// Answers 404 with this reason, one line naming the setting that keeps it off.
    Refuse(String),
}

impl JsonRoute {
    /// Serves the check `check` makes if `served` says so, else refuses with its reason.
    pub fn new(served: Result<(), String>, check: impl FnOnce() -> Arc<dyn JsonCheck>) -> Self {
        match served {
            Ok(()) => Self::Serve(check()),
            Err(reason) => Self::Refuse(reason),
        }
    }
}

impl std::fmt::Debug for JsonRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Serve(_) => f.write_str("Serve(..)"),
            Self::Refuse(reason) => f.debug_tuple("Refuse").field(reason).finish(),
        }
    }
}

#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub view: Arc<ClusterView>,
    /// Set once the node serves; cleared when it starts shutting down.
    pub ready: Arc<AtomicBool>,
    pub json: JsonRoute,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .field("json", &self.json)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Serialize)]
struct MemberJson {
    id: String,
    address: SocketAddr,
    state: &'static str,
    is_self: bool,
    boot_ms: u64,
    clock_offset_ms: Option<i64>,
    clock_fenced: bool,
    /// Cluster time (Unix ms) of the member's last datagram; absent if never (and for self).
    last_heard_ms: Option<u64>,
}

/// OpenMetrics to whoever asks for it (Prometheus does, first); the classic text format to
/// everyone else.
async fn metrics(State(s): State<AdminState>, headers: axum::http::HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if openmetrics {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            s.metrics.encode(),
        )
            .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            s.metrics.encode_classic(),
        )
            .into_response()
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<AdminState>) -> Response {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn members(State(s): State<AdminState>) -> axum::Json<Vec<MemberJson>> {
    let members = s
        .view
        .members()
        .iter()
        .map(|m| MemberJson {
            id: m.id.to_string(),
            address: m.addr,
            state: m.state.as_str(),
            is_self: m.is_self,
            boot_ms: m.boot_ms,
            clock_offset_ms: m.clock_offset_ms,
            clock_fenced: m.clock_fenced,
            last_heard_ms: m.last_heard_ms,
        })
        .collect();
    axum::Json(members)
}

async fn json_check(State(s): State<AdminState>, body: axum::body::Bytes) -> Response {
    let check = match &s.json {
        JsonRoute::Serve(check) => check,
        JsonRoute::Refuse(reason) => {
            return (
                StatusCode::NOT_FOUND,
                format!("POST /json is not served on this listener: {reason}\n"),
            )
                .into_response();
        }
    };
    match check.check_json(&body).await {
        Ok((over, response)) => {
            let status = if over {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, axum::Json(response)).into_response()
        }
        Err(refusal) => (
            StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST),
            format!("{}\n", refusal.message),
        )
            .into_response(),
    }
}

/// The admin routes.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/members", get(members))
        .route("/json", post(json_check))
        .with_state(state)
}

/// `listener` with `TCP_NODELAY` set on every connection it accepts: without it a response's
/// last segment can wait for the client's delayed ACK.
fn nodelay(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    fn set(tcp: &mut tokio::net::TcpStream) {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an admin connection");
        }
    }
    listener.tap_io(set as fn(&mut tokio::net::TcpStream))
}

/// Serves the admin routes on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(nodelay(listener), router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        use axum::serve::Listener as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = super::nodelay(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await;
        assert!(
            accepted.nodelay().unwrap(),
            "Nagle is on for admin connections"
        );
    }
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    fn state() -> AdminState {
        AdminState {
            metrics: Arc::new(Metrics::new()),
            view: Arc::new(ClusterView::default()),
            ready: Arc::new(AtomicBool::new(false)),
            json: JsonRoute::Refuse("http.json is \"off\"".to_owned()),
        }
    }

    async fn get(router: Router, path: &str) -> (StatusCode, String) {
        let resp = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Answers every check with 200 and `{}`.
    struct AlwaysOk;

    impl JsonCheck for AlwaysOk {
        fn check_json<'a>(
            &'a self,
            _body: &'a [u8],
        ) -> std::pin::Pin<Box<dyn Future<Output = JsonOutcome> + Send + 'a>> {
            Box::pin(async { Ok((false, serde_json::json!({}))) })
        }
    }

    async fn post_json(router: Router) -> (StatusCode, String) {
        let resp = router
            .oneshot(Request::post("/json").body(Body::from("{}")).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// `POST /json` consumes quota: by default it is served only on a loopback listener, and
    /// `http.json` says otherwise; the other routes are served whatever it says.
    #[tokio::test]
    async fn json_is_served_only_where_the_configuration_says() {
        let cases = [
            ("", true),
            ("[http]\nlisten = \"[::1]:8080\"\n", true),
            ("[http]\nlisten = \"0.0.0.0:8080\"\n", false),
            ("[http]\nlisten = \"10.1.2.3:8080\"\n", false),
            ("[http]\nlisten = \"[::]:8080\"\n", false),
            ("[http]\nlisten = \"0.0.0.0:8080\"\njson = \"on\"\n", true),
            ("[http]\njson = \"off\"\n", false),
            (
                "[http]\nlisten = \"127.0.0.2:8080\"\njson = \"auto\"\n",
                true,
            ),
        ];
        for (toml, served) in cases {
            let config = crate::config::Config::from_toml("node.toml", toml, std::iter::empty())
                .unwrap_or_else(|e| panic!("{toml}: {e}"));
            let s = AdminState {
                json: JsonRoute::new(config.json_check_served(), || Arc::new(AlwaysOk)),
                ..state()
            };
            let (status, body) = post_json(router(s.clone())).await;
            if served {
                assert_eq!((status, body.as_str()), (StatusCode::OK, "{}"), "{toml}");
            } else {
                assert_eq!(status, StatusCode::NOT_FOUND, "{toml}");
                assert!(body.contains("http.json"), "{toml}: {body}");
                assert_eq!(body.lines().count(), 1, "{toml}: {body}");
            }
            for path in ["/metrics", "/healthz", "/v1/members"] {
                assert_eq!(
                    get(router(s.clone()), path).await.0,
                    StatusCode::OK,
                    "{path}"
                );
            }
        }
    }

    #[tokio::test]
    async fn health_readiness_members_and_metrics() {
        let s = state();
        assert_eq!(get(router(s.clone()), "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(router(s.clone()), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.ready.store(true, Ordering::Relaxed);
        assert_eq!(get(router(s.clone()), "/readyz").await.0, StatusCode::OK);
        let (status, body) = get(router(s.clone()), "/v1/members").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "[]");
        s.metrics
            .record_decisions("demo", crate::metrics::DecisionResult::Allowed, 3);
        let (_, text) = get(router(s.clone()), "/metrics").await;
        assert!(text.contains("limitmesh_decisions_total"), "{text}");
        let resp = router(s)
            .oneshot(Request::post("/json").body(Body::from("{}")).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    }
}
