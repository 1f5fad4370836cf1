//! The simulated datagram socket. Loss and duplication are injected here, per datagram and
//! from a seeded RNG, so they are exact and countable (turmoil's own failure rate breaks whole
//! links instead).

use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use limitmesh::transport::Datagram;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Fault knobs and counters shared by every boot of one host.
#[derive(Debug, Default)]
pub struct NetFaults {
    /// Probability, in millionths, that an outgoing datagram is dropped.
    pub loss_ppm: AtomicU64,
    /// Probability, in millionths, that an outgoing datagram is sent twice.
    pub dup_ppm: AtomicU64,
    pub dropped: AtomicU64,
    pub duplicated: AtomicU64,
    pub sent: AtomicU64,
    /// Extra loss towards one host: `(host name, millionths)` (asymmetric loss).
    pub loss_to: Mutex<Vec<(String, u64)>>,
}

impl NetFaults {
    pub fn set_loss(&self, p: f64) {
        self.loss_ppm.store((p * 1e6) as u64, Ordering::Relaxed);
    }

    /// Datagrams to `host` are also lost with probability `p`.
    pub fn add_loss_to(&self, host: String, p: f64) {
        if let Ok(mut l) = self.loss_to.lock() {
            l.push((host, (p * 1e6) as u64));
        }
    }

    /// The extra loss towards `to`, in millionths (0 if none). Resolves host names, so it is
    /// called inside the simulation.
    fn loss_towards(&self, to: SocketAddr) -> u64 {
        let Ok(l) = self.loss_to.lock() else {
            return 0;
        };
        l.iter()
            .filter(|(host, _)| turmoil::lookup(host.as_str()) == to.ip())
            .map(|(_, ppm)| *ppm)
            .max()
            .unwrap_or(0)
    }

    pub fn set_duplication(&self, p: f64) {
        self.dup_ppm.store((p * 1e6) as u64, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub struct SimSocket {
    socket: turmoil::net::UdpSocket,
    faults: std::sync::Arc<NetFaults>,
    rng: Mutex<StdRng>,
}

impl SimSocket {
    pub fn new(
        socket: turmoil::net::UdpSocket,
        faults: std::sync::Arc<NetFaults>,
        seed: u64,
    ) -> Self {
        Self {
            socket,
            faults,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    fn roll(&self, ppm: u64) -> bool {
        ppm > 0
            && self
                .rng
                .lock()
                .map(|mut r| r.random_range(0..1_000_000) < ppm)
                .unwrap_or(false)
    }
}

impl Datagram for SimSocket {
    async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.faults.sent.fetch_add(1, Ordering::Relaxed);
        if self.roll(self.faults.loss_ppm.load(Ordering::Relaxed))
            || self.roll(self.faults.loss_towards(to))
        {
            self.faults.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(buf.len());
        }
        if self.roll(self.faults.dup_ppm.load(Ordering::Relaxed)) {
            self.faults.duplicated.fetch_add(1, Ordering::Relaxed);
            let _ = self.socket.send_to(buf, to).await;
        }
        self.socket.send_to(buf, to).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.socket.recv_from(buf).await
    }
}
