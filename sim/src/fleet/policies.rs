//! The admissions a fleet run is compared under, each a row of the output named by its label:
//! `share` (limitmesh's demand share as configured: owner mode above 16 members), `mesh` (the
//! same with every register sent to every member, where the size would use owners), `ledger`
//! (tokens leased by each window's owner), `naive` (admit while the global estimate is under
//! the limit). `--only` picks rows by label; a label added here is known to every command.

use limitmesh::limiter::{PartitionPolicy, Policy};
use limitmesh::node::{Dissemination, FULL_MESH_UP_TO};

/// The largest fleet the full mesh is simulated for (its cost grows with the square of the
/// size).
pub const FULL_MESH_SIMULATED_UP_TO: usize = 200;

/// One admission to run a fleet under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyRow {
    pub label: &'static str,
    pub policy: Policy,
    pub dissemination: Dissemination,
}

const SHARE: Policy = Policy::DemandShare(PartitionPolicy::Strict);

/// Every row, in the order they are run and printed.
pub const POLICIES: [PolicyRow; 4] = [
    PolicyRow {
        label: "share",
        policy: SHARE,
        dissemination: Dissemination::Auto,
    },
    PolicyRow {
        label: "mesh",
        policy: SHARE,
        dissemination: Dissemination::FullMesh,
    },
    PolicyRow {
        label: "ledger",
        policy: Policy::Ledger(PartitionPolicy::Strict),
        dissemination: Dissemination::Auto,
    },
    PolicyRow {
        label: "naive",
        policy: Policy::GlobalCount,
        dissemination: Dissemination::Auto,
    },
];

/// Whether `row` is run on a fleet of `nodes`: the full mesh only where owner mode would be
/// used otherwise and the mesh can be simulated in minutes.
pub fn runs_at(row: &PolicyRow, nodes: usize) -> bool {
    row.dissemination != Dissemination::FullMesh
        || (nodes > FULL_MESH_UP_TO && nodes <= FULL_MESH_SIMULATED_UP_TO)
}

/// The labels of `--only` (comma-separated), checked: an unknown one is an error naming the
/// known ones.
pub fn parse_only(only: &str) -> Result<Vec<&'static str>, String> {
    only.split(',')
        .map(str::trim)
        .map(|label| {
            POLICIES
                .iter()
                .find(|r| r.label == label)
                .map(|r| r.label)
                .ok_or_else(|| {
                    let known: Vec<&str> = POLICIES.iter().map(|r| r.label).collect();
                    format!("--only {label:?}: expected one of {}", known.join(", "))
                })
        })
        .collect()
}

/// The rows run on a fleet of `nodes`: those of `only` (every one if `None`), in order.
pub fn rows(nodes: usize, only: Option<&[&str]>) -> Vec<PolicyRow> {
    POLICIES
        .iter()
        .filter(|r| only.is_none_or(|o| o.contains(&r.label)) && runs_at(r, nodes))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_picked_by_label_and_the_mesh_only_where_it_differs() {
        let labels = |rows: Vec<PolicyRow>| rows.iter().map(|r| r.label).collect::<Vec<_>>();
        assert_eq!(labels(rows(5, None)), ["share", "ledger", "naive"]);
        assert_eq!(labels(rows(50, None)), ["share", "mesh", "ledger", "naive"]);
        assert_eq!(labels(rows(1_000, None)), ["share", "ledger", "naive"]);
        let only = parse_only("ledger, share").unwrap();
        assert_eq!(labels(rows(50, Some(&only))), ["share", "ledger"]);
        let e = parse_only("share,leger").unwrap_err();
        assert!(e.contains("\"leger\"") && e.contains("ledger"), "{e}");
    }
}
