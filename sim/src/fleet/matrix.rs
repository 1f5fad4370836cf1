//! A matrix of traffic (`limitmesh-sim fleet-matrix`): the same fleet under every combination
//! of overload (1.1× to 20×), users per key (1 to 40), window (1 s to 60 s) and request cost
//! (1 and 5 units), plus a key every node shares whose limit is below the fleet's size (less
//! than a token a node), optionally under a fault (loss, a partition, a rolling deploy). A
//! rule tuned on one kind of traffic shows in the cells of another: the matrix reports each
//! cell and the worst.
//!
//! Each cell is a fleet traffic file (`cell.file()`), run as `fleet-run` runs one: the matrix
//! exercises the files' format, and `--write DIR` leaves them for a rerun of one cell.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use super::policies::PolicyRow;
use super::report::FleetReport;

/// Overloads of the matrix, as multiples of the limit.
pub const OVERLOADS: [f64; 5] = [1.1, 2.0, 5.0, 10.0, 20.0];
/// Nodes using each key (at most the fleet: 40 is every node of the default fleet).
pub const USERS: [usize; 4] = [1, 3, 10, 40];
pub const WINDOWS_MS: [u64; 3] = [1_000, 10_000, 60_000];
/// Units each request takes.
pub const COSTS: [u32; 2] = [1, 5];
/// The limit of the matrix's keys, in units per window.
pub const LIMIT: u32 = 1_000;
/// Warm-up at least this long (and at least a window).
const WARMUP_MS: u64 = 5_000;

/// A fault every cell can run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixFault {
    None,
    /// 20 % of datagrams lost, all run long.
    Loss,
    /// 60 % | 40 % over the middle half of the measured time.
    Partition,
    /// A fifth of the fleet replaced, one by one, over the first half of the measured time.
    Deploy,
}

impl MatrixFault {
    pub const ALL: [MatrixFault; 4] = [Self::None, Self::Loss, Self::Partition, Self::Deploy];

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Loss => "loss",
            Self::Partition => "partition",
            Self::Deploy => "deploy",
        }
    }

    /// The faults of `--faults` (comma-separated names), checked.
    pub fn parse_list(list: &str) -> Result<Vec<MatrixFault>, String> {
        list.split(',')
            .map(str::trim)
            .map(|name| {
                Self::ALL
                    .into_iter()
                    .find(|f| f.name() == name)
                    .ok_or_else(|| {
                        format!("--faults {name:?}: expected none, loss, partition or deploy")
                    })
            })
            .collect()
    }
}

/// The traffic of a cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CellTraffic {
    /// 8 keys of [`LIMIT`] units, half of them (every other) offered `overload` × L and the
    /// others L/2, each key used by `users` nodes.
    Keys {
        overload: f64,
        users: usize,
        window_ms: u64,
        cost: u32,
    },
    /// One key every node uses, of a limit half the fleet's size, at `overload` × L.
    SmallShare { overload: f64 },
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub traffic: CellTraffic,
    pub fault: MatrixFault,
    pub nodes: usize,
    /// Time measured after the warm-up, at least a window.
    pub measured_ms: u64,
}

/// `1.1` as `1.1`, `2.0` as `2`.
fn factor(v: f64) -> String {
    format!("{v}")
}

impl Cell {
    fn window_ms(&self) -> u64 {
        match self.traffic {
            CellTraffic::Keys { window_ms, .. } => window_ms,
            CellTraffic::SmallShare { .. } => 1_000,
        }
    }

    fn warmup_ms(&self) -> u64 {
        WARMUP_MS.max(self.window_ms())
    }

    fn duration_ms(&self) -> u64 {
        self.warmup_ms() + self.measured_ms.max(self.window_ms())
    }

    /// What the cell is, as a name: `o2-u10-w10s-c5`, `small-o2`, with `-<fault>` if any.
    pub fn name(&self) -> String {
        let mut name = match self.traffic {
            CellTraffic::Keys {
                overload,
                users,
                window_ms,
                cost,
            } => {
                let users = if users >= self.nodes {
                    "all".to_owned()
                } else {
                    users.to_string()
                };
                format!(
                    "o{}-u{users}-w{}s-c{cost}",
                    factor(overload),
                    window_ms / 1_000
                )
            }
            CellTraffic::SmallShare { overload } => format!("small-o{}", factor(overload)),
        };
        if self.fault != MatrixFault::None {
            let _ = write!(name, "-{}", self.fault.name());
        }
        name
    }

    /// The cell as a fleet traffic file.
    pub fn file(&self) -> String {
        let (warmup, duration) = (self.warmup_ms(), self.duration_ms());
        let measured = duration - warmup;
        let mut f = format!(
            "description = \"fleet-matrix cell {}\"\nnodes = {}\nduration_ms = {duration}\n\
             warmup_ms = {warmup}\n",
            self.name(),
            self.nodes
        );
        if self.fault == MatrixFault::Loss {
            f.push_str("\n[network]\nloss = 0.2\n");
        }
        match self.traffic {
            CellTraffic::Keys {
                overload,
                users,
                window_ms,
                cost,
            } => {
                let users = if users >= self.nodes {
                    "\"all\"".to_owned()
                } else {
                    users.to_string()
                };
                let _ = write!(
                    f,
                    "\n[[classes]]\nname = \"keys\"\nkeys = 8\nusers = {users}\nlimit = {LIMIT}\n\
                     window_ms = {window_ms}\nhits_addend = {cost}\noverload = {}\n\
                     overloaded_every = 2\nunderload = 0.5\n",
                    factor(overload)
                );
            }
            CellTraffic::SmallShare { overload } => {
                let _ = write!(
                    f,
                    "\n[[classes]]\nname = \"shared\"\nkeys = 1\nusers = \"all\"\nlimit = {}\n\
                     overload = {}\n",
                    (self.nodes / 2).max(1),
                    factor(overload)
                );
            }
        }
        match self.fault {
            MatrixFault::None | MatrixFault::Loss => {}
            MatrixFault::Partition => {
                let _ = write!(
                    f,
                    "\n[[faults]]\nkind = \"partition\"\nfraction = 0.6\nfrom_ms = {}\n\
                     until_ms = {}\n",
                    warmup + measured / 4,
                    warmup + measured * 3 / 4
                );
            }
            MatrixFault::Deploy => {
                let _ = write!(
                    f,
                    "\n[[faults]]\nkind = \"rolling-deploy\"\nshare = 0.2\nfrom_ms = {warmup}\n\
                     over_ms = {}\n",
                    measured / 2
                );
            }
        }
        f
    }
}

/// Every cell on `nodes` nodes, `measured_ms` measured each (at least a window), under each
/// of `faults`: the grid of overload × users × window × cost, then the small shares at each
/// overload.
pub fn cells(nodes: usize, measured_ms: u64, faults: &[MatrixFault]) -> Vec<Cell> {
    let mut out = Vec::new();
    for &fault in faults {
        let cell = |traffic| Cell {
            traffic,
            fault,
            nodes,
            measured_ms,
        };
        for overload in OVERLOADS {
            for users in USERS {
                for window_ms in WINDOWS_MS {
                    for cost in COSTS {
                        out.push(cell(CellTraffic::Keys {
                            overload,
                            users,
                            window_ms,
                            cost,
                        }));
                    }
                }
            }
        }
        for overload in OVERLOADS {
            out.push(cell(CellTraffic::SmallShare { overload }));
        }
    }
    out
}

/// Runs every cell under every row of `policies` on `jobs` threads, each from the cell's file
/// with `seed`, and says on stderr how long each took; hands each report to `done` in order
/// (cell by cell, then by policy) once it and every one before it are done.
pub fn run(
    cells: &[Cell],
    policies: &[PolicyRow],
    seed: u64,
    jobs: usize,
    mut done: impl FnMut(&Cell, FleetReport),
) -> anyhow::Result<()> {
    let mut configs = Vec::with_capacity(cells.len());
    for cell in cells {
        configs.push(super::file::parse(&cell.name(), &cell.file(), seed, None)?);
    }
    let tasks = cells.len() * policies.len();
    let next = AtomicUsize::new(0);
    let (send, receive) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, tasks.max(1)) {
            let send = send.clone();
            let (next, configs) = (&next, &configs);
            scope.spawn(move || {
                loop {
                    let taken = next.fetch_add(1, Ordering::Relaxed);
                    if taken >= tasks {
                        break;
                    }
                    // The last cells first: the larger overloads, the longest runs, so that
                    // no long run is left alone at the end.
                    let task = tasks - 1 - taken;
                    let (c, p) = (task / policies.len(), task % policies.len());
                    let row = &policies[p];
                    let mut cfg = configs[c].clone();
                    (cfg.policy, cfg.dissemination) = (row.policy, row.dissemination);
                    let started = limitmesh::clock::monotonic_now();
                    let report = super::run(&cells[c].name(), row.label, &cfg);
                    eprintln!(
                        "{}/{}: {:.1} s",
                        cells[c].name(),
                        row.label,
                        started.elapsed().as_secs_f64()
                    );
                    if send.send((task, report)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(send);
        let mut waiting = std::collections::BTreeMap::new();
        let mut due = 0;
        for (task, report) in receive {
            waiting.insert(task, report);
            while let Some(report) = waiting.remove(&due) {
                done(&cells[due / policies.len()], report);
                due += 1;
            }
        }
    });
    Ok(())
}

fn pct(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

/// The header of the matrix's lines.
pub fn header() -> String {
    format!(
        "{:<26} {:<7} {:>9} {:>9} {:>8} {:>9} {:>8}",
        "cell", "policy", "over_mean", "over_max", "util", "refused<L", "ceiling"
    )
}

/// A cell's line for one admission, with the per-node ceiling of its keys.
pub fn line(r: &FleetReport) -> String {
    format!(
        "{:<26} {:<7} {:>9} {:>9} {:>8} {:>9} {:>8}",
        r.scenario,
        r.policy,
        pct(r.over_admission_mean),
        pct(r.over_admission_max),
        pct(r.utilization),
        pct(r.refused_below_limit),
        // A cell has one key class: the per-node ceiling of its keys.
        r.per_node_ceiling_by_class
            .0
            .first()
            .map_or_else(|| "-".into(), |(_, c)| pct(*c))
    )
}

/// For each admission of `reports`: the cell of the largest over-admission (the busiest
/// window; the mean breaks ties), the cell of the lowest utilization, and the cell of the most
/// refusals below the limit.
pub fn worst(reports: &[FleetReport]) -> Vec<String> {
    let mut policies: Vec<&str> = Vec::new();
    for r in reports {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let mut out = Vec::new();
    for policy in policies {
        let of = || reports.iter().filter(move |r| r.policy == policy);
        let by = |a: f64, b: f64| a.total_cmp(&b);
        let over = of().max_by(|a, b| {
            by(a.over_admission_max, b.over_admission_max)
                .then(by(a.over_admission_mean, b.over_admission_mean))
        });
        let util = of().min_by(|a, b| by(a.utilization, b.utilization));
        let refused = of().max_by(|a, b| by(a.refused_below_limit, b.refused_below_limit));
        if let (Some(o), Some(u), Some(r)) = (over, util, refused) {
            out.push(format!(
                "worst {policy}: over-admission {} (max {}, mean {}); utilization {} ({}); \
                 refused below the limit {} ({})",
                o.scenario,
                pct(o.over_admission_max),
                pct(o.over_admission_mean),
                u.scenario,
                pct(u.utilization),
                r.scenario,
                pct(r.refused_below_limit)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{FleetFault, Load, Users, file};

    #[test]
    fn the_matrix_covers_every_combination_and_each_cell_is_a_valid_file() {
        let cells = cells(40, 20_000, &[MatrixFault::None, MatrixFault::Partition]);
        assert_eq!(cells.len(), 2 * (5 * 4 * 3 * 2 + 5));
        let mut names: Vec<String> = cells.iter().map(Cell::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), cells.len(), "every cell has a name of its own");
        for cell in &cells {
            let cfg = file::parse(&cell.name(), &cell.file(), 1, None)
                .unwrap_or_else(|e| panic!("{}: {e:#}\n{}", cell.name(), cell.file()));
            let class = &cfg.traffic.classes[0];
            assert_eq!(cfg.nodes, 40);
            // A window is measured in full, for at least the time asked.
            assert!(cfg.duration_ms - cfg.warmup_ms >= 20_000.max(class.window_ms));
            assert!(cfg.warmup_ms >= class.window_ms);
            match cell.traffic {
                CellTraffic::Keys {
                    overload,
                    users,
                    window_ms,
                    cost,
                } => {
                    assert_eq!(
                        (class.window_ms, class.cost, &class.overload),
                        (window_ms, cost, &Load::Constant(overload))
                    );
                    let expected = if users >= 40 {
                        Users::All
                    } else {
                        Users::Count(users)
                    };
                    assert_eq!(class.users, expected, "{}", cell.name());
                }
                CellTraffic::SmallShare { .. } => {
                    assert!(class.limit < 40, "less than a token a node");
                }
            }
            let partitioned = cfg
                .faults
                .iter()
                .any(|f| matches!(f, FleetFault::Partition { .. }));
            assert_eq!(partitioned, cell.fault == MatrixFault::Partition);
        }
    }
}
