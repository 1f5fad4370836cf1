//! The benchmarks: the hot path against governor, gRPC against a no-op service, memory per
//! key.

use serde::Deserialize;

use super::Recording;
use super::format::{NBSP, header, none_recorded, provenance, row};

#[derive(Deserialize)]
struct HotPathRow {
    case: String,
    limitmesh_ns: f64,
    governor_ns: f64,
    ratio: f64,
}

pub(super) fn hot_path(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Hot path against governor\n\n\
         One check through the limiter and one through governor's keyed limiter, alternated in \
         slices of 16 384 for a few seconds; the ratio is the median over slice pairs (below 1: \
         limitmesh is faster). `hot_key` checks one key, `keys_10k` 10 000 keys in random \
         order; the `ledger_` cases are the same under the ledger, each key holding a lease \
         (a check spends a token the node holds). Both include their clock read.\n\n",
    );
    let mut rows = Vec::new();
    for r in recordings {
        rows.extend(r.rows::<HotPathRow>()?);
    }
    if rows.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    header(page, &["case", "limitmesh", "governor", "ratio"]);
    for h in &rows {
        row(
            page,
            &[
                format!("`{}`", h.case),
                format!("{:.1}{NBSP}ns", h.limitmesh_ns),
                format!("{:.1}{NBSP}ns", h.governor_ns),
                format!("{:.2}×", h.ratio),
            ],
        );
    }
    provenance(page, recordings);
    Ok(())
}

#[derive(Deserialize)]
struct Summary {
    calls_per_s: f64,
    p50_us: u32,
    p99_us: u32,
    p999_us: u32,
    errors: u64,
}

#[derive(Deserialize)]
struct Shape {
    connections: usize,
    streams: usize,
}

#[derive(Deserialize)]
struct ShapeResult {
    shape: Shape,
    noop: Summary,
    limitmesh: Summary,
    throughput_ratio: f64,
}

#[derive(Deserialize)]
struct GrpcBench {
    api: String,
    rounds: u32,
    seconds: f64,
    shapes: Vec<ShapeResult>,
}

fn ms(us: u32) -> String {
    format!("{:.2}{NBSP}ms", f64::from(us) / 1e3)
}

pub(super) fn grpc_bench(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## gRPC against a no-op service\n\n\
         `ShouldRateLimit` on loopback against a no-op tonic service set up as production \
         would be, each in a process of its own, in alternating rounds; a shape is \
         connections × calls in flight on each. The ratio is limitmesh's throughput over the \
         no-op's, the median over round pairs.\n\n",
    );
    let mut runs = Vec::new();
    for r in recordings {
        runs.extend(r.rows::<GrpcBench>()?);
    }
    if runs.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    header(
        page,
        &[
            "API",
            "shape",
            "limitmesh calls/s",
            "no-op calls/s",
            "ratio",
            "limitmesh p50 / p99 / p99.9",
            "no-op p50 / p99 / p99.9",
            "failed calls",
        ],
    );
    for b in &runs {
        for s in &b.shapes {
            let lat =
                |x: &Summary| format!("{} / {} / {}", ms(x.p50_us), ms(x.p99_us), ms(x.p999_us));
            row(
                page,
                &[
                    format!("{} ({} × {:.1} s rounds)", b.api, b.rounds, b.seconds),
                    format!("{} × {}", s.shape.connections, s.shape.streams),
                    format!("{:.0}", s.limitmesh.calls_per_s),
                    format!("{:.0}", s.noop.calls_per_s),
                    format!("{:.3}×", s.throughput_ratio),
                    lat(&s.limitmesh),
                    lat(&s.noop),
                    (s.limitmesh.errors + s.noop.errors).to_string(),
                ],
            );
        }
    }
    provenance(page, recordings);
    Ok(())
}

#[derive(Deserialize)]
struct MemoryRow {
    bytes_per_key: f64,
    target_bytes: f64,
}

pub(super) fn memory(page: &mut String, recordings: &[&Recording]) -> anyhow::Result<()> {
    page.push_str(
        "\n## Memory per key\n\n\
         Bytes held per active window with registers from 5 origins, excluding the key string, \
         counted by an allocator that charges each allocation its malloc chunk.\n\n",
    );
    let mut rows = Vec::new();
    for r in recordings {
        rows.extend(r.rows::<MemoryRow>()?);
    }
    if rows.is_empty() {
        none_recorded(page);
        return Ok(());
    }
    header(page, &["measure", "bytes", "target"]);
    for m in &rows {
        row(
            page,
            &[
                "per active key, 5 origins".to_owned(),
                format!("{:.0}{NBSP}B", m.bytes_per_key),
                format!("{:.0}{NBSP}B", m.target_bytes),
            ],
        );
    }
    provenance(page, recordings);
    Ok(())
}
