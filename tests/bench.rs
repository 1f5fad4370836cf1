//! `limitmesh bench` as a user runs it: the built binary starts its two server processes,
//! loads both, and reports; and the request file it writes for an external load tool is the
//! very request it measures with.

mod support;

use std::process::Command;

use limitmesh::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;
use support::{KEY_B64, Scratch};

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_limitmesh"))
        .arg("bench")
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn a_short_bench_measures_both_services_on_both_apis_without_errors() {
    for api in ["envoy", "own"] {
        let out = bench(&[
            "--api",
            api,
            "--shapes",
            "2x2,1x8",
            "--seconds",
            "0.2",
            "--warmup",
            "0.05",
            "--rounds",
            "2",
            "--keys",
            "10",
            "--json",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{api}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
        assert_eq!(report["api"], api);
        let shapes = report["shapes"].as_array().expect("shapes");
        assert_eq!(shapes.len(), 2, "{report}");
        assert_eq!(shapes[0]["shape"]["connections"], 2);
        assert_eq!(shapes[1]["shape"]["streams"], 8);
        for shape in shapes {
            for service in ["noop", "limitmesh"] {
                let s = &shape[service];
                assert_eq!(s["errors"], 0, "{api} {service}: {s}");
                assert!(
                    s["calls_per_s"].as_f64().unwrap() > 100.0,
                    "{api} {service}: {s}"
                );
                let (p50, p999, max) = (
                    s["p50_us"].as_u64().unwrap(),
                    s["p999_us"].as_u64().unwrap(),
                    s["max_us"].as_u64().unwrap(),
                );
                assert!(
                    0 < p50 && p50 <= p999 && p999 <= max,
                    "{api} {service}: {s}"
                );
            }
            let ratio = shape["throughput_ratio"].as_f64().unwrap();
            assert!(ratio > 0.0 && ratio.is_finite(), "{shape}");
            assert_eq!(shape["round_ratios"].as_array().unwrap().len(), 2);
        }
    }
}

#[test]
fn the_written_request_is_one_grpc_frame_of_the_benchs_envoy_request() {
    let scratch = Scratch::new("bench-request");
    let path = scratch.path().join("request.bin");
    let out = bench(&["--write-request", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frame = std::fs::read(&path).unwrap();
    assert_eq!(frame[0], 0, "uncompressed");
    let len = u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 5, "one message, whole");
    let request = RateLimitRequest::decode(&frame[5..]).unwrap();
    assert_eq!(request, limitmesh::cli::bench::envoy_request("bench"));
    assert_eq!(request.domain, "demo");
}

#[test]
fn bad_arguments_are_refused_by_name() {
    for (args, expected) in [
        (&["--shapes", "4"][..], "CONNECTIONSxSTREAMS"),
        (&["--shapes", "0x4"][..], "CONNECTIONSxSTREAMS"),
        (&["--seconds", "0"][..], "--seconds"),
        (&["--warmup=61"][..], "--warmup"),
        (&["--shapes", "1x1025"][..], "CONNECTIONSxSTREAMS"),
        (&["--rounds", "0"][..], "--rounds"),
        (&["--keys", "100001"][..], "--keys"),
    ] {
        let out = bench(args);
        assert!(!out.status.success(), "{args:?} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// `bench --config`: the node serves the given configuration's rules, and the calls go to
/// each of them; the limits refuse most calls, and a refusal is a served call, not an error.
#[test]
fn a_bench_of_a_real_configuration_calls_its_own_rules() {
    let scratch = Scratch::new("bench-config");
    let rules = scratch.write(
        "rules.yaml",
        "domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: second, requests_per_unit: 2 }\n  - key: path\n    value: /api/*\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: route\n    value: login\n    descriptors:\n      - key: ip\n        rate_limit: { unit: hour, requests_per_unit: 1 }\n",
    );
    let config = scratch.write(
        "node.toml",
        &format!(
            "[rules]\npath = \"{}\"\n[cluster]\nseeds = [\"192.0.2.1:7946\"]\nkeys = [\"{KEY_B64}\"]\n",
            rules.display()
        ),
    );
    let config = config.to_str().expect("a UTF-8 path");
    let out = bench(&[
        "--config",
        config,
        "--shapes",
        "2x2",
        "--seconds",
        "0.2",
        "--warmup",
        "0.05",
        "--rounds",
        "1",
        "--keys",
        "30",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(report["rules"], 3, "{report}");
    let node = &report["shapes"][0]["limitmesh"];
    assert_eq!(node["errors"], 0, "{node}");
    assert!(node["calls_per_s"].as_f64().unwrap() > 100.0, "{node}");

    // The synthetic load's own API has no place in a bench of rules.
    let own = bench(&["--config", config, "--api", "own"]);
    assert!(!own.status.success());
    assert!(
        String::from_utf8_lossy(&own.stderr).contains("--api own"),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
}
