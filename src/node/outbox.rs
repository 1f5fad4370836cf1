//! Datagrams the node core has sealed and its driver has yet to send: the one place where a
//! body becomes a datagram.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::gossip::wire::{Destination, Keyring, Kind, Layout, OVERHEAD, Sealer};

/// A sealed datagram, ready for the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub kind: Kind,
    pub to: SocketAddr,
    pub datagram: Vec<u8>,
}

#[derive(Debug)]
pub struct Outbox {
    sealer: Sealer,
    keyring: Arc<Keyring>,
    queued: Vec<Outgoing>,
}

impl Outbox {
    pub fn new(sealer: Sealer, keyring: Arc<Keyring>) -> Self {
        Self {
            sealer,
            keyring,
            queued: Vec::new(),
        }
    }

    /// Whether the next datagram may go under the compact header.
    pub fn compact_possible(&self) -> bool {
        self.sealer.compact_possible()
    }

    /// The largest body that fits one datagram.
    pub fn max_body(&self) -> usize {
        self.sealer.max_body()
    }

    /// Seals `body` for `to`, sent at `wall_ms`, and queues it, under `layout` (a compact one
    /// only where `to` said it reads one). A body too large for a datagram is not sent: every
    /// caller sizes its bodies to [`Outbox::max_body`], so this is a bug guard, logged rather
    /// than a reason to stop the node.
    pub fn seal(&mut self, kind: Kind, wall_ms: u64, body: &[u8], to: Destination, layout: Layout) {
        let mut datagram = Vec::with_capacity(body.len() + OVERHEAD);
        match self.sealer.seal(
            &self.keyring,
            kind,
            wall_ms,
            body,
            to,
            layout,
            &mut datagram,
        ) {
            Ok(()) => self.queued.push(Outgoing {
                kind,
                to: to.addr,
                datagram,
            }),
            Err(e) => {
                tracing::debug!(kind = kind.as_str(), to = %to.addr, error = %e, "not sealed")
            }
        }
    }

    pub fn take(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.queued)
    }
}
