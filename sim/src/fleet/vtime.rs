//! Virtual time for the in-process simulator: one counter of milliseconds the engine moves,
//! read by every node through its own wall-clock skew.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use limitmesh::clock::TimeSource;

/// Wall time at the start of every fleet simulation (2023-11-14T22:13:20Z).
pub const EPOCH_MS: u64 = 1_700_000_000_000;

/// The engine's clock: milliseconds since the start of the run.
#[derive(Debug, Default)]
pub struct VirtualClock {
    elapsed_ms: AtomicU64,
}

impl VirtualClock {
    pub fn now(&self) -> u64 {
        self.elapsed_ms.load(Ordering::Relaxed)
    }

    pub fn set(&self, ms: u64) {
        self.elapsed_ms.store(ms, Ordering::Relaxed);
    }
}

/// One node's raw clocks: the virtual clock, its wall clock off by a skew the engine may change.
#[derive(Debug, Clone)]
pub struct NodeTime {
    clock: Arc<VirtualClock>,
    skew_ms: Arc<AtomicI64>,
}

impl NodeTime {
    pub fn new(clock: Arc<VirtualClock>, skew_ms: Arc<AtomicI64>) -> Self {
        Self { clock, skew_ms }
    }
}

impl TimeSource for NodeTime {
    fn wall_ms(&self) -> u64 {
        (EPOCH_MS + self.clock.now()).saturating_add_signed(self.skew_ms.load(Ordering::Relaxed))
    }

    fn mono_ms(&self) -> u64 {
        self.clock.now()
    }
}
