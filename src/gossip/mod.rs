//! Everything that crosses the network between nodes: the authenticated datagram envelope and
//! the bodies that carry registers.

mod keyring;
pub mod message;
mod replay;
pub mod wire;
