//! Per-host wall clocks. turmoil simulates `tokio::time` but not `SystemTime`, so a host's wall
//! time is the simulation's logical time since the Unix epoch plus this host's skew, which the
//! harness can change at any moment (a step backwards is a rollback). Its monotonic clock is
//! the simulation's elapsed time.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use limitmesh::clock::TimeSource;

/// Shared by the harness (which sets skew and, between steps, the time) and the host.
#[derive(Debug, Default)]
pub struct ClockControl {
    pub skew_ms: AtomicI64,
    /// The simulation's wall time as the harness last saw it, for reads from outside a host.
    pub outside_now_ms: AtomicU64,
    /// The simulation's elapsed time as the harness last saw it.
    pub outside_elapsed_ms: AtomicU64,
}

/// A host's raw clocks (the wall clock may step; nodes run on cluster time over them).
#[derive(Debug, Clone)]
pub struct SimClock {
    control: Arc<ClockControl>,
}

impl SimClock {
    pub fn new(control: Arc<ClockControl>) -> Self {
        Self { control }
    }
}

impl TimeSource for SimClock {
    fn wall_ms(&self) -> u64 {
        let base = turmoil::since_epoch()
            .map(|d| d.as_millis() as u64)
            .unwrap_or_else(|| self.control.outside_now_ms.load(Ordering::Relaxed));
        base.saturating_add_signed(self.control.skew_ms.load(Ordering::Relaxed))
    }

    /// The simulation's elapsed time: every host's monotonic clock runs at the true rate.
    fn mono_ms(&self) -> u64 {
        turmoil::sim_elapsed()
            .map(|d| d.as_millis() as u64)
            .unwrap_or_else(|| self.control.outside_elapsed_ms.load(Ordering::Relaxed))
    }
}
