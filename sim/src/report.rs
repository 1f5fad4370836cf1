//! The design's measures, computed from what a run recorded.
//!
//! Over-admission is measured on true time, not on any node's clock: for every sliding window
//! `(t − W, t]` ending on a millisecond after warm-up, the admissions in it over the limit.

use serde::Serialize;

use crate::cluster::{Fault, Outcome, SimConfig};
use crate::workload::Workload;

/// Measures of one run. Fractions are of the limit (0.01 = 1 %).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub seed: u64,
    pub windows: usize,
    /// Mean over windows of max(0, admitted / L − 1).
    pub over_admission_mean: f64,
    pub over_admission_p99: f64,
    pub over_admission_max: f64,
    /// Mean over windows of admitted / min(L, offered).
    pub utilization: f64,
    /// Admitted in the first window after a burst's onset, / L − 1.
    pub burst_first_window_over: Option<f64>,
    /// Largest admitted / L over windows inside a partition.
    pub partition_max_ratio: Option<f64>,
    pub staleness_p50_ms: Option<u64>,
    pub staleness_p99_ms: Option<u64>,
    pub convergence_ms: Option<u64>,
    /// Summary bytes per register per peer: the cost per active key per peer per round.
    pub gossip_bytes_per_key_per_peer: Option<f64>,
    pub datagrams_dropped: u64,
    pub datagrams_duplicated: u64,
    pub clock_rollbacks: u64,
    /// Nodes cut off for their clocks at the end of the run, with their offsets (ms).
    pub clock_cut_off: Vec<(usize, i64)>,
    /// The same window measures for each of the run's other descriptors (none in a built-in
    /// scenario, and then not in the JSON).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub descriptors: Vec<DescriptorReport>,
}

/// The window measures of one more limited descriptor of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DescriptorReport {
    pub name: String,
    pub limit: u32,
    pub window_ms: u64,
    pub windows: usize,
    pub over_admission_mean: f64,
    pub over_admission_p99: f64,
    pub over_admission_max: f64,
    pub utilization: f64,
    pub partition_max_ratio: Option<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Counts in every window `(t − w, t]`, for `t` from `from` to the end (inclusive of `t`),
/// from prefix sums so that no window depends on how the first one was seeded.
pub(crate) fn window_sums(per_ms: &[u32], w: usize, from: usize) -> Vec<u64> {
    let mut prefix = Vec::with_capacity(per_ms.len() + 1);
    prefix.push(0u64);
    for c in per_ms {
        prefix.push(prefix[prefix.len() - 1] + u64::from(*c));
    }
    (from..per_ms.len())
        .map(|t| prefix[t + 1] - prefix[(t + 1).saturating_sub(w)])
        .collect()
}

/// Over-admission and utilization of one limit over every sliding window after warm-up, and
/// its busiest window inside a partition.
struct WindowMeasures {
    windows: usize,
    mean: f64,
    p99: f64,
    max: f64,
    utilization: f64,
    partition_max_ratio: Option<f64>,
}

impl WindowMeasures {
    /// `admitted` and `offered` are per true millisecond, all nodes.
    fn of(
        cfg: &SimConfig,
        admitted_per_ms: &[u32],
        offered_per_ms: &[u32],
        limit: u32,
        window_ms: u64,
    ) -> Self {
        let w = window_ms as usize;
        let l = f64::from(limit);
        let from = (cfg.warmup_ms as usize).max(w);
        let admitted = window_sums(admitted_per_ms, w, from);
        let offered = window_sums(offered_per_ms, w, from);
        let mut over: Vec<f64> = admitted
            .iter()
            .map(|a| (*a as f64 / l - 1.0).max(0.0))
            .collect();
        let utilization = if admitted.is_empty() {
            0.0
        } else {
            admitted
                .iter()
                .zip(&offered)
                .map(|(a, o)| {
                    let cap = (*o as f64).min(l);
                    if cap > 0.0 { *a as f64 / cap } else { 1.0 }
                })
                .sum::<f64>()
                / admitted.len() as f64
        };
        let mean = if over.is_empty() {
            0.0
        } else {
            over.iter().sum::<f64>() / over.len() as f64
        };
        over.sort_by(f64::total_cmp);
        let partition_max_ratio = cfg.faults.iter().find_map(|f| match f {
            Fault::Partition {
                from_ms, until_ms, ..
            } => {
                let all = window_sums(admitted_per_ms, w, w);
                let inside = all
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| {
                        let t = (i + w) as u64;
                        t >= *from_ms && t < *until_ms
                    })
                    .map(|(_, a)| *a as f64 / l);
                inside.fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
            }
            _ => None,
        });
        WindowMeasures {
            windows: over.len(),
            mean,
            p99: percentile(&over, 0.99),
            max: over.last().copied().unwrap_or(0.0),
            utilization,
            partition_max_ratio,
        }
    }
}

impl Report {
    pub fn new(cfg: &SimConfig, outcome: &Outcome) -> Self {
        let w = cfg.window_ms as usize;
        let l = f64::from(cfg.limit);
        let m = WindowMeasures::of(
            cfg,
            &outcome.admitted_per_ms,
            &outcome.offered_per_ms,
            cfg.limit,
            cfg.window_ms,
        );
        let descriptors = cfg
            .descriptors
            .iter()
            .zip(&outcome.descriptors)
            .map(|(d, series)| {
                let m = WindowMeasures::of(
                    cfg,
                    &series.admitted_per_ms,
                    &series.offered_per_ms,
                    d.limit,
                    d.window_ms,
                );
                DescriptorReport {
                    name: d.name.clone(),
                    limit: d.limit,
                    window_ms: d.window_ms,
                    windows: m.windows,
                    over_admission_mean: m.mean,
                    over_admission_p99: m.p99,
                    over_admission_max: m.max,
                    utilization: m.utilization,
                    partition_max_ratio: m.partition_max_ratio,
                }
            })
            .collect();
        let burst_first_window_over = match cfg.workload {
            Workload::Burst { onset_ms, .. } | Workload::BurstAfterTrickle { onset_ms, .. } => {
                let start = onset_ms as usize;
                let end = (start + w).min(outcome.admitted_per_ms.len());
                let n: u64 = outcome.admitted_per_ms[start.min(end)..end]
                    .iter()
                    .map(|c| u64::from(*c))
                    .sum();
                Some(n as f64 / l - 1.0)
            }
            _ => None,
        };
        let mut stale = outcome.staleness_ms.clone();
        stale.sort_unstable();
        let pct = |p: f64| {
            (!stale.is_empty()).then(|| stale[(((stale.len() - 1) as f64) * p).round() as usize])
        };
        let (bytes, sends) = outcome.wire.iter().fold((0u64, 0u64), |(b, s), w| {
            (
                b + w.sent_bytes.get("summary").copied().unwrap_or(0),
                s + w.summary_register_sends,
            )
        });
        Report {
            seed: cfg.seed,
            windows: m.windows,
            over_admission_mean: m.mean,
            over_admission_p99: m.p99,
            over_admission_max: m.max,
            utilization: m.utilization,
            burst_first_window_over,
            partition_max_ratio: m.partition_max_ratio,
            staleness_p50_ms: pct(0.5),
            staleness_p99_ms: pct(0.99),
            convergence_ms: outcome.convergence_ms,
            gossip_bytes_per_key_per_peer: (sends > 0).then(|| bytes as f64 / sends as f64),
            datagrams_dropped: outcome.faults.datagrams_dropped,
            datagrams_duplicated: outcome.faults.datagrams_duplicated,
            clock_rollbacks: outcome.faults.clock_rollbacks,
            clock_cut_off: outcome.faults.clock_fenced.clone(),
            descriptors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_sums_slide_by_one_millisecond() {
        let per_ms = [1, 0, 2, 0, 3, 0];
        assert_eq!(window_sums(&per_ms, 3, 2), vec![3, 2, 5, 3]);
        assert_eq!(window_sums(&per_ms, 2, 0), vec![1, 1, 2, 2, 3, 3]);
        // Measuring from a whole window in, as every report does.
        assert_eq!(window_sums(&per_ms, 3, 3), vec![2, 5, 3]);
        assert_eq!(window_sums(&per_ms, 2, 4), vec![3, 3]);
    }

    #[test]
    fn window_sums_match_counting_each_window() {
        let per_ms: Vec<u32> = (0..200u32).map(|i| (i * 7919 + 13) % 5).collect();
        for w in [1, 2, 3, 10, 50] {
            for from in [0, 1, w - 1, w, w + 1, 120] {
                let brute: Vec<u64> = (from..per_ms.len())
                    .map(|t| {
                        per_ms[(t + 1).saturating_sub(w)..=t]
                            .iter()
                            .map(|c| u64::from(*c))
                            .sum()
                    })
                    .collect();
                assert_eq!(window_sums(&per_ms, w, from), brute, "w {w}, from {from}");
            }
        }
    }

    #[test]
    fn percentiles_of_sorted_values() {
        let v: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
