//! The two services under test, each in a process of its own as in production: `limitmesh
//! bench --serve noop|limitmesh` binds an ephemeral loopback port, prints it on the first line of
//! its standard output, and serves until SIGTERM or SIGINT (or a time limit, so that a server
//! whose driver died still stops on its own). The driver starts both through [`ServerProcess`].

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::super::CliError;
use crate::config::Config;

/// Which service a server process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// The no-op baseline (both APIs answered OK at once).
    Noop,
    /// A limitmesh node: the demo configuration on ephemeral loopback ports, no peers.
    Limitmesh,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Self::Noop => "no-op",
            Self::Limitmesh => "limitmesh",
        }
    }
}

fn bench_error(what: &str) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Bench(format!("{what}: {e}"))
}

/// Serves `target` in this process; prints the gRPC address, then serves for at most
/// `max_seconds` or until SIGTERM/SIGINT.
pub async fn serve(target: Target, max_seconds: u64) -> Result<(), CliError> {
    let stop = async move {
        tokio::select! {
            biased;
            () = crate::service::termination() => {}
            () = tokio::time::sleep(Duration::from_secs(max_seconds)) => {}
        }
    };
    match target {
        Target::Noop => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(bench_error("binding the no-op service"))?;
            let addr = listener
                .local_addr()
                .map_err(bench_error("the no-op's address"))?;
            println!("{addr}");
            super::noop::serve(listener, stop)
                .await
                .map_err(|e| CliError::Bench(format!("no-op service: {e}")))
        }
        Target::Limitmesh => {
            // The demo configuration, with LIMITMESH__SECTION__KEY overrides as a node takes them.
            let mut config = Config::load(None)?;
            config.grpc.listen = "127.0.0.1:0".parse().expect("literal address");
            config.http.listen = "127.0.0.1:0".parse().expect("literal address");
            config.cluster.bind = "127.0.0.1:0".parse().expect("literal address");
            let bound = crate::service::bind(&config)
                .await
                .map_err(|e| CliError::Bench(e.to_string()))?;
            println!("{}", bound.grpc_addr());
            crate::service::run(config, bound, stop)
                .await
                .map_err(|e| CliError::Bench(e.to_string()))
        }
    }
}

/// A server process started by the driver; killed when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
}

impl ServerProcess {
    /// Starts `limitmesh bench --serve target` from this very executable and waits for its
    /// address.
    pub fn start(target: Target, max_seconds: u64) -> Result<Self, CliError> {
        let exe = std::env::current_exe().map_err(bench_error("finding this executable"))?;
        let mut child = Command::new(exe)
            .args(["bench", "--serve", target.name_arg()])
            .args(["--serve-seconds", &max_seconds.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(bench_error("starting a server process"))?;
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .map(|out| BufReader::new(out).read_line(&mut line));
        let addr = match (read, line.trim().parse::<SocketAddr>()) {
            (Some(Ok(_)), Ok(addr)) => addr,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CliError::Bench(format!(
                    "the {} server process printed {:?} instead of its address",
                    target.name(),
                    line.trim()
                )));
            }
        };
        Ok(Self { child, addr })
    }
}

impl Target {
    fn name_arg(self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Limitmesh => "limitmesh",
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
