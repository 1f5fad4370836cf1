//! `limitmesh-sim <scenario> --seed N [--nodes N] [--json]`, or `limitmesh-sim run FILE --seed N
//! [--json]` for a scenario file: runs a scenario with limitmesh's admission policy and with
//! the naive baseline, and prints the measures side by side. The output depends only on the
//! arguments (wall-clock speed goes to stderr). `limitmesh-sim results`, from the repository's
//! root, prints `docs/results.md` from the JSON recorded under `docs/results/`.

use anyhow::{Context, bail};
use clap::Parser;
use limitmesh::limiter::{MAX_CREDIT_FROM_SUMS, PartitionPolicy, Policy};
use limitmesh::node::{Dissemination, FULL_MESH_UP_TO};
use limitmesh_sim::fleet::{FLEET_SCENARIOS, fleet_scenario};
use limitmesh_sim::scenario::{SCENARIOS, scenario};
use limitmesh_sim::{Report, run};

// As in the service: a fleet run allocates for every datagram and register of a thousand
// nodes, and mimalloc takes about 5 % off a 400-node run against glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about = "Deterministic simulation of a limitmesh cluster")]
struct Args {
    /// steady, skewed, burst, burst-trickle, partition, restart, loss, loss36, loss40,
    /// loss-oneway, skew, skew500, rollback, skew8, skew-12, skew6x2, skew8-4, skew15, skew90,
    /// step5, pair3, or all; on the in-process simulator: fleet, fleet-partition, fleet-churn,
    /// fleet-small-share, or fleet-all; or `run` with a scenario file (see sim/scenarios/);
    /// or `results`, which prints docs/results.md from the recorded JSON (run it from the
    /// repository's root)
    scenario: String,
    /// With `run`: the scenario file (TOML).
    file: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Write a page of plots of the run (share and naive) to DIR/index.html; with `all`, to
    /// DIR/<scenario>/index.html.
    #[arg(long, value_name = "DIR")]
    report: Option<std::path::PathBuf>,
    /// Fleet scenarios: simulated seconds (default 60).
    #[arg(long)]
    seconds: Option<u64>,
    /// Fleet scenarios: run only this one of share, ledger, mesh, naive.
    #[arg(long)]
    only: Option<String>,
    /// Fleet scenarios: how far past its share (in requests) a node may hold where the
    /// others' demand comes in an owner's sum (default 1.05): less trades utilization for
    /// over-admission.
    #[arg(long, value_name = "REQUESTS")]
    credit: Option<f64>,
}

fn fmt_pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.2}%", v * 100.0))
}

fn fmt_opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.scenario == "results" {
        if let Some(extra) = &args.file {
            bail!(
                "unexpected argument {} (results reads docs/results/)",
                extra.display()
            );
        }
        print!(
            "{}",
            limitmesh_sim::results::render(std::path::Path::new("."))?
        );
        return Ok(());
    }
    if args.scenario.starts_with("fleet") {
        return fleet(&args);
    }
    for (flag, given) in [
        ("--credit", args.credit.is_some()),
        ("--seconds", args.seconds.is_some()),
        ("--only", args.only.is_some()),
    ] {
        if given {
            bail!("{flag} goes with the fleet scenarios (fleet, fleet-partition, ...) only");
        }
    }
    let from_file = if args.scenario == "run" {
        let Some(file) = &args.file else {
            bail!("run: which scenario file? (limitmesh-sim run FILE --seed N)");
        };
        Some(limitmesh_sim::scenario_file::load(file, args.seed)?)
    } else {
        if let Some(extra) = &args.file {
            bail!(
                "unexpected argument {} (a file goes with `run`)",
                extra.display()
            );
        }
        None
    };
    let names: Vec<&str> = if args.scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        vec![args.scenario.as_str()]
    };
    if !args.json {
        println!(
            "{:<13} {:<7} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}  cut_off",
            "scenario",
            "policy",
            "over_mean",
            "over_p99",
            "over_max",
            "util",
            "burst_1st",
            "part_max",
            "stale_p50",
            "stale_p99",
            "conv_ms",
            "B/key",
        );
    }
    if let Some(base) = from_file {
        let name = args
            .file
            .as_deref()
            .and_then(|f| f.file_stem())
            .map_or_else(|| "file".to_owned(), |s| s.to_string_lossy().into_owned());
        return run_both(&name, &base, args.json, args.report.as_deref());
    }
    for name in names {
        let Some(base) = scenario(name, args.seed, args.nodes) else {
            bail!("unknown scenario {name:?}; expected one of {SCENARIOS:?} or all");
        };
        let report = match (&args.report, args.scenario == "all") {
            (Some(dir), true) => Some(dir.join(name)),
            (dir, _) => dir.clone(),
        };
        run_both(name, &base, args.json, report.as_deref())?;
    }
    Ok(())
}

/// Runs `base` with limitmesh's admission (the scenario's own partition policy) and with the
/// naive baseline, and prints a row (or a JSON line) for each.
fn run_both(
    name: &str,
    base: &limitmesh_sim::SimConfig,
    json: bool,
    report_dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let mut done = Vec::new();
    let share = match base.policy {
        p @ Policy::DemandShare(_) => p,
        Policy::Ledger(partition) => Policy::DemandShare(partition),
        Policy::GlobalCount => Policy::DemandShare(PartitionPolicy::Strict),
    };
    for (label, policy) in [("share", share), ("naive", Policy::GlobalCount)] {
        let mut cfg = base.clone();
        cfg.policy = policy;
        let started = limitmesh::clock::monotonic_now();
        let outcome = run(&cfg)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("scenario {name} ({label})"))?;
        let wall = started.elapsed().as_secs_f64();
        eprintln!(
            "{name}/{label}: {:.1} s simulated in {wall:.1} s ({:.0}x)",
            cfg.duration_ms as f64 / 1e3,
            cfg.duration_ms as f64 / 1e3 / wall.max(1e-9)
        );
        let r = Report::new(&cfg, &outcome);
        done.push((label, cfg.clone(), outcome, r.clone()));
        let r = &done[done.len() - 1].3;
        if json {
            let mut v = serde_json::to_value(r)?;
            v["scenario"] = name.into();
            v["policy"] = label.into();
            println!("{v}");
        } else {
            println!(
                "{:<13} {:<7} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}  {}",
                name,
                label,
                fmt_pct(Some(r.over_admission_mean)),
                fmt_pct(Some(r.over_admission_p99)),
                fmt_pct(Some(r.over_admission_max)),
                fmt_pct(Some(r.utilization)),
                fmt_pct(r.burst_first_window_over),
                r.partition_max_ratio
                    .map_or_else(|| "-".into(), |v| format!("{v:.3}xL")),
                fmt_opt(r.staleness_p50_ms),
                fmt_opt(r.staleness_p99_ms),
                fmt_opt(r.convergence_ms),
                r.gossip_bytes_per_key_per_peer
                    .map_or_else(|| "-".into(), |v| format!("{v:.1}")),
                fmt_cut_off(&r.clock_cut_off),
            );
            // A row for each other descriptor: its window measures, the run's own beside
            // them left out.
            for d in &r.descriptors {
                println!(
                    "{:<13} {:<7} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9}",
                    format!("{name}/{}", d.name),
                    label,
                    fmt_pct(Some(d.over_admission_mean)),
                    fmt_pct(Some(d.over_admission_p99)),
                    fmt_pct(Some(d.over_admission_max)),
                    fmt_pct(Some(d.utilization)),
                    "-",
                    d.partition_max_ratio
                        .map_or_else(|| "-".into(), |v| format!("{v:.3}xL")),
                );
            }
        }
    }
    if let Some(dir) = report_dir {
        let runs: Vec<limitmesh_sim::plot::RunData<'_>> = done
            .iter()
            .map(
                |(label, cfg, outcome, report)| limitmesh_sim::plot::RunData {
                    label,
                    cfg,
                    outcome,
                    report,
                },
            )
            .collect();
        let page = limitmesh_sim::plot::write_report(dir, name, &runs)?;
        eprintln!("{name}: report written to {}", page.display());
    }
    Ok(())
}

/// Nodes cut off for their clocks: `node 1 (+15.0 s)`, or `-`.
fn fmt_cut_off(nodes: &[(usize, i64)]) -> String {
    if nodes.is_empty() {
        return "-".into();
    }
    nodes
        .iter()
        .map(|(n, off)| format!("node {n} ({:+.1} s)", *off as f64 / 1e3))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The largest fleet the full mesh is simulated for (its cost grows with the square of the
/// size).
const FULL_MESH_SIMULATED_UP_TO: usize = 200;

/// A fleet scenario on the in-process simulator: limitmesh's admission, the same with every
/// register sent to every member (the full mesh, where the size would use owners), and the
/// naive admission.
fn fleet(args: &Args) -> anyhow::Result<()> {
    if let Some(c) = args.credit
        && !(c.is_finite() && (0.0..=MAX_CREDIT_FROM_SUMS).contains(&c))
    {
        bail!("--credit {c}: expected a number of requests from 0 to {MAX_CREDIT_FROM_SUMS}");
    }
    let names: Vec<&str> = if args.scenario == "fleet-all" {
        FLEET_SCENARIOS.to_vec()
    } else {
        vec![args.scenario.as_str()]
    };
    if !args.json {
        println!(
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
        );
    }
    for name in names {
        let Some(base) = fleet_scenario(name, args.seed, args.nodes) else {
            bail!("unknown scenario {name:?}; expected one of {FLEET_SCENARIOS:?} or fleet-all");
        };
        let share = Policy::DemandShare(PartitionPolicy::Strict);
        let mut runs = vec![
            ("share", share, Dissemination::Auto),
            (
                "ledger",
                Policy::Ledger(PartitionPolicy::Strict),
                Dissemination::Auto,
            ),
            ("naive", Policy::GlobalCount, Dissemination::Auto),
        ];
        // Today's full mesh beside it, where it can be simulated in minutes.
        if base.nodes > FULL_MESH_UP_TO && base.nodes <= FULL_MESH_SIMULATED_UP_TO {
            runs.insert(1, ("mesh", share, Dissemination::FullMesh));
        }
        if let Some(only) = &args.only {
            runs.retain(|(label, _, _)| label == only);
        }
        for (label, policy, dissemination) in runs {
            let mut cfg = base.clone();
            if let Some(seconds) = args.seconds {
                cfg.duration_ms = seconds.max(20) * 1_000;
                for f in &mut cfg.faults {
                    if let limitmesh_sim::fleet::FleetFault::Crash { at_ms, .. } = f {
                        *at_ms = cfg.duration_ms * 3 / 4;
                    }
                }
            }
            cfg.policy = policy;
            cfg.dissemination = dissemination;
            if let Some(credit) = args.credit {
                cfg.credit_from_sums = credit;
            }
            let started = limitmesh::clock::monotonic_now();
            let r = limitmesh_sim::fleet::run(name, label, &cfg);
            let wall = started.elapsed().as_secs_f64();
            eprintln!(
                "{name}/{label}: {} nodes, {:.1} s simulated in {wall:.1} s",
                cfg.nodes,
                cfg.duration_ms as f64 / 1e3,
            );
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{:<18} {:<7} {:>6} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10.0} {:>10.0} {:>8.1} {:>8} {:>7}",
                    name,
                    label,
                    r.nodes,
                    fmt_pct(Some(r.over_admission_mean)),
                    fmt_pct(Some(r.over_admission_p99)),
                    fmt_pct(Some(r.over_admission_max)),
                    fmt_pct(Some(r.utilization)),
                    fmt_pct(Some(r.refused_below_limit)),
                    r.partition_max_ratio
                        .map_or_else(|| "-".into(), |v| format!("{v:.3}xL")),
                    fmt_opt(r.staleness_p50_ms),
                    fmt_opt(r.staleness_p99_ms),
                    r.gossip_bytes_per_node_per_s_mean,
                    r.gossip_bytes_per_node_per_s_max,
                    r.datagrams_per_node_per_s_mean,
                    fmt_opt(r.detection_ms),
                    fmt_opt(r.starved_windows_max),
                );
            }
        }
    }
    Ok(())
}
