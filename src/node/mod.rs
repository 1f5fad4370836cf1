//! A cluster node: SWIM membership, the gossip of window registers and cluster time, around a
//! shared [`Limiter`](crate::limiter::Limiter).
//!
//! The protocol is a sans-IO state machine, [`NodeCore`] (`core.rs`): it is handed each input
//! with the time it happened and returns sealed datagrams and when to wake it next, so that
//! it runs the same under the tokio [`Node`] driver on real UDP, on turmoil's simulated
//! network, in an in-process simulator and in unit tests without a socket or a runtime.
//! [`NodeBuilder`] builds one the same way for all of them.
//!
//! - `core.rs`: the state and the inputs; `receive.rs`: one datagram; `dissemination.rs`:
//!   summary rounds, anti-entropy, bootstrap pushes; `bodies.rs`: what goes in each datagram;
//!   `ownership.rs` (its state), `owner_mode.rs` (its rounds) and `placement.rs`: in large
//!   clusters, registers through each window's owners; `unanswered.rs`: windows whose owner
//!   does not answer; `liveness.rs`: whose demand counts; `member_log.rs`: membership changes
//!   in the log; `not_leasing.rs`: members that lease nothing for their clocks, off the ring; `warmup.rs`: when a starting node may admit; `status.rs`: who counts,
//!   readiness, the published member list; `held_relays.rs`: relays of a live member's
//!   registers, counted once it departs; `clock_sync.rs`: cluster time; `return_route.rs`:
//!   who may be sent registers in an insecure cluster; `rules_digest.rs`: whether the members
//!   enforce the same rules; `timers.rs`: the periodic work; `outbox.rs`: sealing.
//! - `driver.rs`: the tokio loop; `builder.rs`: building a node.
//! - `view.rs`, `stats.rs`, `collector.rs`: what the node publishes (members, wire counters,
//!   metrics).

mod blind_arcs;
mod bodies;
mod builder;
mod clock_sync;
mod collector;
mod core;
mod dissemination;
mod driver;
mod features;
mod held_relays;
mod ledger;
mod ledger_inbox;
mod ledger_join;
mod ledger_leave;
mod ledger_view;
mod liveness;
mod member_log;
mod not_leasing;
mod outbox;
mod owner_mode;
mod ownership;
mod params;
mod placement;
mod receive;
mod relay;
mod return_route;
mod rules_digest;
mod stats;
mod status;
mod timers;
mod unanswered;
mod view;
mod warmup;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;

use thiserror::Error;

pub use self::builder::{NodeBuilder, NodeKeys};
pub use self::clock_sync::ClockStats;
pub use self::collector::ClusterCollector;
pub use self::core::{CoreParts, NodeCore};
pub use self::driver::Node;
pub use self::outbox::Outgoing;
pub use self::ownership::{BACK_TO_FULL_MESH, Dissemination, FULL_MESH_UP_TO};
pub use self::params::NodeParams;
pub use self::placement::{ring_key_of_cluster, ring_key_of_secret};
pub use self::rules_digest::RulesDigest;
pub use self::stats::{WireSnapshot, WireStats};
pub use self::view::{ClusterView, MemberInfo, MemberState};

/// Instructions for a running node.
#[derive(Debug)]
pub enum Command {
    /// Replace the discovered seeds (from DNS); static seeds are kept.
    DiscoveredSeeds(Vec<SocketAddr>),
    /// A request found no token for a window another member leases, or an admitted one left
    /// it short (`TokenNeed::ahead`): ask that member.
    Ask(crate::limiter::TokenNeed),
}

#[derive(Debug, Error)]
pub enum NodeError {
    #[error("max_packet_size {0} leaves no room for a body after the envelope")]
    PacketTooSmall(usize),
}
