//! Every outcome of a request counted in one place: the verdict of each descriptor (or that it
//! is malformed), an invalid request, a refusal. The `domain` label is worked out once per
//! request.

use tonic::Status;

use super::execute::{Outcome, Verdict};
use super::invalid::InvalidRequest;
use super::plan::{Applied, Planned};
use super::request::{DescriptorQuery, Query, Request};
use crate::limiter::CheckError;
use crate::metrics::{DecisionResult, MAX_DESCRIPTOR_LABEL, Metrics, UNCONFIGURED_DOMAIN};
use crate::rules::RuleSet;

/// Counts the outcomes of one request under its domain.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally<'a> {
    metrics: &'a Metrics,
    /// Only domains the rules define, so that requests cannot add series.
    domain: &'a str,
}

impl<'a> Tally<'a> {
    pub fn new(metrics: &'a Metrics, rules: &RuleSet, domain: &'a str) -> Self {
        let domain = if rules.has_domain(domain) {
            domain
        } else {
            UNCONFIGURED_DOMAIN
        };
        Self { metrics, domain }
    }

    /// Counts each verdict. A limited descriptor counts by its own verdict: one that had room
    /// counts as allowed even if another descriptor refused the request. A malformed
    /// descriptor counts once, as invalid, whatever it was answered, and is logged at debug.
    pub fn decided(&self, outcome: &Outcome<'_, '_>, req: &Request<'_>) {
        let mut counts = [
            (DecisionResult::Allowed, 0),
            (DecisionResult::OverLimit, 0),
            (DecisionResult::ShadowOverLimit, 0),
            (DecisionResult::Unlimited, 0),
        ];
        let (mut unmatched, mut near, mut invalid) = (0, 0, 0);
        for (i, verdict) in outcome.verdicts.iter().enumerate() {
            if let Some(malformed) = req.malformed(i) {
                tracing::debug!(
                    domain = req.domain,
                    problem = %malformed.problem(),
                    "malformed descriptor, answered on its own"
                );
                invalid += 1;
                continue;
            }
            if let Some((item, _)) = verdict.limited()
                && let Applied::Rule(rule) = item.applied
                && rule.detailed
                && let Query::Descriptors(descriptors) = &req.query
                && let Some(d) = descriptors.get(i)
            {
                self.metrics
                    .record_detailed(self.domain, &detailed_name(d), result_of(verdict));
            }
            unmatched += u64::from(matches!(verdict.planned, Planned::Unmatched));
            near += u64::from(verdict.limited().is_some_and(|(_, s)| near_limit(s)));
            let result = result_of(verdict);
            if let Some((_, n)) = counts.iter_mut().find(|(r, _)| *r == result) {
                *n += 1;
            }
        }
        for (result, n) in counts {
            self.metrics.record_decisions(self.domain, result, n);
        }
        self.metrics
            .record_decisions(self.domain, DecisionResult::Invalid, invalid);
        self.metrics.record_unmatched(self.domain, unmatched);
        self.metrics.record_near_limit(self.domain, near);
        if outcome.shadowed {
            self.metrics.record_global_shadow(self.domain);
        }
    }

    /// Counts an invalid request and turns it into INVALID_ARGUMENT.
    pub fn invalid(&self, e: InvalidRequest) -> Status {
        self.metrics
            .record_decisions(self.domain, DecisionResult::Invalid, 1);
        e.into()
    }

    /// Counts a request the limiter refused to evaluate and turns it into a status: a full key
    /// table is RESOURCE_EXHAUSTED (retrying later can succeed); anything else the core finds
    /// wrong with a request (planning leaves nothing it would) is INVALID_ARGUMENT.
    pub fn refused(&self, e: CheckError) -> Status {
        match e {
            CheckError::KeyTableFull { .. } => {
                self.metrics
                    .record_decisions(self.domain, DecisionResult::Refused, 1);
                Status::resource_exhausted(e.to_string())
            }
            other => {
                self.metrics
                    .record_decisions(self.domain, DecisionResult::Invalid, 1);
                Status::invalid_argument(other.to_string())
            }
        }
    }
}

/// A descriptor as envoyproxy/ratelimit names its detailed stats: `key_value.key2_value2`,
/// copied no further than the label keeps of it.
fn detailed_name(d: &DescriptorQuery<'_>) -> String {
    fn push_capped(name: &mut String, s: &str) {
        let mut cut = s
            .len()
            .min((MAX_DESCRIPTOR_LABEL + 1).saturating_sub(name.len()));
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        name.push_str(&s[..cut]);
    }
    let mut name = String::new();
    for (n, e) in d.text().iter().enumerate() {
        if n > 0 {
            name.push('.');
        }
        push_capped(&mut name, e.key);
        if !e.value.is_empty() {
            name.push('_');
            push_capped(&mut name, e.value);
        }
    }
    name
}

/// Admitted with less than a fifth of the limit left: 80 % used, envoyproxy/ratelimit's
/// default `NEAR_LIMIT_RATIO`. What is left is what this node could still admit (its share of
/// what the cluster has left), so a key is near its limit here when this node is near being
/// refused.
fn near_limit(status: &crate::limiter::LimitStatus) -> bool {
    status.allowed && status.remaining.saturating_mul(5) < u64::from(status.limit)
}

fn result_of(verdict: &Verdict<'_, '_>) -> DecisionResult {
    match (&verdict.planned, &verdict.status) {
        (Planned::Limited(item), Some(status)) => match (item.shadow, status.allowed) {
            (_, true) => DecisionResult::Allowed,
            (false, false) => DecisionResult::OverLimit,
            (true, false) => DecisionResult::ShadowOverLimit,
        },
        _ => DecisionResult::Unlimited,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::LimitStatus;

    fn status(limit: u32, remaining: u64, allowed: bool) -> LimitStatus {
        LimitStatus {
            allowed,
            limit,
            remaining,
            reset_after_ms: 0,
            retry_after_ms: 0,
        }
    }

    #[test]
    fn near_limit_is_past_80_percent_used_as_envoyproxy_counts_it() {
        // envoyproxy/ratelimit: near once the count after the hit passes floor(0.8 * limit).
        for limit in [1u32, 5, 10, 100, 1_000] {
            let threshold = (f64::from(limit) * 0.8).floor() as u64;
            for remaining in 0..=u64::from(limit) {
                let after = u64::from(limit) - remaining;
                assert_eq!(
                    near_limit(&status(limit, remaining, true)),
                    after > threshold,
                    "limit {limit}, {remaining} left"
                );
            }
        }
        assert!(
            !near_limit(&status(10, 0, false)),
            "refused is over, not near"
        );
    }
}
