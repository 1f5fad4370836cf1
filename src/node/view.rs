//! What the node publishes about the cluster for the API, the admin endpoint and tests: the
//! member list with SWIM state and clock offsets, and the wire counters.

use std::net::SocketAddr;

use arc_swap::ArcSwap;

use super::clock_sync::ClockStats;
use super::stats::WireStats;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Alive,
    Suspect,
    Down,
}

impl From<foca::State> for MemberState {
    fn from(state: foca::State) -> Self {
        match state {
            foca::State::Alive => MemberState::Alive,
            foca::State::Suspect => MemberState::Suspect,
            foca::State::Down => MemberState::Down,
        }
    }
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Alive => "alive",
            MemberState::Suspect => "suspect",
            MemberState::Down => "down",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member's boot id, which is also its CRDT origin.
    pub id: uuid::Uuid,
    pub addr: SocketAddr,
    pub state: MemberState,
    pub is_self: bool,
    pub boot_ms: u64,
    /// The member's wall clock minus cluster time, as estimated from its datagrams (ms; short
    /// by up to one network latency). `None` until it has sent something.
    pub clock_offset_ms: Option<i64>,
    /// Cut off for admission by this node because its clock is beyond `max_clock_drift_ms`
    /// (for this node itself: because its own clock is).
    pub clock_fenced: bool,
    /// When this node last opened a datagram from the member (cluster time, Unix ms); `None`
    /// if it never has (or for this node itself).
    pub last_heard_ms: Option<u64>,
}

/// Shared between the node loop (writer) and readers on other tasks.
#[derive(Debug, Default)]
pub struct ClusterView {
    members: ArcSwap<Vec<MemberInfo>>,
    pub wire: WireStats,
    pub clock: ClockStats,
    /// Live members whose rules differ from this node's, as they last said
    /// (`rules_digest.rs`).
    pub rules_mismatched_members: std::sync::atomic::AtomicU64,
    /// Whether the node holds the cluster's state (see `Node::update_readiness`).
    ready: tokio::sync::watch::Sender<bool>,
    /// Woken whenever an owner's lease or refusal arrives (`ledger.rs`): requests waiting for
    /// a token look again.
    pub leases: tokio::sync::Notify,
}

impl ClusterView {
    /// Whether the node holds the cluster's state and answers as well as the cluster would.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Resolves once the node is ready (at once if it is).
    pub async fn ready(&self) {
        let mut rx = self.ready.subscribe();
        // The sender lives as long as the view, which the caller holds.
        let _ = rx.wait_for(|ready| *ready).await;
    }

    pub(crate) fn set_ready(&self) {
        self.ready.send_replace(true);
    }

    pub fn members(&self) -> std::sync::Arc<Vec<MemberInfo>> {
        self.members.load_full()
    }

    pub(crate) fn publish(&self, members: Vec<MemberInfo>) {
        self.members.store(std::sync::Arc::new(members));
    }

    /// Live members, this node included.
    pub fn live_count(&self) -> usize {
        self.members
            .load()
            .iter()
            .filter(|m| m.state != MemberState::Down)
            .count()
    }
}
