//! The production gRPC server inside the simulation. Three nodes gossip over simulated UDP and
//! serve Envoy's rate limit protocol over simulated TCP; a client host spreads 2× the limit
//! over them. The cluster-wide limit holds before, during and after a partition that cuts one
//! node off from the other two (it keeps answering its clients meanwhile). Fixed seed; every
//! failure message names it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use limitmesh::clock::Clock;
use limitmesh::gossip::wire::Keyring;
use limitmesh::limiter::{KeyHasher, Limiter, LimiterConfig};
use limitmesh::metrics::Metrics;
use limitmesh::node::{Node, NodeBuilder, NodeKeys, NodeParams};
use limitmesh::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use limitmesh::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use limitmesh::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use limitmesh::rpc::{HealthHandle, RpcContext};
use limitmesh::rules::{LoadOptions, RuleSet, RulesHandle, RulesSource};
use limitmesh_sim::clock::{ClockControl, SimClock};
use limitmesh_sim::grpc;
use limitmesh_sim::net::{NetFaults, SimSocket};

const SEED: u64 = 11;
const NODES: usize = 3;
const LIMIT: usize = 100;
const GOSSIP_PORT: u16 = 7946;
const GRPC_PORT: u16 = 8081;
/// One request every 5 ms: 200 per second against a limit of 100 per second.
const EVERY_MS: u64 = 5;
const LOAD_FROM_MS: u64 = 1_500;
const MEASURE_FROM_MS: u64 = LOAD_FROM_MS + 1_000;
const PARTITION_AT_MS: u64 = 3_500;
const HEAL_AT_MS: u64 = 5_500;
const END_MS: u64 = 7_500;

const RULES: &str = "domain: sim
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 100 }
";

fn host(i: usize) -> String {
    format!("n{i}")
}

/// One node process: gossip on UDP, the gRPC services on TCP.
async fn node_main(i: usize, limiters: Arc<Mutex<Vec<Option<Arc<Limiter>>>>>) -> turmoil::Result {
    let udp = turmoil::net::UdpSocket::bind(("0.0.0.0", GOSSIP_PORT)).await?;
    let advertise = SocketAddr::new(turmoil::lookup(host(i)), GOSSIP_PORT);
    let node_id = uuid::Uuid::from_u128(0x51u128 << 64 | i as u128);
    let mut params = NodeParams::new(node_id, advertise, SEED ^ i as u64);
    params.cluster_id = "grpc-sim".into();
    params.seeds = (0..2)
        .map(|s| SocketAddr::new(turmoil::lookup(host(s)), GOSSIP_PORT))
        .collect();
    let keys = NodeKeys {
        keyring: Keyring::new(&[[9u8; 32]])?,
        hasher: KeyHasher::from_secret(b"grpc simulation"),
    };
    let time = SimClock::new(Arc::new(ClockControl::default()));
    let core = NodeBuilder::new(params, LimiterConfig::default(), keys, time).build()?;
    let (clock, limiter, view) = (
        core.clock().clone(),
        core.limiter().clone(),
        core.view().clone(),
    );
    limiters.lock().unwrap()[i] = Some(limiter.clone());
    let socket = Arc::new(SimSocket::new(udp, Arc::new(NetFaults::default()), SEED));
    let node = Node::new(core, socket);
    let rules = RuleSet::parse("sim-rules.yaml", RULES, LoadOptions::default())?;
    let ctx = RpcContext {
        limiter,
        rules: Arc::new(RulesHandle::with_rule_set(
            RulesSource::Embedded {
                name: "sim-rules.yaml",
                text: "",
            },
            rules,
        )),
        clock: clock as Arc<dyn Clock>,
        members: view,
        metrics: Arc::new(Metrics::new()),
        tokens: None,
    };
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", GRPC_PORT)).await?;
    let (_commands, rx) = tokio::sync::mpsc::channel(1);
    let (_, served) = tokio::join!(
        node.run(rx, std::future::pending()),
        limitmesh::rpc::serve(
            grpc::incoming(listener),
            ctx,
            Duration::from_secs(1),
            HealthHandle::new(),
            std::future::pending(),
        )
    );
    served?;
    Ok(())
}

/// What one request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ok,
    OverLimit,
    Failed,
}

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "sim".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: "acme".into(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}

#[test]
fn grpc_cluster_holds_the_limit_through_a_partition() {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_millis(END_MS + 5_000))
        .tick_duration(Duration::from_millis(1))
        .epoch(UNIX_EPOCH + Duration::from_millis(1_700_000_000_000))
        .rng_seed(SEED)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(20))
        .build();
    let limiters: Arc<Mutex<Vec<Option<Arc<Limiter>>>>> = Arc::new(Mutex::new(vec![None; NODES]));
    for i in 0..NODES {
        let limiters = limiters.clone();
        sim.host(host(i), move || node_main(i, limiters.clone()));
    }
    let answers: Arc<Mutex<Vec<(u64, usize, Answer)>>> = Arc::default();
    let recorded = answers.clone();
    sim.client("client", async move {
        let clients: Vec<_> = (0..NODES)
            .map(|i| {
                grpc::channel(&format!("{}:{GRPC_PORT}", host(i)), Duration::from_secs(1))
                    .map(RateLimitServiceClient::new)
            })
            .collect::<Result<_, _>>()?;
        tokio::time::sleep(Duration::from_millis(LOAD_FROM_MS)).await;
        let mut tick = tokio::time::interval(Duration::from_millis(EVERY_MS));
        let mut sent = 0usize;
        loop {
            tick.tick().await;
            let t = turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64);
            if t >= END_MS {
                break;
            }
            let node = sent % NODES;
            sent += 1;
            let mut client = clients[node].clone();
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let answer = match client.should_rate_limit(request()).await {
                    Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => Answer::Ok,
                    Ok(_) => Answer::OverLimit,
                    Err(_) => Answer::Failed,
                };
                recorded.lock().unwrap().push((t, node, answer));
            });
        }
        // Let the last answers arrive.
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(())
    });

    let mut partitioned = false;
    let mut healed = false;
    let mut cut_off_live_min = usize::MAX;
    loop {
        let t = sim.elapsed().as_millis() as u64;
        if !partitioned && t >= PARTITION_AT_MS {
            sim.partition(host(2), host(0));
            sim.partition(host(2), host(1));
            partitioned = true;
        }
        if partitioned && !healed && t >= HEAL_AT_MS {
            sim.repair(host(2), host(0));
            sim.repair(host(2), host(1));
            healed = true;
        }
        if partitioned && !healed && t >= PARTITION_AT_MS + 1_500 {
            // Live as admission counts it: members heard from recently.
            let live = limiters.lock().unwrap()[2]
                .as_ref()
                .map(|l| l.member_counts().0);
            cut_off_live_min = cut_off_live_min.min(live.unwrap_or(usize::MAX));
        }
        if sim.step().expect("simulation runs") {
            break;
        }
    }

    let answers = answers.lock().unwrap().clone();
    // The fault fired: the cut-off node saw itself alone, and it still answered its clients.
    assert_eq!(
        cut_off_live_min, 1,
        "seed {SEED}: node 2 never noticed the partition"
    );
    let during = |(t, _, _): &&(u64, usize, Answer)| (PARTITION_AT_MS..HEAL_AT_MS).contains(t);
    let n2_during: Vec<Answer> = answers
        .iter()
        .filter(during)
        .filter(|(_, n, _)| *n == 2)
        .map(|a| a.2)
        .collect();
    assert!(
        n2_during.contains(&Answer::Ok) && n2_during.contains(&Answer::OverLimit),
        "seed {SEED}: the cut-off node should keep deciding, got {n2_during:?}"
    );
    let failed = answers.iter().filter(|a| a.2 == Answer::Failed).count();
    assert_eq!(failed, 0, "seed {SEED}: {failed} requests failed");
    let expected = ((END_MS - LOAD_FROM_MS) / EVERY_MS) as usize;
    assert!(
        answers.len() + 2 >= expected,
        "seed {SEED}: {} answers for {expected} requests",
        answers.len()
    );

    // Admissions per sliding one-second window, stepped by 10 ms, after warm-up.
    let mut per_ms = vec![0usize; END_MS as usize + 1];
    for (t, _, a) in &answers {
        if *a == Answer::Ok {
            per_ms[*t as usize] += 1;
        }
    }
    let prefix: Vec<usize> = std::iter::once(0)
        .chain(per_ms.iter().scan(0, |acc, n| {
            *acc += n;
            Some(*acc)
        }))
        .collect();
    let windows: Vec<(u64, usize)> = (MEASURE_FROM_MS..=END_MS)
        .step_by(10)
        .map(|end| {
            (
                end,
                prefix[end as usize + 1] - prefix[end as usize + 1 - 1_000],
            )
        })
        .collect();
    let (worst_at, worst) = *windows.iter().max_by_key(|w| w.1).expect("windows");
    let mean = windows.iter().map(|w| w.1).sum::<usize>() as f64 / windows.len() as f64;
    println!("seed {SEED}: worst window {worst} at {worst_at} ms, mean {mean:.1}, limit {LIMIT}");
    assert!(
        worst * 100 <= LIMIT * 110,
        "seed {SEED}: {worst} admitted in the window ending at {worst_at} ms (limit {LIMIT})"
    );
    assert!(
        mean >= LIMIT as f64 * 0.85,
        "seed {SEED}: mean admitted per window {mean:.1} is under 85 % of the limit"
    );
}
