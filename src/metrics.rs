//! Prometheus metrics of a node: one registry, and typed handles to every family in it.
//!
//! All families are created and registered in [`Metrics::new`]; parts of the node increment
//! them through the public fields or the helpers below. To add families, add a field and
//! register it in `new` (the registry is public for families registered elsewhere before the
//! node starts serving). [`Metrics::encode`] renders the Prometheus text format.
//!
//! Label values never come straight from requests: a domain is a label only if the rules
//! define it (others are counted under [`UNCONFIGURED_DOMAIN`]), so a client cannot grow the
//! number of series.

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `domain` label of requests whose domain the rules do not define.
pub const UNCONFIGURED_DOMAIN: &str = "_unconfigured";

/// How one descriptor (or key) of a request was decided.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum DecisionResult {
    /// A limit applied and had room.
    Allowed,
    /// A limit applied and refused.
    OverLimit,
    /// No limit applied: no rule matched, the rule is unlimited, or it was replaced.
    Unlimited,
    /// A shadow-mode rule was over its limit; the request was not refused for it.
    ShadowOverLimit,
    /// The request was malformed (counted once per request, not per descriptor).
    Invalid,
    /// The key table was full of busy keys; the request was refused with RESOURCE_EXHAUSTED
    /// (counted once per request).
    Refused,
}

impl DecisionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionResult::Allowed => "allowed",
            DecisionResult::OverLimit => "over_limit",
            DecisionResult::Unlimited => "unlimited",
            DecisionResult::ShadowOverLimit => "shadow_over_limit",
            DecisionResult::Invalid => "invalid",
            DecisionResult::Refused => "refused",
        }
    }
}

impl EncodeLabelValue for DecisionResult {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub domain: String,
    pub result: DecisionResult,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DescriptorLabels {
    pub domain: String,
    /// The descriptor as envoyproxy/ratelimit names its detailed stats:
    /// `key_value.key2_value2`, or [`OVERFLOW_DESCRIPTOR`].
    pub descriptor: String,
    pub result: DecisionResult,
}

/// Most descriptor values counted in series of their own (`detailed_metric`); the rest are
/// counted together under [`OVERFLOW_DESCRIPTOR`]. The values come from requests: without a
/// cap, a client could add series without end.
pub const MAX_DETAILED_DESCRIPTORS: usize = 1_000;
/// Longest descriptor label kept (longer ones are cut at a character boundary).
pub const MAX_DESCRIPTOR_LABEL: usize = 256;
/// `value` escaped for a label value of the text formats (`\\`, `\"` and `\n`):
/// `prometheus_client` writes label values as they are, and a descriptor value from a request
/// (or a domain from a rules file) holding a quote or a newline would otherwise end the label,
/// or the line, and could write series of its own into the exposition.
fn label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The `descriptor` label of detailed decisions past [`MAX_DETAILED_DESCRIPTORS`].
pub const OVERFLOW_DESCRIPTOR: &str = "_overflow";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DomainLabels {
    pub domain: String,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum ReloadOutcome {
    Success,
    Failure,
}

impl EncodeLabelValue for ReloadOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            ReloadOutcome::Success => "success",
            ReloadOutcome::Failure => "failure",
        })
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub outcome: ReloadOutcome,
}

/// The node's metrics.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    /// `limitmesh_decisions_total{domain, result}`: per descriptor (or key) decided.
    pub decisions: Family<DecisionLabels, Counter>,
    /// `limitmesh_unmatched_descriptors_total{domain}`: descriptors no rule applied to (also
    /// counted as `unlimited` decisions); a high rate often means a descriptor the rules do
    /// not expect.
    pub unmatched_descriptors: Family<DomainLabels, Counter>,
    /// `limitmesh_near_limit_total{domain}`: descriptors admitted with less than a fifth of
    /// their limit left (envoyproxy/ratelimit's `near_limit`, at its default 80 % ratio).
    pub near_limit: Family<DomainLabels, Counter>,
    /// `limitmesh_descriptor_decisions_total{domain, descriptor, result}`: decisions of rules
    /// with `detailed_metric: true`, per descriptor value, at most
    /// [`MAX_DETAILED_DESCRIPTORS`] of them.
    pub descriptor_decisions: Family<DescriptorLabels, Counter>,
    /// The (domain, descriptor) pairs with series of their own.
    detailed_seen: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    /// `limitmesh_global_shadow_mode_total{domain}`: requests the limits refused and the global
    /// shadow switch answered OK (envoyproxy/ratelimit's `global_shadow_mode`).
    pub global_shadow_mode: Family<DomainLabels, Counter>,
    /// `limitmesh_rules_reloads_total{outcome}`.
    pub rules_reloads: Family<ReloadLabels, Counter>,
    /// `limitmesh_rules_loaded`: rules (with a `rate_limit`) in force.
    pub rules_loaded: Gauge,
    /// `limitmesh_rules_domains`: domains in force.
    pub rules_domains: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("limitmesh");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Descriptors (or keys) decided, by domain and result",
            decisions.clone(),
        );
        let unmatched_descriptors = Family::<DomainLabels, Counter>::default();
        registry.register(
            "unmatched_descriptors",
            "Descriptors no rule applied to (reported as unlimited)",
            unmatched_descriptors.clone(),
        );
        let near_limit = Family::<DomainLabels, Counter>::default();
        registry.register(
            "near_limit",
            "Descriptors admitted with less than 20 % of their limit left (80 % used), by domain",
            near_limit.clone(),
        );
        let descriptor_decisions = Family::<DescriptorLabels, Counter>::default();
        registry.register(
            "descriptor_decisions",
            "Decisions of rules with detailed_metric, per descriptor value (at most 1000 values; \
             the rest under descriptor=\"_overflow\")",
            descriptor_decisions.clone(),
        );
        let global_shadow_mode = Family::<DomainLabels, Counter>::default();
        registry.register(
            "global_shadow_mode",
            "Requests refused by the limits and answered OK by rules.shadow_mode, by domain",
            global_shadow_mode.clone(),
        );
        let rules_reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "rules_reloads",
            "Rules reloads by outcome; a failure keeps the previous rules",
            rules_reloads.clone(),
        );
        let rules_loaded = Gauge::default();
        registry.register(
            "rules_loaded",
            "Rules with a rate_limit in force",
            rules_loaded.clone(),
        );
        let rules_domains = Gauge::default();
        registry.register("rules_domains", "Domains in force", rules_domains.clone());
        Self {
            registry,
            decisions,
            unmatched_descriptors,
            near_limit,
            descriptor_decisions,
            detailed_seen: Default::default(),
            global_shadow_mode,
            rules_reloads,
            rules_loaded,
            rules_domains,
        }
    }

    /// Counts `n` decisions of `result` in `domain` (already mapped to a label value).
    pub fn record_decisions(&self, domain: &str, result: DecisionResult, n: u64) {
        if n > 0 {
            self.decisions
                .get_or_create(&DecisionLabels {
                    domain: label_value(domain),
                    result,
                })
                .inc_by(n);
        }
    }

    pub fn record_near_limit(&self, domain: &str, n: u64) {
        if n > 0 {
            self.near_limit
                .get_or_create(&DomainLabels {
                    domain: label_value(domain),
                })
                .inc_by(n);
        }
    }

    /// Counts one decision of a `detailed_metric` rule for `descriptor` (its entries as
    /// `key_value.key2_value2`) in `domain`: under its own series while fewer than
    /// [`MAX_DETAILED_DESCRIPTORS`] have one, else under [`OVERFLOW_DESCRIPTOR`].
    pub fn record_detailed(&self, domain: &str, descriptor: &str, result: DecisionResult) {
        let mut cut = descriptor.len().min(MAX_DESCRIPTOR_LABEL);
        while !descriptor.is_char_boundary(cut) {
            cut -= 1;
        }
        let descriptor = &descriptor[..cut];
        let own = {
            // A poisoned lock only means another thread panicked mid-insert; the set is
            // still a set.
            let mut seen = self
                .detailed_seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let key = (domain.to_owned(), descriptor.to_owned());
            seen.contains(&key) || (seen.len() < MAX_DETAILED_DESCRIPTORS && seen.insert(key))
        };
        self.descriptor_decisions
            .get_or_create(&DescriptorLabels {
                domain: label_value(domain),
                descriptor: if own {
                    label_value(descriptor)
                } else {
                    OVERFLOW_DESCRIPTOR.to_owned()
                },
                result,
            })
            .inc();
    }

    pub fn record_global_shadow(&self, domain: &str) {
        self.global_shadow_mode
            .get_or_create(&DomainLabels {
                domain: label_value(domain),
            })
            .inc();
    }

    pub fn record_unmatched(&self, domain: &str, n: u64) {
        if n > 0 {
            self.unmatched_descriptors
                .get_or_create(&DomainLabels {
                    domain: label_value(domain),
                })
                .inc_by(n);
        }
    }

    pub fn record_rules_reload(&self, success: bool) {
        let outcome = if success {
            ReloadOutcome::Success
        } else {
            ReloadOutcome::Failure
        };
        self.rules_reloads
            .get_or_create(&ReloadLabels { outcome })
            .inc();
    }

    pub fn set_rules_loaded(&self, domains: usize, rules: usize) {
        self.rules_domains
            .set(i64::try_from(domains).unwrap_or(i64::MAX));
        self.rules_loaded
            .set(i64::try_from(rules).unwrap_or(i64::MAX));
    }

    /// The OpenMetrics text exposition of every family (what Prometheus asks for first).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The classic Prometheus text format (0.0.4), for scrapers and tools that do not ask for
    /// OpenMetrics (`promtool check metrics`, older agents, a person with curl).
    pub fn encode_classic(&self) -> String {
        openmetrics_to_classic(&self.encode())
    }
}

/// The OpenMetrics text that `prometheus_client` writes, in the classic format. The two
/// differ, for what this registry holds (counters and gauges), in three ways: a counter
/// family's `HELP` and `TYPE` name its sample (`x_total`), not the family (`x`); there are no
/// `UNIT` lines; and there is no `# EOF`. Samples are the same.
fn openmetrics_to_classic(text: &str) -> String {
    let counters: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(name) {
                    format!("{name}_total")
                } else {
                    name.to_owned()
                };
                let _ = writeln!(out, "{prefix}{name} {tail}");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
