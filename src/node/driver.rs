//! The tokio driver of a node core: a datagram socket (real UDP, or turmoil's), a sleep until
//! the core's next wake-up, a command channel and a shutdown signal, in one `select!` with
//! `biased;` (no hidden randomness). Each turn reads the time once, hands the core one input,
//! and sends what it sealed.
//!
//! Invariant: work that is due runs before another datagram is taken. The socket is polled
//! after the timer, and one datagram is handled per turn, so a wake-up that is due waits behind at most
//! the datagram being handled: a socket that always has a datagram ready (a flood, garbage
//! is enough) cannot hold back summary rounds, SWIM's probes, the clock's steering or the end
//! of the warm-up. (tokio's cooperative budget makes a busy socket yield now and then, but a
//! socket polled first would win every turn after it.)

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::core::NodeCore;
use super::{Command, Outgoing};
use crate::clock::{Now, TimeSource};
use crate::transport::Datagram;

/// One turn's input.
enum Input {
    Wake,
    Command(Option<Command>),
    Datagram(std::io::Result<(usize, std::net::SocketAddr)>),
}

/// A node core on a socket, ready to [`Node::run`].
pub struct Node<S, T> {
    core: NodeCore<T>,
    socket: Arc<S>,
}

impl<S, T> std::fmt::Debug for Node<S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("core", &self.core).finish()
    }
}

impl<S: Datagram, T: TimeSource> Node<S, T> {
    pub fn new(core: NodeCore<T>, socket: Arc<S>) -> Self {
        Self { core, socket }
    }

    /// Runs until `shutdown` resolves, then leaves the cluster gracefully.
    pub async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut buf = vec![0u8; self.core.params.max_packet_size + 1];
        let mut commands_open = true;
        // After a command the socket goes first, after a datagram the commands: when both are
        // ready they take turns, so neither a stream of asks nor a flood starves the other.
        let mut socket_first = false;
        loop {
            let wake = self.core.next_wake();
            let input = if socket_first {
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep_until(wake) => Input::Wake,
                    r = self.socket.recv_from(&mut buf) => Input::Datagram(r),
                    cmd = commands.recv(), if commands_open => Input::Command(cmd),
                }
            } else {
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep_until(wake) => Input::Wake,
                    cmd = commands.recv(), if commands_open => Input::Command(cmd),
                    r = self.socket.recv_from(&mut buf) => Input::Datagram(r),
                }
            };
            match input {
                Input::Wake => self.core.on_wake(Now::read(&self.core.clock)),
                Input::Command(Some(command)) => {
                    socket_first = true;
                    self.core.on_command(Now::read(&self.core.clock), command);
                }
                Input::Command(None) => commands_open = false,
                Input::Datagram(r) => {
                    socket_first = false;
                    if let Ok((n, from)) = r {
                        let len = n.min(buf.len());
                        let now = Now::read(&self.core.clock);
                        self.core.on_datagram(now, &mut buf[..len], from);
                    }
                }
            }
            self.send().await;
        }
        self.core.leave(Now::read(&self.core.clock));
        self.send().await;
    }

    async fn send(&mut self) {
        for Outgoing { kind, to, datagram } in self.core.take_outgoing() {
            match self.socket.send_to(&datagram, to).await {
                Ok(_) => self.core.view.wire.sent(kind, datagram.len()),
                Err(e) => {
                    self.core
                        .view
                        .wire
                        .send_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(%to, error = %e, "send failed");
                }
            }
        }
    }
}
