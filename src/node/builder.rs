//! One way to build a node, for the service, the simulators and the tests: the cluster clock
//! over a time source, the limiter under this node's origin, the published view, the keys, and
//! the registers saved at the last stop.

use std::sync::Arc;

use tokio::time::Instant;

use super::core::{CoreParts, NodeCore};
use super::view::ClusterView;
use super::{NodeError, NodeParams};
use crate::clock::{ClusterClock, Now, TimeSource, monotonic_now};
use crate::gossip::wire::{Keyring, WireError};
use crate::limiter::{KeyHasher, Limiter, LimiterConfig, OriginId};

/// The datagram keyring and the secret that names windows.
#[derive(Debug)]
pub struct NodeKeys {
    pub keyring: Keyring,
    pub hasher: KeyHasher,
}

impl NodeKeys {
    /// The keyring of `secrets` (the first seals, any opens), with windows named under
    /// `naming`, a secret of its own: the sealing keys rotate, and a window's name must not
    /// move with them, or every quota would start over at each step of a rotation (and nodes
    /// a step apart would not see each other's counts), and registers saved to disk would
    /// name windows no later process knows.
    pub fn from_secrets(secrets: &[[u8; 32]], naming: &[u8; 32]) -> Result<Self, WireError> {
        Ok(Self {
            keyring: Keyring::new(secrets)?,
            hasher: KeyHasher::from_secret(naming),
        })
    }
}

/// What a node is built from.
#[derive(Debug)]
pub struct NodeBuilder<T> {
    pub params: NodeParams,
    pub limiter: LimiterConfig,
    pub keys: NodeKeys,
    /// The raw clocks cluster time runs on.
    pub time: T,
}

impl<T: TimeSource> NodeBuilder<T> {
    pub fn new(params: NodeParams, limiter: LimiterConfig, keys: NodeKeys, time: T) -> Self {
        Self {
            params,
            limiter,
            keys,
            time,
        }
    }

    /// Builds the node now.
    pub fn build(self) -> Result<NodeCore<T>, NodeError> {
        self.build_at(monotonic_now())
    }

    /// Builds the node at monotonic time `at` (a simulator's virtual time). Reads the registers
    /// saved at the last stop, if the parameters name a file.
    pub fn build_at(self, at: Instant) -> Result<NodeCore<T>, NodeError> {
        let clock = Arc::new(ClusterClock::new(self.time));
        let limiter = Arc::new(Limiter::new(
            self.limiter,
            OriginId(self.params.node_id.as_u128()),
            self.keys.hasher,
        ));
        let saved = self
            .params
            .state_path
            .as_deref()
            .map(|path| crate::snapshot::read_or_set_aside(path, &limiter));
        let now = Now::read_at(&clock, at);
        NodeCore::new(
            self.params,
            CoreParts {
                clock,
                limiter,
                keyring: Arc::new(self.keys.keyring),
                view: Arc::new(ClusterView::default()),
                saved,
            },
            now,
        )
    }
}
