//! How a limiter is configured.

use super::Policy;
use crate::crdt::Arbitration;

/// How the limiter behaves. Every field has a production default.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// Most windows held at once. Only windows that count nothing any more are evicted: one
    /// that holds quota never is (see [`TableFullPolicy`]).
    pub max_keys: usize,
    pub policy: Policy,
    pub arbitration: Arbitration,
    /// How long after this node's demand for a window starts it may not yet know its peers'
    /// demand (two summary rounds plus latency). Until then it takes at most `1/N`.
    pub onset_ms: u64,
    /// The node's summary round (`gossip_interval`): registers and sums of a refusing window
    /// come every round, so older ones mean their senders are out of hearing.
    pub gossip_interval_ms: u64,
    /// How long the largest cluster size seen is still expected (`N_expected`).
    pub expected_hold_ms: u64,
    /// How far ahead of local wall time a peer's clock stamp may be before its registers are
    /// refused.
    pub max_clock_drift_ms: u64,
    /// What a check on a new key gets while the key table is full of windows that hold quota.
    pub when_full: TableFullPolicy,
    /// Cache each window's admission bound for the current bucket, so that a check far from
    /// its limit is one load and one CAS. Decisions are the same either way (a check the cached
    /// bound cannot admit takes the exact path); off only for comparison.
    pub admission_cache: bool,
    /// How far past its share (in requests) a node may hold where the others' demand comes in
    /// an owner's sum (a large cluster): 1.05 (`WHOLE_REQUEST_CREDIT_FROM_SUMS`). Less lowers
    /// the utilization of overloaded limits and the over-admission's mean and p99 together;
    /// README's "Fleets of hundreds" measures the trade. Not an operator setting: for the
    /// simulator (`--credit`) and for comparison. A value that is not a finite number of at
    /// least 0 counts as 0, and one past [`MAX_CREDIT_FROM_SUMS`] as that.
    ///
    /// [`MAX_CREDIT_FROM_SUMS`]: super::MAX_CREDIT_FROM_SUMS
    pub credit_from_sums: f64,
    /// Lease timing, under [`Policy::Ledger`](super::Policy::Ledger).
    pub ledger: LedgerTiming,
}

/// How leases are timed (`crate::ledger`). The values and their reasons are listed in
/// `crate::ledger::tuning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerTiming {
    /// How long a lease can be spent from its start.
    pub lease_ms: u64,
    /// How far cluster clocks may disagree: users stop this long before a lease ends, and a
    /// spend counts this long past its bucket.
    pub margin_ms: u64,
    /// Post-dated leases start on multiples of this.
    pub start_step_ms: u64,
    /// How long a request without a token may wait for the owner's answer (and for a token
    /// that becomes valid).
    pub ask_wait_ms: u64,
}

impl Default for LedgerTiming {
    fn default() -> Self {
        use crate::ledger::tuning;
        Self {
            lease_ms: tuning::LEASE_MS,
            margin_ms: tuning::CLOCK_MARGIN_MS,
            start_step_ms: tuning::START_STEP_MS,
            ask_wait_ms: tuning::ASK_WAIT_MS,
        }
    }
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self {
            max_keys: 100_000,
            policy: Policy::default(),
            arbitration: Arbitration::default(),
            onset_ms: 500,
            gossip_interval_ms: 200,
            expected_hold_ms: 60_000,
            max_clock_drift_ms: 10_000,
            admission_cache: true,
            credit_from_sums: super::admission::WHOLE_REQUEST_CREDIT_FROM_SUMS,
            ledger: LedgerTiming::default(),
            when_full: TableFullPolicy::default(),
        }
    }
}

/// What a check on a key the table has no room for gets. Windows that hold quota are never
/// evicted (that would hand the quota out again), so a table can be full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableFullPolicy {
    /// Refused as over the limit, with `retry_after_ms` when the earliest window can have
    /// expired: the limit holds, and new keys wait. The default: a rate limiter that admits
    /// what it cannot count is no limiter.
    #[default]
    Deny,
    /// Refused with [`CheckError::KeyTableFull`](super::CheckError::KeyTableFull) (gRPC RESOURCE_EXHAUSTED): the caller's own
    /// failure mode decides (Envoy's default `failure_mode_deny: false` then admits).
    Error,
}

/// Counters for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LimiterStats {
    pub keys: usize,
    pub max_keys: usize,
    pub expired_keys: u64,
    pub evicted_keys: u64,
    pub refused_table_full: u64,
    /// Windows whose registers get no sums back (see
    /// [`Limiter::set_blind`](super::Limiter::set_blind)).
    pub blind_windows: usize,
}
