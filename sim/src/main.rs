//! `limitmesh-sim <scenario> --seed N [--nodes N] [--json]`, or `limitmesh-sim run FILE --seed N
//! [--json]` for a scenario file: runs a scenario with limitmesh's admission policy and with
//! the naive baseline, and prints the measures side by side. The output depends only on the
//! arguments (wall-clock speed goes to stderr). The fleet simulator's: `limitmesh-sim fleet
//! ...` (its scenarios), `fleet-run FILE` (a fleet traffic file), `fleet-matrix` (a sweep of
//! traffic). `limitmesh-sim results`, from the repository's root, prints `docs/results.md`
//! from the JSON recorded under `docs/results/`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use limitmesh::limiter::{PartitionPolicy, Policy};
use limitmesh_sim::scenario::{SCENARIOS, scenario};
use limitmesh_sim::{Report, run};

// As in the service: a fleet run allocates for every datagram and register of a thousand
// nodes in one thread, where the allocator's speed is a large part of a run's time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The fleet simulator's commands (the binary's, not the library's).
mod cli {
    pub mod fleet;
    pub mod matrix;
}

#[derive(Debug, Parser)]
#[command(about = "Deterministic simulation of a limitmesh cluster")]
pub(crate) struct Args {
    /// steady, skewed, burst, burst-trickle, partition, restart, loss, loss36, loss40, loss-oneway,
    /// skew, skew500, rollback, skew8, skew-12, skew6x2, skew8-4, skew15, skew90, step5, pair3, or
    /// all; on the in-process simulator: fleet, fleet-fast-links, fleet-partition, fleet-churn,
    /// fleet-small-share, or fleet-all; `fleet-run` with a fleet traffic file (see
    /// sim/scenarios/fleet/); `fleet-matrix`, a sweep of traffic; or `run` with a scenario file
    /// (see sim/scenarios/); or `results`, which prints docs/results.md from the recorded JSON (run
    /// it from the repository's root)
    scenario: String,
    /// With `run` and `fleet-run`: the file (TOML).
    file: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Nodes (default 5; with fleet-run, the file's; with fleet-matrix, 40).
    #[arg(long)]
    nodes: Option<usize>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Write a page of plots of the run (share and naive) to DIR/index.html; with `all`, to
    /// DIR/<scenario>/index.html (fleet scenarios: the rows run).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Fleet scenarios: simulated seconds (default 60); fleet-matrix: seconds measured in
    /// each cell after its warm-up (default 20, at least a window).
    #[arg(long)]
    seconds: Option<u64>,
    /// Fleet runs: only these of share, mesh, ledger, naive (comma-separated; fleet-matrix:
    /// share,ledger by default).
    #[arg(long, value_name = "POLICIES")]
    only: Option<String>,
    /// fleet-matrix: run every cell under each of these faults (comma-separated: none, loss,
    /// partition, deploy; default none).
    #[arg(long, value_name = "FAULTS")]
    faults: Option<String>,
    /// fleet-matrix: only the cells whose name holds this (`o20-`, `-uall-`, `small`).
    #[arg(long, value_name = "TEXT")]
    cells: Option<String>,
    /// fleet-matrix: write each cell's traffic file to DIR (to rerun one with fleet-run).
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
    /// fleet-matrix: runs at once (default: the machine's cores).
    #[arg(long)]
    jobs: Option<usize>,
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

/// Refuses the options given that go with other commands than `command`.
pub(crate) fn refuse(command: &str, flags: &[(&str, bool)]) -> anyhow::Result<()> {
    match flags.iter().find(|(_, given)| *given) {
        Some((flag, _)) => bail!("{flag} does not go with {command}"),
        None => Ok(()),
    }
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
    let matrix_flags = [
        ("--faults", args.faults.is_some()),
        ("--cells", args.cells.is_some()),
        ("--write", args.write.is_some()),
        ("--jobs", args.jobs.is_some()),
    ];
    if args.scenario == "fleet-matrix" {
        return cli::matrix::run(&args);
    }
    refuse(&args.scenario, &matrix_flags)?;
    if args.scenario.starts_with("fleet") {
        return cli::fleet::run(&args);
    }
    refuse(
        "the turmoil scenarios (only the fleet runs take it)",
        &[
            ("--credit", args.credit.is_some()),
            ("--seconds", args.seconds.is_some()),
            ("--only", args.only.is_some()),
        ],
    )?;
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
        return run_policies(&name, &base, args.json, args.report.as_deref());
    }
    for name in names {
        let Some(base) = scenario(name, args.seed, args.nodes.unwrap_or(5)) else {
            bail!("unknown scenario {name:?}; expected one of {SCENARIOS:?} or all");
        };
        let report = match (&args.report, args.scenario == "all") {
            (Some(dir), true) => Some(dir.join(name)),
            (dir, _) => dir.clone(),
        };
        run_policies(name, &base, args.json, report.as_deref())?;
    }
    Ok(())
}

/// Runs `base` with limitmesh's two admissions (the scenario's own partition policy) and with
/// the naive baseline, and prints a row (or a JSON line) for each.
fn run_policies(
    name: &str,
    base: &limitmesh_sim::SimConfig,
    json: bool,
    report_dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let mut done = Vec::new();
    let partition = match base.policy {
        Policy::DemandShare(p) | Policy::Ledger(p) => p,
        Policy::GlobalCount => PartitionPolicy::Strict,
    };
    for (label, policy) in [
        ("share", Policy::DemandShare(partition)),
        ("ledger", Policy::Ledger(partition)),
        ("naive", Policy::GlobalCount),
    ] {
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
