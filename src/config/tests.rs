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
        "[cluster]\nseeds = [\"10.0.0.2:7946\"]\ninsecure = true\n",
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

// ---- environment ----

#[test]
fn environment_overrides_each_kind_of_setting() {
    let c = parse_ok(
        "[grpc]\nlisten = \"127.0.0.1:1\"\n",
        &[
            ("LIMITMESH__GRPC__LISTEN", "0.0.0.0:9000"),
            ("LIMITMESH__GRPC__REQUEST_TIMEOUT_MS", "15"),
            ("LIMITMESH__CLUSTER__SEEDS", "10.0.0.1:7946, 10.0.0.2:7946,"),
            ("LIMITMESH__CLUSTER__ADVERTISE", "10.0.0.9:7946"),
            ("LIMITMESH__CLUSTER__INSECURE", "true"),
            ("LIMITMESH__LIMITER__PARTITION_POLICY", "available"),
            ("LIMITMESH__LOG__FORMAT", "json"),
            ("UNRELATED", "ignored"),
            ("LIMITMESH_SINGLE_UNDERSCORE", "ignored"),
        ],
    );
    assert_eq!(
        c.grpc.listen,
        addr("0.0.0.0:9000"),
        "env wins over the file"
    );
    assert_eq!(c.grpc.request_timeout_ms, 15);
    assert_eq!(c.cluster.seeds, ["10.0.0.1:7946", "10.0.0.2:7946"]);
    assert!(c.cluster.insecure);
    assert_eq!(c.limiter.partition_policy, PartitionPolicyName::Available);
    assert_eq!(c.log.format, LogFormat::Json);
    // An empty list variable empties the list.
    let cleared = parse_ok(
        "[cluster]\nseeds = [\"10.0.0.1:1\"]\ninsecure = true\nadvertise = \"10.0.0.2:1\"\n",
        &[("LIMITMESH__CLUSTER__SEEDS", "")],
    );
    assert!(cleared.cluster.seeds.is_empty());
}

#[test]
fn environment_errors_name_the_variable() {
    let var_of = |err: ConfigError| match err {
        ConfigError::Env { var, message } => (var, message),
        other => panic!("expected an environment error, got: {other}"),
    };
    let (var, msg) = var_of(parse_err(
        "",
        &[("LIMITMESH__GRPC__LISTEN", "not-an-address")],
    ));
    assert_eq!(var, "LIMITMESH__GRPC__LISTEN");
    assert!(msg.contains("grpc.listen"), "{msg}");
    let (var, _) = var_of(parse_err("", &[("LIMITMESH__LIMITER__MAX_KEYS", "lots")]));
    assert_eq!(var, "LIMITMESH__LIMITER__MAX_KEYS");
    let (var, _) = var_of(parse_err("", &[("LIMITMESH__CLUSTER__INSECURE", "yes")]));
    assert_eq!(var, "LIMITMESH__CLUSTER__INSECURE");
    let (var, msg) = var_of(parse_err("", &[("LIMITMESH__GRPC__LISTN", "0.0.0.0:1")]));
    assert_eq!(var, "LIMITMESH__GRPC__LISTN");
    assert!(msg.contains("grpc.listn"), "{msg}");
    for malformed in ["LIMITMESH__GRPC", "LIMITMESH__A__B__C", "LIMITMESH____X"] {
        let (var, _) = var_of(parse_err("", &[(malformed, "1")]));
        assert_eq!(var, malformed);
    }
    let (var, _) = var_of(parse_err(
        "",
        &[("LIMITMESH__LIMITER__ARBITRATION", "newest")],
    ));
    assert_eq!(var, "LIMITMESH__LIMITER__ARBITRATION");
}

#[cfg(unix)]
#[test]
fn a_non_utf8_environment_value_is_an_error() {
    use std::os::unix::ffi::OsStringExt;
    let err = Config::from_toml(
        FILE,
        "",
        vec![(
            OsString::from("LIMITMESH__NODE__NAME"),
            OsString::from_vec(vec![0xff, 0xfe]),
        )],
    )
    .unwrap_err();
    assert!(
        matches!(err, ConfigError::Env { ref var, .. } if var == "LIMITMESH__NODE__NAME"),
        "{err}"
    );
}

// ---- validation ----

#[test]
fn seeds_without_keys_need_insecure_and_the_error_names_cluster_keys() {
    let text = "[cluster]\nadvertise = \"10.0.0.1:7946\"\nseeds = [\"10.0.0.2:7946\"]\n";
    let err = parse_err(text, &[]);
    assert_invalid(&err, "cluster.keys", &at_line(3));
    let from_env = parse_err(
        "[cluster]\nadvertise = \"10.0.0.1:7946\"\n",
        &[("LIMITMESH__CLUSTER__SEED_DNS", "limitmesh.svc:7946")],
    );
    assert_invalid(
        &from_env,
        "cluster.keys",
        &SetIn::Env {
            var: "LIMITMESH__CLUSTER__SEED_DNS".to_owned(),
        },
    );
    parse_ok(&format!("{text}insecure = true\n"), &[]);
    parse_ok(&format!("{text}keys = [\"{KEY_ONES}\"]\n"), &[]);
    parse_ok(
        &format!("{text}key_file = \"/run/secrets/limitmesh\"\n"),
        &[],
    );
}

#[test]
fn peers_need_a_concrete_advertise_address() {
    let err = parse_err(
        "[cluster]\nbind = \"0.0.0.0:7946\"\nseeds = [\"10.0.0.2:7946\"]\ninsecure = true\n",
        &[],
    );
    assert_invalid(&err, "cluster.advertise", &at_line(2));
    let port0 = parse_err(
        "[cluster]\ninsecure = true\nseeds = [\"10.0.0.2:7946\"]\nadvertise = \"10.0.0.1:0\"\n",
        &[],
    );
    assert_invalid(&port0, "cluster.advertise", &at_line(4));
    let garbage = parse_err("[cluster]\nadvertise = \"somewhere\"\n", &[]);
    assert_invalid(&garbage, "cluster.advertise", &at_line(2));
    // Without peers a wildcard bind is fine.
    parse_ok("[cluster]\nbind = \"0.0.0.0:7946\"\n", &[]);
}

#[test]
fn keys_must_be_strict_base64_of_32_bytes() {
    let short = parse_err(
        &format!("[cluster]\nkeys = [\"{KEY_ONES}\", \"{KEY_SHORT}\"]\n"),
        &[],
    );
    assert_invalid(&short, "cluster.keys", &at_line(2));
    assert!(short.to_string().contains("key 2"), "{short}");
    let garbage = parse_err("[cluster]\nkeys = [\"not base64!\"]\n", &[]);
    assert_invalid(&garbage, "cluster.keys", &at_line(2));
    // Near-miss spellings of a good key: non-zero bits after the last byte, no padding,
    // whitespace, the URL-safe alphabet (32 bytes of 0xff are `/…/8=` in the standard one).
    let last = KEY_ONES.len() - 2;
    let near_misses = [
        format!("{}F=", &KEY_ONES[..last]),
        KEY_ONES.trim_end_matches('=').to_owned(),
        format!(" {KEY_ONES}"),
        format!("{}8=", "_".repeat(42)),
    ];
    for key in near_misses {
        let err = parse_err(&format!("[cluster]\nkeys = [\"{key}\"]\n"), &[]);
        assert_invalid(&err, "cluster.keys", &at_line(2));
        assert!(err.to_string().contains("not base64"), "{key}: {err}");
    }
    let both = parse_err(
        &format!("[cluster]\nkeys = [\"{KEY_ONES}\"]\nkey_file = \"/k\"\n"),
        &[],
    );
    assert_invalid(&both, "cluster.key_file", &at_line(3));
}

#[test]
fn key_file_lines_are_read_and_a_bad_line_is_named() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let good = dir.join("good");
    std::fs::write(
        &good,
        format!("# rotated 2026-11\n{KEY_SEQ}\n\n{KEY_ONES}\n"),
    )
    .unwrap();
    let bad = dir.join("bad");
    std::fs::write(&bad, format!("{KEY_SEQ}\n# old\n{KEY_SHORT}\n")).unwrap();
    let with_file = |path: &std::path::Path| Config {
        cluster: ClusterConfig {
            key_file: path.display().to_string(),
            ..ClusterConfig::default()
        },
        ..Config::default()
    };
    let keys = with_file(&good).cluster_keys().unwrap();
    assert_eq!(keys, vec![core::array::from_fn(|i| i as u8), [1u8; 32]]);
    let err = with_file(&bad).cluster_keys().unwrap_err();
    assert!(matches!(err, ConfigError::KeyFile { line: 3, .. }), "{err}");
    assert!(err.to_string().contains(":3:"), "{err}");
    let empty = dir.join("empty");
    std::fs::write(&empty, "# nothing\n").unwrap();
    assert!(matches!(
        with_file(&empty).cluster_keys(),
        Err(ConfigError::KeyFile { .. })
    ));
    assert!(Config::default().cluster_keys().unwrap().is_empty());
}

#[test]
fn ranges_are_checked_and_errors_point_where_the_value_was_set() {
    let cases: &[(&str, &str, usize)] = &[
        (
            "[grpc]\nrequest_timeout_ms = 0\n",
            "grpc.request_timeout_ms",
            2,
        ),
        (
            "[grpc]\nmax_concurrent_streams = 0\n",
            "grpc.max_concurrent_streams",
            2,
        ),
        ("[http]\nlisten = \"127.0.0.1:8081\"\n", "http.listen", 2),
        ("[node]\nname = \" \"\n", "node.name", 2),
        ("[cluster]\ncluster_id = \"\"\n", "cluster.cluster_id", 2),
        (
            "[cluster]\nmax_packet_size = 100\n",
            "cluster.max_packet_size",
            2,
        ),
        (
            "[cluster]\ngossip_interval_ms = 1\n",
            "cluster.gossip_interval_ms",
            2,
        ),
        (
            "[limiter]\nmax_clock_drift_ms = 999\n",
            "limiter.max_clock_drift_ms",
            2,
        ),
        (
            "[cluster]\nanti_entropy_interval_ms = 100\n",
            "cluster.anti_entropy_interval_ms",
            2,
        ),
        (
            "[cluster]\ndns_refresh_ms = 0\n",
            "cluster.dns_refresh_ms",
            2,
        ),
        ("[cluster]\nseeds = [\"10.0.0.1\"]\n", "cluster.seeds", 2),
        ("[cluster]\nseeds = [\"bad host:1\"]\n", "cluster.seeds", 2),
        ("[cluster]\nseed_dns = \"svc:0\"\n", "cluster.seed_dns", 2),
        ("[limiter]\nmax_keys = 0\n", "limiter.max_keys", 2),
        (
            "[limiter]\ndefault_buckets = 0\n",
            "limiter.default_buckets",
            2,
        ),
        (
            "[limiter]\ndefault_buckets = 3\n",
            "limiter.default_buckets",
            2,
        ),
        (
            "[limiter]\ndefault_buckets = 100\n",
            "limiter.default_buckets",
            2,
        ),
        (
            "[rules]\nreload_interval_ms = 0\n",
            "rules.reload_interval_ms",
            2,
        ),
        ("[log]\nfilter = \"info,[\"\n", "log.filter", 2),
    ];
    for (text, field, line) in cases {
        let err = parse_err(text, &[]);
        assert_invalid(&err, field, &at_line(*line));
        assert!(
            err.to_string()
                .starts_with(&format!("{FILE}:{line}: {field}:")),
            "{err}"
        );
    }
    let from_env = parse_err("", &[("LIMITMESH__LIMITER__DEFAULT_BUCKETS", "7")]);
    assert_invalid(
        &from_env,
        "limiter.default_buckets",
        &SetIn::Env {
            var: "LIMITMESH__LIMITER__DEFAULT_BUCKETS".to_owned(),
        },
    );
    assert!(
        from_env
            .to_string()
            .contains("LIMITMESH__LIMITER__DEFAULT_BUCKETS")
    );
    // Values that divide a second are accepted.
    for buckets in [1, 2, 4, 5, 8, 10, 20, 25, 40, 50] {
        parse_ok(&format!("[limiter]\ndefault_buckets = {buckets}\n"), &[]);
    }
}

#[test]
fn validate_on_a_built_config_reports_default_values() {
    let mut c = Config::default();
    c.grpc.request_timeout_ms = 0;
    assert_invalid(
        &c.validate().unwrap_err(),
        "grpc.request_timeout_ms",
        &SetIn::Default,
    );
}
