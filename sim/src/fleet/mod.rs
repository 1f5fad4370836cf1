//! An in-process, discrete-event simulator of a whole fleet, for cluster sizes turmoil cannot
//! reach: it drives each node's sans-IO core ([`limitmesh::node::NodeCore`]) and real limiter
//! in one thread, with virtual time, a simulated network (latency, loss, partitions) and the
//! faults of a fleet (crashes, rolling deploys), from one seed, byte for byte reproducible.
//!
//! - `config.rs`: the run, the built-in fleet scenarios, and the bounds of a run;
//! - `traffic.rs`: the classes of keys and the keys they make; `load.rs`: the load offered
//!   over time; `arrivals.rs`: the requests, as Poisson streams;
//! - `file.rs`: a run described in a TOML file (`file_class.rs`: a class of keys in it;
//!   `file_values.rs`: values of more than one form; `file_text.rs`: errors at their line);
//! - `engine.rs`: the event loop; `event.rs`: what happens; `faults.rs`: partitions, crashes,
//!   rolling deploys; `waiting.rs`: requests waiting for a token under the ledger;
//!   `probes.rs`: node 0's probes and their observers (staleness, failure detection);
//! - `record.rs` and `report.rs`: what is measured, and the measures; `trace.rs`: what the
//!   plots of a run draw;
//! - `policies.rs`: the admissions a run is compared under; `table.rs`: the output as a
//!   table; `matrix.rs`: a sweep of traffic.
//!
//! turmoil remains the end-to-end test of the real node, tokio driver included, at small
//! sizes (`crate::cluster`).

mod arrivals;
mod config;
mod engine;
mod event;
mod faults;
pub mod file;
mod file_class;
mod file_text;
mod file_values;
mod load;
pub mod matrix;
pub mod policies;
mod probes;
mod record;
mod report;
pub mod table;
mod trace;
mod traffic;
mod vtime;
mod waiting;

pub use config::{
    FLEET_SCENARIOS, FleetConfig, FleetFault, MAX_DURATION_MS, MAX_NODES, MAX_RECORDED_CELLS,
    MAX_REQUESTS_PER_S, MAX_STREAMS, check_size, fleet_scenario,
};
pub use load::Load;
pub use report::{ByClass, FleetReport};
pub use trace::{FleetTrace, TracedKey};
pub use traffic::{KeyCount, Placement, Traffic, TrafficClass, Users};

/// Runs `cfg` to the end and measures it.
pub fn run(name: &str, policy: &str, cfg: &FleetConfig) -> FleetReport {
    let mut engine = engine::Engine::new(cfg);
    engine.run();
    FleetReport::new(name, policy, cfg, &engine.rec)
}

/// Runs `cfg` to the end, measures it, and keeps what its plots draw.
pub fn run_traced(name: &str, policy: &str, cfg: &FleetConfig) -> (FleetReport, FleetTrace) {
    let mut engine = engine::Engine::new(cfg);
    engine.run();
    let (report, histogram) = FleetReport::measure(name, policy, cfg, &engine.rec);
    let trace = FleetTrace::new(cfg, &engine.keys, &engine.rec, histogram);
    (report, trace)
}
