//! gRPC health (`grpc.health.v1`): SERVING for both rate limit services while the node serves,
//! NOT_SERVING once it drains, so that load balancers and Envoy's health checks stop sending.

use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use super::{RateLimitServiceImpl, RateLimiterService};
use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::limitmesh::v1::rate_limiter_server::RateLimiterServer;

/// The names health is reported under: the server as a whole (""), and each service.
const SERVICES: [&str; 3] = [
    "",
    <RateLimiterServer<RateLimiterService> as NamedService>::NAME,
    <RateLimitServiceServer<RateLimitServiceImpl> as NamedService>::NAME,
];

/// Sets what the health service reports. Clones share the same statuses.
#[derive(Debug, Clone, Default)]
pub struct HealthHandle {
    reporter: HealthReporter,
}

impl HealthHandle {
    pub fn new() -> Self {
        Self::default()
    }

    pub async fn set_serving(&self) {
        self.set_all(ServingStatus::Serving).await;
    }

    /// Reports NOT_SERVING for the server and both services; requests are still answered.
    pub async fn set_not_serving(&self) {
        self.set_all(ServingStatus::NotServing).await;
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
