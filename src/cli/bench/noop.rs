//! The baseline: both rate limit APIs answered at once with OK and nothing else, served the way
//! a production tonic server is (`Server::builder()` with tonic's defaults, TCP_NODELAY on every
//! accepted connection, in a process of its own on tokio's default runtime). Whatever it costs is
//! what any gRPC service pays on this machine; limitmesh's figures are read against it. Envoy's
//! requests are decoded as limitmesh's server decodes them ([`RawRateLimitRequest`]).

use tonic::{Request, Response, Status};

use crate::proto::envoy::service::ratelimit::v3::{RateLimitResponse, rate_limit_response};
use crate::proto::envoy_raw::RawRateLimitRequest;
use crate::proto::envoy_raw::server::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use crate::proto::limitmesh::v1::rate_limiter_server::{RateLimiter, RateLimiterServer};
use crate::proto::limitmesh::v1::{
    CheckBatchRequest, CheckBatchResponse, CheckRequest, CheckResponse, InspectRequest,
    InspectResponse, LimitStatus, MembersRequest, MembersResponse,
};

/// Answers every call with OK, one status per descriptor, without looking at anything else.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct NoOp;

#[tonic::async_trait]
impl RateLimiter for NoOp {
    async fn check(&self, _: Request<CheckRequest>) -> Result<Response<CheckResponse>, Status> {
        Ok(Response::new(CheckResponse {
            allowed: true,
            retry_after_ms: 0,
            statuses: vec![LimitStatus {
                allowed: true,
                ..LimitStatus::default()
            }],
            error: None,
        }))
    }

    async fn check_batch(
        &self,
        _: Request<CheckBatchRequest>,
    ) -> Result<Response<CheckBatchResponse>, Status> {
        Ok(Response::new(CheckBatchResponse::default()))
    }

    async fn inspect(
        &self,
        _: Request<InspectRequest>,
    ) -> Result<Response<InspectResponse>, Status> {
        Ok(Response::new(InspectResponse::default()))
    }

    async fn members(
        &self,
        _: Request<MembersRequest>,
    ) -> Result<Response<MembersResponse>, Status> {
        Ok(Response::new(MembersResponse::default()))
    }
}

#[tonic::async_trait]
impl RateLimitService for NoOp {
    async fn should_rate_limit(
        &self,
        request: Request<RawRateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let ok = rate_limit_response::Code::Ok as i32;
        let statuses = request
            .get_ref()
            .descriptors
            .iter()
            .map(|_| rate_limit_response::DescriptorStatus {
                code: ok,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: ok,
            statuses,
            ..Default::default()
        }))
    }
}

/// Serves the no-op on `listener` until `shutdown` completes.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(RateLimiterServer::new(NoOp))
        .add_service(RateLimitServiceServer::new(NoOp))
        .serve_with_incoming_shutdown(crate::rpc::tcp_incoming(listener), shutdown)
        .await
}
