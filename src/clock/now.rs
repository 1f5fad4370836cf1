//! One reading of every clock the node core uses, taken once per input by whoever drives it
//! (a summary round, which steers cluster time, reads it once more after steering).

use tokio::time::Instant;

use super::{Clock, ClusterClock, TimeSource, monotonic_now};

/// The time of one input to the node core (a datagram, a timer, a command): the core reads no
/// clock of its own, so that a driver (the tokio loop, a simulator, a unit test) decides what
/// time it is, and every decision taken for one input sees the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time, for timers and for how long ago something happened.
    pub at: Instant,
    /// Cluster time (ms since the Unix epoch): what buckets, stamps and expiry are keyed by.
    pub cluster_ms: u64,
    /// The raw wall clock (ms since the Unix epoch; it may step): what datagrams carry as their
    /// send time, and what the peers' clock estimates are made of.
    pub wall_ms: u64,
    /// The cluster clock's monotonic clock, suspends included: what those estimates are
    /// measured against.
    pub mono_ms: u64,
}

impl Now {
    /// Reads `clock` and the monotonic clock.
    pub fn read<T: TimeSource>(clock: &ClusterClock<T>) -> Self {
        Self::read_at(clock, monotonic_now())
    }

    /// Reads `clock` at a monotonic time the caller chose (a simulator's virtual time). Time
    /// the machine spent suspended is accounted first, before anything is measured against the
    /// monotonic clock.
    pub fn read_at<T: TimeSource>(clock: &ClusterClock<T>, at: Instant) -> Self {
        clock.account_suspend();
        Self {
            at,
            cluster_ms: clock.now_ms(),
            wall_ms: clock.wall_ms(),
            mono_ms: clock.mono_ms(),
        }
    }
}
