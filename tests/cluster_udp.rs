//! Three nodes on real UDP sockets (127.0.0.1) in one process: they form a cluster through a
//! seed, and a limit shared by all three holds across them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use limitmesh::clock::{Clock, OffsetSystemClock, SystemClock};
use limitmesh::gossip::wire::Keyring;
use limitmesh::limiter::{CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig};
use limitmesh::node::{ClusterView, Node, NodeBuilder, NodeKeys, NodeParams};
use limitmesh::window::WindowSpec;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

struct Running {
    limiter: Arc<Limiter>,
    view: Arc<ClusterView>,
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(i: u128, seeds: Vec<SocketAddr>, keyring: [u8; 32]) -> Running {
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = socket.local_addr().unwrap();
    let node_id = uuid::Uuid::from_u128(0x1000 + i);
    let mut params = NodeParams::new(node_id, addr, i as u64);
    params.seeds = seeds;
    params.cluster_id = "udp-test".into();
    let keys = NodeKeys {
        keyring: Keyring::new(&[keyring]).unwrap(),
        hasher: KeyHasher::from_secret(b"cluster test"),
    };
    let core = NodeBuilder::new(
        params,
        LimiterConfig::default(),
        keys,
        OffsetSystemClock::default(),
    )
    .build()
    .unwrap();
    let (limiter, view) = (core.limiter().clone(), core.view().clone());
    let node = Node::new(core, socket);
    let (stop, stopped) = oneshot::channel::<()>();
    let (_tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        let _keep = _tx;
        node.run(rx, async {
            let _ = stopped.await;
        })
        .await
    });
    Running {
        limiter,
        view,
        addr,
        stop,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_a_cluster_and_share_a_limit() {
    let keyring = [7u8; 32];
    let first = start(1, vec![], keyring).await;
    let seed = first.addr;
    let mut nodes = vec![first];
    for i in 2..=3 {
        nodes.push(start(i, vec![seed], keyring).await);
    }

    // Formation: bounded wait until every node sees two live peers.
    let formed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if nodes.iter().all(|n| n.view.live_count() == 3) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(formed.is_ok(), "the cluster did not form within 15 s");

    // One limit, 30 per 10 s, requested round-robin on all three nodes.
    let limit = Limit {
        max: 30,
        window: WindowSpec::with_default_buckets(10_000).unwrap(),
    };
    let clock = SystemClock::system();
    let mut admitted = [0u32; 3];
    for round in 0..120 {
        let i = round % 3;
        let item = [CheckItem {
            key: b"tenant=42",
            limit,
            cost: 1,
        }];
        let req = CheckRequest {
            items: &item,
            dry_run: false,
        };
        if nodes[i]
            .limiter
            .check(&req, clock.now_ms())
            .unwrap()
            .allowed
        {
            admitted[i] += 1;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let total: u32 = admitted.iter().sum();
    println!("admitted per node {admitted:?}, total {total} of 30");
    assert!(total <= 33, "cluster admitted {total} of 30: {admitted:?}");
    assert!(total >= 24, "cluster used only {total} of 30: {admitted:?}");
    assert!(
        admitted.iter().all(|a| *a > 0),
        "every node got a share: {admitted:?}"
    );

    // Every node holds the others' registers for the key.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in &nodes {
        let inspection = n
            .limiter
            .inspect(b"tenant=42", &limit, clock.now_ms())
            .unwrap();
        assert_eq!(inspection.origins.len(), 3, "{inspection:?}");
        assert!((inspection.global_admitted - f64::from(total)).abs() < 0.5);
    }
    let wire = nodes[0].view.wire.snapshot();
    assert!(wire.sent_bytes["summary"] > 0 && wire.received_bytes["membership"] > 0);
    assert_eq!(wire.dropped_total(), 0, "{:?}", wire.dropped);

    for n in nodes {
        let _ = n.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), n.task)
            .await
            .expect("node stops")
            .unwrap();
    }
}
