//! The limitmesh node binary: `limitmesh [serve]`, client commands, `validate`, `bench`.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use limitmesh::cli::{self, Cli, Command, ServeArgs};
use limitmesh::config::{Config, LogFormat};

/// mimalloc rather than the system allocator: under load most allocations are HTTP/2 buffers
/// freed on another worker than allocated them, which glibc's malloc serves slowly; what it
/// buys is in the benchmarks (README, "Figures").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_tracing(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.filter));
    // Colours only for a person at a terminal, never into a log collector's file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match config.log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let demo = args.config.is_none();
    let config = Config::load(args.config.as_deref()).context("loading the configuration")?;
    init_tracing(&config);
    let bound = limitmesh::service::bind(&config).await?;
    let (grpc, http) = (bound.grpc_addr(), bound.http_addr());
    println!("limitmesh {} serving", env!("CARGO_PKG_VERSION"));
    println!("  gRPC (limitmesh.v1 + Envoy RLS v3): {grpc}");
    let json = if config.json_check_served().is_ok() {
        " /json"
    } else {
        ""
    };
    println!("  admin HTTP (/metrics /healthz /readyz /v1/members{json}): {http}");
    println!("  gossip (UDP): {}", bound.gossip_addr());
    if demo {
        println!("demo rules: domain \"demo\", 10 requests per second per client. Try:");
        println!(
            "  grpcurl -plaintext -d '{{\"domain\":\"demo\",\"descriptors\":[{{\"entries\":[{{\"key\":\"client\",\"value\":\"alice\"}}]}}]}}' {grpc} limitmesh.v1.RateLimiter/Check"
        );
        println!("  limitmesh check --domain demo -d client=alice");
        println!(
            "  curl -s -XPOST -d '{{\"domain\":\"demo\",\"descriptors\":[{{\"entries\":[{{\"key\":\"client\",\"value\":\"alice\"}}]}}]}}' http://{http}/json"
        );
    }
    limitmesh::service::run(config, bound, limitmesh::service::termination()).await?;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let code = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => serve(args).await?,
        Command::Check(args) => cli::check(args).await?,
        Command::Inspect(args) => cli::inspect(args).await?,
        Command::Members(args) => cli::members(args).await?,
        Command::Validate(args) => cli::validate(&args),
        Command::Bench(args) => cli::bench::run(args).await?,
    };
    Ok(code)
}
