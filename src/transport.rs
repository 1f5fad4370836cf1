//! The datagram socket the node runs on: real UDP in production, a simulated one in tests.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

/// A datagram socket. Both operations must be cancel-safe: the node loop `select!`s on them.
pub trait Datagram: Send + Sync + 'static {
    fn send_to(&self, buf: &[u8], to: SocketAddr)
    -> impl Future<Output = io::Result<usize>> + Send;
    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send;
}

impl Datagram for tokio::net::UdpSocket {
    fn send_to(
        &self,
        buf: &[u8],
        to: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        tokio::net::UdpSocket::send_to(self, buf, to)
    }

    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send {
        tokio::net::UdpSocket::recv_from(self, buf)
    }
}
