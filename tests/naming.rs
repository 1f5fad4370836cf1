//! Window names survive what an operator does on an ordinary day: real node processes keep a
//! used day quota through every step of a key rotation, and a node without peers or keys keeps
//! it across a restart.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::*;

const DAY_LIMIT: u32 = 60;
/// The key every node starts with (`support`'s) and the one it rotates to.
const OLD_KEY: &str = KEY_B64;
const NEW_KEY: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="; // bytes 32..=63

/// Asks every node `per_node` times, round robin; how many were admitted.
async fn admitted(nodes: &[Node], per_node: usize) -> u32 {
    admitted_round_robin(nodes, per_node, "tenant").await
}

fn state_extra(scratch: &Scratch, i: usize) -> String {
    let path = scratch.path().join(format!("n{i}.state"));
    format!("[limiter]\nstate_path = \"{}\"\n", path.display())
}

/// Node `i` of three on `ports`, every other one its seed, under the keyring `keys`.
fn spawn_member(
    scratch: &Scratch,
    rules: &std::path::Path,
    ports: &[Ports],
    i: usize,
    keys: &str,
) -> Node {
    let seeds: Vec<SocketAddr> = (0..ports.len())
        .filter(|j| *j != i)
        .map(|j| SocketAddr::from(([127, 0, 0, 1], ports[j].gossip)))
        .collect();
    spawn_with_env(
        scratch,
        &format!("n{i}"),
        rules,
        &seeds,
        ports[i],
        &state_extra(scratch, i),
        &[("LIMITMESH__CLUSTER__KEYS", keys)],
    )
}

fn wait_formed_3(nodes: &[Node]) {
    wait_formed(nodes, nodes.len(), Duration::from_secs(20));
}

/// The rotation README gives, one node at a time at each step: the new key added second, then
/// moved first, then the old one dropped. Nodes a step apart must still open each other's
/// datagrams and name every window the same: not one request may be admitted past the quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_step_by_step_admits_nothing_past_a_day_quota() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("rotation");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    // Formation under the old key alone.
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..3 {
        let seeds: Vec<SocketAddr> = nodes.iter().map(|n| n.gossip).collect();
        let ports = Ports::for_node(!seeds.is_empty());
        let node = spawn_with_env(
            &scratch,
            &format!("n{i}"),
            &rules_path,
            &seeds,
            ports,
            &state_extra(&scratch, i),
            &[("LIMITMESH__CLUSTER__KEYS", OLD_KEY)],
        );
        wait_ready(&node, &format!("n{i}"));
        nodes.push(node);
    }
    let ports: Vec<Ports> = nodes.iter().map(Node::ports).collect();
    wait_formed_3(&nodes);
    let used = admitted(&nodes, (DAY_LIMIT as usize).div_ceil(3) + 10).await;
    assert!(
        (DAY_LIMIT - 3..=DAY_LIMIT).contains(&used),
        "{used} of {DAY_LIMIT} admitted before the rotation"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(admitted(&nodes, 3).await, 0, "the quota is used up");

    let steps = [
        format!("{OLD_KEY},{NEW_KEY}"),
        format!("{NEW_KEY},{OLD_KEY}"),
        NEW_KEY.to_owned(),
    ];
    let mut leaked = Vec::new();
    for (step, keys) in steps.iter().enumerate() {
        for i in 0..3 {
            stop(&mut nodes[i]);
            nodes[i] = spawn_member(&scratch, &rules_path, &ports, i, keys);
            // Asked as soon as it listens, as a proxy would ask a sidecar that restarted.
            let deadline = Instant::now() + Duration::from_secs(20);
            while http_get(nodes[i].http, "/healthz").is_none() {
                assert!(Instant::now() < deadline, "n{i} never listened");
                std::thread::sleep(Duration::from_millis(20));
            }
            let early = admitted(std::slice::from_ref(&nodes[i]), 5).await;
            wait_ready(&nodes[i], &format!("n{i}"));
            wait_formed_3(&nodes);
            let after = admitted(&nodes, 3).await;
            if early + after > 0 {
                leaked.push(format!("step {step}, n{i}: {early} early, {after} after"));
            }
        }
    }
    assert!(
        leaked.is_empty(),
        "admitted past a used day quota during the rotation: {leaked:?}"
    );
}

/// A node without peers and without keys seals with a random key, but names windows the same
/// at every start: its saved registers still count after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_keys_keeps_its_day_quota_across_a_restart() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("keyless");
    let rules_path = scratch.write("rules.yaml", &rules(5, "day"));
    let no_keys = [("LIMITMESH__CLUSTER__KEYS", "")];
    let extra = state_extra(&scratch, 0);
    let mut node = spawn_with_env(
        &scratch,
        "n0",
        &rules_path,
        &[],
        Ports::default(),
        &extra,
        &no_keys,
    );
    wait_ready(&node, "n0");
    assert_eq!(admitted(std::slice::from_ref(&node), 7).await, 5);
    stop(&mut node);
    let node = spawn_with_env(
        &scratch,
        "n0",
        &rules_path,
        &[],
        Ports::default(),
        &extra,
        &no_keys,
    );
    wait_ready(&node, "n0");
    assert_eq!(
        admitted(std::slice::from_ref(&node), 5).await,
        0,
        "5 of 5 were used before the restart"
    );
}
