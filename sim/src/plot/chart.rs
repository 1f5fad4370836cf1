//! The house style of the simulators' plots and pages: charts over time with their faults
//! shaded, a histogram, colours, and the HTML around them.

use std::fmt::Write as _;

use plotters::prelude::*;

pub(super) const WIDTH: u32 = 900;
pub(super) const HEIGHT: u32 = 360;

pub(super) type TimeChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A chart on `root` with the house style: a caption, axes over `x` and `y` with their
/// descriptions and whole-number labels, and no minor grid lines.
pub(super) fn new_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: String,
    (x, x_desc): (std::ops::Range<f64>, &str),
    (y, y_desc): (std::ops::Range<f64>, &str),
    y_labels: usize,
) -> anyhow::Result<TimeChart<'a, 'b>> {
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 17))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x, y)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_labels(y_labels)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(plot_error)?;
    Ok(chart)
}

/// Shades `spans` (from, until, what: seconds) on the time axis, up to `y_max`; in the legend
/// if `legend`.
pub(super) fn shade_spans(
    chart: &mut TimeChart<'_, '_>,
    spans: &[(f64, f64, String)],
    y_max: f64,
    legend: bool,
) -> anyhow::Result<()> {
    const FAULT: RGBColor = RGBColor(255, 200, 120);
    for (from, until, label) in spans {
        let shaded = chart
            .draw_series(std::iter::once(Rectangle::new(
                [(*from, 0.0), (*until, y_max)],
                FAULT.mix(0.35).filled(),
            )))
            .map_err(plot_error)?;
        if legend {
            shaded
                .label(label)
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], FAULT.filled()));
        }
    }
    Ok(())
}

/// The colour of the `n`-th series (a node, a key).
pub(super) fn series_color(n: usize) -> RGBColor {
    let (r, g, b) = Palette99::pick(n).to_rgba().rgb();
    RGBColor(r, g, b)
}

pub(super) fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a plot: {e:?}")
}

/// Draws the legend of `chart` in its lower right corner.
pub(super) fn legend<'a, 'b: 'a>(chart: &mut TimeChart<'a, 'b>) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.6))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(plot_error)
}

/// Bars of `counts`, each `bin` wide from 0 on the x axis (`x_desc`), under `caption`.
pub(super) fn histogram_svg(
    caption: String,
    counts: &[u64],
    bin: f64,
    (x_desc, y_desc): (&str, &str),
) -> anyhow::Result<String> {
    let top = (counts.iter().copied().max().unwrap_or(1) as f64 * 1.1).max(1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 260)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = new_chart(
            &root,
            caption,
            (0.0..(counts.len().max(1) as f64 * bin), x_desc),
            (0.0..top, y_desc),
            10,
        )?;
        chart
            .draw_series(counts.iter().enumerate().map(|(i, c)| {
                let x = i as f64 * bin;
                Rectangle::new(
                    [(x, 0.0), (x + bin * 0.9, *c as f64)],
                    BLUE.mix(0.6).filled(),
                )
            }))
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// How stale one node's view of another's admissions was, as a histogram of `samples` (ms), if
/// there are any.
pub(super) fn staleness_svg(label: &str, samples: &[u64]) -> anyhow::Result<Option<String>> {
    let Some(&max) = samples.iter().max() else {
        return Ok(None);
    };
    let bin = 25u64;
    let bins = usize::try_from(max / bin + 1).unwrap_or(1).min(400);
    let mut counts = vec![0u64; bins];
    for s in samples {
        let i = usize::try_from(s / bin).unwrap_or(bins - 1).min(bins - 1);
        counts[i] += 1;
    }
    histogram_svg(
        format!("staleness, {label}: admission at node 0 until another node counts it"),
        &counts,
        bin as f64,
        ("ms", "probes"),
    )
    .map(Some)
}

pub(super) fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.2} %", v * 100.0))
}

/// Escapes text for HTML.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `s` with anything but ASCII letters, digits, `-` and `_` made `_`: a file name.
pub(super) fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The start of a page titled `name`, up to its heading.
pub(super) fn page_head(name: &str) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>limitmesh-sim: {n}</title><style>body{{font-family:sans-serif;margin:2em;\
         max-width:960px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;\
         padding:4px 8px;text-align:right}}th{{background:#f4f4f4}}</style></head><body>\
         <h1>{n}</h1>",
        n = esc(name)
    );
    html
}
