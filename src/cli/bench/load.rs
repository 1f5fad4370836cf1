//! The load generator: `connections` HTTP/2 connections, each carrying `streams` calls in flight
//! at once (h2load's `-c` and `-m`), every call timed from send to response.

mod workload;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;

use super::super::CliError;
use crate::clock::monotonic_now;
use crate::proto::envoy::service::ratelimit::v3::{RateLimitResponse, rate_limit_response};
use crate::proto::limitmesh::v1::CheckResponse;

pub use self::workload::{Workload, envoy_request, grpc_frame};

/// Which of the node's two rate limit APIs the load calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, as Envoy calls it.
    Envoy,
    /// `limitmesh.v1.RateLimiter/Check` with an inline limit.
    Own,
}

/// Most connections a shape may open.
const MAX_CONNECTIONS: usize = 4096;
/// Most streams a shape may keep open on one connection: the node's default
/// `grpc.max_concurrent_streams`, so that no shape queues calls in the client for one server
/// and not the other.
pub(super) const MAX_STREAMS: usize = 1024;
/// A call unanswered for this long is counted as an error (and the load moves on).
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Connections × calls in flight on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    pub connections: usize,
    pub streams: usize,
}

impl std::str::FromStr for Shape {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{text:?}: expected CONNECTIONSxSTREAMS, e.g. 4x64, with 1 to {MAX_CONNECTIONS} \
                 connections and 1 to {MAX_STREAMS} streams"
            )
        };
        let (c, s) = text.split_once(['x', 'X', '×']).ok_or_else(bad)?;
        let parse = |n: &str, max: usize| match n.trim().parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(bad()),
        };
        let (connections, streams) = (parse(c, MAX_CONNECTIONS)?, parse(s, MAX_STREAMS)?);
        if connections * streams > 65_536 {
            return Err(format!("{text:?}: at most 65 536 calls in flight"));
        }
        Ok(Self {
            connections,
            streams,
        })
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.connections, self.streams)
    }
}

/// One round's measurements.
#[derive(Debug, Clone, Default)]
pub struct Round {
    pub calls: u64,
    pub errors: u64,
    pub seconds: f64,
    pub latencies_us: Vec<u32>,
    /// What the first failed call said.
    pub first_error: Option<String>,
}

impl Round {
    pub fn calls_per_s(&self) -> f64 {
        self.calls as f64 / self.seconds.max(1e-9)
    }
}

/// Why one call failed.
#[derive(Debug)]
enum CallError {
    /// The connection cannot take another call: the stream's task stops.
    Connection(h2::Error),
    Http2(h2::Error),
    Status(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connection(e) => write!(f, "the connection failed: {e}"),
            Self::Http2(e) => write!(f, "HTTP/2: {e}"),
            Self::Status(s) => f.write_str(s),
        }
    }
}

impl From<h2::Error> for CallError {
    fn from(e: h2::Error) -> Self {
        Self::Http2(e)
    }
}

/// The calls' fixed parts: a load generator must cost far less than the server it measures,
/// so each call sends a pre-encoded gRPC message over HTTP/2 (as h2load does) and checks the
/// answer, rather than going through a full gRPC client stack.
struct Calls {
    uri: http::Uri,
    work: Arc<Workload>,
}

impl Calls {
    fn new(addr: SocketAddr, work: Arc<Workload>) -> Result<Self, CliError> {
        let path = match work.api {
            Api::Envoy => "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            Api::Own => "/limitmesh.v1.RateLimiter/Check",
        };
        let uri = format!("http://{addr}{path}")
            .parse()
            .map_err(|e| CliError::Bench(format!("{addr}: {e}")))?;
        Ok(Self { uri, work })
    }

    /// One unary call: the request, then the response's headers, message and trailers; an
    /// answer that is not gRPC status 0 with an admitting message is an error.
    async fn call(
        &self,
        connection: &h2::client::SendRequest<bytes::Bytes>,
        key: usize,
    ) -> Result<(), CallError> {
        let request = http::Request::post(self.uri.clone())
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(())
            .map_err(|e| CallError::Status(e.to_string()))?;
        let mut sender = connection
            .clone()
            .ready()
            .await
            .map_err(CallError::Connection)?;
        let (response, mut stream) = sender.send_request(request, false)?;
        stream.send_data(self.work.bodies[key].clone(), true)?;
        let response = response.await?;
        if response.status() != http::StatusCode::OK {
            return Err(CallError::Status(format!("HTTP {}", response.status())));
        }
        // A trailers-only answer (an error) carries its status in the headers.
        if let Some(status) = response.headers().get("grpc-status") {
            return Err(CallError::Status(format!("grpc-status {status:?}")));
        }
        let mut body = response.into_body();
        let mut message = bytes::BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?;
        let status = trailers.as_ref().and_then(|t| t.get("grpc-status"));
        if status.map(|s| s.as_bytes()) != Some(b"0") {
            return Err(CallError::Status(format!("grpc-status {status:?}")));
        }
        if self.admitted(&message) {
            Ok(())
        } else {
            Err(CallError::Status("not admitted, or not a response".into()))
        }
    }

    fn admitted(&self, frame: &[u8]) -> bool {
        let Some(message) = frame.get(5..) else {
            return false;
        };
        match self.work.api {
            Api::Envoy => RateLimitResponse::decode(message).is_ok_and(|r| {
                r.overall_code == rate_limit_response::Code::Ok as i32
                    || (self.work.refusals_ok
                        && r.overall_code == rate_limit_response::Code::OverLimit as i32)
            }),
            Api::Own => CheckResponse::decode(message).is_ok_and(|r| r.allowed),
        }
    }
}

/// Opens one HTTP/2 connection, TCP_NODELAY on as Envoy's client sets it.
async fn connect(addr: SocketAddr) -> Result<h2::client::SendRequest<bytes::Bytes>, CliError> {
    let failed =
        |e: &dyn std::fmt::Display| CliError::Bench(format!("cannot connect to {addr}: {e}"));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| failed(&e))?;
    tcp.set_nodelay(true).map_err(|e| failed(&e))?;
    let (sender, connection) = h2::client::handshake(tcp).await.map_err(|e| failed(&e))?;
    // The connection's own task; it ends when every sender is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Calls `addr` in `shape` for `warmup` seconds, then for `seconds` measured, on the same
/// connections, walking the workload's requests in turn. Only calls that complete in the
/// measured interval count (as h2load counts them), and throughput is their number over exactly
/// `seconds`: Envoy keeps its connections to a rate limit service open, so the burst that opens
/// a fresh connection (the same few milliseconds for any server) is not what it sees.
pub async fn load(
    addr: SocketAddr,
    work: &Arc<Workload>,
    shape: Shape,
    (warmup, seconds): (f64, f64),
) -> Result<Round, CliError> {
    let calls = Arc::new(Calls::new(addr, Arc::clone(work))?);
    let mut connections = Vec::with_capacity(shape.connections);
    for _ in 0..shape.connections {
        connections.push(connect(addr).await?);
    }
    let measured_from = Duration::from_secs_f64(warmup);
    let until = measured_from + Duration::from_secs_f64(seconds);
    let start = monotonic_now();
    let mut tasks = Vec::with_capacity(shape.connections * shape.streams);
    for t in 0..shape.connections * shape.streams {
        let connection = connections[t % connections.len()].clone();
        let calls = calls.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = Round::default();
            // Each task walks every key from its own starting point.
            let mut k = t.wrapping_mul(7_919) % calls.work.bodies.len();
            while start.elapsed() < until {
                k = (k + 1) % calls.work.bodies.len();
                let sent = monotonic_now();
                let (result, timed_out) =
                    match tokio::time::timeout(CALL_TIMEOUT, calls.call(&connection, k)).await {
                        Ok(result) => (result, false),
                        Err(_) => (
                            Err(CallError::Status(format!(
                                "no answer within {CALL_TIMEOUT:?}"
                            ))),
                            true,
                        ),
                    };
                let latency_us = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
                let measured = (measured_from..until).contains(&start.elapsed());
                match result {
                    Ok(()) if measured => {
                        round.calls += 1;
                        round.latencies_us.push(latency_us);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        let connection_failed = matches!(e, CallError::Connection(_));
                        // A dead connection is reported even in the warm-up: nothing after it
                        // will be measured on this stream.
                        if measured || connection_failed {
                            if round.errors == 0 {
                                round.first_error = Some(e.to_string());
                            }
                            round.errors += 1;
                            // A call given up on is the tail too: it shows in the maximum.
                            if timed_out {
                                round.latencies_us.push(latency_us);
                            }
                        }
                        if connection_failed {
                            break;
                        }
                        // Never spin on failures that come back at once.
                        tokio::task::yield_now().await;
                    }
                }
            }
            round
        }));
    }
    drop(connections);
    let mut total = Round::default();
    for task in tasks {
        let r = task.await.map_err(|e| CliError::Bench(e.to_string()))?;
        total.calls += r.calls;
        total.errors += r.errors;
        total.first_error = total.first_error.or(r.first_error);
        total.latencies_us.extend(r.latencies_us);
    }
    total.seconds = seconds;
    Ok(total)
}

/// Throughput and latency over several rounds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub calls_per_s: f64,
    pub p50_us: u32,
    pub p99_us: u32,
    pub p999_us: u32,
    pub max_us: u32,
    pub errors: u64,
    pub first_error: Option<String>,
}

pub fn summarise(rounds: &[Round]) -> Summary {
    let calls: u64 = rounds.iter().map(|r| r.calls).sum();
    let seconds: f64 = rounds.iter().map(|r| r.seconds).sum();
    let mut lat: Vec<u32> = rounds
        .iter()
        .flat_map(|r| r.latencies_us.iter().copied())
        .collect();
    lat.sort_unstable();
    // Nearest rank: the smallest latency that at least a fraction `p` of calls did not exceed.
    let pct = |p: f64| {
        let rank = ((lat.len() as f64 * p).ceil() as usize).max(1);
        lat.get(rank - 1).copied().unwrap_or(0)
    };
    Summary {
        calls_per_s: calls as f64 / seconds.max(1e-9),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        max_us: lat.last().copied().unwrap_or(0),
        errors: rounds.iter().map(|r| r.errors).sum(),
        first_error: rounds.iter().find_map(|r| r.first_error.clone()),
    }
}

#[cfg(test)]
mod tests;
