//! `limitmesh-sim results`: the page of every figure the project claims (`docs/results.md`),
//! generated from what the simulators and benchmarks printed as JSON.
//!
//! `scripts/record-results.sh` runs each command and keeps its JSON lines under
//! `docs/results/`, one file per command, in a [`Recording`] that adds the command, the
//! commit and the machine. [`render`] turns those files into the page; nothing on the page
//! is written by hand, so a figure cannot be quoted without the run that made it, and a test
//! regenerates the page and compares it byte for byte.

mod benches;
mod fleet;
mod format;
mod scenarios;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

/// Where the recordings and the scenario files live, relative to the repository's root.
pub const RESULTS_DIR: &str = "docs/results";
pub const SCENARIOS_DIR: &str = "sim/scenarios";

/// What a recorded command measured, which decides the section it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `limitmesh-sim <scenario|all> --json`: one [`crate::Report`] a line.
    Scenarios,
    /// `limitmesh-sim fleet... --json`: one [`crate::fleet::FleetReport`] a line.
    Fleet,
    /// `cargo bench --bench hot_path_ratio`, its table as JSON lines.
    HotPath,
    /// `limitmesh bench --json`.
    GrpcBench,
    /// `cargo test --release --test memory`, its figure as a JSON line.
    Memory,
}

/// One recorded command: what ran, where, and the JSON it printed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    pub kind: Kind,
    pub command: String,
    /// The commit the command ran at (with `+ local changes` when the tree differed from it).
    pub commit: String,
    /// CPU, cores and kernel.
    pub machine: String,
    pub rustc: String,
    /// The day it ran (UTC).
    pub recorded: String,
    /// Wall time of the whole command.
    pub wall_seconds: f64,
    pub output: Vec<serde_json::Value>,
    /// The file it was read from (not in the JSON).
    #[serde(skip)]
    pub file: PathBuf,
}

impl Recording {
    /// The line under a section that says what ran where.
    fn provenance(&self) -> String {
        let file = self
            .file
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        format!(
            "Recorded by `{}` at commit `{}` on {} ({}), {}; the command took {:.0} s, a \
             build included if one was needed. JSON: [`{file}`](results/{file}).",
            self.command, self.commit, self.recorded, self.machine, self.rustc, self.wall_seconds
        )
    }

    /// Each line of the output as `T`, with the file and line named when one does not fit.
    fn rows<T: serde::de::DeserializeOwned>(&self) -> anyhow::Result<Vec<T>> {
        self.output
            .iter()
            .enumerate()
            .map(|(i, v)| {
                T::deserialize(v)
                    .with_context(|| format!("{}: output line {}", self.file.display(), i + 1))
            })
            .collect()
    }
}

/// Reads every `*.json` of `dir`, in the order of their names.
pub fn load(dir: &Path) -> anyhow::Result<Vec<Recording>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot list the recordings", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: cannot list the recordings", dir.display()))?;
    files.retain(|f| f.extension().is_some_and(|e| e == "json"));
    files.sort();
    if files.is_empty() {
        bail!("{}: no recordings (*.json)", dir.display());
    }
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("{}: cannot read", file.display()))?;
            let mut r: Recording = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a recording", file.display()))?;
            r.file = file;
            Ok(r)
        })
        .collect()
}

/// Scenario descriptions from the scenario files (`description = "..."`), by name.
fn scenario_descriptions(dir: &Path) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    #[derive(Deserialize)]
    struct Head {
        description: Option<String>,
    }
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        // Only the description is wanted: the rest of the file is the scenario's business.
        let value: toml::Table =
            toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        let head = Head::deserialize(toml::Value::Table(value))
            .with_context(|| format!("{}: description", path.display()))?;
        if let (Some(stem), Some(d)) = (path.file_stem(), head.description) {
            out.insert(stem.to_string_lossy().into_owned(), d);
        }
    }
    Ok(out)
}

/// The whole page, from the recordings in `root/docs/results` and the scenario descriptions
/// in `root/sim/scenarios`.
pub fn render(root: &Path) -> anyhow::Result<String> {
    let recordings = load(&root.join(RESULTS_DIR))?;
    let descriptions = scenario_descriptions(&root.join(SCENARIOS_DIR))?;
    let mut page = String::new();
    page.push_str(HEAD);
    let of =
        |kind: Kind| -> Vec<&Recording> { recordings.iter().filter(|r| r.kind == kind).collect() };
    scenarios::section(&mut page, &of(Kind::Scenarios), &descriptions)?;
    fleet::scenarios(&mut page, &of(Kind::Fleet))?;
    fleet::sizes(&mut page, &of(Kind::Fleet))?;
    benches::hot_path(&mut page, &of(Kind::HotPath))?;
    benches::grpc_bench(&mut page, &of(Kind::GrpcBench))?;
    benches::memory(&mut page, &of(Kind::Memory))?;
    Ok(page)
}

const HEAD: &str = "\
<!-- Generated by `cargo run -p limitmesh-sim -- results` from docs/results/*.json: do not edit.
     Re-record with scripts/record-results.sh. -->

# Results

Every figure limitmesh claims, generated from the JSON its simulators and benchmarks print,
which is kept under [`results/`](results/) with the command, the commit and the machine of
each run. What the tests hold every build to (the bounds) is in the README's
[guarantees](../README.md#what-it-promises); this page is what one run measured.

To measure again: `scripts/record-results.sh` runs every command below, writes its JSON and
regenerates this page (`scripts/record-results.sh sim` for the simulations alone, which need
no quiet machine). A test (`sim/tests/docs.rs`) fails when this page differs from what the
generator makes of the recorded JSON. All simulations are deterministic: the same command at
the same commit prints the same JSON. Benchmarks are ratios measured in one run on a machine
that may be shared and noisy.

- [Scenarios: five nodes on turmoil](#scenarios-five-nodes-on-turmoil)
- [Fleets: the in-process simulator](#fleets-the-in-process-simulator)
- [Fleets by size](#fleets-by-size)
- [Hot path against governor](#hot-path-against-governor)
- [gRPC against a no-op service](#grpc-against-a-no-op-service)
- [Memory per key](#memory-per-key)
";
