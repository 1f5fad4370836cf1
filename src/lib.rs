//! limitmesh: a distributed sliding-window rate limiter that runs as a sidecar.
//!
//! # Layout
//! - [`clock`]: the wall clock (the only place it is read), rollback guard, hybrid logical clock.
//! - [`window`]: the time wheel: epoch-aligned buckets, sliding estimates, the lock-free ring.
//! - [`crdt`]: replica state per window: per-origin registers, version vectors, merge.
//! - [`limiter`]: keys and limits, the key table, admission by demand share, decisions.
//! - [`membership`]: SWIM membership (foca): identity, codec, timers, rejoin.
//! - [`gossip`]: the authenticated datagram envelope and register bodies.
//! - [`discovery`]: seeds from a DNS name, re-resolved periodically.
//! - [`node`]: the node loop: socket, membership, summary rounds, anti-entropy, view.
//! - [`transport`]: the datagram-socket seam (real UDP or simulated).
//! - [`admin`]: the admin HTTP endpoint: metrics, health, readiness, members, JSON checks.
//! - [`envoy_json`]: envoyproxy/ratelimit's `/json` check, on the Envoy service.
//! - [`cli`]: the command line: serve, check, inspect, members, validate, bench.
//! - [`service`]: a whole node process wired from its configuration, with graceful shutdown.
//! - [`snapshot`]: the node's registers on disk across a whole-fleet restart (`state_path`).
//! - [`rules`]: which limit applies to a descriptor (envoyproxy/ratelimit YAML), hot reload.
//! - [`config`]: node configuration: TOML, `LIMITMESH__` overrides, defaults, validation.
//! - [`rpc`]: gRPC services (own API, Envoy RLS v3, health, reflection) on any incoming stream.
//! - [`proto`]: generated protobuf messages, servers and clients.
//! - [`metrics`]: the Prometheus registry and the node's metric families.
//!
//! The core (`window`, `crdt`, `limiter`) is sans-IO: it is handed `now_ms` and messages and
//! never reads a clock, a socket or a random number generator.

pub mod admin;
pub mod cli;
pub mod clock;
pub mod config;
pub mod discovery;
pub mod envoy_json;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod gossip;
pub mod membership;
pub mod metrics;
pub mod node;
pub mod proto;
pub mod rpc;
pub mod rules;
pub mod service;
pub mod snapshot;
pub mod transport;

pub use limitmesh_core::{crdt, ledger, limiter, window};
