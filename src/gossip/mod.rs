//! Everything that crosses the network between nodes: the authenticated datagram envelope and
//! the bodies that carry registers.

pub mod ledger_message;
pub mod message;
pub mod wire;
