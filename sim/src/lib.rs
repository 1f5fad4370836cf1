//! Deterministic network simulation of a limitmesh cluster.
//!
//! Real node code ([`limitmesh::node::Node`] and [`limitmesh::limiter::Limiter`]) runs on
//! turmoil's simulated network and clock. Everything that could vary between runs is seeded
//! or ordered: turmoil's RNG and epoch, each node's boot id and randomness, the workload's
//! arrivals and the injected faults. The same seed gives the same report, byte for byte.
//!
//! - [`net`]: the simulated datagram socket, which also injects loss and duplication;
//! - [`clock`]: per-host wall clocks with adjustable skew and rollback;
//! - [`workload`]: offered load per node over time;
//! - [`cluster`]: builds the simulation, runs it with a fault schedule, and samples;
//! - [`report`]: turns what was recorded into the measures of the design; [`plot`]: the same
//!   as a page of plots;
//! - [`scenario`] and [`scenario_file`]: the built-in scenarios, and runs described in TOML;
//! - [`grpc`]: the production gRPC server and its clients on simulated TCP;
//! - [`fleet`]: an in-process simulator of the node core at fleet sizes (up to thousands), its
//!   traffic built in or read from a fleet traffic file, and a matrix of traffic;
//! - [`results`]: the page of every recorded figure (`docs/results.md`), from their JSON.

pub mod clock;
pub mod cluster;
pub mod fleet;
pub mod grpc;
pub mod net;
pub mod one_check;
pub mod plot;
pub mod report;
pub mod results;
pub mod scenario;
pub mod scenario_file;
pub mod workload;

pub use cluster::{Fault, Outcome, SimConfig, run};
pub use report::Report;
