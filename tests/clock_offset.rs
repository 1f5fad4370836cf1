//! Real processes, one of them with a wrong wall clock (`LIMITMESH_TEST_CLOCK_OFFSET_MS`): the
//! cluster's limit holds. 8 s off is corrected to cluster time; 15 s off is beyond the default
//! `limiter.max_clock_drift_ms` (10 s), and that node is cut off, saying so in `members` and
//! in its metrics.

mod support;

use std::time::{Duration, Instant};

use support::*;

/// Starts n1 and n2 with correct clocks and n3 with its wall clock `offset_ms` off, waits
/// until each lists three alive members, and returns them.
fn cluster(scratch: &Scratch, rules: &std::path::Path, offset_ms: i64) -> Vec<Node> {
    let first = start(scratch, "n1", rules, &[]);
    let seed = first.gossip;
    let second = start(scratch, "n2", rules, &[seed]);
    let offset = offset_ms.to_string();
    let third = spawn_with_env(
        scratch,
        "n3",
        rules,
        &[seed],
        Ports::for_node(true),
        "",
        &[("LIMITMESH_TEST_CLOCK_OFFSET_MS", offset.as_str())],
    );
    wait_ready(&third, "n3");
    let nodes = vec![first, second, third];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !nodes.iter().all(|n| {
        http_get(n.http, "/v1/members").is_some_and(|(_, b)| b.matches("\"alive\"").count() == 3)
    }) {
        assert!(Instant::now() < deadline, "the cluster did not form");
        std::thread::sleep(Duration::from_millis(100));
    }
    nodes
}

/// n3's own entry in its `/v1/members`: (offset from cluster time, cut off).
fn own_clock(node: &Node) -> (i64, bool) {
    let (_, body) = http_get(node.http, "/v1/members").expect("members answer");
    let members: serde_json::Value = serde_json::from_str(&body).expect("members are JSON");
    let me = members
        .as_array()
        .and_then(|a| a.iter().find(|m| m["is_self"] == true))
        .expect("lists itself");
    (
        me["clock_offset_ms"].as_i64().expect("offset known"),
        me["clock_fenced"].as_bool().expect("fenced flag"),
    )
}

/// 300 requests per second over the three nodes for 4 s against 100 per second: the busiest
/// 1 s window, and how many were admitted.
async fn overload(nodes: &[Node], user: &str) -> (usize, usize) {
    let mut clients = Vec::new();
    for n in nodes {
        clients.push(envoy(n).await);
    }
    let (sent, admitted_at) = drive(&mut clients, user, 300, 4).await;
    let worst = busiest_second(&admitted_at);
    println!(
        "{sent} requests, {} admitted, busiest window {worst}",
        admitted_at.len()
    );
    (worst, admitted_at.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_8_s_fast_is_corrected_and_the_limit_holds() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("clock8");
    let rules_path = scratch.write("rules.yaml", &rules(100, "second"));
    let mut nodes = cluster(&scratch, &rules_path, 8_000);

    let (offset, fenced) = own_clock(&nodes[2]);
    assert!(
        (7_800..=8_200).contains(&offset),
        "n3 should see its clock 8 s ahead of cluster time, sees {offset} ms"
    );
    assert!(
        !fenced,
        "8 s is within the tolerance: n3 must not be cut off"
    );

    // The bar of the three-process test with correct clocks. Without cluster time the fast
    // node counts in buckets 8 s ahead, the others refuse its registers as from the future,
    // and the cluster admits its limit about one and a third times over.
    the_limit_holds_under_overload(&mut nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_15_s_fast_is_cut_off_says_why_and_the_limit_holds() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("clock15");
    let rules_path = scratch.write("rules.yaml", &rules(100, "second"));
    let mut nodes = cluster(&scratch, &rules_path, 15_000);

    let (offset, fenced) = own_clock(&nodes[2]);
    assert!(
        fenced,
        "15 s is beyond the 10 s tolerance: n3 must cut itself off"
    );
    assert!(
        (14_800..=15_200).contains(&offset),
        "offset reported {offset}"
    );
    let (_, metrics) = http_get(nodes[2].http, "/metrics").expect("metrics");
    assert!(metrics.contains("limitmesh_clock_fenced 1"), "{metrics}");
    // Its peers cut it off too.
    let (_, members) = http_get(nodes[0].http, "/v1/members").expect("members");
    assert_eq!(
        members.matches("\"clock_fenced\":true").count(),
        1,
        "{members}"
    );

    the_limit_holds_under_overload(&mut nodes).await;
}

/// Overloads the cluster 3× on one key for 4 s: the busiest 1 s window stays within the bar of
/// the three-process test with correct clocks, and the limit is not starved; then stops all.
async fn the_limit_holds_under_overload(nodes: &mut [Node]) {
    let (worst, admitted) = overload(nodes, "tenant").await;
    assert!(
        worst <= 115,
        "cluster admitted {worst} in one window against 100"
    );
    assert!(admitted >= 300, "only {admitted} admitted in 4 s");
    for n in nodes {
        stop(n);
    }
}
