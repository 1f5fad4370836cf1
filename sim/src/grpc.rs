//! limitmesh's gRPC server and its clients on turmoil's simulated TCP.
//!
//! The server is the production one ([`limitmesh::rpc::serve`]): it takes any stream of
//! incoming connections, so here it is fed turmoil's. Clients dial through a connector that
//! opens turmoil streams. With HTTP/2 keepalive set, a channel recovers after a partition heals
//! (turmoil drops segments across a partition and never retransmits them).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::{Channel, Endpoint, Uri};
use turmoil::net::{TcpListener, TcpStream};

/// An accepted simulated connection, as tonic's server wants it.
#[derive(Debug)]
pub struct Accepted(TcpStream);

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.0.local_addr().ok(),
            remote_addr: self.0.peer_addr().ok(),
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The connections `listener` accepts, as a stream for [`limitmesh::rpc::serve`]. The accept
/// loop ends when the server drops the stream.
pub fn incoming(listener: TcpListener) -> ReceiverStream<io::Result<Accepted>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let accepted = listener.accept().await.map(|(s, _)| Accepted(s));
            if tx.send(accepted).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

type Dialing = Pin<Box<dyn Future<Output = io::Result<TokioIo<TcpStream>>> + Send>>;

/// A channel to `host:port` over simulated TCP. It connects lazily, gives up on a call after
/// `timeout`, and probes idle connections so that it notices a partition and redials.
pub fn channel(authority: &str, timeout: Duration) -> Result<Channel, tonic::transport::Error> {
    let connector = tower::service_fn(|uri: Uri| {
        Box::pin(async move {
            let authority = uri
                .authority()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no authority"))?
                .to_string();
            Ok(TokioIo::new(TcpStream::connect(authority).await?))
        }) as Dialing
    });
    Ok(Endpoint::from_shared(format!("http://{authority}"))?
        .timeout(timeout)
        .http2_keep_alive_interval(Duration::from_millis(500))
        .keep_alive_timeout(Duration::from_millis(500))
        .keep_alive_while_idle(true)
        .connect_with_connector_lazy(connector))
}
