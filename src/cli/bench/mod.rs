//! `limitmesh bench`: gRPC throughput and latency on loopback, for a limitmesh node and for a
//! no-op service with the same APIs (the floor any gRPC service on this machine pays). Each
//! runs in a process of its own, set up as in production; the driver (this process) is the
//! client, and measures the two in alternating rounds, at several shapes of load, so that both
//! see the same machine. The ratios are the figures; absolute numbers depend on the machine.

mod load;
mod noop;
mod servers;

use std::path::PathBuf;

use clap::Args;

use super::CliError;
pub use load::{Api, Shape, envoy_request, grpc_frame};
use load::{Round, Summary, Workload, load, summarise};
use servers::ServerProcess;
pub use servers::Target;

#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// Shapes of load, CONNECTIONSxSTREAMS (calls in flight on each connection), as h2load's
    /// `-c` and `-m`.
    #[arg(long, value_delimiter = ',', default_value = "4x1,4x64,64x4", num_args = 1..=16)]
    pub shapes: Vec<Shape>,
    /// Which API the calls use.
    #[arg(long, value_enum, default_value_t = Api::Envoy)]
    pub api: Api,
    /// Seconds per measured round (at most 60).
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Seconds of load on each round's fresh connections before the measurement starts.
    #[arg(long, default_value_t = 0.3)]
    pub warmup: f64,
    /// Rounds per service and shape (alternating no-op, limitmesh, no-op, …). The ratio
    /// reported is the median over round pairs, which a noisy neighbour moves far less than a
    /// total.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub rounds: u16,
    /// Distinct descriptor values (keys) the calls spread over (at most the node's table).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub keys: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Do not measure: serve one of the two services on an ephemeral loopback port, print its
    /// address, and serve until SIGTERM/SIGINT (for an external load tool such as h2load).
    #[arg(long, value_enum)]
    pub serve: Option<Target>,
    /// With --serve: stop on your own after this many seconds.
    #[arg(long, default_value_t = 3_600)]
    pub serve_seconds: u64,
    /// With --serve: also stop when standard input closes (how `bench` ties its servers'
    /// lives to its own).
    #[arg(long, hide = true)]
    pub serve_until_stdin_closes: bool,
    /// Benchmark this node configuration and its rules (a node's TOML file) instead of the
    /// demo: the node serves them alone on loopback, and the calls (Envoy's API) go to every
    /// rule in turn, `--keys` requests in all, values a rule leaves open made up. Calls its
    /// limits refuse are served calls too. With --serve limitmesh: serve this configuration.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Do not measure: write the Envoy `ShouldRateLimit` request the bench sends, framed as
    /// one gRPC message (the body to post with an HTTP/2 load tool), to this file.
    #[arg(long)]
    pub write_request: Option<PathBuf>,
}

/// One shape's comparison.
#[derive(Debug, serde::Serialize)]
struct ShapeResult {
    shape: Shape,
    noop: Summary,
    limitmesh: Summary,
    /// Median over round pairs of limitmesh's throughput over the no-op's (the mean of the two
    /// middle ones for an even number of pairs).
    throughput_ratio: f64,
    round_ratios: Vec<f64>,
}

/// The median of sorted, non-empty `values`.
fn median(values: &[f64]) -> f64 {
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Alternates rounds of the no-op and limitmesh at `shape` (ABBA order).
async fn compare(
    noop: &ServerProcess,
    node: &ServerProcess,
    shape: Shape,
    args: &BenchArgs,
    work: &std::sync::Arc<Workload>,
) -> Result<ShapeResult, CliError> {
    let (mut noop_rounds, mut node_rounds): (Vec<Round>, Vec<Round>) = (Vec::new(), Vec::new());
    let time = (args.warmup, args.seconds);
    for pair in 0..args.rounds {
        // ABBA: whatever favours the first (or second) of a pair falls on both sides alike.
        if pair.is_multiple_of(2) {
            noop_rounds.push(load(noop.addr, work, shape, time).await?);
            node_rounds.push(load(node.addr, work, shape, time).await?);
        } else {
            node_rounds.push(load(node.addr, work, shape, time).await?);
            noop_rounds.push(load(noop.addr, work, shape, time).await?);
        }
    }
    let mut round_ratios: Vec<f64> = noop_rounds
        .iter()
        .zip(&node_rounds)
        .map(|(noop, node)| node.calls_per_s() / noop.calls_per_s().max(1e-9))
        .collect();
    round_ratios.sort_by(f64::total_cmp);
    Ok(ShapeResult {
        shape,
        noop: summarise(&noop_rounds),
        limitmesh: summarise(&node_rounds),
        throughput_ratio: median(&round_ratios),
        round_ratios,
    })
}

fn print_table(args: &BenchArgs, results: &[ShapeResult], rules: usize) {
    println!(
        "{:<6} {:<10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6}  limitmesh / no-op",
        "shape", "service", "calls/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors",
    );
    let ms = |us: u32| f64::from(us) / 1000.0;
    for r in results {
        for (name, s) in [("no-op", &r.noop), ("limitmesh", &r.limitmesh)] {
            let ratio = if name == "limitmesh" {
                format!(
                    "{:.3} ({:.3} to {:.3})",
                    r.throughput_ratio,
                    r.round_ratios[0],
                    r.round_ratios[r.round_ratios.len() - 1]
                )
            } else {
                String::new()
            };
            println!(
                "{:<6} {:<10} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6}  {}",
                r.shape.to_string(),
                name,
                s.calls_per_s,
                ms(s.p50_us),
                ms(s.p99_us),
                ms(s.p999_us),
                ms(s.max_us),
                s.errors,
                ratio
            );
        }
    }
    for r in results {
        for (name, s) in [("no-op", &r.noop), ("limitmesh", &r.limitmesh)] {
            if let Some(error) = &s.first_error {
                println!(
                    "{} {name}: {} calls failed; the first: {error}",
                    r.shape, s.errors
                );
            }
        }
    }
    let calls = match &args.config {
        Some(path) => format!(
            "{} requests over the {rules} rules of {}",
            args.keys,
            path.display()
        ),
        None => format!("{} keys", args.keys),
    };
    println!(
        "{:?} API, {calls}, {} alternating rounds of {} s per service and shape, each measured \
         after {} s of load on its fresh connections; the ratio is the median of the round \
         pairs' throughput ratios (lowest to highest in brackets)",
        args.api, args.rounds, args.seconds, args.warmup
    );
}

/// The calls: the synthetic load, or with `--config` the configuration's own rules (read as
/// the node will read them).
fn workload(args: &BenchArgs) -> Result<Workload, CliError> {
    let Some(path) = &args.config else {
        return Ok(Workload::synthetic(args.api, args.keys as usize));
    };
    if args.api != Api::Envoy {
        return Err(CliError::Bench(
            "--config calls the configuration's rules through Envoy's API: leave out --api own"
                .into(),
        ));
    }
    let config = crate::config::Config::load(Some(path))?;
    let rules = crate::rules::RuleSet::load(&config.rules_source(), config.rules_load_options())
        .map_err(|e| CliError::Bench(format!("{}: {e}", path.display())))?;
    Workload::from_rules(&rules, args.keys as usize)
}

/// Runs the benchmark (or one of its helper modes) and prints the comparison.
pub async fn run(args: BenchArgs) -> Result<std::process::ExitCode, CliError> {
    if let Some(path) = &args.write_request {
        std::fs::write(path, grpc_frame(&envoy_request("bench")))
            .map_err(|e| CliError::Bench(format!("writing {}: {e}", path.display())))?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if let Some(target) = args.serve {
        servers::serve(
            target,
            args.serve_seconds,
            args.serve_until_stdin_closes,
            args.config.as_deref(),
        )
        .await?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if !(args.seconds > 0.0 && args.seconds <= 60.0) {
        return Err(CliError::Bench(format!(
            "--seconds {}: expected more than 0 and at most 60",
            args.seconds
        )));
    }
    if !(0.0..=60.0).contains(&args.warmup) {
        return Err(CliError::Bench(format!(
            "--warmup {}: expected 0 to 60",
            args.warmup
        )));
    }
    // Each server outlives the whole run by a margin, and stops on its own if we die.
    let budget = (args.warmup + args.seconds + 3.0)
        * f64::from(args.rounds)
        * 2.0
        * args.shapes.len().min(1_000) as f64;
    let max_seconds = 60 + budget.ceil() as u64;
    let work = std::sync::Arc::new(workload(&args)?);
    let noop = ServerProcess::start(Target::Noop, max_seconds, None)?;
    let node = ServerProcess::start(Target::Limitmesh, max_seconds, args.config.as_deref())?;
    // The client runs on one thread, as h2load does by default: a multi-threaded client on a
    // small machine takes cores from the servers and adds its own scheduling delays to every
    // latency it reports.
    let results = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| CliError::Bench(format!("the client's runtime: {e}")))?;
                runtime.block_on(async {
                    let mut results = Vec::with_capacity(args.shapes.len());
                    for &shape in &args.shapes {
                        results.push(compare(&noop, &node, shape, &args, &work).await?);
                    }
                    Ok::<_, CliError>(results)
                })
            })
            .join()
            .map_err(|_| CliError::Bench("the client thread panicked".into()))?
    })?;
    drop((noop, node));
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "api": args.api, "keys": args.keys, "rounds": args.rounds,
                "seconds": args.seconds, "warmup": args.warmup, "config": args.config,
                "rules": work.rules, "shapes": results })
        );
    } else {
        print_table(&args, &results, work.rules);
    }
    // A comparison with failed calls is not one: say so in the exit status too.
    let failed = results
        .iter()
        .any(|r| r.noop.errors > 0 || r.limitmesh.errors > 0);
    Ok(if failed {
        eprintln!("some calls failed: the figures above are not a fair comparison");
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[0.8, 0.9, 1.0, 1.1]), 0.95);
        assert_eq!(median(&[0.8, 0.9, 1.0]), 0.9);
        assert_eq!(median(&[0.7]), 0.7);
    }
}
