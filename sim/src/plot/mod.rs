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
//! `chart.rs` holds what the pages draw with: the charts' style, shading, colours, histograms.

mod chart;
mod scenario;

pub use scenario::{RunData, write_report};
