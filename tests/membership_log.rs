//! What an operator sees of a partition: four real processes, their network cut 3 | 1 by a
//! proxy between them. Each side's log says the other side is down within 5 s, and alive
//! again after the heal; `/v1/members` shows when each member was last heard from.

mod support;

use std::time::{Duration, Instant};

use support::partition::Proxy;
use support::*;

const NODES: usize = 4;
const LOG_FILTER: (&str, &str) = ("RUST_LOG", "warn,limitmesh=info");

/// Each node's own id, from its `/v1/members`.
fn own_id(node: &Node) -> String {
    members(node)
        .into_iter()
        .find(|m| m["is_self"] == true)
        .and_then(|m| m["id"].as_str().map(str::to_owned))
        .expect("lists itself")
}

fn members(node: &Node) -> Vec<serde_json::Value> {
    let (_, body) = http_get(node.http, "/v1/members").expect("members answer");
    serde_json::from_str(&body).expect("members are JSON")
}

/// When `node` last heard from member `id`, as its `/v1/members` says.
fn last_heard(node: &Node, id: &str) -> Option<u64> {
    members(node)
        .into_iter()
        .find(|m| m["id"] == id)
        .and_then(|m| m["last_heard_ms"].as_u64())
}

/// Waits (at most `within`) for a line past byte `from` of the log at `path` that contains
/// every one of `words`; returns how long it took.
fn wait_for_line(
    path: &std::path::Path,
    from: usize,
    words: &[&str],
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        let found = log
            .get(from..)
            .is_some_and(|tail| tail.lines().any(|l| words.iter().all(|w| l.contains(w))));
        if found {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "no line with {words:?} in {} within {within:?}; it says:\n{}",
            path.display(),
            log.get(from..).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tail_of(path: &std::path::Path, from: usize) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .get(from..)
        .unwrap_or_default()
        .to_owned()
}

fn log_len(path: &std::path::Path) -> usize {
    std::fs::metadata(path).map_or(0, |m| m.len() as usize)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_reads_down_then_alive_in_the_logs_of_both_sides() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("partition-log");
    let rules_path = scratch.write("rules.yaml", &rules(100, "second"));
    let proxy = Proxy::new(NODES);
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let ports = Ports {
            gossip: proxy.real_port(i),
            advertise: Some(proxy.advertised(i).port()),
            ..Ports::default()
        };
        let seeds = if i == 0 {
            vec![]
        } else {
            vec![proxy.advertised(0)]
        };
        let node = spawn_with_env(
            &scratch,
            &format!("n{i}"),
            &rules_path,
            &seeds,
            ports,
            "",
            &[LOG_FILTER],
        );
        wait_ready(&node, &format!("n{i}"));
        nodes.push(node);
    }
    wait_formed(&nodes, NODES, Duration::from_secs(20));
    let ids: Vec<String> = nodes.iter().map(own_id).collect();
    let logs: Vec<_> = (0..NODES)
        .map(|i| log_path(&scratch, &format!("n{i}")))
        .collect();
    // Every join is in the log, with the member's id and its advertised address.
    wait_for_line(
        &logs[0],
        0,
        &["member joined", &ids[3], &proxy.advertised(3).to_string()],
        Duration::from_secs(5),
    );

    // Heard from lately, and the time moves on while the network is whole.
    let before = last_heard(&nodes[0], &ids[3]).expect("n3 heard from");
    std::thread::sleep(Duration::from_millis(1_500));
    let after = last_heard(&nodes[0], &ids[3]).expect("n3 heard from");
    assert!(after > before, "last heard from n3: {before} then {after}");

    let marks: Vec<usize> = logs.iter().map(|l| log_len(l)).collect();
    proxy.partition(&[0, 0, 0, 1]);
    let cut_at = Instant::now();
    // The big side of the small one, and the small side of every member of the big one.
    wait_for_line(
        &logs[0],
        marks[0],
        &["member down", &ids[3]],
        Duration::from_secs(15),
    );
    let big_side_sees = cut_at.elapsed();
    for id in &ids[..3] {
        wait_for_line(
            &logs[3],
            marks[3],
            &["member down", id],
            Duration::from_secs(15),
        );
    }
    let small_side_sees = cut_at.elapsed();
    assert!(proxy.dropped() > 0, "the partition dropped nothing");
    assert!(
        big_side_sees <= Duration::from_secs(5) && small_side_sees <= Duration::from_secs(5),
        "down logged after {big_side_sees:?} (n0 of n3) and {small_side_sees:?} (n3 of all three)\n\
         n0:\n{}\nn3:\n{}",
        tail_of(&logs[0], marks[0]),
        tail_of(&logs[3], marks[3])
    );
    // Suspected before down: the log reads as a failure, not as a member leaving.
    let tail = tail_of(&logs[0], marks[0]);
    assert!(
        tail.lines()
            .any(|l| l.contains("member suspect") && l.contains(&ids[3])),
        "{tail}"
    );
    assert!(!tail.contains("member left"), "{tail}");
    // Nothing from n3 arrives any more.
    let cut = last_heard(&nodes[0], &ids[3]);
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(last_heard(&nodes[0], &ids[3]), cut, "n3 still heard from");

    let marks: Vec<usize> = logs.iter().map(|l| log_len(l)).collect();
    proxy.heal();
    wait_for_line(
        &logs[0],
        marks[0],
        &["member alive again", &ids[3]],
        Duration::from_secs(20),
    );
    wait_for_line(
        &logs[3],
        marks[3],
        &["member alive again", &ids[0]],
        Duration::from_secs(20),
    );
    wait_formed(&nodes, NODES, Duration::from_secs(20));

    // A graceful stop reads as leaving.
    let mark = log_len(&logs[0]);
    stop(&mut nodes[3]);
    wait_for_line(
        &logs[0],
        mark,
        &["member left", &ids[3]],
        Duration::from_secs(10),
    );
    for node in &mut nodes[..3] {
        stop(node);
    }
    eprintln!(
        "down logged after {big_side_sees:?} (big side) and {small_side_sees:?} (small side)"
    );
}
