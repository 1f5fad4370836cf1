//! What every section of the results page shares: how figures are written, table rows, and
//! the line that says where a recording comes from.

use std::fmt::Write as _;

use super::Recording;

/// No-break space: a figure and its unit stay on one line in a narrow column.
pub(super) const NBSP: char = '\u{a0}';

/// `0.0123` as `1.23 %`.
pub(super) fn pct(v: f64) -> String {
    format!("{:.2}{NBSP}%", v * 100.0)
}

/// A window's admissions over its limit, `1.012 × L`.
pub(super) fn times_l(v: f64) -> String {
    format!("{v:.3}{NBSP}×{NBSP}L")
}

pub(super) fn row(page: &mut String, cells: &[String]) {
    let _ = writeln!(page, "| {} |", cells.join(" | "));
}

pub(super) fn header(page: &mut String, cells: &[&str]) {
    let _ = writeln!(page, "| {} |", cells.join(" | "));
    let _ = writeln!(page, "|{}", "---|".repeat(cells.len()));
}

pub(super) fn provenance(page: &mut String, recordings: &[&Recording]) {
    for r in recordings {
        let _ = writeln!(page, "\n{}", r.provenance());
    }
}

pub(super) fn none_recorded(page: &mut String) {
    page.push_str("\nNothing recorded.\n");
}
