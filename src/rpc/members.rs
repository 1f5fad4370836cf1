//! Who is in the cluster, as the `Members` RPC reports it: a node's published view
//! ([`ClusterView`]), or [`SingleNode`] for a node without a cluster.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::node::{ClusterView, MemberInfo, MemberState};

/// Anything that can list the members.
pub trait MembersSource: Send + Sync + 'static {
    /// Every member known, this node included, in any order.
    fn members(&self) -> Arc<Vec<MemberInfo>>;
}

impl MembersSource for ClusterView {
    fn members(&self) -> Arc<Vec<MemberInfo>> {
        ClusterView::members(self)
    }
}

/// A node without a cluster: itself, alive.
#[derive(Debug, Clone)]
pub struct SingleNode {
    me: Arc<Vec<MemberInfo>>,
}

impl SingleNode {
    pub fn new(id: uuid::Uuid, addr: SocketAddr, boot_ms: u64) -> Self {
        Self {
            me: Arc::new(vec![MemberInfo {
                id,
                addr,
                state: MemberState::Alive,
                is_self: true,
                boot_ms,
                clock_offset_ms: Some(0),
                clock_fenced: false,
                last_heard_ms: None,
            }]),
        }
    }
}

impl MembersSource for SingleNode {
    fn members(&self) -> Arc<Vec<MemberInfo>> {
        Arc::clone(&self.me)
    }
}
