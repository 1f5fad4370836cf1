//! The built `limitmesh` binary, as users run it: real processes on 127.0.0.1, configured by
//! files, spoken to over gRPC (Envoy's RLS and the health service) and HTTP.

mod support;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use limitmesh::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_envoy_reload_metrics_health_and_sigterm() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("one");
    let rules_path = scratch.write("rules.yaml", &rules(5, "minute"));
    let mut node = start(&scratch, "solo", &rules_path, &[]);
    let mut client = envoy(&node).await;

    // Exactly requests_per_unit OK in a window, then OVER_LIMIT.
    for i in 0..5 {
        let r = ask(&mut client, "alice").await;
        assert_eq!(r.overall_code, Code::Ok as i32, "request {i}");
        assert_eq!(r.statuses[0].limit_remaining, 4 - i);
    }
    let over = ask(&mut client, "alice").await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    let status = &over.statuses[0];
    assert_eq!(status.current_limit.as_ref().unwrap().requests_per_unit, 5);
    // All five landed in one 6 s bucket of a 60 s window: a request fits again once that
    // bucket is leaving the window, a minute from now (give or take the bucket).
    let reset = status.duration_until_reset.expect("duration_until_reset");
    assert!(
        (53..=62).contains(&reset.seconds),
        "duration_until_reset {reset:?}"
    );
    assert!(
        over.response_headers_to_add.is_empty(),
        "no rate limit headers by default, as envoyproxy/ratelimit: {:?}",
        over.response_headers_to_add
    );
    assert_eq!(
        ask(&mut client, "bob").await.overall_code,
        Code::Ok as i32,
        "per user"
    );

    // /metrics counts the decisions.
    let (code, metrics) = http_get(node.http, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains("limitmesh_decisions_total{domain=\"test\",result=\"allowed\"} 6"),
        "{metrics}"
    );
    assert!(metrics.contains("limitmesh_decisions_total{domain=\"test\",result=\"over_limit\"} 1"));
    // The fifth of five went past 80 % of the limit.
    assert!(
        metrics.contains("limitmesh_near_limit_total{domain=\"test\"} 1"),
        "{metrics}"
    );

    // Health reports SERVING.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // Hot reload: 5 per minute becomes 8 per minute, without a restart.
    scratch.write("rules.yaml", &rules(8, "minute"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = ask(&mut client, "carol").await;
        if r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit
            == 8
        {
            break;
        }
        assert!(Instant::now() < deadline, "the new limit never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // alice had 5 of 5; now 3 more fit under 8.
    let mut allowed = 0;
    for _ in 0..5 {
        if ask(&mut client, "alice").await.overall_code == Code::Ok as i32 {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3, "the raised limit applies to the same window");

    // An invalid file is refused: the old rules stay and the failure is counted.
    scratch.write("rules.yaml", "domain: test\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, m) = http_get(node.http, "/metrics").unwrap();
        if m.contains("limitmesh_rules_reloads_total{outcome=\"failure\"} 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bad reload was never attempted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = ask(&mut client, "dave").await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        8
    );

    // SIGTERM: a clean exit within 5 s.
    let sent = Instant::now();
    kill(&node, Signal::TERM);
    let status = loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "still running 5 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status}");
    println!("exited {} ms after SIGTERM", sent.elapsed().as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_share_a_limit_and_survive_a_kill() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("three");
    let rules_path = scratch.write("rules.yaml", &rules(100, "second"));
    let first = start(&scratch, "n1", &rules_path, &[]);
    let seed = first.gossip;
    let mut nodes = vec![first];
    for name in ["n2", "n3"] {
        nodes.push(start(&scratch, name, &rules_path, &[seed]));
    }
    // Formation: each node lists three alive members.
    wait_formed(&nodes, 3, Duration::from_secs(20));

    // 300 requests per second spread over the three nodes for 4 s, against 100 per second.
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(envoy(n).await);
    }
    let (i, admitted_at) = drive(&mut clients, "tenant", 300, 4).await;
    let worst = busiest_second(&admitted_at);
    println!(
        "{i} requests, {} admitted, busiest window {worst}",
        admitted_at.len()
    );
    // Measured on the client's clock, with three nodes and the client sharing a machine's
    // cores: the client's scheduling moves requests between windows, so the bound here is
    // loose; the cluster's own over-admission is pinned on true time in the simulator
    // (`sim/tests/faults.rs`).
    assert!(
        worst <= 115,
        "cluster admitted {worst} in one window against 100"
    );
    assert!(
        admitted_at.len() >= 300,
        "only {} admitted in 4 s",
        admitted_at.len()
    );

    // Kill one process outright; the others keep answering.
    kill(&nodes[2], Signal::KILL);
    for _ in 0..20 {
        for c in clients.iter_mut().take(2) {
            let r = ask(c, "after-kill").await;
            assert!(r.overall_code == Code::Ok as i32 || r.overall_code == Code::OverLimit as i32);
        }
    }
}

/// Runs the binary with `config` to its end (at most 20 s): exit success, stdout, stderr.
fn run_to_end(config: &Path) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_limitmesh"))
        .args(["serve", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a node that cannot start kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .expect("stdout");
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut err)
        .expect("stderr");
    (status.success(), out, err)
}

#[test]
fn a_node_that_cannot_start_says_why_before_it_says_serving() {
    let _turn = ONE_AT_A_TIME.blocking_lock();
    let scratch = Scratch::new("no-start");
    let good_rules = scratch.write("rules.yaml", &rules(5, "second"));
    let bad_rules = scratch.write("bad.yaml", "domain: test\ndescriptors:\n  - key: user\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n");
    let missing_key = scratch.path().join("missing.key");
    let config = |name: &str, key_line: &str, rules: &Path| {
        scratch.write(
            name,
            &format!(
                "[grpc]\nlisten = \"127.0.0.1:0\"\n[http]\nlisten = \"127.0.0.1:0\"\n[cluster]\nbind = \"127.0.0.1:0\"\n{key_line}\n[rules]\npath = \"{}\"\n",
                rules.display()
            ),
        )
    };

    let no_key = config(
        "no-key.toml",
        &format!("key_file = \"{}\"", missing_key.display()),
        &good_rules,
    );
    let (ok, out, err) = run_to_end(&no_key);
    assert!(!ok, "started without its key file: {out}");
    assert!(!out.contains("serving"), "said it was serving: {out}");
    assert!(
        err.contains("missing.key"),
        "the error should name the key file: {err}"
    );

    let rules_error = config("bad-rules.toml", "", &bad_rules);
    let (ok, out, err) = run_to_end(&rules_error);
    assert!(!ok, "started with invalid rules: {out}");
    assert!(!out.contains("serving"), "said it was serving: {out}");
    assert!(
        err.contains("bad.yaml") && err.contains("fortnight"),
        "the error should name the file and the unit: {err}"
    );
}

/// `limitmesh validate RULES [CONFIG]`: exit code and what it printed.
fn validate(args: &[&Path]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_limitmesh"))
        .arg("validate")
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `limitmesh validate` on files it must refuse: asserts it failed, returns what it said.
fn validate_refuses(args: &[&Path]) -> String {
    let (ok, out, err) = validate(args);
    assert!(!ok, "accepted {args:?}: {out}");
    err
}

#[test]
fn validate_reports_file_and_line_and_fails() {
    let _turn = ONE_AT_A_TIME.blocking_lock();
    let scratch = Scratch::new("validate");
    let rules_ok = scratch.write("ok.yaml", &rules(5, "second"));
    let key = scratch.write("key", &format!("{KEY_B64}\n"));
    let config_ok = scratch.write(
        "ok.toml",
        &format!("[cluster]\nkey_file = \"{}\"\n", key.display()),
    );
    let (ok, out, err) = validate(&[&rules_ok, &config_ok]);
    assert!(ok, "valid files refused: {out} {err}");
    assert!(out.contains("1 domains, 1 rules"), "{out}");

    let rules_bad = scratch.write(
        "bad.yaml",
        "domain: test\ndescriptors:\n  - key: user\n    rate_limit: { unit: second }\n",
    );
    let err = validate_refuses(&[&rules_bad]);
    assert!(
        err.contains("bad.yaml:4") && err.contains("requests_per_unit"),
        "the error should name file, line and field: {err}"
    );

    let config_bad = scratch.write(
        "bad.toml",
        "[grpc]\nlisten = \"127.0.0.1:1\"\nlisen = \"x\"\n",
    );
    let err = validate_refuses(&[&rules_ok, &config_bad]);
    assert!(
        err.contains("bad.toml") && err.contains("3") && err.contains("lisen"),
        "the error should name file, line and key: {err}"
    );

    let config_no_key = scratch.write(
        "no-key.toml",
        "[cluster]\nkey_file = \"/nonexistent/limitmesh.key\"\n",
    );
    let err = validate_refuses(&[&rules_ok, &config_no_key]);
    assert!(err.contains("/nonexistent/limitmesh.key"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_headers_are_sent_when_configured() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("headers");
    let rules_path = scratch.write("rules.yaml", &rules(2, "minute"));
    let mut node = spawn_with_env(
        &scratch,
        "headers",
        &rules_path,
        &[],
        Ports::default(),
        "",
        &[("LIMITMESH__GRPC__RATE_LIMIT_HEADERS", "draft-03")],
    );
    wait_ready(&node, "headers");
    let mut client = envoy(&node).await;
    let header = |r: &limitmesh::proto::envoy::service::ratelimit::v3::RateLimitResponse,
                  key: &str| {
        r.response_headers_to_add
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.clone())
    };
    let first = ask(&mut client, "ada").await;
    assert_eq!(
        header(&first, "x-ratelimit-limit").as_deref(),
        Some("2, 2;w=60")
    );
    assert_eq!(
        header(&first, "x-ratelimit-remaining").as_deref(),
        Some("1")
    );
    ask(&mut client, "ada").await;
    let over = ask(&mut client, "ada").await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(header(&over, "x-ratelimit-remaining").as_deref(), Some("0"));
    assert!(header(&over, "x-ratelimit-reset").is_some());
    stop(&mut node);
}

/// `POST /json` on a real process, with the outside test's probes: a per-IP login limit of 3
/// a minute next to a tenant value of 5 000 bytes gives 200 200 200 429 429 (the long value
/// fails nothing), and a cost of 6 on a limit of 5 a day is 429. A node told `http.json =
/// "off"` answers 404 naming the setting, and still serves its metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_checks_decide_each_descriptor_and_are_served_only_where_allowed() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scratch = Scratch::new("json");
    let rules_path = scratch.write(
        "rules.yaml",
        "domain: edge\ndescriptors:\n  - key: route\n    value: /login\n    descriptors:\n      - key: remote_address\n        rate_limit: { unit: minute, requests_per_unit: 3 }\n  - key: tenant\n    rate_limit: { unit: minute, requests_per_unit: 100 }\n  - key: client\n    rate_limit: { unit: day, requests_per_unit: 5 }\n",
    );
    let mut node = start(&scratch, "json", &rules_path, &[]);
    let long = "t".repeat(5_000);
    let probe = format!(
        r#"{{"domain":"edge","descriptors":[{{"entries":[{{"key":"route","value":"/login"}},{{"key":"remote_address","value":"9.9.9.9"}}]}},{{"entries":[{{"key":"tenant","value":"{long}"}}]}}]}}"#
    );
    let codes: Vec<u16> = (0..5)
        .map(|_| http_post(node.http, "/json", &probe).expect("answered").0)
        .collect();
    assert_eq!(codes, [200, 200, 200, 429, 429]);

    let request_level = r#"{"domain":"edge","hits_addend":6,"descriptors":[{"entries":[{"key":"client","value":"c1"}]}]}"#;
    let (code, body) = http_post(node.http, "/json", request_level).expect("answered");
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("OVER_LIMIT"), "{body}");
    let descriptor_level = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"c1"}],"hitsAddend":6}]}"#;
    assert_eq!(
        http_post(node.http, "/json", descriptor_level)
            .expect("answered")
            .0,
        429
    );
    let five = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"c1"}],"hits_addend":5}]}"#;
    assert_eq!(
        http_post(node.http, "/json", five).expect("answered").0,
        200,
        "the refused costs took nothing"
    );
    stop(&mut node);

    let mut off = spawn_with_env(
        &scratch,
        "json-off",
        &rules_path,
        &[],
        Ports::default(),
        "",
        &[("LIMITMESH__HTTP__JSON", "off")],
    );
    wait_ready(&off, "json-off");
    let (code, body) = http_post(off.http, "/json", &probe).expect("answered");
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("http.json"), "{body}");
    assert_eq!(http_get(off.http, "/metrics").map(|(c, _)| c), Some(200));
    stop(&mut off);
}
