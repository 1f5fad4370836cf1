//! The `[limiter]` section: the window table, partitions, arbitration and saved state.

use serde::{Deserialize, Serialize};

/// See `limitmesh::limiter::PartitionPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionPolicyName {
    Strict,
    Available,
}

/// How a node admits: `share` (each node takes its share of a window's limit, computed from
/// the demands it hears) or `ledger` (owners lease tokens, nodes spend them; see
/// `limitmesh::limiter::Policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionName {
    Share,
    Ledger,
}

/// See `limitmesh::limiter::TableFullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TableFullPolicyName {
    Deny,
    Error,
}

/// See `limitmesh::crdt::Arbitration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArbitrationName {
    VectorDominance,
    MaxTimestamp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimiterSettings {
    /// Most windows held at once. Default: 100000.
    pub max_keys: usize,
    /// What a check on a new key gets while every window in a full table holds quota:
    /// `deny` (over the limit, retry when the earliest window expires) or `error`
    /// (RESOURCE_EXHAUSTED: the caller's failure mode decides). Default: `deny`.
    pub when_table_full: TableFullPolicyName,
    /// `strict`: in a partition each side takes its share of the limit, so the cluster stays
    /// within it; `available`: each side may use the whole limit. Default: `strict`.
    pub partition_policy: PartitionPolicyName,
    /// `share` or `ledger` (owners lease tokens, nodes spend them). Default: `share`.
    pub admission: AdmissionName,
    /// Under `ledger`: how long a request that finds no token waits for the window's owner
    /// (and for a held token that becomes valid). 1 to 1000. Default: 15.
    pub ask_wait_ms: u64,
    /// `vector-dominance` (higher version wins) or `max-timestamp` (later clock stamp wins).
    /// Default: `vector-dominance`.
    pub arbitration: ArbitrationName,
    /// How long a new burst takes at most `1/N` of a limit. Default: 500.
    pub onset_ms: u64,
    /// How long the largest cluster size seen is still expected. Default: 60000.
    pub expected_hold_ms: u64,
    /// How far a clock may be from cluster time before its node is cut off for admission (and
    /// a peer's stamp refused). 1000 to 30000. Default: 10000.
    pub max_clock_drift_ms: u64,
    /// Buckets per window when a rule or request does not say; must divide 1000 (so that
    /// every unit's window divides). Default: 10.
    pub default_buckets: u16,
    /// A file where the node saves every live register it holds (periodically and at a
    /// graceful stop), and a start loads those still inside their windows: day and month
    /// quotas survive a restart of the whole fleet. Its directory must exist and be writable
    /// (checked at start). Default: empty (nothing saved).
    pub state_path: String,
    /// How often a serving node saves to `state_path`, besides at a graceful stop: what a
    /// crash can lose is what was admitted since. At least 1000. Default: 30000.
    pub state_save_interval_ms: u64,
}

impl Default for LimiterSettings {
    fn default() -> Self {
        let core = crate::limiter::LimiterConfig::default();
        Self {
            max_keys: core.max_keys,
            when_table_full: TableFullPolicyName::Deny,
            partition_policy: PartitionPolicyName::Strict,
            admission: AdmissionName::Share,
            ask_wait_ms: core.ledger.ask_wait_ms,
            arbitration: ArbitrationName::VectorDominance,
            onset_ms: core.onset_ms,
            expected_hold_ms: core.expected_hold_ms,
            max_clock_drift_ms: core.max_clock_drift_ms,
            default_buckets: crate::window::DEFAULT_BUCKETS,
            state_path: String::new(),
            state_save_interval_ms: 30_000,
        }
    }
}
