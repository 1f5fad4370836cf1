//! `/metrics` of a running node in a cluster, as Prometheus's own tools read it: the classic
//! format passes `promtool check metrics` (names, units, help text), OpenMetrics is served to
//! whoever asks for it, and every series the Grafana dashboard in `deploy/grafana/` plots is
//! one the node exposes.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::*;

/// Set (as CI does) to fail rather than skip when promtool is not installed.
const REQUIRE_PROMTOOL: &str = "LIMITMESH_REQUIRE_PROMTOOL";

/// `promtool check metrics` on `text`: `None` if promtool is not installed, else its verdict
/// and what it said.
fn promtool_check(text: &str) -> Option<(bool, String)> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())
        .expect("promtool reads its input");
    let out = child.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}

/// The metric names an expression of the dashboard uses.
fn dashboard_series() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/limitmesh.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard"))
            .expect("the dashboard is JSON");
    let mut names = BTreeSet::new();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for expr in &exprs {
        for (at, _) in expr.match_indices("limitmesh_") {
            let name: String = expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_of_a_clustered_node_pass_promtool_and_cover_the_dashboard() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("metrics");
    let rules_path = scratch.write("rules.yaml", &rules(2, "second"));
    let first = start(&scratch, "m1", &rules_path, &[]);
    let second = start(&scratch, "m2", &rules_path, &[first.gossip]);
    let nodes = vec![first, second];
    wait_formed(&nodes, 2, Duration::from_secs(20));
    let first = &nodes[0];
    let mut client = envoy(first).await;
    let mut over = 0;
    for _ in 0..6 {
        if ask(&mut client, "carol").await.overall_code == Code::OverLimit as i32 {
            over += 1;
        }
    }
    assert!(over > 0, "the limit refused nothing");
    // A round or two, for the peer's clock offset and the gossip counters.
    tokio::time::sleep(Duration::from_millis(600)).await;

    let (status, classic) = http_get(first.http, "/metrics").expect("metrics answer");
    assert_eq!(status, 200);
    assert!(
        classic.contains("limitmesh_decisions_total{domain=\"test\",result=\"over_limit\"}"),
        "{classic}"
    );
    assert!(
        classic.contains("limitmesh_clock_peer_offset_seconds{peer="),
        "{classic}"
    );
    assert!(!classic.contains("# EOF"), "classic format: {classic}");
    match promtool_check(&classic) {
        Some((ok, said)) => assert!(ok, "promtool check metrics:\n{said}\n{classic}"),
        None if std::env::var_os(REQUIRE_PROMTOOL).is_some() => {
            panic!("promtool is not installed (Debian: apt-get install prometheus)")
        }
        None => eprintln!("SKIPPED promtool check: promtool is not installed"),
    }

    let open = openmetrics(first.http);
    assert!(open.trim_end().ends_with("# EOF"), "{open}");
    assert!(
        open.contains("# TYPE limitmesh_decisions counter"),
        "{open}"
    );

    let missing: Vec<String> = dashboard_series()
        .into_iter()
        .filter(|name| !classic.contains(&format!("\n{name}")))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard plots series the node does not expose: {missing:?}"
    );
}

/// `/metrics` asked for as Prometheus asks: OpenMetrics first.
fn openmetrics(addr: std::net::SocketAddr) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .proxy(None)
        .build()
        .into();
    agent
        .get(format!("http://{addr}/metrics"))
        .header(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )
        .call()
        .expect("metrics answer")
        .body_mut()
        .read_to_string()
        .expect("a text body")
}

/// `limitmesh_rules_mismatched_members` of `node`, once it is `want`; panics after 10 s.
fn wait_mismatched(node: &Node, want: u64) {
    let line = format!("\nlimitmesh_rules_mismatched_members {want}\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = http_get(node.http, "/metrics").expect("metrics answer");
        if metrics.contains(&line) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {want} mismatched members: {}",
            metrics
                .lines()
                .filter(|l| l.contains("rules_mismatched"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_other_rules_is_reported_until_it_reloads_the_same() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("rules-digest");
    let first_rules = scratch.write("first.yaml", &rules(2, "second"));
    // A typo: the second node allows 20 a second.
    let second_rules = scratch.write("second.yaml", &rules(20, "second"));
    let first = start(&scratch, "d1", &first_rules, &[]);
    let second = start(&scratch, "d2", &second_rules, &[first.gossip]);
    let mut nodes = vec![first, second];
    wait_formed(&nodes, 2, Duration::from_secs(20));
    wait_mismatched(&nodes[0], 1);
    wait_mismatched(&nodes[1], 1);
    // Fixed and reloaded: agreement, on both sides.
    scratch.write("second.yaml", &rules(2, "second"));
    wait_mismatched(&nodes[0], 0);
    wait_mismatched(&nodes[1], 0);
    for n in &mut nodes {
        stop(n);
    }
}
