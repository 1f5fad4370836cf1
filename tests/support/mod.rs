//! Helpers for tests that run the built `limitmesh` binary as users do: scratch directories,
//! node processes on 127.0.0.1, and minimal gRPC and HTTP clients.

#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use limitmesh::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use limitmesh::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use limitmesh::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
pub use rustix::process::Signal;
use tonic::transport::Channel;

pub mod partition;

/// The tests here take turns: each starts real processes, and on a two-core machine four nodes
/// and two clients at once starve each other's gossip and skew the timing being measured.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A UDP port nobody is using right now (the OS picks it; it is released for the node to
/// bind). Only a node with seeds needs one chosen in advance: its peers must reach a fixed
/// port (`cluster.advertise`). Every other port is 0, and the node says what it bound.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

/// A directory for one test's files, removed when the test ends.
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    pub fn new(name: &str) -> Self {
        Self(
            tempfile::Builder::new()
                .prefix(&format!("limitmesh-{name}-"))
                .tempdir()
                .expect("scratch dir"),
        )
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Writes a file atomically (a rename), as a deployment tool would.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        let tmp = self.path().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        path
    }
}

pub struct Node {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub gossip: SocketAddr,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub const KEY_B64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="; // 32 bytes 0..=31

/// The ports a node listens on; 0: any (the node says which it got).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ports {
    pub grpc: u16,
    pub http: u16,
    pub gossip: u16,
    /// The gossip port peers are told to use (`cluster.advertise`), when it is not `gossip`'s:
    /// a [`partition::Proxy`] in between.
    pub advertise: Option<u16>,
}

impl Ports {
    /// Any ports; a fixed gossip port when the node has seeds (see [`free_udp_port`]).
    pub fn for_node(seeded: bool) -> Self {
        Self {
            gossip: if seeded { free_udp_port() } else { 0 },
            ..Self::default()
        }
    }
}

impl Node {
    /// The ports this node bound, to start it again on the same ones.
    pub fn ports(&self) -> Ports {
        Ports {
            grpc: self.grpc.port(),
            http: self.http.port(),
            gossip: self.gossip.port(),
            advertise: None,
        }
    }
}

/// Starts a node and waits until it is ready.
pub fn start(scratch: &Scratch, name: &str, rules: &Path, seeds: &[SocketAddr]) -> Node {
    let ports = Ports::for_node(!seeds.is_empty());
    let node = spawn(scratch, name, rules, seeds, ports, "");
    wait_ready(&node, name);
    node
}

/// Starts a node on `ports` without waiting for it; `extra` is appended to its config file
/// (whole TOML tables, such as `[limiter]`).
pub fn spawn(
    scratch: &Scratch,
    name: &str,
    rules: &Path,
    seeds: &[SocketAddr],
    ports: Ports,
    extra: &str,
) -> Node {
    spawn_with_env(scratch, name, rules, seeds, ports, extra, &[])
}

/// As [`spawn`], with environment variables set for the process.
pub fn spawn_with_env(
    scratch: &Scratch,
    name: &str,
    rules: &Path,
    seeds: &[SocketAddr],
    ports: Ports,
    extra: &str,
    env: &[(&str, &str)],
) -> Node {
    let Ports {
        grpc,
        http,
        gossip,
        advertise,
    } = ports;
    let seeds: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    let advertise =
        advertise.map_or_else(String::new, |p| format!("advertise = \"127.0.0.1:{p}\""));
    let config = format!(
        r#"
[node]
name = "{name}"
[grpc]
listen = "127.0.0.1:{grpc}"
[http]
listen = "127.0.0.1:{http}"
[cluster]
bind = "127.0.0.1:{gossip}"
{advertise}
seeds = [{seeds}]
cluster_id = "process-test"
keys = ["{KEY_B64}"]
[rules]
path = "{rules}"
reload_interval_ms = 100
[log]
filter = "warn"
{extra}
"#,
        seeds = seeds.join(", "),
        rules = rules.display()
    );
    let config_path = scratch.write(&format!("{name}.toml"), &config);
    let stderr_path = scratch.path().join(format!("{name}.stderr"));
    let stderr = std::fs::File::create(&stderr_path).expect("a file for stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_limitmesh"))
        .args(["serve", "--config"])
        .arg(&config_path)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("piped");
    let Some(bound) = read_bound_addresses(stdout, &log_path(scratch, name)) else {
        // Not left running: a bare `Child` does not stop its process when dropped.
        let _ = child.kill();
        let _ = child.wait();
        let said = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        panic!("{name} did not say where it listens; it said: {said}");
    };
    Node {
        child,
        grpc: bound[0],
        http: bound[1],
        gossip: bound[2],
    }
}

/// Where the node `name` writes its log (its standard output after the addresses).
pub fn log_path(scratch: &Scratch, name: &str) -> PathBuf {
    scratch.path().join(format!("{name}.stdout"))
}

/// The gRPC, HTTP and gossip addresses a starting node prints (at most 20 s; `None` if it
/// says nothing of them). Its standard output goes to `log` from then on, so that its logs
/// never fill the pipe and a test can read them.
fn read_bound_addresses(stdout: std::process::ChildStdout, log: &Path) -> Option<[SocketAddr; 3]> {
    let mut log = std::fs::File::create(log).ok()?;
    const LABELS: [&str; 3] = ["  gRPC (", "  admin HTTP (", "  gossip (UDP): "];
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut found: [Option<SocketAddr>; 3] = [None; 3];
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line);
            for (i, label) in LABELS.iter().enumerate() {
                if text.starts_with(label) {
                    found[i] = text
                        .trim_end()
                        .rsplit(' ')
                        .next()
                        .and_then(|a| a.parse().ok());
                }
            }
            if let [Some(g), Some(h), Some(u)] = found {
                let _ = tx.send([g, h, u]);
                // Line by line, so that a test reading the file sees whole lines.
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            let _ = std::io::Write::write_all(&mut log, &line);
                        }
                    }
                }
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20)).ok()
}

/// Waits (at most 20 s) until `node` answers `/readyz` with 200.
pub fn wait_ready(node: &Node, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get(node.http, "/readyz").map(|(s, _)| s) != Some(200) {
        assert!(Instant::now() < deadline, "{name} did not become ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (at most `within`) until every one of `nodes` lists `members` alive members.
pub fn wait_formed(nodes: &[Node], members: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while !nodes.iter().all(|n| {
        http_get(n.http, "/v1/members")
            .is_some_and(|(_, b)| b.matches("\"alive\"").count() == members)
    }) {
        assert!(
            Instant::now() < deadline,
            "the cluster of {members} did not form within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends SIGTERM and waits (at most 10 s) for a clean exit.
pub fn stop(node: &mut Node) {
    kill(node, Signal::TERM);
    wait_exited(node);
}

/// Waits (at most 10 s) for the node's process to exit cleanly.
pub fn wait_exited(node: &mut Node) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = node.child.try_wait().expect("wait") {
            assert!(status.success(), "exit status {status}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        // The node is on loopback: never through a proxy the environment may name.
        .proxy(None)
        .http_status_as_error(false)
        .build()
        .into()
}

/// An HTTP GET on the admin port: status and body; `None` if the node does not answer.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut response = http_agent()
        .get(format!("http://{addr}{path}"))
        .call()
        .ok()?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().ok()?;
    Some((status, body))
}

/// An HTTP POST of `body` on the admin port: status and body; `None` if the node does not
/// answer.
pub fn http_post(addr: SocketAddr, path: &str, body: &str) -> Option<(u16, String)> {
    let mut response = http_agent()
        .post(format!("http://{addr}{path}"))
        .send(body)
        .ok()?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().ok()?;
    Some((status, body))
}

pub async fn envoy(node: &Node) -> RateLimitServiceClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.grpc))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connects");
    RateLimitServiceClient::new(channel)
}

pub async fn ask(client: &mut RateLimitServiceClient<Channel>, user: &str) -> RateLimitResponse {
    client
        .should_rate_limit(RateLimitRequest {
            domain: "test".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".into(),
                    value: user.into(),
                }],
                ..Default::default()
            }],
            hits_addend: 0,
        })
        .await
        .expect("answered")
        .into_inner()
}

pub fn rules(per_unit: u32, unit: &str) -> String {
    format!(
        "domain: test\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: {unit}\n      requests_per_unit: {per_unit}\n      name: per-user\n"
    )
}

/// Sends `signal` to the node's process.
pub fn kill(node: &Node, signal: Signal) {
    let pid = i32::try_from(node.child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .expect("a process id");
    rustix::process::kill_process(pid, signal).expect("the signal is sent");
}

/// Asks every node `per_node` times for `user`, round robin; how many were admitted.
pub async fn admitted_round_robin(nodes: &[Node], per_node: usize, user: &str) -> u32 {
    use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
    let mut clients = Vec::new();
    for n in nodes {
        clients.push(envoy(n).await);
    }
    let mut admitted = 0;
    for _ in 0..per_node {
        for c in &mut clients {
            admitted += u32::from(ask(c, user).await.overall_code == Code::Ok as i32);
        }
    }
    admitted
}

/// Sends `rate` requests per second for `user`, round robin over `clients`, for `secs` seconds;
/// returns (requests sent, admission times since the start).
pub async fn drive(
    clients: &mut [RateLimitServiceClient<Channel>],
    user: &str,
    rate: u64,
    secs: u64,
) -> (usize, Vec<Duration>) {
    drive_from(Instant::now(), clients, user, rate, secs).await
}

/// [`drive`] on a schedule that starts at `start_at`, and admission times since it: drivers
/// that share a start share a time line.
pub async fn drive_from(
    start_at: Instant,
    clients: &mut [RateLimitServiceClient<Channel>],
    user: &str,
    rate: u64,
    secs: u64,
) -> (usize, Vec<Duration>) {
    use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
    let mut admitted_at = Vec::new();
    let mut i = 0usize;
    let gap_us = 1_000_000 / rate.max(1);
    while start_at.elapsed() < Duration::from_secs(secs) {
        let n = clients.len();
        if ask(&mut clients[i % n], user).await.overall_code == Code::Ok as i32 {
            admitted_at.push(start_at.elapsed());
        }
        i += 1;
        let next = start_at + Duration::from_micros(gap_us * i as u64);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }
    (i, admitted_at)
}

/// The most admissions in any 1 s window ending after the first second (on the client's clock).
pub fn busiest_second(admitted_at: &[Duration]) -> usize {
    let mut worst = 0;
    for (k, t) in admitted_at.iter().enumerate() {
        if *t < Duration::from_secs(1) {
            continue;
        }
        let n = admitted_at[..=k]
            .iter()
            .rev()
            .take_while(|s| t.saturating_sub(**s) < Duration::from_secs(1))
            .count();
        worst = worst.max(n);
    }
    worst
}
