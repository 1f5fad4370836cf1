//! `limitmesh bench`: gRPC `Check` throughput and latency on loopback, for a real limitmesh node
//! and for a no-op service with the same API (the floor any gRPC service on this machine pays),
//! started by the same process and measured in alternating rounds, so that both see the same
//! machine. The ratio is the figure; absolute numbers depend on the machine.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use super::CliError;
use crate::clock::monotonic_now;
use crate::config::Config;
use crate::proto::limitmesh::v1::rate_limiter_client::RateLimiterClient;
use crate::proto::limitmesh::v1::rate_limiter_server::{RateLimiter, RateLimiterServer};
use crate::proto::limitmesh::v1::{
    CheckBatchRequest, CheckBatchResponse, CheckRequest, CheckResponse, InspectRequest,
    InspectResponse, Limit, LimitStatus, MembersRequest, MembersResponse,
};

#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// HTTP/2 connections the requests share.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Seconds per measured round.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Rounds per service (alternating no-op, limitmesh, no-op, …). The ratio reported is the
    /// median over round pairs, which a noisy neighbour moves far less than a total.
    #[arg(long, default_value_t = 8)]
    pub rounds: usize,
    /// Distinct keys the requests spread over.
    #[arg(long, default_value_t = 1_000)]
    pub keys: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The same API, doing nothing: what serving gRPC costs on this machine.
#[derive(Debug, Default)]
struct NoOp;

#[tonic::async_trait]
impl RateLimiter for NoOp {
    async fn check(&self, _: Request<CheckRequest>) -> Result<Response<CheckResponse>, Status> {
        Ok(Response::new(CheckResponse {
            allowed: true,
            retry_after_ms: 0,
            statuses: vec![LimitStatus {
                allowed: true,
                ..LimitStatus::default()
            }],
        }))
    }

    async fn check_batch(
        &self,
        _: Request<CheckBatchRequest>,
    ) -> Result<Response<CheckBatchResponse>, Status> {
        Ok(Response::new(CheckBatchResponse::default()))
    }

    async fn inspect(
        &self,
        _: Request<InspectRequest>,
    ) -> Result<Response<InspectResponse>, Status> {
        Ok(Response::new(InspectResponse::default()))
    }

    async fn members(
        &self,
        _: Request<MembersRequest>,
    ) -> Result<Response<MembersResponse>, Status> {
        Ok(Response::new(MembersResponse::default()))
    }
}

/// One round's measurements.
#[derive(Debug, Clone, Default)]
struct Round {
    calls: u64,
    errors: u64,
    seconds: f64,
    latencies_us: Vec<u32>,
}

impl Round {
    fn calls_per_s(&self) -> f64 {
        self.calls as f64 / self.seconds.max(1e-9)
    }
}

/// Measures `Check` against `addr` for `seconds`.
async fn load(addr: SocketAddr, args: &BenchArgs) -> Result<Round, CliError> {
    let mut clients = Vec::new();
    for _ in 0..args.connections.max(1) {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| CliError::Bench(e.to_string()))?
            .connect()
            .await
            .map_err(|e| CliError::Bench(e.to_string()))?;
        clients.push(RateLimiterClient::new(channel));
    }
    let keys: std::sync::Arc<Vec<String>> = std::sync::Arc::new(
        (0..args.keys.max(1))
            .map(|k| format!("bench-key-{k}"))
            .collect(),
    );
    let duration = Duration::from_secs_f64(args.seconds);
    let start = monotonic_now();
    let mut tasks = Vec::new();
    for t in 0..args.concurrency.max(1) {
        let mut client = clients[t % clients.len()].clone();
        let keys = keys.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = Round::default();
            let mut k = t;
            while start.elapsed() < duration {
                k = (k + 7_919) % keys.len();
                let request = CheckRequest {
                    domain: "bench".into(),
                    key: keys[k].clone(),
                    limit: Some(Limit {
                        requests: u32::MAX,
                        window_ms: 1_000,
                        ..Limit::default()
                    }),
                    ..CheckRequest::default()
                };
                let sent = monotonic_now();
                match client.check(request).await {
                    Ok(_) => {
                        round.calls += 1;
                        let us = sent.elapsed().as_micros();
                        round
                            .latencies_us
                            .push(u32::try_from(us).unwrap_or(u32::MAX));
                    }
                    Err(_) => round.errors += 1,
                }
            }
            round
        }));
    }
    let mut total = Round::default();
    for task in tasks {
        let r = task.await.map_err(|e| CliError::Bench(e.to_string()))?;
        total.calls += r.calls;
        total.errors += r.errors;
        total.latencies_us.extend(r.latencies_us);
    }
    total.seconds = start.elapsed().as_secs_f64();
    Ok(total)
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Summary {
    calls_per_s: f64,
    p50_us: u32,
    p99_us: u32,
    p999_us: u32,
    errors: u64,
}

fn summarise(rounds: &[Round]) -> Summary {
    let calls: u64 = rounds.iter().map(|r| r.calls).sum();
    let seconds: f64 = rounds.iter().map(|r| r.seconds).sum();
    let mut lat: Vec<u32> = rounds
        .iter()
        .flat_map(|r| r.latencies_us.iter().copied())
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len().saturating_sub(1)) as f64 * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    Summary {
        calls_per_s: calls as f64 / seconds.max(1e-9),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        errors: rounds.iter().map(|r| r.errors).sum(),
    }
}

/// Runs the benchmark and prints the comparison.
pub async fn run(args: BenchArgs) -> Result<std::process::ExitCode, CliError> {
    // The no-op service.
    let noop_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CliError::Bench(e.to_string()))?;
    let noop_addr = noop_listener
        .local_addr()
        .map_err(|e| CliError::Bench(e.to_string()))?;
    let (noop_stop, noop_stopped) = oneshot::channel::<()>();
    let noop = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimiterServer::new(NoOp))
            // As tonic's own `serve(addr)` sets it up: TCP_NODELAY on, keepalive off.
            .serve_with_incoming_shutdown(crate::rpc::tcp_incoming(noop_listener), async {
                let _ = noop_stopped.await;
            }),
    );

    // A limitmesh node: the demo configuration on ephemeral loopback ports.
    let mut config = Config::demo()?;
    config.grpc.listen = "127.0.0.1:0".parse().expect("literal address");
    config.http.listen = "127.0.0.1:0".parse().expect("literal address");
    config.cluster.bind = "127.0.0.1:0".parse().expect("literal address");
    let bound = crate::service::bind(&config)
        .await
        .map_err(|e| CliError::Bench(e.to_string()))?;
    let node_addr = bound.grpc_addr();
    let (node_stop, node_stopped) = oneshot::channel::<()>();
    let node = tokio::spawn(crate::service::run(config, bound, async {
        let _ = node_stopped.await;
    }));

    // Warm up both, then alternate.
    let warm = BenchArgs {
        seconds: 0.5,
        ..args.clone()
    };
    load(noop_addr, &warm).await?;
    load(node_addr, &warm).await?;
    let (mut noop_rounds, mut node_rounds) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds.max(1) {
        noop_rounds.push(load(noop_addr, &args).await?);
        node_rounds.push(load(node_addr, &args).await?);
    }
    let _ = noop_stop.send(());
    let _ = node_stop.send(());
    let _ = noop.await;
    let _ = node.await;

    let (a, b) = (summarise(&noop_rounds), summarise(&node_rounds));
    let mut ratios: Vec<f64> = noop_rounds
        .iter()
        .zip(&node_rounds)
        .map(|(noop, node)| node.calls_per_s() / noop.calls_per_s().max(1e-9))
        .collect();
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "noop": a, "limitmesh": b, "throughput_ratio": ratio,
                "round_ratios": ratios, "concurrency": args.concurrency,
                "connections": args.connections })
        );
    } else {
        println!(
            "{:<10} {:>12} {:>9} {:>9} {:>9} {:>7}",
            "service", "calls/s", "p50 µs", "p99 µs", "p99.9 µs", "errors"
        );
        for (name, s) in [("no-op", a), ("limitmesh", b)] {
            println!(
                "{:<10} {:>12.0} {:>9} {:>9} {:>9} {:>7}",
                name, s.calls_per_s, s.p50_us, s.p99_us, s.p999_us, s.errors
            );
        }
        println!(
            "throughput ratio limitmesh / no-op: {ratio:.3} (median of {} round pairs; {:.3} to {:.3})",
            ratios.len(),
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}
