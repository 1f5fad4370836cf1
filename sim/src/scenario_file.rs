//! Scenario files: a simulated run described in TOML, so that a user can run their own setup
//! (`limitmesh-sim run FILE --seed N`) and every built-in scenario is one (`sim/scenarios/`).
//!
//! ```toml
//! description = "The last two nodes cut off from the first three for 20 s, then healed."
//! nodes = 5
//! duration_ms = 40_000
//! warmup_ms = 5_000            # windows ending before this are not measured
//!
//! [network]
//! latency_ms = [1, 20]         # each datagram's latency, uniform in this range
//! gossip_interval_ms = 200
//!
//! [limit]
//! requests = 1_000             # per window, across the cluster
//! window_ms = 1_000
//! buckets = 10
//! partition_policy = "strict"  # or "available"
//!
//! [traffic]
//! shape = "uniform"            # uniform, skewed, burst, burst-after-trickle, ramp
//! overload = 2.0               # offered load, as a multiple of the limit
//!
//! [[descriptors]]              # any number (at most 16): more limits, each with its traffic
//! name = "tenant=7"            # how reports name it (with a rules file: the entries)
//! requests = 200               # as in [limit]; with a rules file, `descriptor = [[k, v]]`
//! traffic = { shape = "ramp", from = 0.5, to = 3.0, from_ms = 5_000, until_ms = 20_000 }
//!
//! [[faults]]
//! kind = "partition"           # partition, crash, loss, loss-one-way, duplication, skew,
//! side = [3, 4]                # clock-step
//! from_ms = 10_000
//! until_ms = 30_000
//!
//! [measure]
//! converge_at_ms = 30_000      # traffic on a second key stops here; time to agree is measured
//! ```
//!
//! Every field but `nodes` has the default shown (`[[descriptors]]` has none unless given);
//! an unknown field is an error. Errors name the file, the line and the field.

mod checks;
mod descriptors;
mod limits;

use std::path::Path;

use anyhow::{Context, bail};
use limitmesh::limiter::{PartitionPolicy, Policy};
use serde::Deserialize;

use self::checks::{check_limit, check_workload};
use self::descriptors::{DescriptorDoc, descriptors};
use self::limits::{descriptor_name, read_rules, resolve_limit};
use crate::cluster::{Fault, SimConfig};
use crate::workload::Workload;

pub use self::descriptors::MAX_DESCRIPTORS;

/// Most nodes a turmoil run takes (the fleet simulator is for larger ones).
pub const MAX_NODES: usize = 64;
/// Longest run a file may ask for: ten simulated minutes.
pub const MAX_DURATION_MS: u64 = 600_000;
/// Slowest datagram a file may ask for.
pub const MAX_LATENCY_MS: u64 = 10_000;
/// Longest gossip round a file may ask for.
pub const MAX_GOSSIP_INTERVAL_MS: u64 = 60_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioDoc {
    #[serde(default)]
    #[allow(dead_code)] // For the reader of the file.
    description: String,
    nodes: usize,
    #[serde(default = "default_duration")]
    duration_ms: u64,
    #[serde(default = "default_warmup")]
    warmup_ms: u64,
    #[serde(default)]
    network: NetworkDoc,
    #[serde(default)]
    limit: LimitDoc,
    #[serde(default = "default_traffic")]
    traffic: Workload,
    #[serde(default)]
    background: Option<BackgroundDoc>,
    #[serde(default)]
    descriptors: Vec<toml::Spanned<DescriptorDoc>>,
    #[serde(default)]
    faults: Vec<toml::Spanned<Fault>>,
    #[serde(default)]
    measure: MeasureDoc,
}

fn default_duration() -> u64 {
    30_000
}

fn default_warmup() -> u64 {
    5_000
}

fn default_traffic() -> Workload {
    Workload::Uniform { overload: 2.0 }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NetworkDoc {
    latency_ms: toml::Spanned<[u64; 2]>,
    gossip_interval_ms: u64,
}

impl Default for NetworkDoc {
    fn default() -> Self {
        Self {
            latency_ms: toml::Spanned::new(0..0, [1, 20]),
            gossip_interval_ms: 200,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LimitDoc {
    /// Default 1000.
    requests: Option<u32>,
    /// Default 1000.
    window_ms: Option<u64>,
    /// Default 10.
    buckets: Option<u16>,
    partition_policy: PartitionPolicyDoc,
    /// Instead of the three above: the limit a rules file (envoyproxy/ratelimit's format,
    /// relative to the scenario file) gives `descriptor` in `domain`.
    rules: Option<String>,
    domain: Option<String>,
    /// The descriptor's entries, `[["key", "value"], ...]`.
    descriptor: Option<Vec<[String; 2]>>,
}

impl Default for LimitDoc {
    fn default() -> Self {
        Self {
            requests: None,
            window_ms: None,
            buckets: None,
            partition_policy: PartitionPolicyDoc::Strict,
            rules: None,
            domain: None,
            descriptor: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum PartitionPolicyDoc {
    #[default]
    Strict,
    Available,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackgroundDoc {
    /// Other keys, never limited, so that rounds carry many registers.
    keys: usize,
    /// Requests per second per key per node.
    rate: f64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct MeasureDoc {
    converge_at_ms: Option<u64>,
    probe_staleness: bool,
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Reads the scenario file at `path` as a run with `seed`.
pub fn load(path: &Path, seed: u64) -> anyhow::Result<SimConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the scenario file {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    parse_in(&path.display().to_string(), &text, seed, dir)
}

/// Parses scenario `text` (`file` names it in errors) as a run with `seed`; a rules file it
/// names is read from the current directory.
pub fn parse(file: &str, text: &str, seed: u64) -> anyhow::Result<SimConfig> {
    parse_in(file, text, seed, Path::new("."))
}

/// As [`parse`], a rules file read from `dir`.
pub fn parse_in(file: &str, text: &str, seed: u64, dir: &Path) -> anyhow::Result<SimConfig> {
    let doc: ScenarioDoc = toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map_or(String::new(), |s| format!(":{}", line_of(text, s.start)));
        anyhow::anyhow!("{file}{at}: {}", e.message())
    })?;
    let fail = |line: Option<usize>, field: &str, what: String| -> anyhow::Error {
        let at = line.map_or(String::new(), |l| format!(":{l}"));
        anyhow::anyhow!("{file}{at}: {field}: {what}")
    };
    if !(2..=MAX_NODES).contains(&doc.nodes) {
        return Err(fail(
            None,
            "nodes",
            format!("{}: expected 2 to {MAX_NODES}", doc.nodes),
        ));
    }
    // Every node's admissions are kept per millisecond: a run is bounded in time as in size.
    if !(1..=MAX_DURATION_MS).contains(&doc.duration_ms) {
        return Err(fail(
            None,
            "duration_ms",
            format!("{}: expected 1 to {MAX_DURATION_MS}", doc.duration_ms),
        ));
    }
    if doc.warmup_ms >= doc.duration_ms {
        return Err(fail(
            None,
            "warmup_ms",
            format!(
                "{} is not before the end of the run ({} ms)",
                doc.warmup_ms, doc.duration_ms
            ),
        ));
    }
    let [lo, hi] = *doc.network.latency_ms.get_ref();
    // A datagram slower than the longest run is no network a node could form a cluster on.
    if lo == 0 || lo > hi || hi > MAX_LATENCY_MS {
        let line = Some(line_of(text, doc.network.latency_ms.span().start)).filter(|_| hi > 0);
        return Err(fail(
            line,
            "network.latency_ms",
            format!("[{lo}, {hi}]: expected [min, max] with 1 <= min <= max <= {MAX_LATENCY_MS}"),
        ));
    }
    if !(1..=MAX_GOSSIP_INTERVAL_MS).contains(&doc.network.gossip_interval_ms) {
        return Err(fail(
            None,
            "network.gossip_interval_ms",
            format!(
                "{}: expected 1 to {MAX_GOSSIP_INTERVAL_MS}",
                doc.network.gossip_interval_ms
            ),
        ));
    }
    let plain = |(field, what): (String, String)| fail(None, &field, what);
    let rules = read_rules(&doc.limit, dir).map_err(plain)?;
    let given = (doc.limit.requests, doc.limit.window_ms, doc.limit.buckets);
    let main = resolve_limit(
        "limit",
        rules.as_ref(),
        doc.limit.descriptor.as_deref(),
        given,
    )
    .map_err(plain)?;
    check_limit("limit", main).map_err(plain)?;
    let (requests, window_ms, buckets) = main;
    let nodes = doc.nodes;
    let mut c = SimConfig::new(seed);
    c.nodes = nodes;
    c.duration_ms = doc.duration_ms;
    c.warmup_ms = doc.warmup_ms;
    c.min_latency_ms = lo;
    c.max_latency_ms = hi;
    c.gossip_interval_ms = doc.network.gossip_interval_ms;
    c.limit = requests;
    c.window_ms = window_ms;
    c.buckets = buckets;
    c.policy = Policy::DemandShare(match doc.limit.partition_policy {
        PartitionPolicyDoc::Strict => PartitionPolicy::Strict,
        PartitionPolicyDoc::Available => PartitionPolicy::Available,
    });
    check_workload("traffic", &doc.traffic).map_err(plain)?;
    c.main_name = doc.limit.descriptor.as_deref().map(descriptor_name);
    c.descriptors = descriptors(&doc, rules.as_ref())
        .map_err(|(line, field, what)| fail(line.map(|at| line_of(text, at)), &field, what))?;
    c.workload = doc.traffic;
    if let Some(b) = doc.background {
        if b.keys > 10_000 || !(b.rate.is_finite() && b.rate >= 0.0 && b.rate <= 1_000.0) {
            return Err(fail(
                None,
                "background",
                format!(
                    "{} keys at {}/s: expected at most 10000 keys at 0 to 1000/s",
                    b.keys, b.rate
                ),
            ));
        }
        c.background = Some((b.keys, b.rate));
    }
    for spanned in doc.faults {
        let line = Some(line_of(text, spanned.span().start));
        let node = |field: &str, n: usize| -> anyhow::Result<usize> {
            if n < nodes {
                Ok(n)
            } else {
                Err(fail(
                    line,
                    field,
                    format!("node {n}: the nodes are 0 to {}", nodes - 1),
                ))
            }
        };
        let p = |v: f64| -> anyhow::Result<f64> {
            if (0.0..=1.0).contains(&v) {
                Ok(v)
            } else {
                Err(fail(line, "faults.p", format!("{v}: expected 0 to 1")))
            }
        };
        let fault = spanned.into_inner();
        match &fault {
            Fault::Partition {
                side,
                from_ms,
                until_ms,
            } => {
                if side.is_empty() || side.len() >= nodes {
                    return Err(fail(
                        line,
                        "faults.side",
                        "a side must hold some of the nodes, not all".into(),
                    ));
                }
                for n in side {
                    node("faults.side", *n)?;
                }
                if until_ms <= from_ms {
                    return Err(fail(
                        line,
                        "faults.until_ms",
                        format!("{until_ms} is not after from_ms {from_ms}"),
                    ));
                }
            }
            Fault::Crash { node: n, .. } => {
                node("faults.node", *n)?;
            }
            Fault::Loss {
                p: v,
                from_ms,
                until_ms,
            } => {
                p(*v)?;
                match (from_ms, until_ms) {
                    (None, Some(_)) => {
                        return Err(fail(line, "faults.until_ms", "goes with from_ms".into()));
                    }
                    (Some(from), Some(until)) if until <= from => {
                        return Err(fail(
                            line,
                            "faults.until_ms",
                            format!("{until} is not after from_ms {from}"),
                        ));
                    }
                    _ => {}
                }
            }
            Fault::Duplication { p: v } => {
                p(*v)?;
            }
            Fault::LossOneWay { from, to, p: v } => {
                node("faults.from", *from)?;
                node("faults.to", *to)?;
                p(*v)?;
            }
            Fault::Skew { node: n, ms } => {
                node("faults.node", *n)?;
                if ms.unsigned_abs() > 3_600_000 {
                    return Err(fail(
                        line,
                        "faults.ms",
                        format!("{ms}: at most an hour off"),
                    ));
                }
            }
            Fault::ClockStep { node: n, by_ms, .. } => {
                node("faults.node", *n)?;
                if by_ms.unsigned_abs() > 3_600_000 {
                    return Err(fail(
                        line,
                        "faults.by_ms",
                        format!("{by_ms}: at most an hour"),
                    ));
                }
            }
        }
        c.faults.push(fault);
    }
    c.converge_at_ms = doc.measure.converge_at_ms;
    c.probe_staleness = doc.measure.probe_staleness;
    if let Some(at) = c.converge_at_ms
        && at >= c.duration_ms
    {
        bail!(
            "{file}: measure.converge_at_ms: {at} is not before the end of the run ({} ms)",
            c.duration_ms
        );
    }
    Ok(c)
}
