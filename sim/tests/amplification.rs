//! A cluster whose datagrams anyone can forge (`cluster.insecure`: the key derives from the
//! cluster id) must not be an amplifier. An attacker sends one forged announcement claiming a
//! member whose address is a victim's; without return routability every node pushed its
//! registers there (a bootstrap, then every summary round). With it, the victim gets no
//! registers at all: only SWIM's own probes and a heartbeat a round, until SWIM declares the
//! member that never answers down. Fixed seed; failures name it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use limitmesh::clock::Clock;
use limitmesh::gossip::wire::{Destination, Keyring, Kind, Layout, Sealer, cluster_tag};
use limitmesh::limiter::{CheckItem, CheckRequest, KeyHasher, Limit, Limiter, LimiterConfig};
use limitmesh::membership::{Membership, NodeId};
use limitmesh::node::{Node, NodeBuilder, NodeKeys, NodeParams};
use limitmesh::window::WindowSpec;
use limitmesh_sim::clock::{ClockControl, SimClock};
use limitmesh_sim::net::{NetFaults, SimSocket};

const SEED: u64 = 23;
const NODES: usize = 3;
const PORT: u16 = 7946;
const KEY: [u8; 32] = [7; 32];
const CLUSTER: &str = "insecure-sim";
const ATTACK_AT_MS: u64 = 3_000;
const END_MS: u64 = 15_000;

fn host(i: usize) -> String {
    format!("n{i}")
}

#[derive(Debug, Default)]
struct Seen {
    /// Bytes and datagrams the victim received, by kind byte.
    registers: AtomicU64,
    other: AtomicU64,
    bytes: AtomicU64,
    attacker_bytes: AtomicU64,
}

async fn node_main(
    i: usize,
    verify: bool,
    limiters: Arc<Mutex<Vec<Option<Arc<Limiter>>>>>,
) -> turmoil::Result {
    let udp = turmoil::net::UdpSocket::bind(("0.0.0.0", PORT)).await?;
    let advertise = SocketAddr::new(turmoil::lookup(host(i)), PORT);
    let node_id = uuid::Uuid::from_u128(0xA3u128 << 64 | i as u128);
    let mut params = NodeParams::new(node_id, advertise, SEED ^ i as u64);
    params.cluster_id = CLUSTER.into();
    params.verify_return_route = verify;
    params.seeds = (0..NODES)
        .filter(|s| *s != i)
        .map(|s| SocketAddr::new(turmoil::lookup(host(s)), PORT))
        .collect();
    let keys = NodeKeys {
        keyring: Keyring::new(&[KEY])?,
        hasher: KeyHasher::from_secret(&KEY),
    };
    let time = SimClock::new(Arc::new(ClockControl::default()));
    let core = NodeBuilder::new(params, LimiterConfig::default(), keys, time).build()?;
    let (clock, limiter) = (core.clock().clone(), core.limiter().clone());
    limiters.lock().unwrap()[i] = Some(limiter.clone());
    let socket = Arc::new(SimSocket::new(udp, Arc::new(NetFaults::default()), SEED));
    let node = Node::new(core, socket);
    // Traffic on 100 keys, so that every node has registers to push.
    let work = async move {
        let limit = Limit {
            max: 1_000,
            window: WindowSpec::with_default_buckets(10_000).expect("valid"),
        };
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            for k in 0..100 {
                let key = format!("tenant={k}");
                let item = [CheckItem {
                    key: key.as_bytes(),
                    limit,
                    cost: 1,
                }];
                let _ = limiter.check(
                    &CheckRequest {
                        items: &item,
                        dry_run: false,
                    },
                    clock.now_ms(),
                );
            }
        }
    };
    let (_commands, rx) = tokio::sync::mpsc::channel(1);
    tokio::join!(node.run(rx, std::future::pending()), work);
    Ok(())
}

/// Runs the attack; returns what the victim saw and the limiters (to check the cluster works).
fn attack(verify: bool) -> (Arc<Seen>, Vec<Arc<Limiter>>) {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_millis(END_MS + 5_000))
        .tick_duration(Duration::from_millis(1))
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .rng_seed(SEED)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .build();
    let limiters = Arc::new(Mutex::new(vec![None; NODES]));
    for i in 0..NODES {
        let limiters = limiters.clone();
        sim.host(host(i), move || node_main(i, verify, limiters.clone()));
    }
    let seen = Arc::new(Seen::default());
    let victim_seen = seen.clone();
    sim.host("victim", move || {
        let seen = victim_seen.clone();
        async move {
            let udp = turmoil::net::UdpSocket::bind(("0.0.0.0", PORT)).await?;
            let mut buf = vec![0u8; 2_048];
            loop {
                let (n, _) = udp.recv_from(&mut buf).await?;
                seen.bytes.fetch_add(n as u64, Ordering::Relaxed);
                let kind = buf.get(3).map(|b| b & 0x7F);
                // Anything that carries registers or sums.
                if [
                    Kind::Summary,
                    Kind::AntiEntropy,
                    Kind::Aggregate,
                    Kind::Exchange,
                ]
                .iter()
                .any(|k| kind == Some(*k as u8))
                {
                    seen.registers.fetch_add(1, Ordering::Relaxed);
                } else {
                    seen.other.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let attacker_seen = seen.clone();
    sim.client("attacker", async move {
        tokio::time::sleep(Duration::from_millis(ATTACK_AT_MS)).await;
        let udp = turmoil::net::UdpSocket::bind(("0.0.0.0", PORT)).await?;
        let victim = SocketAddr::new(turmoil::lookup("victim"), PORT);
        let target = SocketAddr::new(turmoil::lookup(host(0)), PORT);
        // A member that claims the victim's address, announcing itself to node 0.
        let forged = NodeId::new(uuid::Uuid::from_u128(0xBAD), victim, 1_700_000_003_000);
        let mut membership = Membership::new(forged, 1_340, SEED);
        membership.announce(target, limitmesh::clock::monotonic_now());
        let keyring = Keyring::new(&[KEY])?;
        let mut sealer = Sealer::new(cluster_tag(CLUSTER), 0xBAD, 1_400);
        for (_, packet) in membership.take_outbox() {
            let mut out = Vec::new();
            let now = 1_700_000_000_000 + ATTACK_AT_MS;
            let to = Destination {
                addr: target,
                node: None,
            };
            sealer.seal(
                &keyring,
                Kind::Membership,
                now,
                &packet,
                to,
                Layout::Full,
                &mut out,
            )?;
            attacker_seen
                .attacker_bytes
                .fetch_add(out.len() as u64, Ordering::Relaxed);
            udp.send_to(&out, target).await?;
        }
        tokio::time::sleep(Duration::from_millis(END_MS - ATTACK_AT_MS)).await;
        Ok(())
    });
    sim.run()
        .unwrap_or_else(|e| panic!("seed {SEED}: simulation failed: {e}"));
    let limiters = limiters
        .lock()
        .unwrap()
        .iter()
        .map(|l| l.clone().expect("every node started"))
        .collect();
    (seen, limiters)
}

#[test]
fn a_forged_member_does_not_turn_the_cluster_into_an_amplifier() {
    let (open, _) = attack(false);
    let (checked, limiters) = attack(true);
    let sent = checked.attacker_bytes.load(Ordering::Relaxed);
    let (open_bytes, checked_bytes) = (
        open.bytes.load(Ordering::Relaxed),
        checked.bytes.load(Ordering::Relaxed),
    );
    println!(
        "seed {SEED}: attacker sent {sent} B; the victim received {open_bytes} B ({} register \
         datagrams) without return routability, {checked_bytes} B ({} register datagrams) with it",
        open.registers.load(Ordering::Relaxed),
        checked.registers.load(Ordering::Relaxed),
    );
    // The attack worked without the check: the forged member got registers.
    assert!(
        open.registers.load(Ordering::Relaxed) > 0,
        "seed {SEED}: the forged member was never sent registers: the attack did not land"
    );
    // With it, not one register datagram, and far fewer bytes.
    assert_eq!(checked.registers.load(Ordering::Relaxed), 0, "seed {SEED}");
    assert!(
        checked_bytes * 10 < open_bytes,
        "seed {SEED}: {checked_bytes} B with the check against {open_bytes} B without"
    );
    // And the cluster still shares its registers: every node holds the others' windows.
    for (i, l) in limiters.iter().enumerate() {
        let held = l.stats().keys;
        assert!(held >= 100, "seed {SEED}: node {i} holds {held} windows");
    }
    let origins: usize = limiters[0]
        .relay(1_700_000_000_000 + END_MS, |_| true)
        .len();
    assert_eq!(
        origins,
        NODES - 1,
        "seed {SEED}: node 0 holds its peers' registers"
    );
}
