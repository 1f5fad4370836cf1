//! A cluster large enough for owner mode, as users run it: eighteen `limitmesh` processes on
//! 127.0.0.1 (owner mode begins past sixteen members, with no setting), sharing one limit.

mod support;

use std::time::Duration;

use support::*;

/// Members in the test: the smallest cluster in which registers go through owners.
const NODES: usize = 18;

/// A counter of `/metrics`, summed over its series whose labels contain `labels`.
fn metric(text: &str, name: &str, labels: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eighteen_processes_share_a_limit_through_owners() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("owners");
    let rules_path = scratch.write("rules.yaml", &rules(100, "second"));
    let first = start(&scratch, "n0", &rules_path, &[]);
    let seed = first.gossip;
    let mut nodes = vec![first];
    for i in 1..NODES {
        let name = format!("n{i}");
        let ports = Ports::for_node(true);
        nodes.push(spawn(&scratch, &name, &rules_path, &[seed], ports, ""));
    }
    for (i, n) in nodes.iter().enumerate() {
        wait_ready(n, &format!("n{i}"));
    }
    // Formation: every node lists every member alive.
    wait_formed(&nodes, NODES, Duration::from_secs(30));

    // 300 requests per second spread over every node for 5 s, against 100 per second: each
    // node sees about 17 a second, so each must count the others' admissions to refuse.
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(envoy(n).await);
    }
    let (sent, admitted_at) = drive(&mut clients, "tenant", 300, 5).await;
    let worst = busiest_second(&admitted_at);
    println!(
        "{sent} requests over {NODES} nodes, {} admitted, busiest window {worst}",
        admitted_at.len()
    );

    // Registers went through owners: sums of windows arrived from owners, and no node sent
    // its registers to every member.
    let mut aggregates = 0;
    let mut summaries_sent = 0;
    for n in &nodes {
        let (_, text) = http_get(n.http, "/metrics").expect("metrics");
        // Sums and registers go alone, or together to the same node.
        for kind in ["aggregate", "exchange"] {
            aggregates += metric(
                &text,
                "limitmesh_gossip_packets_received_total",
                &format!("kind=\"{kind}\""),
            );
        }
        for kind in ["summary", "exchange"] {
            summaries_sent += metric(
                &text,
                "limitmesh_gossip_packets_sent_total",
                &format!("kind=\"{kind}\""),
            );
        }
    }
    println!("aggregates received {aggregates}, summaries sent {summaries_sent}");
    assert!(
        aggregates > 0,
        "no owner sent a window's sums: not in owner mode"
    );
    // The full mesh would send each round's registers to every other member: at least
    // NODES x (NODES - 1) datagrams a round for the 25 rounds of traffic. Through owners, a
    // node sends its one window to one or two owners a round.
    let full_mesh = NODES * (NODES - 1) * 25;
    assert!(
        summaries_sent * 2 < full_mesh as u64,
        "{summaries_sent} summary datagrams sent: half of what the full mesh would send ({full_mesh}) or more"
    );

    // Naive local limits would admit up to 18 × 100 in a window; the full mesh keeps the 3-node
    // process test within 115. Owners add a hop (a round more of staleness) and the client
    // measures on its own clock, beside eighteen processes on two cores.
    assert!(
        worst <= 125,
        "cluster admitted {worst} in one window against 100"
    );
    // Five seconds at 100 a second, the first second's burst aside: the limit is used.
    assert!(
        admitted_at.len() >= 400,
        "only {} admitted in 5 s",
        admitted_at.len()
    );
}
