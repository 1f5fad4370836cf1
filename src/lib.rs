//! limitmesh: a distributed sliding-window rate limiter that runs as a sidecar.
//!
//! # Layout
//! - [`clock`]: the wall clock (the only place it is read), rollback guard, hybrid logical clock.
//! - [`window`]: the time wheel: epoch-aligned buckets, sliding estimates, the lock-free ring.
//! - [`crdt`]: replica state per window: per-origin registers, version vectors, merge.
//! - [`limiter`]: keys and limits, the key table, admission by demand share, decisions.
//! - [`rules`]: which limit applies to a descriptor (envoyproxy/ratelimit YAML), hot reload.
//! - [`config`]: node configuration: TOML, `LIMITMESH__` overrides, defaults, validation.
//! - [`rpc`]: gRPC services (own API, Envoy RLS v3, health, reflection) on any incoming stream.
//! - [`proto`]: generated protobuf messages, servers and clients.
//! - [`metrics`]: the Prometheus registry and the node's metric families.
//!
//! The core (`window`, `crdt`, `limiter`) is sans-IO: it is handed `now_ms` and messages and
//! never reads a clock, a socket or a random number generator.

pub mod clock;
pub mod config;
pub mod crdt;
pub mod limiter;
pub mod metrics;
pub mod proto;
pub mod rpc;
pub mod rules;
pub mod window;
