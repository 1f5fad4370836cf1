//! A network partition between real node processes on loopback, without privileges: every
//! node advertises a proxy port of its own, and the proxy forwards datagrams between them
//! unless the two are on different sides.
//!
//! Node `i` binds its real gossip port and advertises proxy port `P_i`. A datagram from node
//! `j` to `P_i` is forwarded to node `i`'s real port *from* `P_j`, so every node sees its peers
//! at their advertised addresses, as on a real network.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::free_udp_port;

/// The proxies of a cluster of test nodes. Stops its threads when dropped.
pub struct Proxy {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

struct Shared {
    /// Per node: the proxy socket its peers send to.
    sockets: Vec<UdpSocket>,
    /// Per node: its real gossip port.
    real: Vec<u16>,
    /// Per node: its side while partitioned (`None`: one network).
    sides: Mutex<Option<Vec<u8>>>,
    dropped: AtomicU64,
    stop: AtomicBool,
}

impl Proxy {
    /// Proxies for `n` nodes: the real ports to bind, then the ports to advertise.
    pub fn new(n: usize) -> Self {
        let sockets: Vec<UdpSocket> = (0..n)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").expect("a proxy socket");
                s.set_read_timeout(Some(Duration::from_millis(50)))
                    .expect("a read timeout");
                s
            })
            .collect();
        let shared = Arc::new(Shared {
            sockets,
            real: (0..n).map(|_| free_udp_port()).collect(),
            sides: Mutex::new(None),
            dropped: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let threads = (0..n)
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || shared.forward_to(i))
            })
            .collect();
        Self { shared, threads }
    }

    /// Node `i`'s real gossip port (to bind).
    pub fn real_port(&self, i: usize) -> u16 {
        self.shared.real[i]
    }

    /// Node `i`'s advertised gossip address (its proxy).
    pub fn advertised(&self, i: usize) -> SocketAddr {
        self.shared.sockets[i].local_addr().expect("bound")
    }

    /// Cuts the network: nodes on different sides (`sides[i]` for node `i`) stop hearing each
    /// other.
    pub fn partition(&self, sides: &[u8]) {
        *self.shared.sides.lock().expect("not poisoned") = Some(sides.to_vec());
    }

    pub fn heal(&self) {
        *self.shared.sides.lock().expect("not poisoned") = None;
    }

    /// Datagrams dropped by the partition so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Shared {
    /// Forwards what arrives for node `to` until told to stop.
    fn forward_to(&self, to: usize) {
        let mut buf = vec![0u8; 65_536];
        let dest = SocketAddr::from(([127, 0, 0, 1], self.real[to]));
        while !self.stop.load(Ordering::Relaxed) {
            let Ok((len, from)) = self.sockets[to].recv_from(&mut buf) else {
                continue;
            };
            // Only the nodes' own sockets are forwarded.
            let Some(sender) = self.real.iter().position(|p| *p == from.port()) else {
                continue;
            };
            let cut = self
                .sides
                .lock()
                .expect("not poisoned")
                .as_ref()
                .is_some_and(|sides| sides[sender] != sides[to]);
            if cut {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let _ = self.sockets[sender].send_to(&buf[..len], dest);
        }
    }
}
