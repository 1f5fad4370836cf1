//! Restarts must not hand a used quota out again: real node processes on 127.0.0.1 exhaust a
//! day limit, then restart one by one (and, with `limiter.state_path`, all at once).

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use support::*;

const DAY_LIMIT: u32 = 300;

fn gossip_addrs(ports: &[Ports]) -> Vec<SocketAddr> {
    ports
        .iter()
        .map(|p| SocketAddr::from(([127, 0, 0, 1], p.gossip)))
        .collect()
}

/// Node `i` of a cluster whose every node lists the others as seeds (as a DNS name would).
fn spawn_member(
    scratch: &Scratch,
    rules: &std::path::Path,
    ports: &[Ports],
    i: usize,
    extra: &str,
) -> Node {
    let seeds: Vec<SocketAddr> = gossip_addrs(ports)
        .into_iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, a)| a)
        .collect();
    spawn(scratch, &format!("n{i}"), rules, &seeds, ports[i], extra)
}

/// The first formation: n0 alone, then each next node seeded with those before it (their
/// gossip ports are known once they run). Returns the nodes, ready, and the ports they bound:
/// later boots use the same ones, each node listing all the others as seeds.
fn form(
    scratch: &Scratch,
    rules: &std::path::Path,
    extra: impl Fn(usize) -> String,
) -> (Vec<Node>, Vec<Ports>) {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..3 {
        let seeds: Vec<SocketAddr> = nodes.iter().map(|n| n.gossip).collect();
        let ports = Ports::for_node(!seeds.is_empty());
        let node = spawn(scratch, &format!("n{i}"), rules, &seeds, ports, &extra(i));
        wait_ready(&node, &format!("n{i}"));
        nodes.push(node);
    }
    let ports = nodes.iter().map(Node::ports).collect();
    (nodes, ports)
}

/// Starts every member on its ports and waits until each is ready.
fn start_all(
    scratch: &Scratch,
    rules: &std::path::Path,
    ports: &[Ports],
    extra: impl Fn(usize) -> String,
) -> Vec<Node> {
    let nodes: Vec<Node> = (0..ports.len())
        .map(|i| spawn_member(scratch, rules, ports, i, &extra(i)))
        .collect();
    for (i, n) in nodes.iter().enumerate() {
        wait_ready(n, &format!("n{i}"));
    }
    nodes
}

fn wait_formed(nodes: &[Node]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !nodes.iter().all(|n| {
        http_get(n.http, "/v1/members")
            .is_some_and(|(_, b)| b.matches("\"alive\"").count() == nodes.len())
    }) {
        assert!(Instant::now() < deadline, "the cluster did not form");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asks every node `per_node` times, round robin; how many were admitted.
async fn admitted(nodes: &[Node], per_node: usize) -> u32 {
    admitted_round_robin(nodes, per_node, "tenant").await
}

/// Uses the whole day quota, then lets the last registers reach every node.
async fn exhaust(nodes: &[Node]) {
    let used = admitted(nodes, (DAY_LIMIT as usize).div_ceil(nodes.len()) + 40).await;
    assert!(
        (DAY_LIMIT - 6..=DAY_LIMIT).contains(&used),
        "{used} of {DAY_LIMIT} admitted before the restarts"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(admitted(nodes, 5).await, 0, "the quota is used up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_day_quota_survives_a_rolling_restart() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("rolling");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    let (mut nodes, ports) = form(&scratch, &rules_path, |_| String::new());
    wait_formed(&nodes);
    exhaust(&nodes).await;

    // Each node in turn: SIGTERM, start again on the same ports, and ask it at once, as a
    // proxy whose sidecar restarted would, before and after it says it is ready.
    let mut leaked = 0;
    for i in 0..3 {
        stop(&mut nodes[i]);
        nodes[i] = spawn_member(&scratch, &rules_path, &ports, i, "");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut client = loop {
            if let Ok(Ok(ch)) = tokio::time::timeout(
                Duration::from_millis(500),
                tonic::transport::Endpoint::from_shared(format!("http://{}", nodes[i].grpc))
                    .unwrap()
                    .connect(),
            )
            .await
            {
                break limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(ch);
            }
            assert!(Instant::now() < deadline, "n{i} never listened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for _ in 0..20 {
            leaked += u32::from(ask(&mut client, "tenant").await.overall_code == Code::Ok as i32);
        }
        wait_ready(&nodes[i], &format!("n{i}"));
        wait_formed(&nodes);
        leaked += admitted(&nodes, 10).await;
    }
    assert_eq!(
        leaked, 0,
        "{leaked} requests admitted on a used day quota across restarts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_day_quota_survives_a_whole_fleet_restart_with_state_path() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("fleet");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    let extra = |i: usize| {
        let path = scratch.path().join(format!("n{i}.state"));
        format!("[limiter]\nstate_path = \"{}\"\n", path.display())
    };
    let (mut nodes, ports) = form(&scratch, &rules_path, extra);
    wait_formed(&nodes);
    exhaust(&nodes).await;

    // Every node stops; nothing runs; every node starts again.
    for n in &mut nodes {
        stop(n);
    }
    for i in 0..3 {
        assert!(
            scratch.path().join(format!("n{i}.state")).exists(),
            "n{i} saved no state"
        );
    }
    let nodes = start_all(&scratch, &rules_path, &ports, extra);
    let leaked = admitted(&nodes, 20).await;
    assert_eq!(
        leaked, 0,
        "{leaked} admitted on a used day quota after a fleet restart"
    );
}

/// The control: without `state_path` nobody keeps a day quota through a whole-fleet restart
/// (so the test above tests the snapshot, not something else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_state_path_a_whole_fleet_restart_forgets_the_quota() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("forget");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    let (mut nodes, ports) = form(&scratch, &rules_path, |_| String::new());
    wait_formed(&nodes);
    exhaust(&nodes).await;
    for n in &mut nodes {
        stop(n);
    }
    let nodes = start_all(&scratch, &rules_path, &ports, |_| String::new());
    assert!(admitted(&nodes, 20).await > 0);
}

/// A whole-fleet restart in which one node's file is gone (a new disk, a crash before its
/// first save): the others restore their files before they push anything, and push what they
/// restored, so the node without a file learns the quota is used before it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_fleet_restart_with_one_state_file_missing_re_admits_nothing() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("fleet-missing");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    let extra = |i: usize| {
        let path = scratch.path().join(format!("n{i}.state"));
        format!("[limiter]\nstate_path = \"{}\"\n", path.display())
    };
    let (mut nodes, ports) = form(&scratch, &rules_path, extra);
    wait_formed(&nodes);
    exhaust(&nodes).await;
    for n in &mut nodes {
        stop(n);
    }
    std::fs::remove_file(scratch.path().join("n1.state")).expect("n1 saved a file");
    let nodes = start_all(&scratch, &rules_path, &ports, extra);
    let leaked = admitted(&nodes, 20).await;
    assert_eq!(
        leaked, 0,
        "{leaked} admitted on a used day quota after a fleet restart with a file missing"
    );
}

/// A node that crashes (no graceful stop, so no save at the end) keeps what its last periodic
/// save held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_node_keeps_what_its_last_periodic_save_held() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("crash-save");
    let rules_path = scratch.write("rules.yaml", &rules(5, "day"));
    let state = scratch.path().join("n.state");
    let extra = format!(
        "[limiter]\nstate_path = \"{}\"\nstate_save_interval_ms = 1000\n",
        state.display()
    );
    let node = spawn(&scratch, "n", &rules_path, &[], Ports::default(), &extra);
    wait_ready(&node, "n");
    assert_eq!(admitted(std::slice::from_ref(&node), 5).await, 5);
    // Two saves' time, then SIGKILL: nothing runs at the end.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    kill(&node, rustix::process::Signal::KILL);
    drop(node);
    assert!(state.exists(), "no periodic save");
    let node = spawn(&scratch, "n", &rules_path, &[], Ports::default(), &extra);
    wait_ready(&node, "n");
    assert_eq!(
        admitted(std::slice::from_ref(&node), 5).await,
        0,
        "the day quota was used before the crash"
    );
}

/// A state file whose records are all unreadable does not keep a node from starting: a copy is
/// set aside for a person to look at, the node starts without it, and its next save writes a
/// good file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_state_file_is_set_aside() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("corrupt");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    let state = scratch.write("n.state", "LMSTATE\u{1}\u{ff}\u{ff}\u{ff}\u{ff}garbage");
    let extra = format!("[limiter]\nstate_path = \"{}\"\n", state.display());
    let mut node = spawn(&scratch, "n", &rules_path, &[], Ports::default(), &extra);
    wait_ready(&node, "n");
    assert!(scratch.path().join("n.state.corrupt").exists());
    assert_eq!(admitted(std::slice::from_ref(&node), 3).await, 3);
    // The next graceful stop writes a good file: read back whole, with the 3 admitted.
    stop(&mut node);
    let saved = limitmesh::snapshot::read(&state).expect("a good file");
    assert!(saved.damage().is_empty(), "{:?}", saved.damage());
    assert_eq!(saved.registers(), 1);
}

/// A `state_path` the node cannot write is refused before it starts, with the reason.
#[test]
fn a_state_path_that_cannot_be_written_keeps_the_node_from_starting() {
    let scratch = Scratch::new("unwritable");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    let state = scratch.path().join("no-such-dir").join("n.state");
    let config = scratch.write(
        "n.toml",
        &format!(
            "[rules]\npath = \"{}\"\n[limiter]\nstate_path = \"{}\"\n",
            rules_path.display(),
            state.display()
        ),
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_limitmesh"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("limiter.state_path") && said.contains("does not exist"),
        "{said}"
    );
}
