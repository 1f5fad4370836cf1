//! What the node publishes about the cluster for the API, the admin endpoint and tests: the
//! member list with SWIM state and clock offsets, and the wire counters.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use arc_swap::ArcSwap;

use super::stats::WireStats;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Alive,
    Suspect,
    Down,
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
    /// The member's wall clock minus ours, as estimated from its datagrams (ms; includes up to
    /// one network latency). `None` until it has sent something.
    pub clock_offset_ms: Option<i64>,
}

/// Shared between the node loop (writer) and readers on other tasks.
#[derive(Debug, Default)]
pub struct ClusterView {
    members: ArcSwap<Vec<MemberInfo>>,
    pub wire: WireStats,
    /// Whether the node holds the cluster's state (see `Node::update_readiness`).
    ready: tokio::sync::watch::Sender<bool>,
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

/// Estimates each sender's clock offset from the send times datagrams carry. A sample is
/// `sent − received`, the offset minus the one-way latency, so the largest recent sample is the
/// tightest estimate.
#[derive(Debug, Default)]
pub(crate) struct OffsetEstimator {
    samples: BTreeMap<u128, VecDeque<i64>>,
}

const OFFSET_SAMPLES: usize = 16;

impl OffsetEstimator {
    pub fn observe(&mut self, sender: u128, sent_ms: u64, now_ms: u64) -> i64 {
        let sample = sent_ms as i64 - now_ms as i64;
        let q = self.samples.entry(sender).or_default();
        if q.len() == OFFSET_SAMPLES {
            q.pop_front();
        }
        q.push_back(sample);
        q.iter().copied().max().unwrap_or(sample)
    }

    pub fn estimate(&self, sender: u128) -> Option<i64> {
        self.samples.get(&sender)?.iter().copied().max()
    }

    /// Forgets senders that are no longer members.
    pub fn retain(&mut self, keep: impl Fn(u128) -> bool) {
        self.samples.retain(|s, _| keep(*s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_is_the_tightest_recent_sample() {
        let mut e = OffsetEstimator::default();
        // A peer 100 ms ahead, seen through 3..20 ms of latency.
        for (i, lat) in [20, 3, 15, 9].iter().enumerate() {
            let now = 1_000 + i as u64 * 200;
            e.observe(7, now + 100 - lat, now);
        }
        assert_eq!(e.estimate(7), Some(97));
        e.retain(|s| s != 7);
        assert_eq!(e.estimate(7), None);
    }
}
