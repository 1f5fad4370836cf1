//! Fleet traffic files: a fleet run described in TOML, so that a user can simulate their own
//! fleet (`limitmesh-sim fleet-run FILE --seed N`); each built-in fleet scenario is one too
//! (`sim/scenarios/fleet/`).
//!
//! ```toml
//! description = "Tenants on 50 nodes, a fifth of them redeployed"
//! nodes = 50                   # 2 to 10 000 (`--nodes` overrides it)
//! duration_ms = 60_000
//! warmup_ms = 10_000           # windows ending before this, and traffic before it, unmeasured
//!
//! [network]
//! latency_ms = [1, 20]         # each datagram's latency, uniform in this range
//! loss = 0.0                   # each datagram lost with this probability
//! gossip_interval_ms = 200
//!
//! [[classes]]                  # any number (at least one, at most 64)
//! name = "tenant"              # names the class in reports, and its keys (tenant=0, ...)
//! keys_per_node = 5            # or `keys = 200`: this many in all
//! users = 10                   # nodes using each key, or "all"
//! placement = "random"         # or "in-turn": key k on nodes k·users ... (mod nodes)
//! limit = 100                  # units per window
//! window_ms = 1_000
//! buckets = 10
//! hits_addend = 1              # units each request takes
//! overload = 2.0               # load as a multiple of the limit, or [[t_ms, multiple], ...]
//! overloaded_every = 3         # keys 0, 3, 6, ... are offered `overload` ...
//! underload = 0.5              # ... and the others this (a number or a profile too)
//!
//! [[faults]]
//! kind = "partition"           # the first ⌈fraction × nodes⌉ against the others
//! fraction = 0.6
//! from_ms = 20_000
//! until_ms = 40_000
//! # kind = "crash"           node (an index or "last"), at_ms
//! # kind = "rolling-deploy"  count or share (of the nodes), from_ms, every_ms or over_ms
//! ```
//!
//! Every field but `nodes`, `classes` and each class's `name`, `limit` and `keys` (or
//! `keys_per_node`) has the default shown (`users`: "all", `overloaded_every`: 1); an unknown
//! field is an error. Errors name the file, the line and the field. A file is held to the
//! simulator's bounds ([`super::config::check_size`]).

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use toml::Spanned;

use super::config::{FleetConfig, FleetFault, MAX_DURATION_MS, check_size};
use super::file_class::{ClassDoc, class};
use super::file_text::{Bad, Text, within};
use super::file_values::NodeDoc;
use super::traffic::{Traffic, TrafficClass};

/// Most classes a file may have.
pub const MAX_CLASSES: usize = 64;
/// Most faults a file may have (a rolling deploy is one, of up to every node).
pub const MAX_FAULTS: usize = 64;
/// Slowest datagram a file may ask for.
pub const MAX_LATENCY_MS: u64 = 10_000;
/// Gossip rounds a file may ask for: as a node's configuration allows, and no longer than the
/// anti-entropy period (5 s).
pub const GOSSIP_INTERVAL_MS: std::ops::RangeInclusive<u64> = 10..=5_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetDoc {
    #[serde(default)]
    #[allow(dead_code)] // For the reader of the file.
    description: String,
    nodes: Spanned<u64>,
    duration_ms: Option<Spanned<u64>>,
    warmup_ms: Option<Spanned<u64>>,
    #[serde(default)]
    network: NetworkDoc,
    classes: Vec<Spanned<ClassDoc>>,
    #[serde(default)]
    faults: Vec<Spanned<FaultDoc>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkDoc {
    latency_ms: Option<Spanned<[u64; 2]>>,
    loss: Option<Spanned<f64>>,
    gossip_interval_ms: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "kebab-case")]
enum FaultDoc {
    Partition {
        fraction: f64,
        from_ms: u64,
        until_ms: u64,
    },
    Crash {
        node: NodeDoc,
        at_ms: u64,
    },
    RollingDeploy {
        count: Option<u64>,
        share: Option<f64>,
        from_ms: u64,
        every_ms: Option<u64>,
        over_ms: Option<u64>,
    },
}

/// Reads the fleet traffic file at `path` as a run with `seed` on `nodes` nodes (the file's
/// own if `None`).
pub fn load(path: &Path, seed: u64, nodes: Option<usize>) -> anyhow::Result<FleetConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the fleet traffic file {}", path.display()))?;
    parse(&path.display().to_string(), &text, seed, nodes)
}

/// Parses fleet traffic `text` (`file` names it in errors) as a run with `seed` on `nodes`
/// nodes (the file's own if `None`).
pub fn parse(
    file: &str,
    text: &str,
    seed: u64,
    nodes: Option<usize>,
) -> anyhow::Result<FleetConfig> {
    let doc: FleetDoc = toml::from_str(text).map_err(|e| {
        // The line itself, so that a value of the wrong kind names its field.
        let line = e.span().and_then(|s| Text(text).line(s));
        let quoted = line
            .and_then(|l| text.lines().nth(l - 1))
            .map(|l| l.trim().chars().take(80).collect::<String>())
            .filter(|l| !l.is_empty())
            .map_or(String::new(), |l| format!(" (`{l}`)"));
        let at = line.map_or(String::new(), |l| format!(":{l}"));
        anyhow::anyhow!("{file}{at}: {}{quoted}", e.message().trim_end())
    })?;
    config(&Text(text), doc, seed, nodes).map_err(|(line, field, what)| {
        let at = line.map_or(String::new(), |l| format!(":{l}"));
        anyhow::anyhow!("{file}{at}: {field}: {what}")
    })
}

fn config(
    text: &Text<'_>,
    doc: FleetDoc,
    seed: u64,
    nodes: Option<usize>,
) -> Result<FleetConfig, Bad> {
    let max_nodes = super::config::MAX_NODES as u64;
    let nodes = match nodes {
        Some(n) if !(2..=super::config::MAX_NODES).contains(&n) => {
            return Err((
                None,
                "--nodes".into(),
                format!("{n}: expected 2 to {max_nodes}"),
            ));
        }
        Some(n) => n,
        None => {
            within(text, &doc.nodes, "nodes", 2..=max_nodes)?;
            *doc.nodes.get_ref() as usize
        }
    };
    let mut c = FleetConfig::new(seed, nodes);
    if let Some(d) = &doc.duration_ms {
        within(text, d, "duration_ms", 1..=MAX_DURATION_MS)?;
        c.duration_ms = *d.get_ref();
    }
    if let Some(w) = &doc.warmup_ms {
        c.warmup_ms = *w.get_ref();
    }
    if c.warmup_ms >= c.duration_ms {
        let line = doc.warmup_ms.as_ref().and_then(|w| text.line(w.span()));
        return Err((
            line,
            "warmup_ms".into(),
            format!(
                "{} is not before the end of the run ({} ms)",
                c.warmup_ms, c.duration_ms
            ),
        ));
    }
    network(text, &doc.network, &mut c)?;
    if doc.classes.is_empty() || doc.classes.len() > MAX_CLASSES {
        return Err((
            None,
            "classes".into(),
            format!("{} classes: expected 1 to {MAX_CLASSES}", doc.classes.len()),
        ));
    }
    let mut classes: Vec<TrafficClass> = Vec::with_capacity(doc.classes.len());
    for (i, spanned) in doc.classes.iter().enumerate() {
        let class = class(text, &format!("classes[{i}]"), spanned)?;
        if classes.iter().any(|o| o.name == class.name) {
            return Err(text.bad(
                &spanned.get_ref().name,
                format!("classes[{i}].name"),
                format!("{:?} names another class of this file too", class.name),
            ));
        }
        classes.push(class);
    }
    c.traffic = Traffic { classes };
    if doc.faults.len() > MAX_FAULTS {
        return Err((
            None,
            "faults".into(),
            format!("{} faults: at most {MAX_FAULTS}", doc.faults.len()),
        ));
    }
    c.faults = Vec::with_capacity(doc.faults.len());
    for (i, spanned) in doc.faults.iter().enumerate() {
        let fault = fault(text, &format!("faults[{i}]"), spanned, &c)?;
        c.faults.push(fault);
    }
    check_size(&c).map_err(|what| (None, "classes".into(), what))?;
    Ok(c)
}

fn network(text: &Text<'_>, doc: &NetworkDoc, c: &mut FleetConfig) -> Result<(), Bad> {
    if let Some(latency) = &doc.latency_ms {
        let [lo, hi] = *latency.get_ref();
        // A datagram slower than this is no network a node could form a cluster on.
        if lo == 0 || lo > hi || hi > MAX_LATENCY_MS {
            return Err(text.bad(
                latency,
                "network.latency_ms".into(),
                format!(
                    "[{lo}, {hi}]: expected [min, max] with 1 <= min <= max <= {MAX_LATENCY_MS}"
                ),
            ));
        }
        (c.min_latency_ms, c.max_latency_ms) = (lo, hi);
    }
    if let Some(loss) = &doc.loss {
        within(text, loss, "network.loss", 0.0..=1.0)?;
        c.loss = *loss.get_ref();
    }
    if let Some(g) = &doc.gossip_interval_ms {
        within(text, g, "network.gossip_interval_ms", GOSSIP_INTERVAL_MS)?;
        c.gossip_interval_ms = *g.get_ref();
    }
    Ok(())
}

fn fault(
    text: &Text<'_>,
    at: &str,
    spanned: &Spanned<FaultDoc>,
    c: &FleetConfig,
) -> Result<FleetFault, Bad> {
    let bad = |f: &str, what: String| (text.line(spanned.span()), format!("{at}.{f}"), what);
    let time = |f: &str, t: u64| {
        if t <= MAX_DURATION_MS {
            Ok(t)
        } else {
            Err(bad(f, format!("{t}: expected at most {MAX_DURATION_MS}")))
        }
    };
    let nodes = c.nodes;
    Ok(match *spanned.get_ref() {
        FaultDoc::Partition {
            fraction,
            from_ms,
            until_ms,
        } => {
            if !(fraction > 0.0 && fraction < 1.0) {
                return Err(bad(
                    "fraction",
                    format!("{fraction}: expected more than 0 and less than 1"),
                ));
            }
            if until_ms <= from_ms {
                return Err(bad(
                    "until_ms",
                    format!("{until_ms} is not after from_ms {from_ms}"),
                ));
            }
            if c.partition().is_some() {
                return Err(bad("kind", "a run has one partition at most".into()));
            }
            FleetFault::Partition {
                fraction,
                from_ms: time("from_ms", from_ms)?,
                until_ms: time("until_ms", until_ms)?,
            }
        }
        FaultDoc::Crash { node, at_ms } => FleetFault::Crash {
            node: match node {
                NodeDoc::Last => nodes - 1,
                NodeDoc::Index(n) if n < nodes as u64 => n as usize,
                NodeDoc::Index(n) => {
                    return Err(bad(
                        "node",
                        format!("node {n}: the nodes are 0 to {}", nodes - 1),
                    ));
                }
            },
            at_ms: time("at_ms", at_ms)?,
        },
        FaultDoc::RollingDeploy {
            count,
            share,
            from_ms,
            every_ms,
            over_ms,
        } => {
            let count = match (count, share) {
                (Some(n), None) if (1..=nodes as u64).contains(&n) => n as usize,
                (Some(n), None) => {
                    return Err(bad(
                        "count",
                        format!("{n}: expected 1 to {nodes} (the nodes)"),
                    ));
                }
                (None, Some(s)) if s > 0.0 && s <= 1.0 => {
                    ((s * nodes as f64).floor() as usize).clamp(1, nodes)
                }
                (None, Some(s)) => {
                    return Err(bad(
                        "share",
                        format!("{s}: expected more than 0, at most 1"),
                    ));
                }
                _ => return Err(bad("count", "give either count or share".into())),
            };
            let every_ms = match (every_ms, over_ms) {
                (Some(e), None) => e,
                (None, Some(over)) => over / count as u64,
                _ => return Err(bad("every_ms", "give either every_ms or over_ms".into())),
            }
            .max(1);
            time("from_ms", from_ms)?;
            let last = from_ms.saturating_add(every_ms.saturating_mul(count as u64 - 1));
            time("every_ms", last).map_err(|_| {
                bad(
                    "every_ms",
                    format!(
                        "the last replacement at {last} ms: expected at most {MAX_DURATION_MS}"
                    ),
                )
            })?;
            FleetFault::Replace {
                count,
                from_ms,
                every_ms,
            }
        }
    })
}
