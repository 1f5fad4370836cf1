//! The page of a turmoil run (`--report DIR`): for a scenario run with limitmesh's admission
//! and with the naive one, side by side, admitted per sliding window against the limit stacked
//! by node, the members each node sees up, staleness, and the measures in a table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;

use super::chart::{
    HEIGHT, WIDTH, esc, file_safe, legend, new_chart, page_head, pct, plot_error, series_color,
    shade_spans, staleness_svg,
};
use crate::cluster::{Fault, Outcome, SimConfig};
use crate::report::Report;

/// One run of a scenario: its admission policy's label and what it recorded.
#[derive(Debug, Clone, Copy)]
pub struct RunData<'a> {
    pub label: &'a str,
    pub cfg: &'a SimConfig,
    pub outcome: &'a Outcome,
    pub report: &'a Report,
}

/// Where the plotted window's sums are taken (ms).
const STEP_MS: usize = 50;

/// Per node, requests admitted in the window of `window_ms` ending at each step.
fn window_sums(by_node: &[Vec<u32>], window_ms: usize) -> (Vec<f64>, Vec<Vec<u32>>) {
    let len = by_node.first().map_or(0, Vec::len);
    let mut times = Vec::new();
    let mut sums = vec![Vec::new(); by_node.len()];
    let prefix: Vec<Vec<u64>> = by_node
        .iter()
        .map(|ms| {
            let mut p = Vec::with_capacity(ms.len() + 1);
            p.push(0u64);
            for v in ms {
                p.push(p[p.len() - 1] + u64::from(*v));
            }
            p
        })
        .collect();
    let mut end = window_ms.min(len);
    while end <= len && end > 0 {
        times.push(end as f64 / 1000.0);
        for (n, p) in prefix.iter().enumerate() {
            sums[n].push(u32::try_from(p[end] - p[end - window_ms.min(end)]).unwrap_or(u32::MAX));
        }
        end += STEP_MS;
    }
    (times, sums)
}

/// The faults of `cfg` as shaded spans (seconds) with a name, for the time axis.
fn fault_spans(cfg: &SimConfig) -> Vec<(f64, f64, String)> {
    let end = cfg.duration_ms as f64 / 1000.0;
    let s = |ms: u64| ms as f64 / 1000.0;
    let mut spans = Vec::new();
    for f in &cfg.faults {
        match f {
            Fault::Partition {
                side,
                from_ms,
                until_ms,
            } => spans.push((s(*from_ms), s(*until_ms), format!("partition {side:?}"))),
            Fault::Crash {
                node,
                at_ms,
                restart_ms,
            } => {
                // `restart_ms` is a time of the run, like `at_ms`.
                let back = restart_ms.map_or(end, |r| s(r).min(end));
                spans.push((
                    s(*at_ms),
                    back.max(s(*at_ms) + 0.2),
                    format!("node {node} down"),
                ));
            }
            Fault::ClockStep { node, at_ms, by_ms } => spans.push((
                s(*at_ms),
                s(*at_ms) + 0.2,
                format!("node {node} clock {by_ms:+} ms"),
            )),
            Fault::Loss {
                p,
                from_ms: Some(from),
                until_ms,
            } => spans.push((
                s(*from),
                until_ms.map_or(end, s),
                format!("{:.0} % loss", p * 100.0),
            )),
            // All-run faults are named in the title, not shaded.
            Fault::Loss { .. }
            | Fault::LossOneWay { .. }
            | Fault::Duplication { .. }
            | Fault::Skew { .. } => {}
        }
    }
    spans
}

/// The all-run faults, in words.
fn standing_faults(cfg: &SimConfig) -> String {
    let words: Vec<String> = cfg
        .faults
        .iter()
        .filter_map(|f| match f {
            Fault::Loss {
                p, from_ms: None, ..
            } => Some(format!("{:.0} % loss", p * 100.0)),
            Fault::LossOneWay { from, to, p } => {
                Some(format!("{:.0} % loss {from}→{to}", p * 100.0))
            }
            Fault::Duplication { p } => Some(format!("{:.0} % duplication", p * 100.0)),
            Fault::Skew { node, ms } => Some(format!("node {node} clock {ms:+} ms")),
            _ => None,
        })
        .collect();
    words.join(", ")
}

/// One limited descriptor of a run, as a plot shows it.
struct Plotted<'a> {
    /// Its name, when the run limits more than one.
    name: Option<&'a str>,
    admitted_by_node: &'a [Vec<u32>],
    limit: u32,
    window_ms: u64,
}

/// The limited descriptors of `run`: the main one, then the others in order.
fn plotted<'a>(run: &RunData<'a>) -> Vec<Plotted<'a>> {
    let cfg = run.cfg;
    let several = !cfg.descriptors.is_empty();
    let main = Plotted {
        name: several.then(|| cfg.main_name.as_deref().unwrap_or("main limit")),
        admitted_by_node: &run.outcome.admitted_by_node,
        limit: cfg.limit,
        window_ms: cfg.window_ms,
    };
    let others = cfg
        .descriptors
        .iter()
        .zip(&run.outcome.descriptors)
        .map(|(d, series)| Plotted {
            name: Some(&d.name),
            admitted_by_node: &series.admitted_by_node,
            limit: d.limit,
            window_ms: d.window_ms,
        });
    std::iter::once(main).chain(others).collect()
}

/// Admitted per sliding window on one descriptor, stacked by node, against its limit, faults
/// shaded.
fn admitted_svg(name: &str, run: &RunData<'_>, what: &Plotted<'_>) -> anyhow::Result<String> {
    let cfg = run.cfg;
    let window = what.window_ms as usize;
    let (times, sums) = window_sums(what.admitted_by_node, window);
    let total_max = (0..times.len())
        .map(|i| sums.iter().map(|s| u64::from(s[i])).sum::<u64>())
        .max()
        .unwrap_or(0);
    let y_max = (total_max.max(u64::from(what.limit)) as f64 * 1.15).max(1.0);
    let x_max = cfg.duration_ms as f64 / 1000.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let standing = standing_faults(cfg);
        let subject = what
            .name
            .map_or_else(|| name.to_owned(), |d| format!("{name}, {d}"));
        let title = if standing.is_empty() {
            format!("{subject}: {} ({} nodes)", run.label, cfg.nodes)
        } else {
            format!("{subject}: {} ({} nodes; {standing})", run.label, cfg.nodes)
        };
        let y_desc = format!("admitted per {} ms window", what.window_ms);
        let mut chart = new_chart(
            &root,
            title,
            (0.0..x_max, "time (s)"),
            (0.0..y_max, &y_desc),
            10,
        )?;
        shade_spans(&mut chart, &fault_spans(cfg), y_max, true)?;
        // Stacked: node n's area runs from the sum of nodes below it to that plus its own.
        let mut below = vec![0u64; times.len()];
        for (n, own) in sums.iter().enumerate() {
            let top: Vec<u64> = below
                .iter()
                .zip(own)
                .map(|(b, o)| b + u64::from(*o))
                .collect();
            let color = series_color(n);
            let upper = times.iter().zip(&top).map(|(t, v)| (*t, *v as f64));
            let lower = times.iter().zip(&below).rev().map(|(t, v)| (*t, *v as f64));
            let outline: Vec<(f64, f64)> = upper.chain(lower).collect();
            chart
                .draw_series(std::iter::once(Polygon::new(
                    outline,
                    color.mix(0.55).filled(),
                )))
                .map_err(plot_error)?
                .label(format!("node {n}"))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
            below = top;
        }
        let limit = f64::from(what.limit);
        chart
            .draw_series(LineSeries::new(
                [(0.0, limit), (x_max, limit)],
                BLACK.stroke_width(2),
            ))
            .map_err(plot_error)?
            .label(format!("limit ({})", what.limit))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
        legend(&mut chart)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// The members each node sees up over time, faults shaded.
fn members_svg(run: &RunData<'_>) -> anyhow::Result<Option<String>> {
    let samples = &run.outcome.live_samples;
    if samples.is_empty() {
        return Ok(None);
    }
    let cfg = run.cfg;
    let x_max = cfg.duration_ms as f64 / 1000.0;
    let y_max = cfg.nodes as f64 + 0.5;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 260)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = new_chart(
            &root,
            format!("members each node sees up, {}", run.label),
            (0.0..x_max, "time (s)"),
            (0.0..y_max, "members"),
            // Whole members only: labels at halves would print as the same number twice.
            (cfg.nodes + 1).min(10),
        )?;
        shade_spans(&mut chart, &fault_spans(cfg), y_max, false)?;
        for n in 0..cfg.nodes {
            // Nodes that see the same count would hide each other: each is nudged a little.
            let nudge = (n as f64 - cfg.nodes as f64 / 2.0) * 0.04;
            let color = series_color(n);
            chart
                .draw_series(LineSeries::new(
                    samples.iter().map(|(t, live)| {
                        (
                            *t as f64 / 1000.0,
                            live.get(n).copied().unwrap_or(0) as f64 + nudge,
                        )
                    }),
                    color.stroke_width(2),
                ))
                .map_err(plot_error)?
                .label(format!("node {n}"))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 12, y)], color.stroke_width(2))
                });
        }
        legend(&mut chart)?;
        root.present().map_err(plot_error)?;
    }
    Ok(Some(svg))
}

/// Writes `dir/index.html` for scenario `name`, and each run's plot as
/// `dir/<name>-<label>.svg`; returns the page's path.
pub fn write_report(dir: &Path, name: &str, runs: &[RunData<'_>]) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut html = page_head(name);
    if let Some(first) = runs.first() {
        let c = first.cfg;
        let _ = write!(
            html,
            "<p>Seed {}, {} nodes, a limit of {} per {} ms window ({} buckets), {}–{} ms \
             latency, {} ms gossip, {:.1} s simulated; windows measured from {:.1} s.</p>",
            c.seed,
            c.nodes,
            c.limit,
            c.window_ms,
            c.buckets,
            c.min_latency_ms,
            c.max_latency_ms,
            c.gossip_interval_ms,
            c.duration_ms as f64 / 1e3,
            c.warmup_ms as f64 / 1e3
        );
    }
    html.push_str(
        "<table><tr><th>policy</th><th>over-admission mean</th><th>p99</th><th>max</th>\
         <th>utilization</th><th>busiest window in a partition</th><th>staleness p99</th></tr>",
    );
    let ratio = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.3} × L"));
    for run in runs {
        let r = run.report;
        let main = plotted(run).swap_remove(0).name;
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&main.map_or_else(|| run.label.to_owned(), |d| format!("{}, {d}", run.label))),
            pct(Some(r.over_admission_mean)),
            pct(Some(r.over_admission_p99)),
            pct(Some(r.over_admission_max)),
            pct(Some(r.utilization)),
            ratio(r.partition_max_ratio),
            r.staleness_p99_ms
                .map_or_else(|| "-".into(), |v| format!("{v} ms")),
        );
        for d in &r.descriptors {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>-</td></tr>",
                esc(&format!("{}, {}", run.label, d.name)),
                pct(Some(d.over_admission_mean)),
                pct(Some(d.over_admission_p99)),
                pct(Some(d.over_admission_max)),
                pct(Some(d.utilization)),
                ratio(d.partition_max_ratio),
            );
        }
    }
    html.push_str("</table>");
    for run in runs {
        let _ = write!(html, "<h2>{}</h2>", esc(run.label));
        for (i, what) in plotted(run).iter().enumerate() {
            let svg = admitted_svg(name, run, what)?;
            // Each plot also as a file of its own, to put in a document: the main limit's as
            // `<scenario>-<policy>.svg`, another's numbered (names may differ only in what a
            // file name cannot hold) and named.
            let stem = format!("{}-{}", file_safe(name), file_safe(run.label));
            let file = match (i, what.name) {
                (0, _) | (_, None) => dir.join(format!("{stem}.svg")),
                (i, Some(d)) => {
                    let d: String = file_safe(d).chars().take(60).collect();
                    dir.join(format!("{stem}-{i}-{d}.svg"))
                }
            };
            std::fs::write(&file, &svg).with_context(|| format!("writing {}", file.display()))?;
            html.push_str(&svg);
        }
        if let Some(svg) = members_svg(run)? {
            html.push_str(&svg);
        }
        if let Some(svg) = staleness_svg(run.label, &run.outcome.staleness_ms)? {
            html.push_str(&svg);
        }
    }
    html.push_str("</body></html>\n");
    let path = dir.join("index.html");
    std::fs::write(&path, html).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_is_shaded_until_its_restart_and_far_times_do_not_overflow() {
        let mut cfg = SimConfig::new(1);
        cfg.duration_ms = 30_000;
        cfg.faults = vec![
            Fault::Crash {
                node: 1,
                at_ms: 10_000,
                restart_ms: Some(15_000),
            },
            Fault::Crash {
                node: 2,
                at_ms: u64::MAX - 1,
                restart_ms: Some(u64::MAX),
            },
        ];
        let spans = fault_spans(&cfg);
        assert_eq!((spans[0].0, spans[0].1), (10.0, 15.0));
        assert!(spans[1].1 >= spans[1].0);
    }

    #[test]
    fn window_sums_count_each_window_in_full() {
        // Node 0 admits one a millisecond; node 1 one every other millisecond.
        let by_node = vec![vec![1u32; 1_000], (0..1_000).map(|i| i % 2).collect()];
        let (times, sums) = window_sums(&by_node, 100);
        assert_eq!(times[0], 0.1);
        assert!(sums[0].iter().all(|s| *s == 100), "{:?}", &sums[0][..3]);
        assert!(sums[1].iter().all(|s| *s == 50), "{:?}", &sums[1][..3]);
        assert_eq!(times.len(), (1_000 - 100) / STEP_MS + 1);
    }
}
