//! Load shapes, percentiles and what counts as an admitting answer.

use super::*;
use crate::proto::envoy::service::ratelimit::v3::RateLimitRequest;

#[test]
fn shapes_parse_and_refuse_nonsense() {
    let shape: Shape = "4x64".parse().unwrap();
    assert_eq!((shape.connections, shape.streams), (4, 64));
    assert_eq!(shape.to_string(), "4x64");
    for bad in [
        "4", "0x4", "4x0", "x4", "4xx", "-1x2", "4096x17", "1x1025", "4097x1",
    ] {
        assert!(bad.parse::<Shape>().is_err(), "{bad} accepted");
    }
}

#[test]
fn percentiles_are_nearest_rank() {
    let round = Round {
        calls: 1000,
        seconds: 1.0,
        latencies_us: (1..=1000).rev().collect(),
        ..Round::default()
    };
    let s = summarise(&[round]);
    assert_eq!(
        (s.p50_us, s.p99_us, s.p999_us, s.max_us),
        (500, 990, 999, 1000)
    );
    assert_eq!(s.calls_per_s, 1000.0);
}

#[test]
fn only_an_admitting_answer_counts_as_a_call() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let envoy = Calls::new(addr, Arc::new(Workload::synthetic(Api::Envoy, 1))).unwrap();
    let answer = |code: rate_limit_response::Code| {
        grpc_frame(&RateLimitResponse {
            overall_code: code as i32,
            ..RateLimitResponse::default()
        })
    };
    assert!(envoy.admitted(&answer(rate_limit_response::Code::Ok)));
    assert!(!envoy.admitted(&answer(rate_limit_response::Code::OverLimit)));
    assert!(!envoy.admitted(&answer(rate_limit_response::Code::Unknown)));
    assert!(!envoy.admitted(&[0, 0, 0]), "not a frame");
    let own = Calls::new(addr, Arc::new(Workload::synthetic(Api::Own, 1))).unwrap();
    let check = |allowed| {
        grpc_frame(&CheckResponse {
            allowed,
            ..CheckResponse::default()
        })
    };
    assert!(own.admitted(&check(true)));
    assert!(!own.admitted(&check(false)));
    // A bench of real rules counts a refusal as an answer; anything else still fails.
    let rules = crate::rules::RuleSet::parse(
        "r.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
        crate::rules::LoadOptions::default(),
    )
    .unwrap();
    let real = Calls::new(addr, Arc::new(Workload::from_rules(&rules, 4).unwrap())).unwrap();
    assert!(real.admitted(&answer(rate_limit_response::Code::OverLimit)));
    assert!(real.admitted(&answer(rate_limit_response::Code::Ok)));
    assert!(!real.admitted(&answer(rate_limit_response::Code::Unknown)));
}

#[test]
fn the_envoy_body_is_one_grpc_frame_of_the_request() {
    let frame = grpc_frame(&envoy_request("bench"));
    assert_eq!(frame[0], 0, "uncompressed");
    let len = u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 5);
    let decoded = RateLimitRequest::decode(&frame[5..]).unwrap();
    assert_eq!(decoded, envoy_request("bench"));
}
