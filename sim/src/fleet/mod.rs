//! An in-process, discrete-event simulator of a whole fleet, for cluster sizes turmoil cannot
//! reach: it drives each node's sans-IO core ([`limitmesh::node::NodeCore`]) and real limiter
//! in one thread, with virtual time, a simulated network (latency, loss, partitions) and the
//! faults of a fleet (crashes, rolling deploys), from one seed, byte for byte reproducible.
//!
//! - `config.rs`: the run and the fleet scenarios;
//! - `traffic.rs`: the keys (global, tenant, local) and their Poisson arrivals;
//! - `engine.rs`: the event loop; `event.rs`: what happens; `faults.rs`: partitions, crashes,
//!   rolling deploys;
//! - `record.rs` and `report.rs`: what is measured, and the measures.
//!
//! turmoil remains the end-to-end test of the real node, tokio driver included, at small
//! sizes (`crate::cluster`).

mod config;
mod engine;
mod event;
mod faults;
mod record;
mod report;
mod traffic;
mod vtime;
mod waiting;

pub use config::{FLEET_SCENARIOS, FleetConfig, FleetFault, fleet_scenario};
pub use report::FleetReport;
pub use traffic::{KeyClass, Traffic};

/// Runs `cfg` to the end and measures it.
pub fn run(name: &str, policy: &str, cfg: &FleetConfig) -> FleetReport {
    let mut engine = engine::Engine::new(cfg);
    engine.run();
    FleetReport::new(name, policy, cfg, &engine.rec)
}
