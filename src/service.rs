//! A whole node process: the limiter, the cluster node, the gRPC services, the admin endpoint,
//! rules reloading and seed discovery, wired from a [`Config`] and stopped in order.
//!
//! Sockets are bound first ([`bind`]) so that a caller (a test, or the CLI printing where to
//! connect) knows the real addresses before anything runs. [`run`] then serves until its
//! shutdown signal, and shuts down gracefully: readiness and gRPC health go to NOT_SERVING
//! first, the node leaves the cluster, in-flight requests drain (bounded), then everything
//! stops.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use thiserror::Error;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{mpsc, watch};

use crate::admin::{self, AdminState, JsonRoute};
use crate::clock::{Clock, OffsetSystemClock};
use crate::config::{Config, ConfigError};
use crate::gossip::wire::WireError;
use crate::metrics::Metrics;
use crate::node::{ClusterCollector, Node, NodeBuilder, NodeError, NodeKeys};
use crate::rpc::{self, HealthHandle, RpcContext, TokenWait};
use crate::rules::{Reload, RulesError, RulesHandle};

/// Resolves on SIGTERM or SIGINT: what stops a node process.
pub async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            tokio::select! {
                biased;
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// How long in-flight requests get to finish after shutdown starts.
const DRAIN: Duration = Duration::from_secs(3);

#[derive(Debug, Error)]
pub enum ServiceError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Rules(#[from] RulesError),
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cluster keyring: {0}")]
    Keyring(#[from] WireError),
    #[error("{0}")]
    Node(#[from] NodeError),
    #[error("{0}")]
    Rpc(#[from] rpc::RpcError),
    #[error("admin HTTP server failed: {0}")]
    Admin(std::io::Error),
    #[error("limiter.state_path: {0}")]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    #[error(
        "{CLOCK_OFFSET_ENV}={value:?}: expected whole milliseconds (an integer, may be negative)"
    )]
    ClockOffset { value: String },
}

/// Runs the node with its wall clock moved by this many milliseconds: for tests and drills of
/// a wrong clock, never for production.
pub const CLOCK_OFFSET_ENV: &str = "LIMITMESH_TEST_CLOCK_OFFSET_MS";

fn clock_offset_from_env() -> Result<i64, ServiceError> {
    match std::env::var(CLOCK_OFFSET_ENV) {
        Err(_) => Ok(0),
        Ok(value) => value
            .trim()
            .parse()
            .map_err(|_| ServiceError::ClockOffset { value }),
    }
}

/// A node ready to serve: its configuration checked, its keys read, its rules loaded and its
/// sockets bound. Everything that can keep a node from starting fails while this is built,
/// before the node says it is serving.
#[derive(Debug)]
pub struct Bound {
    pub grpc: TcpListener,
    pub http: TcpListener,
    pub gossip: UdpSocket,
    keys: NodeKeys,
    rules: RulesHandle,
    clock_offset_ms: i64,
}

impl Bound {
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc.local_addr().unwrap_or_else(|_| unspecified())
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http.local_addr().unwrap_or_else(|_| unspecified())
    }

    pub fn gossip_addr(&self) -> SocketAddr {
        self.gossip.local_addr().unwrap_or_else(|_| unspecified())
    }
}

fn unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

/// Checks the configuration, reads the cluster keys, loads the rules, and binds the gRPC, HTTP
/// and gossip sockets the configuration names.
pub async fn bind(config: &Config) -> Result<Bound, ServiceError> {
    config.validate()?;
    if !config.limiter.state_path.is_empty() {
        crate::snapshot::check_writable(std::path::Path::new(&config.limiter.state_path))?;
    }
    let clock_offset_ms = clock_offset_from_env()?;
    let keys = keys(config)?;
    let rules = RulesHandle::load(config.rules_source(), config.rules_load_options())?;
    let tcp = |what, addr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| ServiceError::Bind { what, addr, source })
    };
    let grpc = tcp("gRPC", config.grpc.listen).await?;
    let http = tcp("HTTP", config.http.listen).await?;
    let gossip = UdpSocket::bind(config.cluster.bind)
        .await
        .map_err(|source| ServiceError::Bind {
            what: "gossip (UDP)",
            addr: config.cluster.bind,
            source,
        })?;
    Ok(Bound {
        grpc,
        http,
        gossip,
        keys,
        rules,
        clock_offset_ms,
    })
}

/// The datagram keyring and the window-naming secret ([`NodeKeys::from_secrets`]).
///
/// Without configured keys, a node with peers must have been allowed `insecure` (its keys
/// derive from the cluster id, which is not a secret), and a node without peers seals with a
/// random key no one else needs to know. Windows are named under the naming secret either way
/// (`Config::naming_secret`), never under a sealing key.
fn keys(config: &Config) -> Result<NodeKeys, ServiceError> {
    let naming = config.naming_secret()?;
    let mut secrets = config.cluster_keys()?;
    if secrets.is_empty() {
        let secret = if config.cluster.has_peers() {
            tracing::warn!(
                "cluster.insecure: datagrams are sealed with a key derived from the cluster id; \
                 anyone who knows it can read and forge them"
            );
            blake3::derive_key(
                "limitmesh insecure cluster key",
                config.cluster.cluster_id.as_bytes(),
            )
        } else {
            let mut key = [0u8; 32];
            key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            key
        };
        secrets.push(secret);
    }
    Ok(NodeKeys::from_secrets(&secrets, &naming)?)
}

/// Saves the registers to `path` every `every` while the node is ready (before then, the
/// file holds what the node has not finished merging), until `stop`.
async fn save_periodically(
    path: std::path::PathBuf,
    every: Duration,
    (limiter, clock, view): (
        Arc<crate::limiter::Limiter>,
        Arc<dyn Clock>,
        Arc<crate::node::ClusterView>,
    ),
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // at once: the first save is one interval after the start
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            _ = ticks.tick() => {}
        }
        if !view.is_ready() {
            continue;
        }
        let (limiter, clock, path) = (limiter.clone(), clock.clone(), path.clone());
        let saved = tokio::task::spawn_blocking(move || {
            crate::snapshot::save(&limiter, &path, clock.now_ms())
        })
        .await;
        match saved {
            Ok(Ok(registers)) => tracing::debug!(registers, "saved the registers"),
            Ok(Err(e)) => tracing::error!(error = %e, "cannot save the registers"),
            Err(e) => tracing::error!(error = %e, "the save of the registers failed"),
        }
    }
}

/// Serves until `shutdown` resolves, then shuts down gracefully.
pub async fn run(
    config: Config,
    bound: Bound,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServiceError> {
    let gossip_addr = bound.gossip_addr();
    // Tables keyed by the ids datagrams name hash them from a seed nobody else knows.
    crate::limiter::seed_id_hashes(uuid::Uuid::new_v4().as_u64_pair().0);
    let node_id = uuid::Uuid::new_v4();
    if bound.clock_offset_ms != 0 {
        tracing::warn!(
            offset_ms = bound.clock_offset_ms,
            "{CLOCK_OFFSET_ENV} is set: this node's wall clock is moved on purpose"
        );
    }
    let mut advertise = config.advertise_addr()?;
    if advertise.port() == 0 || advertise.ip().is_unspecified() {
        // A node without peers may bind anywhere; it advertises what it got.
        advertise = gossip_addr;
    }
    let mut params = config.node_params(node_id, advertise)?;
    for seed in &config.cluster.seeds {
        match tokio::net::lookup_host(seed.as_str()).await {
            Ok(addrs) => params.seeds.extend(addrs),
            Err(e) => tracing::warn!(%seed, error = %e, "cannot resolve seed; will rely on others"),
        }
    }
    // The digest of the rules in force, said to the members; a reload updates it.
    let rules_digest = crate::node::RulesDigest::new(bound.rules.current().digest());
    params.rules_digest = rules_digest.clone();
    let state_path = params.state_path.clone();
    let save_every = Duration::from_millis(config.limiter.state_save_interval_ms);
    let core = NodeBuilder::new(
        params,
        config.limiter_config(),
        bound.keys,
        OffsetSystemClock {
            offset_ms: bound.clock_offset_ms,
        },
    )
    .build()?;
    let (clock, limiter, view) = (
        core.clock().clone(),
        core.limiter().clone(),
        core.view().clone(),
    );
    let rules = Arc::new(bound.rules);
    let mut metrics = Metrics::new();
    metrics
        .registry
        .register_collector(Box::new(ClusterCollector {
            view: view.clone(),
            limiter: limiter.clone(),
        }));
    let current = rules.current();
    metrics.set_rules_loaded(current.domain_count(), current.rule_count());
    let metrics = Arc::new(metrics);

    // The servers stop first; the node loop last, so that its final round carries everything
    // they admitted.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (node_stop_tx, node_stop_rx) = watch::channel(false);
    let stopped = move |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // The cluster node.
    // Room for the asks of a burst of requests; an ask that finds it full is skipped (the
    // request waits for what another's ask brings).
    let (commands, command_rx) = mpsc::channel(64);
    let node = Node::new(core, Arc::new(bound.gossip));
    let node_task = tokio::spawn(node.run(command_rx, stopped(node_stop_rx)));
    if !config.cluster.seed_dns.is_empty() {
        tokio::spawn(crate::discovery::resolve_seeds_periodically(
            config.cluster.seed_dns.clone(),
            Duration::from_millis(config.cluster.dns_refresh_ms),
            commands.clone(),
            stopped(stop_rx.clone()),
        ));
    }

    // Rules reloading.
    if !config.rules.path.is_empty() {
        let metrics = metrics.clone();
        tokio::spawn(crate::rules::watch(
            rules.clone(),
            Duration::from_millis(config.rules.reload_interval_ms),
            move |reload| match reload {
                Reload::Loaded(set) => {
                    metrics.record_rules_reload(true);
                    metrics.set_rules_loaded(set.domain_count(), set.rule_count());
                    rules_digest.set(set.digest());
                }
                Reload::Failed => metrics.record_rules_reload(false),
            },
            stopped(stop_rx.clone()),
        ));
    }

    // gRPC. Health says SERVING only once the node holds the cluster's state.
    let health = HealthHandle::until_ready();
    let ctx = RpcContext {
        limiter: limiter.clone(),
        rules: rules.clone(),
        clock: clock.clone() as Arc<dyn Clock>,
        members: view.clone(),
        metrics: metrics.clone(),
        tokens: TokenWait::for_node(&limiter, &commands, &view),
    };
    let grpc_addr = bound.grpc.local_addr().unwrap_or_else(|_| unspecified());
    let incoming = rpc::tcp_incoming(bound.grpc);
    let serve_options = config.serve_options();
    let rate_limit_headers = serve_options.rate_limit_headers;
    let grpc_task = tokio::spawn(rpc::serve_with_options(
        incoming,
        ctx.clone(),
        serve_options,
        health.clone(),
        stopped(stop_rx.clone()),
    ));

    // Admin HTTP. `POST /json` consumes quota: served only where `http.json` allows.
    let ready = Arc::new(AtomicBool::new(false));
    let json_served = config.json_check_served();
    match &json_served {
        Ok(()) => tracing::info!(http = %config.http.listen, "POST /json is served"),
        Err(reason) => {
            tracing::info!(http = %config.http.listen, "POST /json is not served: {reason}")
        }
    }
    let admin_state = AdminState {
        metrics: metrics.clone(),
        view: view.clone(),
        ready: ready.clone(),
        json: JsonRoute::new(json_served, || {
            Arc::new(crate::envoy_json::JsonChecker::new(ctx, rate_limit_headers))
        }),
    };
    let admin_task = tokio::spawn(admin::serve(
        bound.http,
        admin_state,
        stopped(stop_rx.clone()),
    ));

    // Periodic snapshots, so that a crash loses only what was admitted since the last.
    let saver = state_path.clone().map(|path| {
        tokio::spawn(save_periodically(
            path,
            save_every,
            (
                limiter.clone(),
                clock.clone() as Arc<dyn Clock>,
                view.clone(),
            ),
            stopped(stop_rx.clone()),
        ))
    });

    let readiness = tokio::spawn({
        let (view, health, ready, stop) =
            (view.clone(), health.clone(), ready.clone(), stop_rx.clone());
        async move {
            tokio::select! {
                biased;
                _ = stopped(stop) => {}
                _ = view.ready() => {
                    health.set_ready().await;
                    ready.store(true, Ordering::Relaxed);
                }
            }
        }
    });
    tracing::info!(
        id = %node_id,
        grpc = %grpc_addr,
        gossip = %advertise,
        rules = %rules.source().describe(),
        "serving"
    );

    shutdown.await;
    tracing::info!("shutting down: not serving, draining, leaving the cluster");
    readiness.abort();
    ready.store(false, Ordering::Relaxed);
    health.set_not_serving().await;
    let _ = stop_tx.send(true);
    let (grpc_abort, admin_abort) = (grpc_task.abort_handle(), admin_task.abort_handle());
    let (grpc, admin_result) = tokio::join!(
        tokio::time::timeout(DRAIN, grpc_task),
        tokio::time::timeout(DRAIN, admin_task),
    );
    // Whatever is still running past the drain admits nothing more: the final round and the
    // snapshot below hold every admission.
    grpc_abort.abort();
    admin_abort.abort();
    if let Some(saver) = saver {
        // It stops at the signal; a save it had begun finishes before the last one starts.
        let _ = saver.await;
    }
    limiter.set_warming_until(u64::MAX);
    let _ = node_stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN, node_task).await;
    drop(commands);
    if let Ok(Ok(Err(e))) = grpc {
        return Err(e.into());
    }
    if let Ok(Ok(Err(e))) = admin_result {
        return Err(ServiceError::Admin(e));
    }
    if let Some(path) = &state_path
        && !view.is_ready()
    {
        // The saved registers are merged at the end of the warm-up: a node stopped before then
        // never merged them, and must not overwrite them with less.
        tracing::warn!(path = %path.display(), "stopped while warming up: the saved registers are kept as they were");
    } else if let Some(path) = &state_path {
        // After the gRPC server and the node loop have stopped: nothing is admitted any more.
        let saved = crate::snapshot::save(&limiter, path, clock.now_ms())?;
        tracing::info!(path = %path.display(), registers = saved, "saved the registers");
    }
    tracing::info!("stopped");
    Ok(())
}
