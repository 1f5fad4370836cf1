//! `fleet`, `fleet-all` and `fleet-run FILE`: fleet runs on the in-process simulator, a
//! row for each admission, and their report.

use anyhow::bail;
use limitmesh::limiter::MAX_CREDIT_FROM_SUMS;
use limitmesh_sim::fleet::policies::{self, PolicyRow};
use limitmesh_sim::fleet::{FLEET_SCENARIOS, FleetConfig, FleetFault, fleet_scenario, table};

use crate::Args;

/// The fleet runs of `args`: a file's (named by its stem), or the built-in scenarios'.
fn fleet_configs(args: &Args) -> anyhow::Result<Vec<(String, FleetConfig)>> {
    if args.scenario == "fleet-run" {
        let Some(file) = &args.file else {
            bail!("fleet-run: which fleet traffic file? (limitmesh-sim fleet-run FILE --seed N)");
        };
        if args.seconds.is_some() {
            bail!("--seconds does not go with fleet-run: the file gives duration_ms");
        }
        let cfg = limitmesh_sim::fleet::file::load(file, args.seed, args.nodes)?;
        let name = file.file_stem().map_or_else(
            || "fleet-file".to_owned(),
            |s| s.to_string_lossy().into_owned(),
        );
        return Ok(vec![(name, cfg)]);
    }
    if let Some(extra) = &args.file {
        bail!(
            "unexpected argument {} (a file goes with `fleet-run`)",
            extra.display()
        );
    }
    let names: Vec<&str> = if args.scenario == "fleet-all" {
        FLEET_SCENARIOS.to_vec()
    } else {
        vec![args.scenario.as_str()]
    };
    let mut configs = Vec::new();
    for name in names {
        let Some(mut cfg) = fleet_scenario(name, args.seed, args.nodes.unwrap_or(5)) else {
            bail!(
                "unknown scenario {name:?}; expected one of {FLEET_SCENARIOS:?}, fleet-all or \
                 fleet-run FILE"
            );
        };
        if let Some(seconds) = args.seconds {
            cfg.duration_ms = seconds.clamp(20, 3 * 3_600) * 1_000;
            for f in &mut cfg.faults {
                if let FleetFault::Crash { at_ms, .. } = f {
                    *at_ms = cfg.duration_ms * 3 / 4;
                }
            }
        }
        limitmesh_sim::fleet::check_size(&cfg).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        configs.push((name.to_owned(), cfg));
    }
    Ok(configs)
}

/// The rows of `--only`, or every row.
pub fn only(args: &Args) -> anyhow::Result<Option<Vec<&'static str>>> {
    args.only
        .as_deref()
        .map(policies::parse_only)
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))
}

/// A fleet run on the in-process simulator (a built-in scenario, or a file's), under each
/// admission of `--only` (every one by default: limitmesh's, the same as a full mesh where
/// the size would use owners, the ledger, the naive one).
pub fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(c) = args.credit
        && !(c.is_finite() && (0.0..=MAX_CREDIT_FROM_SUMS).contains(&c))
    {
        bail!("--credit {c}: expected a number of requests from 0 to {MAX_CREDIT_FROM_SUMS}");
    }
    let only = only(args)?;
    let configs = fleet_configs(args)?;
    if !args.json {
        println!("{}", table::header());
    }
    let several = configs.len() > 1;
    for (name, base) in configs {
        let rows = policies::rows(base.nodes, only.as_deref());
        for label in only.iter().flatten() {
            if !rows.iter().any(|r| r.label == *label) {
                eprintln!(
                    "{name}/{label}: not run at {} nodes (the full mesh: from {} to {})",
                    base.nodes,
                    limitmesh::node::FULL_MESH_UP_TO + 1,
                    policies::FULL_MESH_SIMULATED_UP_TO
                );
            }
        }
        let mut traced = Vec::new();
        for PolicyRow {
            label,
            policy,
            dissemination,
        } in rows
        {
            let mut cfg = base.clone();
            cfg.policy = policy;
            cfg.dissemination = dissemination;
            if let Some(credit) = args.credit {
                cfg.credit_from_sums = credit;
            }
            let started = limitmesh::clock::monotonic_now();
            let (r, trace) = if args.report.is_some() {
                let (r, trace) = limitmesh_sim::fleet::run_traced(&name, label, &cfg);
                (r, Some(trace))
            } else {
                (limitmesh_sim::fleet::run(&name, label, &cfg), None)
            };
            let wall = started.elapsed().as_secs_f64();
            eprintln!(
                "{name}/{label}: {} nodes, {:.1} s simulated in {wall:.1} s",
                cfg.nodes,
                cfg.duration_ms as f64 / 1e3,
            );
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("{}", table::row(&r));
                for line in table::classes(&r) {
                    println!("{line}");
                }
            }
            if let Some(trace) = trace {
                traced.push((label, r, trace));
            }
        }
        if let Some(dir) = &args.report {
            let dir = if several {
                dir.join(&name)
            } else {
                dir.clone()
            };
            let runs: Vec<limitmesh_sim::plot::FleetRunData<'_>> = traced
                .iter()
                .map(|(label, report, trace)| limitmesh_sim::plot::FleetRunData {
                    label,
                    report,
                    trace,
                })
                .collect();
            let page = limitmesh_sim::plot::write_fleet_report(&dir, &name, &base, &runs)?;
            eprintln!("{name}: report written to {}", page.display());
        }
    }
    Ok(())
}
