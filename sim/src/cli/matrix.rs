//! `fleet-matrix`: the fleet simulator over a matrix of traffic.

use std::path::Path;

use anyhow::{Context, bail};
use limitmesh_sim::fleet::matrix::{self, MatrixFault};
use limitmesh_sim::fleet::policies;

use super::fleet::only;
use crate::{Args, refuse};

/// The matrix of traffic: every cell under each admission of `--only` (share and ledger by
/// default), a line each, then the worst cell of each admission.
pub fn run(args: &Args) -> anyhow::Result<()> {
    refuse(
        "fleet-matrix",
        &[
            ("a file", args.file.is_some()),
            ("--report", args.report.is_some()),
            ("--credit", args.credit.is_some()),
        ],
    )?;
    let only = only(args)?.unwrap_or_else(|| vec!["share", "ledger"]);
    let faults = MatrixFault::parse_list(args.faults.as_deref().unwrap_or("none"))
        .map_err(|e| anyhow::anyhow!(e))?;
    let nodes = args.nodes.unwrap_or(40);
    let seconds = args.seconds.unwrap_or(20).clamp(1, 3_600);
    let mut cells = matrix::cells(nodes, seconds * 1_000, &faults);
    if let Some(text) = &args.cells {
        cells.retain(|c| c.name().contains(text.as_str()));
    }
    if cells.is_empty() {
        bail!("no cell of the matrix matches --cells");
    }
    if let Some(dir) = &args.write {
        write_cells(dir, &cells)?;
    }
    let rows = policies::rows(nodes, Some(&only));
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    eprintln!(
        "fleet-matrix: {} cells × {} admissions on {nodes} nodes, {jobs} at once",
        cells.len(),
        rows.len()
    );
    if !args.json {
        println!("{}", matrix::header());
    }
    let mut reports = Vec::new();
    let mut failed = None;
    matrix::run(&cells, &rows, args.seed, jobs, |_, r| {
        let line = if args.json {
            serde_json::to_string(&r).map_err(anyhow::Error::from)
        } else {
            Ok(matrix::line(&r))
        };
        match line {
            Ok(line) => println!("{line}"),
            Err(e) => failed = Some(e),
        }
        reports.push(r);
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    for line in matrix::worst(&reports) {
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    Ok(())
}

/// Writes each cell's traffic file to `dir`.
fn write_cells(dir: &Path, cells: &[matrix::Cell]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for cell in cells {
        let path = dir.join(format!("{}.toml", cell.name()));
        std::fs::write(&path, cell.file())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("fleet-matrix: the cells' files are in {}", dir.display());
    Ok(())
}
