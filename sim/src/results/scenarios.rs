//! The 5-node scenarios on turmoil: one row per scenario and policy.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Recording;
use super::format::{NBSP, header, none_recorded, pct, provenance, row, times_l};

#[derive(Deserialize)]
struct ScenarioRow {
    scenario: String,
    policy: String,
    over_admission_mean: f64,
    over_admission_p99: f64,
    over_admission_max: f64,
    utilization: f64,
    burst_first_window_over: Option<f64>,
    partition_max_ratio: Option<f64>,
    staleness_p50_ms: Option<u64>,
    staleness_p99_ms: Option<u64>,
    convergence_ms: Option<u64>,
    gossip_bytes_per_key_per_peer: Option<f64>,
    clock_cut_off: Vec<(usize, i64)>,
}

impl ScenarioRow {
    /// The measures only some scenarios have.
    fn other(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v) = self.burst_first_window_over {
            parts.push(format!(
                "first window after the onset {:+.2}{NBSP}%",
                v * 100.0
            ));
        }
        if let Some(v) = self.partition_max_ratio {
            parts.push(format!("busiest window in the partition {}", times_l(v)));
        }
        if let Some(v) = self.convergence_ms {
            parts.push(format!("estimates agree {v}{NBSP}ms after the event"));
        }
        if let (Some(a), Some(b)) = (self.staleness_p50_ms, self.staleness_p99_ms) {
            parts.push(format!("staleness p50 {a}{NBSP}ms, p99 {b}{NBSP}ms"));
        }
        for (node, off) in &self.clock_cut_off {
            parts.push(format!(
                "node {node} cut off ({:+.1}{NBSP}s)",
                *off as f64 / 1e3
            ));
        }
        parts.join("; ")
    }
}

pub(super) fn section(
    page: &mut String,
    recordings: &[&Recording],
    descriptions: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    page.push_str(
        "\n## Scenarios: five nodes on turmoil\n\n\
         Real nodes on a simulated network and clock (see [simulation](simulation.md)): a \
         limit of 1 000 per 1 s window of 10 buckets, 200 ms gossip, 1–20 ms latency, 2× \
         overload unless the scenario says otherwise. Each scenario runs three times: `share` \
         and `ledger` are limitmesh's two admissions (a demand share of the limit; owners \
         leasing tokens that nodes spend, where a request that finds none waits up to 15 ms \
         for its owner), `naive` admits while the global estimate is under the limit (what \
         sharing raw counts gives). Over-admission is measured on true time over every \
         sliding window after the warm-up: `max(0, admitted / L − 1)`; utilization is \
         admitted / min(L, offered). *Gossip* is the summary bytes per active key per peer \
         and round (in `steady`, 200 other keys share the datagrams, as in a real sidecar; the \
         other scenarios have one active key). *Estimates agree* is the time from the event \
         (a heal, a restart) until every node's estimate of a key agrees within 1 %; \
         *staleness* is the time from an admission at one node until another counts it.\n\n",
    );
    let mut rows = Vec::new();
    for r in recordings {
        rows.extend(r.rows::<ScenarioRow>()?);
    }
    if rows.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    header(
        page,
        &[
            "scenario",
            "policy",
            "over-admission mean",
            "p99",
            "max",
            "utilization",
            "gossip",
            "other",
        ],
    );
    for s in &rows {
        row(
            page,
            &[
                format!("`{}`", s.scenario),
                s.policy.clone(),
                pct(s.over_admission_mean),
                pct(s.over_admission_p99),
                pct(s.over_admission_max),
                pct(s.utilization),
                s.gossip_bytes_per_key_per_peer
                    .map_or_else(|| "-".into(), |v| format!("{v:.1}{NBSP}B")),
                s.other(),
            ],
        );
    }
    page.push_str("\nWhat each scenario does (from `sim/scenarios/`):\n\n");
    header(page, &["scenario", "description"]);
    let mut seen = std::collections::BTreeSet::new();
    for s in &rows {
        if seen.insert(s.scenario.as_str()) {
            let d = descriptions.get(&s.scenario).map_or("", String::as_str);
            row(page, &[format!("`{}`", s.scenario), d.to_owned()]);
        }
    }
    provenance(page, recordings);
    Ok(())
}
