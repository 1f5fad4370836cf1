//! A node on a real UDP socket (127.0.0.1) whose gossip port is flooded with garbage from its
//! first moment: its periodic work (summary rounds, SWIM, clock steering, the end of its
//! warm-up) goes on while the flood lasts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use limitmesh::clock::OffsetSystemClock;
use limitmesh::gossip::wire::Keyring;
use limitmesh::limiter::{KeyHasher, LimiterConfig};
use limitmesh::node::{ClusterView, Node, NodeBuilder, NodeKeys, NodeParams};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

struct Running {
    view: Arc<ClusterView>,
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

type Core = limitmesh::node::NodeCore<OffsetSystemClock>;

/// Node `i` on `socket`, its wall clock `offset_ms` off, built but not running.
fn build(i: u128, socket: &UdpSocket, seeds: Vec<SocketAddr>, offset_ms: i64) -> Core {
    let addr = socket.local_addr().unwrap();
    let mut params = NodeParams::new(uuid::Uuid::from_u128(0xF100 + i), addr, i as u64);
    params.seeds = seeds;
    params.cluster_id = "flood-test".into();
    // Long enough that only holding the cluster's state ends the warm-up within the test.
    params.warmup_timeout = Duration::from_secs(60);
    let keys = NodeKeys {
        keyring: Keyring::new(&[[9u8; 32]]).unwrap(),
        hasher: KeyHasher::from_secret(b"flood test"),
    };
    NodeBuilder::new(
        params,
        LimiterConfig::default(),
        keys,
        OffsetSystemClock { offset_ms },
    )
    .build()
    .unwrap()
}

fn run(core: Core, socket: UdpSocket) -> Running {
    let socket = Arc::new(socket);
    let addr = socket.local_addr().unwrap();
    let view = core.view().clone();
    let node = Node::new(core, socket);
    let (stop, stopped) = oneshot::channel::<()>();
    let (keep, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        let _keep = keep;
        node.run(rx, async {
            let _ = stopped.await;
        })
        .await
    });
    Running {
        view,
        addr,
        stop,
        task,
    }
}

/// Keeps `backlog` garbage datagrams waiting on the flooded node's socket until `stop`: as
/// fast as the node takes them, never so fast that the kernel drops them (or its peer's
/// datagrams) for a full buffer. So its socket always has a datagram ready, as under a flood
/// from elsewhere, and whatever the node misses is its own doing. Several threads share
/// `sent`, so that one of them sends while another waits for the processor.
fn flood(to: SocketAddr, view: &ClusterView, backlog: u64, sent: &AtomicU64, stop: &AtomicBool) {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(socket.local_addr().unwrap().port());
    let mut datagram = [0u8; 80];
    while !stop.load(Ordering::Relaxed) {
        let taken = view.wire.snapshot().dropped_total();
        if sent.load(Ordering::Relaxed).saturating_sub(taken) >= backlog {
            std::thread::yield_now();
            continue;
        }
        for _ in 0..32 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = 16 + (state % 64) as usize;
            datagram[..8].copy_from_slice(&state.to_le_bytes());
            if socket.send_to(&datagram[..len], to).is_ok() {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A socket on 127.0.0.1 with as large a receive buffer as the system allows: the more
/// datagrams wait in it, the longer the flooding thread (which shares the machine) may pause
/// without the queue running dry, as it would not under a flood from elsewhere.
fn flooded_socket() -> UdpSocket {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    let _ = socket.set_recv_buffer_size(64 << 20);
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket.set_nonblocking(true).unwrap();
    UdpSocket::from_std(socket.into()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_flooded_with_garbage_keeps_its_rounds_its_peer_its_clock_and_gets_ready() {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let first = run(build(1, &socket, vec![], 0), socket);
    // The second node's socket is flooded before the node starts on it. Its wall clock is 2 s
    // fast: two nodes meet halfway, so steering shows as a 1 s offset.
    let socket = flooded_socket();
    let core = build(2, &socket, vec![first.addr], 2_000);
    let (target, view) = (socket.local_addr().unwrap(), core.view().clone());
    // A small datagram takes 832 bytes of the buffer on Linux; a quarter of it is left free.
    let capacity = socket2::SockRef::from(&socket).recv_buffer_size().unwrap() as u64;
    let backlog = (capacity / 1_100).max(64);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            let (view, sent, stop) = (view.clone(), sent.clone(), stop.clone());
            std::thread::spawn(move || flood(target, &view, backlog, &sent, &stop))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = run(core, socket);

    let ready = tokio::time::timeout(Duration::from_secs(8), second.view.ready()).await;
    let rounds_at_ready = second.view.wire.snapshot().summary_rounds;
    // Two more seconds of flood: rounds go on, the peer stays up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let wire = second.view.wire.snapshot();
    let members = second.view.members();
    let offset_ms = second.view.clock.offset_ms.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    let sent = sent.load(Ordering::Relaxed);
    println!(
        "{sent} garbage datagrams sent, {backlog} kept waiting; {} dropped; rounds {rounds_at_ready} at ready, {} \
         two seconds later; offset {offset_ms} ms; members {members:?}",
        wire.dropped_total(),
        wire.summary_rounds,
    );

    assert!(
        wire.dropped_total() > 10_000,
        "the flood did not reach the node: {} dropped",
        wire.dropped_total()
    );
    assert!(ready.is_ok(), "the flooded node never ended its warm-up");
    // Ten rounds in two seconds at 200 ms; half of them leaves room for a loaded machine.
    assert!(
        wire.summary_rounds >= rounds_at_ready + 5,
        "rounds stalled under the flood: {rounds_at_ready} then {}",
        wire.summary_rounds
    );
    assert_eq!(
        second.view.live_count(),
        2,
        "the peer went down under the flood: {members:?}"
    );
    assert!(
        (700..=1_300).contains(&offset_ms),
        "cluster time was not steered halfway to the peer's: own offset {offset_ms} ms"
    );
    assert_eq!(first.view.live_count(), 2, "the first node lost the second");

    for n in [first, second] {
        let _ = n.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), n.task)
            .await
            .expect("node stops")
            .unwrap();
    }
}
