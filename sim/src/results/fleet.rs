//! The fleet simulator's runs: the scenarios of one recording side by side, and the `fleet`
//! scenario across the sizes recorded. Each is split into narrow tables (limits, partitions,
//! cost and timing) so that they fit a page.

use serde::Deserialize;

use super::Recording;
use super::format::{NBSP, header, none_recorded, pct, provenance, row, times_l};

#[derive(Deserialize)]
struct FleetRow {
    scenario: String,
    policy: String,
    nodes: usize,
    over_admission_mean: f64,
    over_admission_p99: f64,
    over_admission_max: f64,
    utilization: f64,
    refused_below_limit: f64,
    partition_max_ratio: Option<f64>,
    partition_inside_max_ratio: Option<f64>,
    partition_heal_max_ratio: Option<f64>,
    staleness_p99_ms: Option<u64>,
    gossip_bytes_per_node_per_s_mean: f64,
    gossip_bytes_per_node_per_s_max: f64,
    detection_ms: Option<u64>,
    starved_windows_max: Option<u32>,
    replacements: u32,
}

fn ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v}{NBSP}ms"))
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), times_l)
}

impl FleetRow {
    fn name(&self) -> String {
        format!("`{}`", self.scenario)
    }

    fn gossip(&self) -> String {
        format!(
            "{:.1} / {:.0}{NBSP}KB/s",
            self.gossip_bytes_per_node_per_s_mean / 1e3,
            self.gossip_bytes_per_node_per_s_max / 1e3
        )
    }

    /// Over-admission and utilization of the overloaded keys, and refusals below the limit.
    fn limits(&self) -> Vec<String> {
        vec![
            pct(self.over_admission_mean),
            pct(self.over_admission_p99),
            times_l(1.0 + self.over_admission_max),
            pct(self.utilization),
            pct(self.refused_below_limit),
        ]
    }
}

const LIMIT_COLUMNS: [&str; 5] = [
    "over-admission mean",
    "p99",
    "worst window",
    "utilization",
    "refused below the limit",
];

const FLEET_SCENARIOS: [(&str, &str); 5] = [
    (
        "fleet",
        "10 keys every node uses (L = 5 000/s), 5 tenant keys per node each used by 10 nodes \
         (L = 100/s), one key local to each node (L = 50/s); a third of each class offered \
         2 × L, the rest L/2",
    ),
    (
        "fleet-fast-links",
        "as `fleet`, on links of 1 to 2 ms (a data centre's) instead of 1 to 20 ms",
    ),
    (
        "fleet-partition",
        "as `fleet`, cut 60 % \\| 40 % from 20 s to 40 s, strict",
    ),
    (
        "fleet-churn",
        "as `fleet`, a fifth of the fleet replaced by new processes one by one from 12 s on",
    ),
    (
        "fleet-small-share",
        "one key of 200/s over every node, at 2 × L",
    ),
];

pub(super) fn scenarios(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Fleets: the in-process simulator\n\n\
         The node cores of a whole fleet in virtual time (see \
         [simulation](simulation.md#fleets-of-hundreds)), 60 s a run, the first 10 s a \
         warm-up, one node crashed for good 15 s before the end to time failure detection; \
         windows of every overloaded key are measured up to that crash. Rows: `share` \
         (limitmesh as configured: owner mode above 16 members), `mesh` (the full mesh \
         forced), `naive` (admit while the global estimate is under the limit). *Worst \
         window* is the busiest window of any overloaded key, as a multiple of its limit. \
         *Refused below the limit* is the part of the requests refused on keys offered half \
         their limit, up to the crash as well.\n\n",
    );
    header(page, &["scenario", "what it runs"]);
    for (name, what) in FLEET_SCENARIOS {
        row(page, &[format!("`{name}`"), what.to_owned()]);
    }
    let mut rows = Vec::new();
    let mut used = Vec::new();
    for r in recordings {
        let mut these = r.rows::<FleetRow>()?;
        // A recording of one row of `fleet` is a point of the by-size table, not this one.
        if these.len() == 1 && these[0].scenario == "fleet" {
            continue;
        }
        rows.append(&mut these);
        used.push(*r);
    }
    if rows.is_empty() {
        none_recorded(page);
        return Ok(());
    }

    page.push_str("\nThe limits:\n\n");
    let mut columns = vec!["scenario", "row", "nodes"];
    columns.extend(LIMIT_COLUMNS);
    header(page, &columns);
    for f in &rows {
        let mut cells = vec![f.name(), f.policy.clone(), f.nodes.to_string()];
        cells.extend(f.limits());
        row(page, &cells);
    }

    let cut: Vec<&FleetRow> = rows
        .iter()
        .filter(|f| f.partition_max_ratio.is_some())
        .collect();
    if !cut.is_empty() {
        page.push_str(
            "\nThe partition: the busiest window wholly inside it (begun at the cut or after), \
             across the heal (ending within a window of it), and ending in it (which includes \
             windows that end in its first second, mostly the second before the cut):\n\n",
        );
        header(
            page,
            &[
                "scenario",
                "row",
                "nodes",
                "wholly inside",
                "across the heal",
                "ending in it",
            ],
        );
        for f in cut {
            row(
                page,
                &[
                    f.name(),
                    f.policy.clone(),
                    f.nodes.to_string(),
                    ratio(f.partition_inside_max_ratio),
                    ratio(f.partition_heal_max_ratio),
                    ratio(f.partition_max_ratio),
                ],
            );
        }
    }

    page.push_str(
        "\nWhat it costs, and how fast news travels: gossip sent and received per node (mean, \
         and the busiest node), staleness (an admission at one node until another counts it; \
         under the ledger a register goes to its window's owner, and other nodes count it only \
         at anti-entropy, which no admission waits on), failure detection (a crash or replacement until every other node counted the member \
         out); for the small-share key, the longest run of windows in which a node had \
         requests and none admitted:\n\n",
    );
    header(
        page,
        &[
            "scenario",
            "row",
            "nodes",
            "gossip per node",
            "staleness p99",
            "failure detected in",
            "replacements",
            "longest starvation, windows",
        ],
    );
    for f in &rows {
        row(
            page,
            &[
                f.name(),
                f.policy.clone(),
                f.nodes.to_string(),
                f.gossip(),
                ms(f.staleness_p99_ms),
                ms(f.detection_ms),
                f.replacements.to_string(),
                f.starved_windows_max
                    .map_or_else(|| "-".into(), |v| v.to_string()),
            ],
        );
    }
    provenance(page, &used);
    Ok(())
}

pub(super) fn sizes(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Fleets by size\n\n\
         The `fleet` scenario with limitmesh's admission at each size recorded.\n\n",
    );
    let mut rows: Vec<(FleetRow, Option<f64>)> = Vec::new();
    let mut used = Vec::new();
    for r in recordings {
        let these = r.rows::<FleetRow>()?;
        let alone = these.len() == 1;
        let mut any = false;
        for f in these {
            if f.scenario == "fleet" && f.policy == "share" {
                rows.push((f, alone.then_some(r.wall_seconds)));
                any = true;
            }
        }
        if any {
            used.push(*r);
        }
    }
    if rows.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    rows.sort_by_key(|(f, _)| f.nodes);
    let mut columns = vec!["nodes"];
    columns.extend(LIMIT_COLUMNS);
    header(page, &columns);
    for (f, _) in &rows {
        let mut cells = vec![f.nodes.to_string()];
        cells.extend(f.limits());
        row(page, &cells);
    }
    page.push_str(
        "\nWhat it costs (*run took*: the wall time of a recording that ran this size alone):\n\n",
    );
    header(
        page,
        &[
            "nodes",
            "gossip per node, mean / busiest",
            "staleness p99",
            "failure detected in",
            "run took",
        ],
    );
    for (f, wall) in &rows {
        row(
            page,
            &[
                f.nodes.to_string(),
                f.gossip(),
                ms(f.staleness_p99_ms),
                ms(f.detection_ms),
                wall.map_or_else(|| "-".into(), |v| format!("{v:.0}{NBSP}s")),
            ],
        );
    }
    provenance(page, &used);
    Ok(())
}
