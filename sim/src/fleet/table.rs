//! The fleet simulator's output as a table: one row per scenario and admission.

use super::report::FleetReport;

fn pct(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The table's header.
pub fn header() -> String {
    format!(
        "{:<18} {:<7} {:>6} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8} {:>7}",
        "scenario",
        "policy",
        "nodes",
        "over_mean",
        "over_p99",
        "over_max",
        "util",
        "refused<L",
        "part_max",
        "stale_p50",
        "stale_p99",
        "B/node/s",
        "max_B/s",
        "dgram/s",
        "detect",
        "starved",
    )
}

/// One run's row.
pub fn row(r: &FleetReport) -> String {
    format!(
        "{:<18} {:<7} {:>6} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10.0} {:>10.0} {:>8.1} {:>8} {:>7}",
        r.scenario,
        r.policy,
        r.nodes,
        pct(r.over_admission_mean),
        pct(r.over_admission_p99),
        pct(r.over_admission_max),
        pct(r.utilization),
        pct(r.refused_below_limit),
        r.partition_max_ratio
            .map_or_else(|| "-".into(), |v| format!("{v:.3}xL")),
        opt(r.staleness_p50_ms),
        opt(r.staleness_p99_ms),
        r.gossip_bytes_per_node_per_s_mean,
        r.gossip_bytes_per_node_per_s_max,
        r.datagrams_per_node_per_s_mean,
        opt(r.detection_ms),
        opt(r.starved_windows_max),
    )
}

/// One line per key class under a run's row: its utilization beside the per-node ceiling (what
/// a fixed cap at each node could use), and its refusals below the limit; then, if a member
/// crashed, the refusals below the limit after it.
pub fn classes(r: &FleetReport) -> Vec<String> {
    let after_crash = r
        .refused_below_limit_after_crash
        .map(|refused| format!("  after the crash: refused<L {}", pct(refused)));
    r.utilization_by_class
        .0
        .iter()
        .map(|(class, util)| {
            let ceiling = r.per_node_ceiling_by_class.get(class).copied();
            let refused = r.refused_below_limit_by_class.get(class).copied();
            format!(
                "  {class}: util {} (per-node ceiling {}), refused<L {}",
                pct(*util),
                ceiling.map_or_else(|| "-".into(), pct),
                refused.map_or_else(|| "-".into(), pct),
            )
        })
        .chain(after_crash)
        .collect()
}
