//! One section of the results page per kind of recording. Each reads only the fields it
//! shows, so a report that grows a field changes nothing here; one that loses a field fails
//! with the file and line.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use super::Recording;

/// No-break space: a figure and its unit stay on one line in a narrow column.
const NBSP: char = '\u{a0}';

/// `0.0123` as `1.23 %`.
fn pct(v: f64) -> String {
    format!("{:.2}{NBSP}%", v * 100.0)
}

/// A window's admissions over its limit, `1.012 × L`.
fn times_l(v: f64) -> String {
    format!("{v:.3}{NBSP}×{NBSP}L")
}

fn row(page: &mut String, cells: &[String]) {
    let _ = writeln!(page, "| {} |", cells.join(" | "));
}

fn header(page: &mut String, cells: &[&str]) {
    let _ = writeln!(page, "| {} |", cells.join(" | "));
    let _ = writeln!(page, "|{}", "---|".repeat(cells.len()));
}

fn provenance(page: &mut String, recordings: &[&Recording]) {
    for r in recordings {
        let _ = writeln!(page, "\n{}", r.provenance());
    }
}

fn none_recorded(page: &mut String) {
    page.push_str("\nNothing recorded.\n");
}

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

pub(super) fn scenarios(
    page: &mut String,
    recordings: &[&Recording],
    descriptions: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    page.push_str(
        "\n## Scenarios: five nodes on turmoil\n\n\
         Real nodes on a simulated network and clock (see [simulation](simulation.md)): a \
         limit of 1 000 per 1 s window of 10 buckets, 200 ms gossip, 1–20 ms latency, 2× \
         overload unless the scenario says otherwise. Each scenario runs twice: `share` is \
         limitmesh's admission, `naive` admits while the global estimate is under the limit \
         (what sharing raw counts gives). Over-admission is measured on true time over every \
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

impl FleetRow {
    fn gossip(&self) -> String {
        format!(
            "{:.1} / {:.0}{NBSP}KB/s",
            self.gossip_bytes_per_node_per_s_mean / 1e3,
            self.gossip_bytes_per_node_per_s_max / 1e3
        )
    }

    fn other(&self) -> String {
        let mut parts = Vec::new();
        if let (Some(inside), Some(heal)) = (
            self.partition_inside_max_ratio,
            self.partition_heal_max_ratio,
        ) {
            parts.push(format!(
                "busiest window wholly inside the partition {}, across the heal {}",
                times_l(inside),
                times_l(heal)
            ));
        }
        if let Some(v) = self.partition_max_ratio {
            parts.push(format!("ending in the partition {}", times_l(v)));
        }
        if let Some(v) = self.staleness_p99_ms {
            parts.push(format!("staleness p99 {v}{NBSP}ms"));
        }
        if let Some(v) = self.detection_ms {
            parts.push(format!("failure detected in {v}{NBSP}ms"));
        }
        if self.replacements > 0 {
            parts.push(format!("{} replacements", self.replacements));
        }
        if let Some(v) = self.starved_windows_max {
            parts.push(format!(
                "longest run of windows in which a node had none admitted: {v}"
            ));
        }
        parts.join("; ")
    }
}

const FLEET_SCENARIOS: [(&str, &str); 4] = [
    (
        "fleet",
        "10 keys every node uses (L = 5 000/s), 5 tenant keys per node each used by 10 nodes \
         (L = 100/s), one key local to each node (L = 50/s); a third of each class offered \
         2 × L, the rest L/2",
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

pub(super) fn fleet(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Fleets: the in-process simulator\n\n\
         The node cores of a whole fleet in virtual time (see [simulation](simulation.md#fleets-of-hundreds)), \
         60 s a run, the first 10 s a warm-up, one node crashed for good 15 s before the end \
         to time failure detection; windows of every overloaded key are measured up to that \
         crash. Rows: `share` (limitmesh as configured: owner mode above 16 members), `mesh` \
         (the full mesh forced), `naive` (admit while the global estimate is under the \
         limit). *Worst window* is the busiest window of any overloaded key, as a multiple of \
         its limit. *Refused below the limit* is the part of the requests refused on keys \
         offered half their limit. Gossip is bytes sent and received per node, mean and \
         busiest node.\n\n",
    );
    header(page, &["scenario", "what it runs"]);
    for (name, what) in FLEET_SCENARIOS {
        row(page, &[format!("`{name}`"), what.to_owned()]);
    }
    page.push('\n');
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
    header(
        page,
        &[
            "scenario",
            "row",
            "nodes",
            "over-admission mean",
            "p99",
            "worst window",
            "utilization",
            "refused below the limit",
            "gossip per node",
            "other",
        ],
    );
    for f in &rows {
        row(
            page,
            &[
                format!("`{}`", f.scenario),
                f.policy.clone(),
                f.nodes.to_string(),
                pct(f.over_admission_mean),
                pct(f.over_admission_p99),
                times_l(1.0 + f.over_admission_max),
                pct(f.utilization),
                pct(f.refused_below_limit),
                f.gossip(),
                f.other(),
            ],
        );
    }
    provenance(page, &used);
    Ok(())
}

pub(super) fn fleet_sizes(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Fleets by size\n\n\
         The `fleet` scenario with limitmesh's admission at each size recorded. *Run took* is \
         the wall time of a recording that ran this row alone.\n\n",
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
    header(
        page,
        &[
            "nodes",
            "over-admission mean",
            "p99",
            "worst window",
            "utilization",
            "refused below the limit",
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
                pct(f.over_admission_mean),
                pct(f.over_admission_p99),
                times_l(1.0 + f.over_admission_max),
                pct(f.utilization),
                pct(f.refused_below_limit),
                f.gossip(),
                f.staleness_p99_ms
                    .map_or_else(|| "-".into(), |v| format!("{v}{NBSP}ms")),
                f.detection_ms
                    .map_or_else(|| "-".into(), |v| format!("{v}{NBSP}ms")),
                wall.map_or_else(|| "-".into(), |v| format!("{v:.0}{NBSP}s")),
            ],
        );
    }
    provenance(page, &used);
    Ok(())
}

#[derive(Deserialize)]
struct HotPathRow {
    case: String,
    limitmesh_ns: f64,
    governor_ns: f64,
    ratio: f64,
}

pub(super) fn hot_path(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Hot path against governor\n\n\
         One check through the limiter and one through governor's keyed limiter, alternated in \
         slices of 16 384 for a few seconds; the ratio is the median over slice pairs (below 1: \
         limitmesh is faster). `hot_key` checks one key, `keys_10k` 10 000 keys in random \
         order. Both include their clock read.\n\n",
    );
    let mut rows = Vec::new();
    for r in recordings {
        rows.extend(r.rows::<HotPathRow>()?);
    }
    if rows.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    header(page, &["case", "limitmesh", "governor", "ratio"]);
    for h in &rows {
        row(
            page,
            &[
                format!("`{}`", h.case),
                format!("{:.1}{NBSP}ns", h.limitmesh_ns),
                format!("{:.1}{NBSP}ns", h.governor_ns),
                format!("{:.2}×", h.ratio),
            ],
        );
    }
    provenance(page, recordings);
    Ok(())
}

#[derive(Deserialize)]
struct Summary {
    calls_per_s: f64,
    p50_us: u32,
    p99_us: u32,
    p999_us: u32,
    errors: u64,
}

#[derive(Deserialize)]
struct Shape {
    connections: usize,
    streams: usize,
}

#[derive(Deserialize)]
struct ShapeResult {
    shape: Shape,
    noop: Summary,
    limitmesh: Summary,
    throughput_ratio: f64,
}

#[derive(Deserialize)]
struct GrpcBench {
    api: String,
    rounds: u32,
    seconds: f64,
    shapes: Vec<ShapeResult>,
}

fn ms(us: u32) -> String {
    format!("{:.2}{NBSP}ms", f64::from(us) / 1e3)
}

pub(super) fn grpc_bench(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## gRPC against a no-op service\n\n\
         `ShouldRateLimit` on loopback against a no-op tonic service set up as production \
         would be, each in a process of its own, in alternating rounds; a shape is \
         connections × calls in flight on each. The ratio is limitmesh's throughput over the \
         no-op's, the median over round pairs.\n\n",
    );
    let mut runs = Vec::new();
    for r in recordings {
        runs.extend(r.rows::<GrpcBench>()?);
    }
    if runs.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    header(
        page,
        &[
            "API",
            "shape",
            "limitmesh calls/s",
            "no-op calls/s",
            "ratio",
            "limitmesh p50 / p99 / p99.9",
            "no-op p50 / p99 / p99.9",
            "failed calls",
        ],
    );
    for b in &runs {
        for s in &b.shapes {
            let lat =
                |x: &Summary| format!("{} / {} / {}", ms(x.p50_us), ms(x.p99_us), ms(x.p999_us));
            row(
                page,
                &[
                    format!("{} ({} × {:.1} s rounds)", b.api, b.rounds, b.seconds),
                    format!("{} × {}", s.shape.connections, s.shape.streams),
                    format!("{:.0}", s.limitmesh.calls_per_s),
                    format!("{:.0}", s.noop.calls_per_s),
                    format!("{:.3}×", s.throughput_ratio),
                    lat(&s.limitmesh),
                    lat(&s.noop),
                    (s.limitmesh.errors + s.noop.errors).to_string(),
                ],
            );
        }
    }
    provenance(page, recordings);
    Ok(())
}

#[derive(Deserialize)]
struct MemoryRow {
    bytes_per_key: f64,
    target_bytes: f64,
}

pub(super) fn memory(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Memory per key\n\n\
         Bytes held per active window with registers from 5 origins, excluding the key string, \
         counted by an allocator that charges each allocation its malloc chunk.\n\n",
    );
    let mut rows = Vec::new();
    for r in recordings {
        rows.extend(r.rows::<MemoryRow>()?);
    }
    if rows.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    header(page, &["measure", "bytes", "target"]);
    for m in &rows {
        row(
            page,
            &[
                "per active key, 5 origins".to_owned(),
                format!("{:.0}{NBSP}B", m.bytes_per_key),
                format!("{:.0}{NBSP}B", m.target_bytes),
            ],
        );
    }
    provenance(page, recordings);
    Ok(())
}
