//! Replica state of a window, merged as a state-based CRDT.
//!
//! An **origin** is one node process boot. For each window, each origin owns one
//! [`Register`]: its whole contribution (admitted per bucket, and its demand), stamped with a
//! per-origin version and a hybrid-logical-clock time. Only the origin writes it. A
//! [`Replica`] maps origin → register; merging keeps, per origin, the register that
//! [`Arbitration`] orders highest. That is a map of last-writer-wins registers under a total
//! order, so merge is commutative, associative and idempotent, and replicas that have seen the
//! same registers hold the same state whatever the order, duplication or loss on the way
//! (`tests.rs` checks these laws as properties).
//!
//! Registers are stamped by a hybrid logical clock ([`Hlc`]), which `max-timestamp`
//! arbitration orders by.
//!
//! A restarted node is a new origin, so its old register simply ages out of the window.

mod counts;
mod hlc;
mod register;
mod replica;
pub mod succession;
mod version;

#[cfg(test)]
mod tests;

pub use counts::Counts;
pub use hlc::{HLC_MAX_PHYSICAL_MS, Hlc, HlcError, HlcTimestamp};
pub use register::{Arbitration, Register, RegisterRef};
pub use replica::{MergeOutcome, OriginIdx, Replica};
pub use version::VersionVector;
