//! An in-process, discrete-event simulator of a whole fleet, for cluster sizes turmoil cannot
//! reach: it drives each node's sans-IO core ([`limitmesh::node::NodeCore`]) and real limiter
//! in one thread, with virtual time, a simulated network (latency, loss, partitions) and the
//! faults of a fleet (crashes, rolling deploys), from one seed, byte for byte reproducible.
//!
//! - `config.rs`: the run, the built-in fleet scenarios, and the bounds of a run;
//! - `traffic.rs`: the classes of keys and the keys they make; `load.rs`: the load offered
//!   over time; `arrivals.rs`: the requests, as Poisson streams;
//! - `engine.rs`: the event loop; `event.rs`: what happens; `faults.rs`: partitions, crashes,
//!   rolling deploys; `waiting.rs`: requests waiting for a token under the ledger;
//! - `record.rs` and `report.rs`: what is measured, and the measures.
//!
//! turmoil remains the end-to-end test of the real node, tokio driver included, at small
//! sizes (`crate::cluster`).

mod arrivals;
mod config;
mod engine;
mod event;
mod faults;
mod load;
mod record;
mod report;
mod traffic;
mod vtime;
mod waiting;

pub use config::{
    FLEET_SCENARIOS, FleetConfig, FleetFault, MAX_DURATION_MS, MAX_NODES, MAX_RECORDED_CELLS,
    MAX_REQUESTS_PER_S, MAX_STREAMS, check_size, fleet_scenario,
};
pub use load::Load;
pub use report::{ByClass, FleetReport};
pub use traffic::{KeyCount, Placement, Traffic, TrafficClass, Users};

/// Runs `cfg` to the end and measures it.
pub fn run(name: &str, policy: &str, cfg: &FleetConfig) -> FleetReport {
    let mut engine = engine::Engine::new(cfg);
    engine.run();
    FleetReport::new(name, policy, cfg, &engine.rec)
}
