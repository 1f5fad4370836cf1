//! What happens in a fleet run, in time order.

use std::net::SocketAddr;

/// An event at a time; earlier first, ties in the order they were made.
#[derive(Debug)]
pub(super) struct Queued {
    pub at_us: u64,
    pub seq: u64,
    pub event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.seq) == (other.at_us, other.seq)
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_us, self.seq).cmp(&(other.at_us, other.seq))
    }
}

#[derive(Debug)]
pub(super) enum Event {
    Deliver {
        to: SocketAddr,
        from: SocketAddr,
        datagram: Vec<u8>,
    },
    Wake {
        slot: usize,
        generation: u64,
    },
    Probe,
    Observe,
    Sample,
    Fault(usize),
    /// The `k`-th replacement of a rolling deploy.
    Replace(usize),
}
