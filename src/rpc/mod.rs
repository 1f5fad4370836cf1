//! The gRPC services of a node: limitmesh's own API (`limitmesh.v1.RateLimiter`), Envoy's rate
//! limit service (`envoy.service.ratelimit.v3.RateLimitService`), health (`grpc.health.v1`)
//! and server reflection, on any stream of incoming connections.
//!
//! Both APIs decide a request the same way, in four steps, each in one place:
//!
//! 1. `convert/`: protobuf → a `request::Request` in domain terms, checked in form (only what
//!    concerns the whole request fails it; a malformed descriptor is carried, and answered,
//!    on its own);
//! 2. `plan.rs`: resolved against the rules, keys built, costs set against their limits,
//!    nothing consumed;
//! 3. `execute.rs`: the limiter asked, at one reading of the context's clock;
//! 4. `tally.rs`: every outcome counted (verdicts, invalid requests, refusals), then
//!    `convert/` again for the response.

mod convert;
mod envoy_rls;
mod execute;
mod health;
mod invalid;
mod members;
mod own_api;
mod plan;
mod request;
mod tally;
mod token_wait;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::Stream;
use tonic::Status;
use tonic::transport::server::Connected;

pub use self::envoy_rls::{RateLimitHeaders, RateLimitServiceImpl};
use self::execute::Outcome;
pub use self::health::HealthHandle;
pub use self::invalid::InvalidRequest;
pub use self::members::{MembersSource, SingleNode};
pub use self::own_api::{MAX_BATCH_CHECKS, RateLimiterService};
pub use self::request::MAX_DESCRIPTORS;
use self::tally::Tally;
pub use self::token_wait::TokenWait;
use crate::clock::Clock;
use crate::limiter::{Limiter, TokenNeed};
use crate::metrics::Metrics;
use crate::proto::envoy_raw::server::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::limitmesh::v1::rate_limiter_server::RateLimiterServer;
use crate::rules::{RuleSet, RulesHandle};

/// Everything the services read. Cheap to clone.
#[derive(Clone)]
pub struct RpcContext {
    pub limiter: Arc<Limiter>,
    pub rules: Arc<RulesHandle>,
    pub clock: Arc<dyn Clock>,
    pub members: Arc<dyn MembersSource>,
    pub metrics: Arc<Metrics>,
    /// Under the ledger, how a request without a token waits for one; `None`: it is refused
    /// at once.
    pub tokens: Option<TokenWait>,
}

impl std::fmt::Debug for RpcContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcContext")
            .field("limiter", &self.limiter)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl RpcContext {
    /// Counts the outcomes of a request under `domain`.
    pub(crate) fn tally<'a>(&'a self, rules: &RuleSet, domain: &'a str) -> Tally<'a> {
        Tally::new(&self.metrics, rules, domain)
    }

    /// Plans and executes `req`, counting the outcome (or the refusal) in `tally`. A request
    /// refused for want of ledger tokens waits for them (`token_wait.rs`) and is decided
    /// again, as often as something arrives within its wait; dry runs do not wait.
    pub(crate) async fn decide<'r, 'q>(
        &self,
        rules: &'r RuleSet,
        req: &request::Request<'q>,
        tally: &Tally<'_>,
    ) -> Result<Outcome<'r, 'q>, Status> {
        let shadow = rules.options().shadow_mode;
        let run = |now_ms: u64, again: bool| {
            let planned = plan::plan(rules, req);
            if again {
                execute::execute_again(&self.limiter, planned, shadow, now_ms)
            } else {
                execute::execute(&self.limiter, planned, req.dry_run, shadow, now_ms)
            }
            .map_err(|e| tally.refused(e))
        };
        let tokens = self.tokens.as_ref().filter(|_| !req.dry_run);
        let mut seen = tokens.map_or(0, TokenWait::arrivals);
        let mut now_ms = self.clock.now_ms();
        let mut outcome = run(now_ms, false)?;
        if let Some(tokens) = tokens {
            // On tokio's timer: cluster time may stand still while it is slewed back.
            let deadline = tokio::time::sleep(std::time::Duration::from_millis(tokens.wait_ms));
            tokio::pin!(deadline);
            // Until a token comes, the wait ends, or every window lacking one cannot get one:
            // its owner refused and it holds none that becomes valid, or the cost is above
            // the limit.
            while !outcome.allowed
                && !TokenNeed::waiting_in_vain(&outcome.needs)
                && !deadline.is_elapsed()
            {
                tokens
                    .wait(&outcome.needs, now_ms, seen, deadline.as_mut())
                    .await;
                seen = tokens.arrivals();
                now_ms = self.clock.now_ms();
                outcome = run(now_ms, true)?;
            }
            // Shadow mode answers OK a request its limits refused: the windows ran dry all
            // the same.
            if outcome.allowed && !outcome.shadowed {
                tokens.ask_ahead(&outcome.needs);
            } else {
                self.limiter.ran_dry(&outcome.needs, now_ms);
            }
        }
        tally.decided(&outcome, req);
        Ok(outcome)
    }
}

#[derive(Debug, Error)]
pub enum RpcError {
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Server settings beyond the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// A request still running after this long is answered with an error.
    pub request_timeout: Duration,
    /// HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Rate limit headers in Envoy responses.
    pub rate_limit_headers: RateLimitHeaders,
}

/// The defaults of `[grpc]` in the node configuration (a test there holds them equal).
impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_millis(50),
            max_concurrent_streams: 1024,
            rate_limit_headers: RateLimitHeaders::None,
        }
    }
}

/// The connections of `listener`, with `TCP_NODELAY` set on each, as tonic's own `serve`
/// sets it. Without it a response's frames wait for the client's delayed ACK (40 ms on Linux)
/// once a connection carries a few dozen requests in flight.
pub fn tcp_incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Serves every gRPC service on the connections of `incoming` ([`tcp_incoming`] in
/// production, simulated connections in tests) until `shutdown` completes, then stops
/// accepting and finishes the requests in flight. Health reports SERVING for both rate limit
/// services once serving starts, and NOT_SERVING from the moment `shutdown` completes; call
/// [`HealthHandle::set_not_serving`] earlier to drain before shutting down.
pub async fn serve<I, IO, IE>(
    incoming: I,
    ctx: RpcContext,
    request_timeout: Duration,
    health: HealthHandle,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RpcError>
where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let options = ServeOptions {
        request_timeout,
        ..ServeOptions::default()
    };
    serve_with_options(incoming, ctx, options, health, shutdown).await
}

/// [`serve`] with every server setting.
pub async fn serve_with_options<I, IO, IE>(
    incoming: I,
    ctx: RpcContext,
    options: ServeOptions,
    health: HealthHandle,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RpcError>
where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    // Older grpcurl releases ask the v1alpha service.
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    health.set_serving().await;
    let draining = health.clone();
    let shutdown = async move {
        shutdown.await;
        draining.set_not_serving().await;
    };
    tonic::transport::Server::builder()
        .timeout(options.request_timeout)
        .max_concurrent_streams(options.max_concurrent_streams)
        .add_service(health.service())
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(RateLimiterServer::new(RateLimiterService::new(ctx.clone())))
        .add_service(RateLimitServiceServer::new(RateLimitServiceImpl::new(
            ctx,
            options.rate_limit_headers,
        )))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    Ok(())
}
