//! Envoy's rate limit service, `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! with the semantics of envoyproxy/ratelimit: a descriptor no rule matches is OK and reported
//! without a limit; a shadow rule counts and is always OK; the request is OVER_LIMIT if any
//! other descriptor is. Unlike envoyproxy/ratelimit, the non-shadow descriptors of a request
//! are consumed all together or not at all.

use tonic::{Request, Response, Status};

use super::{RpcContext, convert};
use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use crate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// Which rate limit headers a response asks Envoy to add to the client's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RateLimitHeaders {
    /// None (envoyproxy/ratelimit's and Limitador's default). Envoy can still add draft-03
    /// headers itself, computed from the statuses, with `enable_x_ratelimit_headers`.
    #[default]
    None,
    /// `x-ratelimit-limit`, `-remaining` and `-reset` in the style of the IETF draft
    /// (draft-ietf-httpapi-ratelimit-headers-03), on every response a limit applied to.
    Draft03,
    /// `RateLimit-Policy` and `RateLimit` as structured fields, as the current IETF draft
    /// (draft-ietf-httpapi-ratelimit-headers-09) defines them.
    Ietf,
}

/// The `envoy.service.ratelimit.v3.RateLimitService` service.
#[derive(Debug, Clone)]
pub struct RateLimitServiceImpl {
    ctx: RpcContext,
    headers: RateLimitHeaders,
}

impl RateLimitServiceImpl {
    pub fn new(ctx: RpcContext, headers: RateLimitHeaders) -> Self {
        Self { ctx, headers }
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimitServiceImpl {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        let rules = self.ctx.rules.current();
        let tally = self.ctx.tally(&rules, &req.domain);
        let query = convert::envoy_request(&req).map_err(|e| tally.invalid(e))?;
        let outcome = self.ctx.decide(&rules, &query, &tally)?;
        Ok(Response::new(convert::envoy_response(
            &outcome,
            self.headers,
        )))
    }
}
