//! limitmesh's own API: `Check`, `CheckBatch`, `Inspect`, `Members`.

use tonic::{Request, Response, Status};

use super::invalid::InvalidRequest;
use super::{RpcContext, convert, execute, plan};
use crate::proto::limitmesh::v1::rate_limiter_server::RateLimiter;
use crate::proto::limitmesh::v1::{
    CheckBatchRequest, CheckBatchResponse, CheckRequest, CheckResponse, InspectRequest,
    InspectResponse, MembersRequest, MembersResponse,
};

/// Most checks in one `CheckBatch`.
pub const MAX_BATCH_CHECKS: usize = 1000;
/// Most bytes of keys one `CheckBatch` may plan (each check's keys are its domain and
/// descriptors in canonical form). Planning stops at the check that passes it, so a request
/// never makes a node hold much more than this in keys.
pub const MAX_BATCH_KEY_BYTES: usize = 1 << 20;

/// The `limitmesh.v1.RateLimiter` service.
#[derive(Debug, Clone)]
pub struct RateLimiterService {
    ctx: RpcContext,
}

impl RateLimiterService {
    pub fn new(ctx: RpcContext) -> Self {
        Self { ctx }
    }
}

#[tonic::async_trait]
impl RateLimiter for RateLimiterService {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let req = request.into_inner();
        let rules = self.ctx.rules.current();
        let tally = self.ctx.tally(&rules, &req.domain);
        let query =
            convert::own_check(&req, rules.default_buckets()).map_err(|e| tally.invalid(e))?;
        let outcome = self.ctx.decide(&rules, &query, &tally).await?;
        Ok(Response::new(convert::own_check_response(&outcome, &query)))
    }

    /// Every check is decided on its own: one that a `Check` call would fail (malformed, or
    /// refused by a full key table) gets that error in its own result, and the others run all
    /// the same. Only the batch as a whole can fail the call: more than [`MAX_BATCH_CHECKS`]
    /// checks, or checks that plan more than `MAX_BATCH_KEY_BYTES` (1 MiB) of keys (planning
    /// stops at the check that passes it, before any check runs). Checks run in order, at one
    /// reading of the clock.
    async fn check_batch(
        &self,
        request: Request<CheckBatchRequest>,
    ) -> Result<Response<CheckBatchResponse>, Status> {
        let req = request.into_inner();
        let rules = self.ctx.rules.current();
        if req.checks.len() > MAX_BATCH_CHECKS {
            let e = InvalidRequest::new(
                "checks",
                format!(
                    "{} given; the maximum is {MAX_BATCH_CHECKS}",
                    req.checks.len()
                ),
            );
            return Err(self.ctx.tally(&rules, "").invalid(e));
        }
        let mut planned = Vec::with_capacity(req.checks.len());
        let mut key_bytes = 0usize;
        for (i, check) in req.checks.iter().enumerate() {
            let tally = self.ctx.tally(&rules, &check.domain);
            let query = match convert::own_check(check, rules.default_buckets()) {
                Ok(query) => query,
                Err(e) => {
                    planned.push(Err(tally.invalid(e)));
                    continue;
                }
            };
            let plan = plan::plan(&rules, &query);
            key_bytes += plan::planned_key_bytes(&plan);
            if key_bytes > MAX_BATCH_KEY_BYTES {
                let e = InvalidRequest::new(
                    format!("checks[{i}]"),
                    format!(
                        "the checks up to here name {key_bytes} bytes of keys; the maximum \
                         per batch is {MAX_BATCH_KEY_BYTES}"
                    ),
                );
                return Err(tally.invalid(e));
            }
            planned.push(Ok((query, plan)));
        }
        let now_ms = self.ctx.clock.now_ms();
        let results = planned
            .into_iter()
            .map(|check| {
                let (query, plan) = match check {
                    Ok(planned) => planned,
                    Err(status) => return convert::own_check_error(&status),
                };
                let tally = self.ctx.tally(&rules, query.domain);
                match execute::execute(
                    &self.ctx.limiter,
                    plan,
                    query.dry_run,
                    rules.options().shadow_mode,
                    now_ms,
                ) {
                    Ok(outcome) => {
                        tally.decided(&outcome, &query);
                        convert::own_check_response(&outcome, &query)
                    }
                    Err(e) => convert::own_check_error(&tally.refused(e)),
                }
            })
            .collect();
        Ok(Response::new(CheckBatchResponse { results }))
    }

    async fn inspect(
        &self,
        request: Request<InspectRequest>,
    ) -> Result<Response<InspectResponse>, Status> {
        let req = request.into_inner();
        let rules = self.ctx.rules.current();
        let tally = self.ctx.tally(&rules, &req.domain);
        let query =
            convert::own_inspect(&req, rules.default_buckets()).map_err(|e| tally.invalid(e))?;
        let plan = plan::plan(&rules, &query);
        let now_ms = self.ctx.clock.now_ms();
        let limiter = &self.ctx.limiter;
        let windows = plan
            .iter()
            .enumerate()
            .map(|(i, planned)| {
                let malformed = query.malformed(i);
                match planned {
                    plan::Planned::Limited(item) => {
                        let key_id = limiter.key_id(&item.key, &item.limit.window).to_string();
                        let inspection = limiter.inspect(&item.key, &item.limit, now_ms);
                        convert::own_window(planned, Some(key_id), inspection.as_ref(), malformed)
                    }
                    other => convert::own_window(other, None, None, malformed),
                }
            })
            .collect();
        let (live, expected) = limiter.member_counts();
        Ok(Response::new(InspectResponse {
            windows,
            live_members: u32::try_from(live).unwrap_or(u32::MAX),
            expected_members: u32::try_from(expected).unwrap_or(u32::MAX),
            clock_fenced: limiter.clock_fenced(),
        }))
    }

    /// This node first, then the others by id.
    async fn members(
        &self,
        _request: Request<MembersRequest>,
    ) -> Result<Response<MembersResponse>, Status> {
        let mut members = self.ctx.members.members().to_vec();
        members.sort_by(|a, b| b.is_self.cmp(&a.is_self).then_with(|| a.id.cmp(&b.id)));
        Ok(Response::new(MembersResponse {
            members: members.iter().map(convert::own_member).collect(),
        }))
    }
}
