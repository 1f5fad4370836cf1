//! Reports a person would rather look at than read: `--report DIR` writes `DIR/index.html`, one
//! self-contained page (the plots are inline SVG, drawn with `plotters`; each is also written as
//! an SVG file of its own).
//!
//! For a turmoil scenario (`scenario.rs`), run with limitmesh's admission and with the naive
//! one, side by side:
//!
//! - admitted per sliding window over time against the limit, stacked by node, with the
//!   faults shaded on the time axis (partitions, crashes and restarts, clock steps): one plot
//!   for each limited descriptor of the run;
//! - the members each node sees up over time (a partition is two groups of lines);
//! - how stale a node's view of another's admissions was (a histogram), when measured;
//! - the measures of the run in a table.
//!
//! For a fleet run (`fleet.rs`), under each admission run: admitted per sliding window against
//! the limit for the busiest keys of each class, faults shaded; how far over the limit its
//! windows went (a histogram); the bytes each node sent per second over the run; staleness;
//! and the measures in a table.
//!
//! `chart.rs` holds what both draw with: the charts' style, shading, colours, histograms.

mod chart;
mod fleet;
mod scenario;

pub use fleet::{FleetRunData, write_fleet_report};
pub use scenario::{RunData, write_report};
