//! The two services under test, each in a process of its own as in production: `limitmesh
//! bench --serve noop|limitmesh` binds an ephemeral loopback port, prints it on the first line of
//! its standard output, and serves until SIGTERM or SIGINT, or a time limit. The driver starts
//! both through [`ServerProcess`] with a pipe on their standard input and asks them to stop when
//! it closes, so that they die with the driver however it ends.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
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

    /// How `--serve` spells it.
    fn name_arg(self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Limitmesh => "limitmesh",
        }
    }
}

fn bench_error(what: &str) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Bench(format!("{what}: {e}"))
}

/// Resolves when standard input reaches its end (or fails). A thread of its own reads it, so
/// that this needs no runtime support for blocking standard input.
async fn stdin_closed() {
    let (closed, closed_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut buf = [0_u8; 64];
        let mut stdin = std::io::stdin().lock();
        while let Ok(n) = std::io::Read::read(&mut stdin, &mut buf) {
            if n == 0 {
                break;
            }
        }
        let _ = closed.send(());
    });
    let _ = closed_rx.await;
}

/// Serves `target` in this process; prints the gRPC address, then serves for at most
/// `max_seconds`, until SIGTERM/SIGINT, or (if `until_stdin_closes`) until standard input
/// closes.
pub async fn serve(
    target: Target,
    max_seconds: u64,
    until_stdin_closes: bool,
    config_path: Option<&Path>,
) -> Result<(), CliError> {
    let stop = async move {
        let stdin = async {
            if until_stdin_closes {
                stdin_closed().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            biased;
            () = crate::service::termination() => {}
            () = stdin => {}
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
            // The demo configuration (or the one given), with LIMITMESH__SECTION__KEY
            // overrides as a node takes them (`grpc.*` and `limiter.*` knobs can be measured
            // so), but always alone on loopback and with no state file: a bench started in a
            // deployed sidecar's environment must not join its cluster or touch its files. The
            // demo's rules are the ones the synthetic load is written for; a given
            // configuration keeps its own.
            let mut config = Config::load(config_path)?;
            config.grpc.listen = "127.0.0.1:0".parse().expect("literal address");
            config.http.listen = "127.0.0.1:0".parse().expect("literal address");
            config.cluster.bind = "127.0.0.1:0".parse().expect("literal address");
            config.cluster.advertise = String::new();
            config.cluster.seeds.clear();
            config.cluster.seed_dns = String::new();
            config.limiter.state_path = String::new();
            if config_path.is_none() {
                config.rules.path = String::new();
            }
            // As many streams per connection as a bench shape may open, so that no shape
            // queues calls in the client for the node and not for the no-op (which has no cap).
            config.grpc.max_concurrent_streams = super::load::MAX_STREAMS as u32;
            let bound = crate::service::bind(&config)
                .await
                .map_err(|e| CliError::Bench(e.to_string()))?;
            // The gRPC address, then the admin HTTP one (for /metrics), in one write so that
            // a reader never sees the first line alone.
            let addresses = format!("{}\n{}\n", bound.grpc_addr(), bound.http_addr());
            print!("{addresses}");
            crate::service::run(config, bound, stop)
                .await
                .map_err(|e| CliError::Bench(e.to_string()))
        }
    }
}

/// How long a server process may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A server process started by the driver; killed when dropped, and stopping on its own when
/// the driver's end of its standard input closes (the driver exited, however).
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
}

impl ServerProcess {
    /// Starts `limitmesh bench --serve target` from this very executable and waits (at most
    /// [`START_TIMEOUT`]) for its address.
    pub fn start(
        target: Target,
        max_seconds: u64,
        config_path: Option<&Path>,
    ) -> Result<Self, CliError> {
        let exe = std::env::current_exe().map_err(bench_error("finding this executable"))?;
        let mut command = Command::new(exe);
        command
            .args([
                "bench",
                "--serve",
                target.name_arg(),
                "--serve-until-stdin-closes",
            ])
            .args(["--serve-seconds", &max_seconds.to_string()]);
        if let Some(path) = config_path {
            command.arg("--config").arg(path);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(bench_error("starting a server process"))?;
        // The first line is the address; whatever follows is drained, so that the server never
        // writes into a closed pipe.
        let (line_tx, line_rx) = std::sync::mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                let mut out = BufReader::new(out);
                let mut line = String::new();
                let _ = out.read_line(&mut line);
                let _ = line_tx.send(line);
                let _ = std::io::copy(&mut out, &mut std::io::sink());
            });
        }
        let line = line_rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
        let Ok(addr) = line.trim().parse::<SocketAddr>() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CliError::Bench(format!(
                "the {} server process printed {:?} instead of its address within {START_TIMEOUT:?}",
                target.name(),
                line.trim()
            )));
        };
        Ok(Self { child, addr })
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
