//! gRPC health (`grpc.health.v1`): SERVING for both rate limit services while the node serves,
//! NOT_SERVING once it drains, so that load balancers and Envoy's health checks stop sending.

use std::sync::Arc;

use tokio::sync::Mutex;

use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use super::{RateLimitServiceImpl, RateLimiterService};
use crate::proto::envoy_raw::server::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::limitmesh::v1::rate_limiter_server::RateLimiterServer;

/// The names health is reported under: the server as a whole (""), and each service.
const SERVICES: [&str; 3] = [
    "",
    <RateLimiterServer<RateLimiterService> as NamedService>::NAME,
    <RateLimitServiceServer<RateLimitServiceImpl> as NamedService>::NAME,
];

/// Sets what the health service reports. Clones share the same statuses.
///
/// SERVING takes two things: the server has started ([`HealthHandle::set_serving`]) and the
/// node is ready, which a handle made with [`HealthHandle::until_ready`] is only once
/// [`HealthHandle::set_ready`] says so (a node that does not hold the cluster's state yet).
#[derive(Debug, Clone)]
pub struct HealthHandle {
    reporter: HealthReporter,
    gate: Arc<Mutex<Gate>>,
}

#[derive(Debug, Clone, Copy)]
struct Gate {
    started: bool,
    ready: bool,
}

impl Default for HealthHandle {
    fn default() -> Self {
        Self::gated(true)
    }
}

impl HealthHandle {
    /// A handle for a node that is ready as soon as it serves.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle that reports NOT_SERVING until [`HealthHandle::set_ready`].
    pub fn until_ready() -> Self {
        Self::gated(false)
    }

    fn gated(ready: bool) -> Self {
        Self {
            reporter: HealthReporter::default(),
            gate: Arc::new(Mutex::new(Gate {
                started: false,
                ready,
            })),
        }
    }

    /// Changes the gate and reports what it now says, under the gate's lock so that two
    /// changes are reported in the order they were made.
    async fn update(&self, f: impl FnOnce(&mut Gate)) {
        let mut gate = self.gate.lock().await;
        f(&mut gate);
        let status = if gate.started && gate.ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.set_all(status).await;
    }

    /// The server has started: SERVING, if the node is ready.
    pub async fn set_serving(&self) {
        self.update(|g| g.started = true).await;
    }

    /// The node is ready: SERVING, if the server has started.
    pub async fn set_ready(&self) {
        self.update(|g| g.ready = true).await;
    }

    /// Reports NOT_SERVING for the server and both services; requests are still answered.
    pub async fn set_not_serving(&self) {
        self.update(|g| g.started = false).await;
    }

    async fn set_all(&self, status: ServingStatus) {
        for name in SERVICES {
            self.reporter.set_service_status(name, status).await;
        }
    }

    pub(crate) fn service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService::from_health_reporter(self.reporter.clone()))
    }
}
