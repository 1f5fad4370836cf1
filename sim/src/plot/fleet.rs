//! The page of a fleet run (`fleet ... --report DIR`, `fleet-run FILE --report DIR`): for each
//! admission run, the busiest keys of each class window by window against their limit, how
//! far over the limit the windows went, the bytes each node sent per second, and staleness.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;

use super::chart::{
    HEIGHT, WIDTH, esc, file_safe, histogram_svg, legend, new_chart, page_head, pct, plot_error,
    series_color, shade_spans, staleness_svg,
};
use crate::fleet::{FleetConfig, FleetFault, FleetReport, FleetTrace, Load, TracedKey, Users};

/// One admission's run of a fleet: its label, measures, and what its plots draw.
#[derive(Debug, Clone, Copy)]
pub struct FleetRunData<'a> {
    pub label: &'a str,
    pub report: &'a FleetReport,
    pub trace: &'a FleetTrace,
}

/// Most points a line has: a window's sum is plotted as the busiest in each step of the run.
const POINTS: u64 = 1_500;

/// The faults of `cfg` as shaded spans (seconds) with a name.
fn fault_spans(cfg: &FleetConfig) -> Vec<(f64, f64, String)> {
    let s = |ms: u64| ms as f64 / 1e3;
    let mut spans = Vec::new();
    for f in &cfg.faults {
        match *f {
            FleetFault::Partition {
                from_ms, until_ms, ..
            } => {
                let side = cfg.partition().map_or(0, |(side, _, _)| side);
                let other = cfg.nodes - side;
                spans.push((
                    s(from_ms),
                    s(until_ms),
                    format!("partition {side} | {other}"),
                ));
            }
            FleetFault::Crash { node, at_ms } => {
                spans.push((s(at_ms), s(at_ms) + 0.2, format!("node {node} crashes")));
            }
            FleetFault::Replace {
                count,
                from_ms,
                every_ms,
            } => {
                let until = from_ms.saturating_add(every_ms.saturating_mul(count as u64));
                spans.push((s(from_ms), s(until), format!("{count} nodes redeployed")));
            }
        }
    }
    spans
}

/// The busiest window ending in each step (seconds at the step's end, units), over windows of
/// `window` slots of `admitted`.
fn busiest_per_step(admitted: &[u32], window: usize, step: usize) -> Vec<(f64, f64)> {
    let mut prefix = Vec::with_capacity(admitted.len() + 1);
    prefix.push(0u64);
    for a in admitted {
        prefix.push(prefix[prefix.len() - 1] + u64::from(*a));
    }
    let mut points = Vec::new();
    let mut end = window.max(1);
    while end <= admitted.len() {
        let last = (end + step - 1).min(admitted.len());
        let busiest = (end..=last)
            .map(|e| prefix[e] - prefix[e - window.max(1)])
            .max()
            .unwrap_or(0);
        points.push((
            last as f64 * FleetTrace::SLOT_MS as f64 / 1e3,
            busiest as f64,
        ));
        end = last + 1;
    }
    points
}

/// Admitted per sliding window on the busiest keys of class `class`, against its limit.
fn class_svg(
    name: &str,
    cfg: &FleetConfig,
    run: &FleetRunData<'_>,
    keys: &[&TracedKey],
) -> anyhow::Result<String> {
    let first = keys[0];
    let window = (first.window_ms / FleetTrace::SLOT_MS).max(1) as usize;
    let slots = first.admitted.len() as u64;
    let step = (slots / POINTS).max(5) as usize;
    let lines: Vec<Vec<(f64, f64)>> = keys
        .iter()
        .map(|k| busiest_per_step(&k.admitted, window, step))
        .collect();
    let top = lines.iter().flatten().map(|(_, v)| *v).fold(0.0, f64::max);
    let limit = f64::from(first.limit);
    let y_max = (top.max(limit) * 1.15).max(1.0);
    let x_max = cfg.duration_ms as f64 / 1e3;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let title = format!(
            "{name}, {} keys: {} ({} nodes), the busiest",
            first.class, run.label, cfg.nodes
        );
        let y_desc = format!("units admitted per {} ms window", first.window_ms);
        let mut chart = new_chart(
            &root,
            title,
            (0.0..x_max, "time (s)"),
            (0.0..y_max, &y_desc),
            10,
        )?;
        shade_spans(&mut chart, &fault_spans(cfg), y_max, true)?;
        for (i, (key, line)) in keys.iter().zip(&lines).enumerate() {
            let color = series_color(i);
            chart
                .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(2)))
                .map_err(plot_error)?
                .label(format!("{} (busiest {:.3} × L)", key.name, key.busiest))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 12, y)], color.stroke_width(2))
                });
        }
        chart
            .draw_series(LineSeries::new(
                [(0.0, limit), (x_max, limit)],
                BLACK.stroke_width(2),
            ))
            .map_err(plot_error)?
            .label(format!("limit ({})", first.limit))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
        legend(&mut chart)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// The windows over their limit by how far over, in bins of at least 0.5 %; `None` if none
/// went 0.1 % over.
fn over_admission_svg(run: &FleetRunData<'_>) -> anyhow::Result<Option<String>> {
    let h = &run.trace.over_admission;
    let total: u64 = h.iter().sum();
    let Some(last) = h.iter().rposition(|n| *n > 0).filter(|l| *l > 0) else {
        return Ok(None);
    };
    // Steps of 0.1 %, grouped so that there are at most 200 bars.
    let group = last.div_ceil(200).max(5);
    let counts: Vec<u64> = h[1..=last].chunks(group).map(|c| c.iter().sum()).collect();
    let over: u64 = counts.iter().sum();
    let caption = format!(
        "windows over the limit, {}: {over} of {total} ({:.3} %)",
        run.label,
        over as f64 / total.max(1) as f64 * 100.0
    );
    histogram_svg(
        caption,
        &counts,
        group as f64 * 0.1,
        ("% over the limit (from 0.1 %)", "windows"),
    )
    .map(Some)
}

/// Bytes each node sent per second over the run, faults shaded.
fn gossip_svg(cfg: &FleetConfig, run: &FleetRunData<'_>) -> anyhow::Result<String> {
    let per_s = &run.trace.sent_per_node_per_s;
    let top = per_s.iter().copied().fold(0.0, f64::max);
    let y_max = (top * 1.15).max(1.0);
    let x_max = cfg.duration_ms as f64 / 1e3;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 260)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = new_chart(
            &root,
            format!("gossip, {}: bytes sent per node per second", run.label),
            (0.0..x_max, "time (s)"),
            (0.0..y_max, "bytes"),
            6,
        )?;
        shade_spans(&mut chart, &fault_spans(cfg), y_max, false)?;
        chart
            .draw_series(LineSeries::new(
                per_s.iter().enumerate().map(|(s, b)| (s as f64 + 1.0, *b)),
                BLUE.stroke_width(2),
            ))
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

fn load(load: &Load) -> String {
    match load {
        Load::Constant(f) => format!("{f} × L"),
        Load::Profile(points) => {
            let shown: Vec<String> = points
                .iter()
                .take(8)
                .map(|(t, f)| format!("{f} at {:.1} s", *t as f64 / 1e3))
                .collect();
            let more = if points.len() > 8 { ", ..." } else { "" };
            format!("{}{more} (× L)", shown.join(", "))
        }
    }
}

/// What the run is: its fleet, network and classes.
fn describe(cfg: &FleetConfig, html: &mut String) {
    let _ = write!(
        html,
        "<p>Seed {}, {} nodes, {}–{} ms latency, {:.1} % loss, {} ms gossip, {:.1} s simulated; \
         windows measured from {:.1} s.</p><table><tr><th>class</th><th>keys</th>\
         <th>nodes a key</th><th>limit</th><th>units a request</th><th>load</th>\
         <th>others' load</th></tr>",
        cfg.seed,
        cfg.nodes,
        cfg.min_latency_ms,
        cfg.max_latency_ms,
        cfg.loss * 100.0,
        cfg.gossip_interval_ms,
        cfg.duration_ms as f64 / 1e3,
        cfg.warmup_ms as f64 / 1e3
    );
    for c in &cfg.traffic.classes {
        let users = match c.users {
            Users::All => "all".to_owned(),
            Users::Count(_) => c.users_per_key(cfg.nodes).to_string(),
        };
        let others = if c.overloaded_every > 1 {
            load(&c.underload)
        } else {
            "-".into()
        };
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{users}</td><td>{} per {} ms</td><td>{}</td>\
             <td>{}{}</td><td>{}</td></tr>",
            esc(&c.name),
            c.key_count(cfg.nodes),
            c.limit,
            c.window_ms,
            c.cost,
            esc(&load(&c.overload)),
            if c.overloaded_every > 1 {
                format!(" (one key in {})", c.overloaded_every)
            } else {
                String::new()
            },
            esc(&others)
        );
    }
    html.push_str("</table>");
}

/// Writes `dir/index.html` for fleet run `name` of `cfg` under each admission of `runs`, and
/// each class's plot as `dir/<name>-<admission>-<class>.svg`; returns the page's path.
pub fn write_fleet_report(
    dir: &Path,
    name: &str,
    cfg: &FleetConfig,
    runs: &[FleetRunData<'_>],
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut html = page_head(name);
    describe(cfg, &mut html);
    html.push_str(
        "<h2>Measures</h2><table><tr><th>admission</th><th>over-admission mean</th><th>p99</th>\
         <th>max</th><th>utilization</th><th>refused below the limit</th>\
         <th>busiest window in a partition</th><th>staleness p99</th>\
         <th>gossip a node</th></tr>",
    );
    for run in runs {
        let r = run.report;
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{:.1} KB/s</td></tr>",
            esc(run.label),
            pct(Some(r.over_admission_mean)),
            pct(Some(r.over_admission_p99)),
            pct(Some(r.over_admission_max)),
            pct(Some(r.utilization)),
            pct(Some(r.refused_below_limit)),
            r.partition_max_ratio
                .map_or_else(|| "-".into(), |v| format!("{v:.3} × L")),
            r.staleness_p99_ms
                .map_or_else(|| "-".into(), |v| format!("{v} ms")),
            r.gossip_bytes_per_node_per_s_mean / 1e3
        );
    }
    html.push_str("</table>");
    for run in runs {
        let _ = write!(html, "<h2>{}</h2>", esc(run.label));
        for class in &cfg.traffic.classes {
            let keys: Vec<&TracedKey> = run
                .trace
                .keys
                .iter()
                .filter(|k| k.class == class.name)
                .collect();
            if keys.is_empty() {
                continue;
            }
            let svg = class_svg(name, cfg, run, &keys)?;
            let file = dir.join(format!(
                "{}-{}-{}.svg",
                file_safe(name),
                file_safe(run.label),
                file_safe(&class.name)
            ));
            std::fs::write(&file, &svg).with_context(|| format!("writing {}", file.display()))?;
            html.push_str(&svg);
        }
        match over_admission_svg(run)? {
            Some(svg) => html.push_str(&svg),
            None => html.push_str("<p>No window went 0.1 % over its limit.</p>"),
        }
        html.push_str(&gossip_svg(cfg, run)?);
        if let Some(svg) = staleness_svg(run.label, &run.trace.staleness_ms)? {
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
    fn each_step_plots_its_busiest_window() {
        // 10 slots a window; one slot of 50 admitted at slot 30.
        let mut admitted = vec![1u32; 100];
        admitted[30] = 50;
        let points = busiest_per_step(&admitted, 10, 20);
        // Windows end at slots 10..=100, in steps of 20 slots.
        assert_eq!(points.len(), 5);
        assert_eq!(points[0], (0.29, 10.0));
        assert_eq!(points[1], (0.49, 59.0), "the windows holding slot 30");
        assert!(points[2..].iter().all(|(_, v)| *v == 10.0), "{points:?}");
    }
}
