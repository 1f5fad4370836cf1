//! Who is in the cluster, as the `Members` RPC reports it. The membership layer implements
//! [`MembersSource`]; until a node has one, [`SingleNode`] reports the node alone.

/// A member's liveness, as the failure detector sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberState {
    Alive,
    Suspect,
    Down,
}

/// One member, as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// Stable for the member's process lifetime (a fresh one per boot).
    pub id: String,
    /// `host:port` of its gossip socket.
    pub address: String,
    pub state: MemberState,
    pub is_self: bool,
    /// Wall time of the member's process start, Unix milliseconds.
    pub boot_ms: u64,
    /// Estimated offset of its wall clock from cluster time (positive: ahead).
    pub clock_offset_ms: i64,
    /// Cut off for admission because its clock is beyond `limiter.max_clock_drift_ms`.
    pub clock_fenced: bool,
}

/// Anything that can list the members (the membership layer).
pub trait MembersSource: Send + Sync + 'static {
    /// Every member known, this node included, in any order.
    fn members(&self) -> Vec<MemberInfo>;
}

/// A node without a cluster: itself, alive.
#[derive(Debug, Clone)]
pub struct SingleNode {
    me: MemberInfo,
}

impl SingleNode {
    pub fn new(id: impl Into<String>, address: impl Into<String>, boot_ms: u64) -> Self {
        Self {
            me: MemberInfo {
                id: id.into(),
                address: address.into(),
                state: MemberState::Alive,
                is_self: true,
                boot_ms,
                clock_offset_ms: 0,
                clock_fenced: false,
            },
        }
    }
}

impl MembersSource for SingleNode {
    fn members(&self) -> Vec<MemberInfo> {
        vec![self.me.clone()]
    }
}
