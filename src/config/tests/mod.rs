//! Node configuration: defaults, TOML, environment overrides, validation, and where each value was set.

use std::ffi::OsString;
use std::net::SocketAddr;

use super::*;
use crate::crdt::Arbitration;
use crate::limiter::{LimiterConfig, PartitionPolicy, Policy};
use crate::rules::{LoadOptions, Lookup, RuleLimit, RuleSet, RulesSource};

const FILE: &str = "node.toml";
const KEY_ONES: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const KEY_SEQ: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_SHORT: &str = "AAAAAAAAAAAAAAAAAAAAAA==";

fn env(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    vars.iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

fn parse(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_toml(FILE, text, env(vars))
}

fn parse_ok(text: &str, vars: &[(&str, &str)]) -> Config {
    match parse(text, vars) {
        Ok(c) => c,
        Err(e) => panic!("config should load: {e}"),
    }
}

fn parse_err(text: &str, vars: &[(&str, &str)]) -> ConfigError {
    match parse(text, vars) {
        Ok(c) => panic!("config should be refused: {c:?}"),
        Err(e) => e,
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Asserts an `Invalid` error about `field`, set in `set_in`.
fn assert_invalid(err: &ConfigError, field: &str, set_in: &SetIn) {
    let ConfigError::Invalid {
        field: f,
        set_in: o,
        ..
    } = err
    else {
        panic!("expected a validation error, got: {err}");
    };
    assert_eq!(*f, field, "{err}");
    assert_eq!(o, set_in, "{err}");
    assert!(err.to_string().contains(field), "{err}");
}

fn at_line(line: usize) -> SetIn {
    SetIn::File {
        file: FILE.to_owned(),
        line,
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = Config::default();
    assert!(!c.node.name.is_empty());
    assert_eq!(c.grpc.listen, addr("127.0.0.1:8081"));
    assert_eq!(c.grpc.request_timeout_ms, 50);
    assert_eq!(c.grpc.max_concurrent_streams, 1024);
    assert_eq!(c.http.listen, addr("127.0.0.1:8080"));
    assert_eq!(c.http.json, JsonCheckName::Auto);
    assert_eq!(c.cluster.bind, addr("127.0.0.1:7946"));
    assert_eq!(c.cluster.advertise, "");
    assert!(c.cluster.seeds.is_empty());
    assert_eq!(c.cluster.seed_dns, "");
    assert_eq!(c.cluster.dns_refresh_ms, 30_000);
    assert_eq!(c.cluster.cluster_id, "limitmesh");
    assert!(c.cluster.keys.is_empty());
    assert_eq!(c.cluster.key_file, "");
    assert!(!c.cluster.insecure);
    assert_eq!(c.cluster.gossip_interval_ms, 200);
    assert_eq!(c.cluster.anti_entropy_interval_ms, 5_000);
    assert_eq!(c.cluster.max_packet_size, 1_400);
    assert_eq!(c.limiter.max_keys, 100_000);
    assert_eq!(c.limiter.partition_policy, PartitionPolicyName::Strict);
    assert_eq!(c.limiter.arbitration, ArbitrationName::VectorDominance);
    assert_eq!(c.limiter.onset_ms, 500);
    assert_eq!(c.limiter.expected_hold_ms, 60_000);
    assert_eq!(c.limiter.max_clock_drift_ms, 10_000);
    assert_eq!(c.limiter.default_buckets, 10);
    assert_eq!(c.rules.path, "");
    assert_eq!(c.rules.reload_interval_ms, 1_000);
    assert_eq!(c.log.format, LogFormat::Text);
    assert_eq!(c.log.filter, "info");
    c.validate().unwrap();
}

#[test]
fn an_empty_file_gives_the_defaults() {
    assert_eq!(parse_ok("", &[]), Config::default());
    assert_eq!(parse_ok("[grpc]\n", &[]), Config::default());
}

#[test]
fn the_demo_config_is_the_defaults_on_loopback_with_the_demo_rules() {
    let demo = Config::demo().unwrap();
    assert_eq!(demo.node.name, "demo");
    let defaults = Config {
        node: NodeConfig {
            name: "demo".to_owned(),
        },
        ..Config::default()
    };
    assert_eq!(demo, defaults);
    assert!(demo.grpc.listen.ip().is_loopback());
    assert!(demo.http.listen.ip().is_loopback());
    assert!(demo.cluster.bind.ip().is_loopback());
    assert!(!demo.cluster.has_peers());
    assert_eq!(Config::load_with_env(None, env(&[])).unwrap(), demo);
    assert!(matches!(demo.rules_source(), RulesSource::Embedded { .. }));
}

#[test]
fn the_demo_rules_load_and_mean_what_they_say() {
    let set = RuleSet::parse(DEMO_RULES_NAME, DEMO_RULES_YAML, LoadOptions::default()).unwrap();
    let e = crate::rules::DescriptorEntry::new;
    let rule = |entries: &[crate::rules::DescriptorEntry<'_>]| match set.lookup("demo", entries) {
        Lookup::Matched(m) => Some((
            m.rule.label().to_owned(),
            m.rule.limit.clone(),
            m.rule.shadow,
        )),
        _ => None,
    };
    let (name, limit, _) = rule(&[e("client", "alice")]).unwrap();
    assert_eq!(name, "per-client");
    assert!(matches!(
        limit,
        RuleLimit::Limited {
            requests_per_unit: 10,
            ..
        }
    ));
    assert_eq!(
        rule(&[e("client", "trusted")]).unwrap().1,
        RuleLimit::Unlimited
    );
    assert_eq!(rule(&[e("path", "/api/users")]).unwrap().0, "api");
    assert!(rule(&[e("path", "/admin")]).unwrap().2, "shadow");
    assert!(rule(&[e("other", "x")]).is_none());
}

#[test]
fn rate_limit_headers_and_merged_domains_are_read() {
    let c = parse_ok(
        "[grpc]\nrate_limit_headers = \"ietf\"\n[rules]\nmerge_domains = true\n",
        &[],
    );
    assert_eq!(c.grpc.rate_limit_headers, RateLimitHeadersName::Ietf);
    assert!(c.rules.merge_domains);
    assert!(c.rules_load_options().merge_domains);
    assert!(!Config::default().rules.merge_domains);
}

#[test]
fn every_field_is_read_from_toml() {
    let c = parse_ok(
        r#"
[node]
name = "n1"
[grpc]
listen = "0.0.0.0:9000"
request_timeout_ms = 20
max_concurrent_streams = 64
rate_limit_headers = "draft-03"
[http]
listen = "0.0.0.0:9001"
json = "on"
[cluster]
bind = "0.0.0.0:7000"
advertise = "10.0.0.5:7000"
seeds = ["10.0.0.1:7000", "peer.example:7000"]
seed_dns = "limitmesh.default.svc.cluster.local:7000"
dns_refresh_ms = 1000
cluster_id = "prod"
keys = ["AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="]
insecure = false
gossip_interval_ms = 100
anti_entropy_interval_ms = 1000
max_packet_size = 1200
[limiter]
max_keys = 5
when_table_full = "error"
partition_policy = "available"
arbitration = "max-timestamp"
onset_ms = 1
expected_hold_ms = 2
max_clock_drift_ms = 3000
default_buckets = 20
[rules]
path = "/etc/limitmesh/rules"
reload_interval_ms = 250
[log]
format = "json"
filter = "warn,limitmesh=debug"
"#,
        &[],
    );
    assert_eq!(c.node.name, "n1");
    assert_eq!(c.grpc.listen, addr("0.0.0.0:9000"));
    assert_eq!(c.grpc.request_timeout_ms, 20);
    assert_eq!(c.grpc.max_concurrent_streams, 64);
    assert_eq!(c.grpc.rate_limit_headers, RateLimitHeadersName::Draft03);
    assert_eq!(c.http.listen, addr("0.0.0.0:9001"));
    assert_eq!(c.http.json, JsonCheckName::On);
    assert_eq!(c.cluster.seeds, ["10.0.0.1:7000", "peer.example:7000"]);
    assert_eq!(c.advertise_addr().unwrap(), addr("10.0.0.5:7000"));
    assert_eq!(c.cluster.cluster_id, "prod");
    assert_eq!(
        c.cluster_keys().unwrap(),
        vec![[1u8; 32], core::array::from_fn(|i| i as u8)]
    );
    assert_eq!(c.cluster.max_packet_size, 1200);
    assert_eq!(c.limiter.default_buckets, 20);
    assert_eq!(c.rules_load_options().default_buckets, 20);
    assert_eq!(
        c.rules_source(),
        RulesSource::Path("/etc/limitmesh/rules".into())
    );
    assert_eq!(c.log.format, LogFormat::Json);

    let core = c.limiter_config();
    assert_eq!(core.max_keys, 5);
    assert_eq!(core.when_full, crate::limiter::TableFullPolicy::Error);
    assert_eq!(core.policy, Policy::DemandShare(PartitionPolicy::Available));
    assert_eq!(core.arbitration, Arbitration::MaxTimestamp);
    assert_eq!(
        (
            core.onset_ms,
            core.expected_hold_ms,
            core.max_clock_drift_ms
        ),
        (1, 2, 3_000)
    );
    assert!(core.admission_cache);
}

#[test]
fn the_default_limiter_config_maps_to_the_core_defaults() {
    let core = Config::default().limiter_config();
    let expected = LimiterConfig::default();
    assert_eq!(core.max_keys, 100_000);
    assert_eq!(core.policy, Policy::DemandShare(PartitionPolicy::Strict));
    assert_eq!(core.arbitration, Arbitration::VectorDominance);
    assert_eq!(
        (
            core.onset_ms,
            core.expected_hold_ms,
            core.max_clock_drift_ms
        ),
        (
            expected.onset_ms,
            expected.expected_hold_ms,
            expected.max_clock_drift_ms
        )
    );
}

#[test]
fn the_default_grpc_section_is_the_servers_default() {
    assert_eq!(
        Config::default().serve_options(),
        crate::rpc::ServeOptions::default()
    );
    let c = parse_ok(
        "[grpc]\nrequest_timeout_ms = 7\nmax_concurrent_streams = 9\nrate_limit_headers = \"draft-03\"\n",
        &[],
    );
    let options = c.serve_options();
    assert_eq!(options.request_timeout, std::time::Duration::from_millis(7));
    assert_eq!(options.max_concurrent_streams, 9);
    assert_eq!(
        options.rate_limit_headers,
        crate::rpc::RateLimitHeaders::Draft03
    );
}

#[test]
fn node_params_carry_the_cluster_section() {
    let id = uuid::Uuid::from_u128(7);
    let addr: SocketAddr = "10.0.0.1:7946".parse().unwrap();
    let c = parse_ok(
        &format!(
            "[cluster]\nseeds = [\"10.0.0.2:7946\"]\ncluster_id = \"blue\"\ngossip_interval_ms = 100\n\
             anti_entropy_interval_ms = 900\nmax_packet_size = 1200\nwarmup_timeout_ms = 2000\n\
             keys = [\"{KEY_ONES}\"]\n[limiter]\nstate_path = \"/var/lib/limitmesh/state\"\n"
        ),
        &[],
    );
    let p = c.node_params(id, addr).unwrap();
    assert_eq!((p.node_id, p.advertise), (id, addr));
    assert_eq!(p.cluster_id, "blue");
    assert_eq!(p.gossip_interval, std::time::Duration::from_millis(100));
    assert_eq!(p.silence_threshold, std::time::Duration::from_millis(800));
    assert_eq!(
        p.anti_entropy_interval,
        std::time::Duration::from_millis(900)
    );
    assert_eq!(p.max_packet_size, 1200);
    assert_eq!(p.warmup_timeout, std::time::Duration::from_secs(2));
    assert!(p.expect_peers);
    assert!(!p.verify_return_route, "keys are set");
    assert!(p.seeds.is_empty(), "seed names are resolved by the caller");
    assert_eq!(
        p.state_path.as_deref(),
        Some(std::path::Path::new("/var/lib/limitmesh/state"))
    );
    let insecure = parse_ok(
        "[cluster]\nseeds = [\"127.0.0.2:7946\"]\ninsecure = true\n",
        &[],
    );
    let p = insecure.node_params(id, addr).unwrap();
    assert!(p.verify_return_route, "anyone can forge datagrams");
    assert_eq!(p.state_path, None);
}

// ---- file errors ----

#[test]
fn toml_syntax_error_names_file_and_line() {
    let err = parse_err(
        "[grpc]\nlisten = \"127.0.0.1:1\"\nrequest_timeout_ms = = 3\n",
        &[],
    );
    let ConfigError::Toml { file, line, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!((file.as_str(), *line), (FILE, 3));
    assert!(err.to_string().starts_with("node.toml:3:"), "{err}");
}

#[test]
fn an_unknown_header_style_names_its_line_and_the_styles() {
    let err = parse_err(
        "[grpc]\nlisten = \"127.0.0.1:1\"\nrate_limit_headers = \"draft-07\"\n",
        &[],
    );
    assert!(matches!(err, ConfigError::Toml { line: 3, .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("draft-07") && text.contains("none") && text.contains("draft-03"),
        "{text}"
    );
}

#[test]
fn the_json_check_setting_takes_three_values_and_names_its_line_otherwise() {
    let err = parse_err("[http]\nlisten = \"127.0.0.1:1\"\njson = \"yes\"\n", &[]);
    assert!(matches!(err, ConfigError::Toml { line: 3, .. }), "{err}");
    let text = err.to_string();
    assert!(
        ["yes", "auto", "on", "off"]
            .iter()
            .all(|v| text.contains(v)),
        "{text}"
    );
    let env_err = parse_err("", &[("LIMITMESH__HTTP__JSON", "true")]);
    assert!(
        env_err.to_string().contains("LIMITMESH__HTTP__JSON"),
        "{env_err}"
    );
    let off = parse_ok("", &[("LIMITMESH__HTTP__JSON", "off")]);
    assert_eq!(off.http.json, JsonCheckName::Off);
    assert!(off.json_check_served().is_err());
}

#[test]
fn unknown_keys_and_sections_are_errors_with_their_line() {
    let err = parse_err("[grpc]\nlisten = \"127.0.0.1:1\"\nlisen = \"x\"\n", &[]);
    assert!(matches!(err, ConfigError::Toml { line: 3, .. }), "{err}");
    assert!(err.to_string().contains("lisen"), "{err}");
    let section = parse_err("\n[gprc]\nlisten = \"x\"\n", &[]);
    assert!(
        matches!(section, ConfigError::Toml { line: 2, .. }),
        "{section}"
    );
}

#[test]
fn wrong_types_and_bad_values_name_their_line() {
    let err = parse_err("[limiter]\nmax_keys = \"many\"\n", &[]);
    assert!(matches!(err, ConfigError::Toml { line: 2, .. }), "{err}");
    let addr = parse_err("[grpc]\n\nlisten = \"localhost\"\n", &[]);
    assert!(matches!(addr, ConfigError::Toml { line: 3, .. }), "{addr}");
    let policy = parse_err("[limiter]\npartition_policy = \"lenient\"\n", &[]);
    assert!(
        matches!(policy, ConfigError::Toml { line: 2, .. }),
        "{policy}"
    );
    let negative = parse_err("[grpc]\nrequest_timeout_ms = -5\n", &[]);
    assert!(
        matches!(negative, ConfigError::Toml { line: 2, .. }),
        "{negative}"
    );
}

#[test]
fn a_missing_file_is_a_read_error_naming_it() {
    let err = Config::load_with_env(
        Some(std::path::Path::new("/nonexistent/limitmesh.toml")),
        env(&[]),
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/limitmesh.toml"),
        "{err}"
    );
}

mod environment;
mod validation;
