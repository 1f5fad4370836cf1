//! A whole-fleet restart in owner mode (past sixteen members a window's registers go through
//! its owners, and sums are not saved): twenty `limitmesh` processes exhaust a day quota, all
//! stop, one loses its state file, all start again with new boot ids (so new owners), and not
//! one request is admitted on the used quota.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::*;

const NODES: usize = 20;
const DAY_LIMIT: u32 = 200;

fn state_extra(scratch: &Scratch, i: usize) -> String {
    let path = scratch.path().join(format!("n{i}.state"));
    format!("[limiter]\nstate_path = \"{}\"\n", path.display())
}

/// Every member on its ports, each listing all the others as seeds; waits until each is ready
/// and every node lists every member alive.
fn start_all(scratch: &Scratch, rules: &std::path::Path, ports: &[Ports]) -> Vec<Node> {
    let nodes: Vec<Node> = (0..ports.len())
        .map(|i| {
            let seeds: Vec<SocketAddr> = (0..ports.len())
                .filter(|j| *j != i)
                .map(|j| SocketAddr::from(([127, 0, 0, 1], ports[j].gossip)))
                .collect();
            spawn(
                scratch,
                &format!("n{i}"),
                rules,
                &seeds,
                ports[i],
                &state_extra(scratch, i),
            )
        })
        .collect();
    for (i, n) in nodes.iter().enumerate() {
        wait_ready(n, &format!("n{i}"));
    }
    wait_formed(&nodes, ports.len(), Duration::from_secs(60));
    nodes
}

/// Asks every node `per_node` times, round robin; how many were admitted.
async fn admitted(nodes: &[Node], per_node: usize) -> u32 {
    admitted_round_robin(nodes, per_node, "tenant").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_mode_fleet_restart_with_one_state_file_missing_re_admits_nothing() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("owners-restart");
    let rules_path = scratch.write("rules.yaml", &rules(DAY_LIMIT, "day"));
    let ports: Vec<Ports> = (0..NODES).map(|_| Ports::for_node(true)).collect();
    let mut nodes = start_all(&scratch, &rules_path, &ports);

    let per_node = (DAY_LIMIT as usize).div_ceil(NODES) + 10;
    let used = admitted(&nodes, per_node).await;
    // Owner mode admits within a few percent of the limit; what matters is what follows.
    assert!(used >= DAY_LIMIT * 9 / 10, "{used} of {DAY_LIMIT} admitted");
    let started = Instant::now();
    while admitted(&nodes, 1).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the quota is still not used up everywhere"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    for n in &mut nodes {
        stop(n);
    }
    std::fs::remove_file(scratch.path().join("n7.state")).expect("n7 saved a file");
    let nodes = start_all(&scratch, &rules_path, &ports);
    let leaked = admitted(&nodes, 3).await;
    println!("{used} admitted before, {leaked} of {} after", 3 * NODES);
    assert_eq!(
        leaked, 0,
        "{leaked} admitted on a used day quota after an owner-mode fleet restart"
    );
}
