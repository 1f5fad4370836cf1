//! Envoy's rate limit service, `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! with the semantics of envoyproxy/ratelimit: a descriptor no rule matches is OK and reported
//! without a limit; a shadow rule counts and is always OK; the request is OVER_LIMIT if any
//! other descriptor is. Unlike envoyproxy/ratelimit, the non-shadow descriptors of a request
//! are consumed all together or not at all.
//!
//! Requests are decoded as [`RawRateLimitRequest`]s, entries as bytes, so that a header value
//! that is not UTF-8 is decided like any other. Only what concerns the whole request (its
//! domain, its number of descriptors) fails the call: Envoy lets a request through every
//! limit when the call fails (`failure_mode_deny: false`, its default), so one descriptor
//! must never fail it. A descriptor that is malformed, too long or too costly is answered on
//! its own.

use tonic::{Request, Response, Status};

use super::{RpcContext, convert};
use crate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use crate::proto::envoy_raw::RawRateLimitRequest;
use crate::proto::envoy_raw::server::rate_limit_service_server::RateLimitService;

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
        request: Request<RawRateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        let rules = self.ctx.rules.current();
        let tally = self
            .ctx
            .tally(&rules, std::str::from_utf8(&req.domain).unwrap_or_default());
        let query = convert::envoy_request(&req).map_err(|e| tally.invalid(e))?;
        let outcome = self.ctx.decide(&rules, &query, &tally).await?;
        Ok(Response::new(convert::envoy_response(
            &outcome,
            self.headers,
        )))
    }
}
