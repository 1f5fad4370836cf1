//! The command line: `limitmesh [serve]`, and clients of a running node (`check`, `inspect`,
//! `members`), `validate` for rules and config files, and `bench`.

pub mod bench;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use thiserror::Error;

use crate::config::{Config, ConfigError};
use crate::proto::limitmesh::v1::rate_limiter_client::RateLimiterClient;
use crate::proto::limitmesh::v1::{
    CheckRequest, Descriptor, Entry, InspectRequest, Limit, MembersRequest, member,
};
use crate::rules::{LoadOptions, RuleSet, RulesSource};

pub use bench::BenchArgs;

#[derive(Debug, Parser)]
#[command(
    name = "limitmesh",
    version,
    about = "A distributed sliding-window rate limiter that runs as a sidecar"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve a node (the default). Without --config: one node on 127.0.0.1 with demo rules.
    Serve(ServeArgs),
    /// Ask a running node whether a request may go.
    Check(CheckArgs),
    /// Explain a window: the global estimate by origin, and this node's allowance.
    Inspect(CheckArgs),
    /// List the cluster's members as a running node sees them.
    Members(ClientArgs),
    /// Check a rules file (or directory) and optionally a node config; exit 1 on errors.
    Validate(ValidateArgs),
    /// Load-test a node over gRPC on loopback (Envoy's ShouldRateLimit or our Check), at several
    /// shapes of load, side by side with a no-op service.
    Bench(BenchArgs),
}

#[derive(Debug, Args, Default)]
pub struct ServeArgs {
    /// Node configuration (TOML). Environment variables LIMITMESH__SECTION__KEY override it.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The node's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub addr: String,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[arg(long, default_value = "")]
    pub domain: String,
    /// A descriptor as comma-separated key=value entries; repeat for several descriptors.
    #[arg(long = "descriptor", short = 'd')]
    pub descriptors: Vec<String>,
    /// A plain key instead of descriptors (needs --limit).
    #[arg(long)]
    pub key: Option<String>,
    /// An inline limit: this many requests per --window-ms, instead of the rules.
    #[arg(long)]
    pub limit: Option<u32>,
    #[arg(long, default_value_t = 1_000)]
    pub window_ms: u64,
    #[arg(long)]
    pub hits: Option<u32>,
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// A rules file, or a directory of them.
    pub rules: PathBuf,
    /// A node configuration to check as well.
    pub config: Option<PathBuf>,
}

#[derive(Debug, Error)]
pub enum CliError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: tonic::transport::Error,
    },
    #[error("{0}")]
    Rpc(#[from] tonic::Status),
    #[error("descriptor {0:?}: expected key=value[,key=value…]")]
    Descriptor(String),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Bench(String),
}

/// Parses `k=v,k2=v2` into a descriptor.
pub fn parse_descriptor(text: &str) -> Result<Descriptor, CliError> {
    let entries = text
        .split(',')
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| Entry {
                    key: k.trim().to_owned(),
                    value: v.trim().to_owned(),
                })
                .ok_or_else(|| CliError::Descriptor(text.to_owned()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Descriptor { entries })
}

async fn connect(addr: &str) -> Result<RateLimiterClient<tonic::transport::Channel>, CliError> {
    let endpoint = tonic::transport::Endpoint::from_shared(addr.to_owned())
        .map_err(|source| CliError::Connect {
            addr: addr.to_owned(),
            source,
        })?
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(5));
    let channel = endpoint
        .connect()
        .await
        .map_err(|source| CliError::Connect {
            addr: addr.to_owned(),
            source,
        })?;
    Ok(RateLimiterClient::new(channel))
}

fn inline_limit(args: &CheckArgs) -> Option<Limit> {
    args.limit.map(|requests| Limit {
        requests,
        window_ms: args.window_ms,
        ..Limit::default()
    })
}

/// `limitmesh check`: prints the decision; exit status 0 when allowed, 1 when not.
pub async fn check(args: CheckArgs) -> Result<ExitCode, CliError> {
    let descriptors = args
        .descriptors
        .iter()
        .map(|d| parse_descriptor(d))
        .collect::<Result<Vec<_>, _>>()?;
    let mut client = connect(&args.client.addr).await?;
    let response = client
        .check(CheckRequest {
            domain: args.domain.clone(),
            descriptors,
            key: args.key.clone().unwrap_or_default(),
            hits: args.hits,
            dry_run: args.dry_run,
            limit: inline_limit(&args),
        })
        .await?
        .into_inner();
    println!(
        "{}{}",
        if response.allowed {
            "ALLOWED"
        } else {
            "OVER_LIMIT"
        },
        if response.allowed {
            String::new()
        } else {
            format!(" (retry after {} ms)", response.retry_after_ms)
        }
    );
    for (i, s) in response.statuses.iter().enumerate() {
        if !s.invalid.is_empty() {
            println!("  [{i}] malformed, not limited: {}", s.invalid);
        } else if s.unlimited {
            println!(
                "  [{i}] unlimited{}",
                if s.matched { "" } else { " (no rule)" }
            );
        } else {
            println!(
                "  [{i}] {} limit {} per {} ms, remaining {}, resets in {} ms{}{}",
                if s.allowed { "ok  " } else { "over" },
                s.limit,
                s.window_ms,
                s.remaining,
                s.reset_after_ms,
                if s.rule.is_empty() {
                    String::new()
                } else {
                    format!(", rule {}", s.rule)
                },
                if s.shadow { ", shadow" } else { "" },
            );
        }
    }
    Ok(if response.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `limitmesh inspect`: prints each matched window's estimate by origin.
pub async fn inspect(args: CheckArgs) -> Result<ExitCode, CliError> {
    let descriptors = args
        .descriptors
        .iter()
        .map(|d| parse_descriptor(d))
        .collect::<Result<Vec<_>, _>>()?;
    let mut client = connect(&args.client.addr).await?;
    let r = client
        .inspect(InspectRequest {
            domain: args.domain.clone(),
            descriptors,
            key: args.key.clone().unwrap_or_default(),
            limit: inline_limit(&args),
        })
        .await?
        .into_inner();
    println!(
        "members: {} live, {} expected{}",
        r.live_members,
        r.expected_members,
        if r.clock_fenced {
            "; a clock beyond limiter.max_clock_drift_ms cuts a node off (see `members`): \
             shares are scaled as under the strict policy"
        } else {
            ""
        }
    );
    for (i, w) in r.windows.iter().enumerate() {
        if !w.found {
            println!(
                "  [{i}] {}",
                if w.unlimited {
                    "unlimited"
                } else {
                    "no traffic yet"
                }
            );
            continue;
        }
        println!(
            "  [{i}] limit {} per {} ms: global {:.1}, this node may hold {:.1}{}",
            w.limit,
            w.window_ms,
            w.global_admitted,
            w.allowance,
            if w.rule.is_empty() {
                String::new()
            } else {
                format!(" (rule {})", w.rule)
            }
        );
        for o in &w.origins {
            println!(
                "      {} {:>8.1} admitted, demand {:>6}, version {:>6}, {} ms old",
                if o.is_local { "local " } else { "remote" },
                o.admitted,
                o.demand,
                o.version,
                o.age_ms
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `limitmesh members`.
pub async fn members(args: ClientArgs) -> Result<ExitCode, CliError> {
    let mut client = connect(&args.addr).await?;
    let r = client.members(MembersRequest {}).await?.into_inner();
    let now_ms = crate::clock::Clock::now_ms(&crate::clock::RawSystemClock);
    for m in &r.members {
        let state = member::State::try_from(m.state).map_or("?", |s| s.as_str_name());
        println!(
            "{:<36} {:<22} {:<7} offset {:>8} heard {:>9}{}{}",
            m.id,
            m.address,
            state,
            m.clock_offset_ms
                .map_or_else(|| "-".to_owned(), |o| format!("{o} ms")),
            heard_ago(m.last_heard_ms, now_ms, m.is_self),
            if m.clock_fenced {
                "  CUT OFF: clock beyond limiter.max_clock_drift_ms"
            } else {
                ""
            },
            if m.is_self { "  (this node)" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How long ago a member was last heard from, for `members`: "-" for this node, "never" when
/// nothing has arrived from it.
fn heard_ago(last_heard_ms: Option<u64>, now_ms: u64, is_self: bool) -> String {
    match last_heard_ms {
        _ if is_self => "-".to_owned(),
        None => "never".to_owned(),
        Some(t) => format!("{:.1} s ago", now_ms.saturating_sub(t) as f64 / 1000.0),
    }
}

/// `limitmesh validate`: exit 0 when every file is valid.
pub fn validate(args: &ValidateArgs) -> ExitCode {
    let mut ok = true;
    let mut options = LoadOptions::default();
    if let Some(path) = &args.config {
        // The key files too: a node reads them before it starts, so a missing or malformed one
        // is a deployment error like any other.
        let checked = Config::load(Some(path))
            .and_then(|c| c.cluster_keys().map(|_| c))
            .and_then(|c| c.naming_secret().map(|_| c));
        match checked {
            Ok(config) => {
                println!("{}: ok", path.display());
                options = config.rules_load_options();
            }
            Err(e) => {
                eprintln!("{e}");
                ok = false;
            }
        }
    }
    match RuleSet::load(&RulesSource::Path(args.rules.clone()), options) {
        Ok(set) => println!(
            "{}: ok ({} domains, {} rules)",
            args.rules.display(),
            set.domain_count(),
            set.rule_count()
        ),
        Err(e) => {
            eprintln!("{e}");
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_parse_or_name_the_bad_one() {
        let d = parse_descriptor("tenant=42, route=/login").unwrap();
        assert_eq!(d.entries.len(), 2);
        assert_eq!(d.entries[1].value, "/login");
        assert!(matches!(
            parse_descriptor("tenant"),
            Err(CliError::Descriptor(_))
        ));
        let cli = Cli::try_parse_from([
            "limitmesh",
            "check",
            "--domain",
            "d",
            "-d",
            "a=1",
            "--hits",
            "3",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(Command::Check(ref c)) if c.hits == Some(3)));
        assert!(
            Cli::try_parse_from(["limitmesh"])
                .unwrap()
                .command
                .is_none()
        );
    }
}
