//! A member's identity in SWIM: one per process boot, renewable within the boot.

use std::net::SocketAddr;

use foca::Identity;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `node` is drawn fresh at every boot and is also the process's CRDT origin, so a restarted
/// process never reuses a replica slot its peers still hold. `boot_ms` orders boots of the same
/// address (a restart must win the address over its stale self) and `bump` orders renewals
/// within one boot (after being declared down).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeId {
    pub node: Uuid,
    pub addr: SocketAddr,
    pub boot_ms: u64,
    pub bump: u32,
}

impl NodeId {
    pub fn new(node: Uuid, addr: SocketAddr, boot_ms: u64) -> Self {
        Self {
            node,
            addr,
            boot_ms,
            bump: 0,
        }
    }

    /// A placeholder for a seed known only by address: foca accepts an announce addressed to
    /// any identity with our address.
    pub fn seed(addr: SocketAddr) -> Self {
        Self::new(Uuid::nil(), addr, 0)
    }

    fn rank(&self) -> (u64, u32, Uuid) {
        (self.boot_ms, self.bump, self.node)
    }
}

impl Identity for NodeId {
    type Addr = SocketAddr;

    /// The renewed identity outranks the current one (same boot, higher bump), as foca
    /// requires for an automatic rejoin to succeed.
    fn renew(&self) -> Option<Self> {
        Some(Self {
            bump: self.bump.checked_add(1)?,
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.rank() > adversary.rank()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_and_a_renewal_both_win_the_address() {
        let addr: SocketAddr = "10.0.0.1:7946".parse().unwrap();
        let first = NodeId::new(Uuid::from_u128(9), addr, 1_000);
        let renewed = first.renew().unwrap();
        let restarted = NodeId::new(Uuid::from_u128(1), addr, 2_000);
        assert!(renewed.win_addr_conflict(&first));
        assert!(!first.win_addr_conflict(&renewed));
        assert!(
            restarted.win_addr_conflict(&renewed),
            "a later boot wins whatever its uuid"
        );
        assert_eq!(first.addr(), addr);
    }
}
