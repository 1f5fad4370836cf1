//! `LIMITMESH__SECTION__KEY` overrides: values, lists, unknown variables, errors naming them.

use super::*;

#[test]
fn environment_overrides_each_kind_of_setting() {
    let c = parse_ok(
        "[grpc]\nlisten = \"127.0.0.1:1\"\n",
        &[
            ("LIMITMESH__GRPC__LISTEN", "0.0.0.0:9000"),
            ("LIMITMESH__GRPC__REQUEST_TIMEOUT_MS", "15"),
            (
                "LIMITMESH__CLUSTER__SEEDS",
                "127.0.0.1:7946, 127.0.0.2:7946,",
            ),
            ("LIMITMESH__CLUSTER__ADVERTISE", "127.0.0.9:7946"),
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
    assert_eq!(c.cluster.seeds, ["127.0.0.1:7946", "127.0.0.2:7946"]);
    assert!(c.cluster.insecure);
    assert_eq!(c.limiter.partition_policy, PartitionPolicyName::Available);
    assert_eq!(c.log.format, LogFormat::Json);
    // An empty list variable empties the list.
    let cleared = parse_ok(
        "[cluster]\nseeds = [\"127.0.0.1:1\"]\ninsecure = true\nadvertise = \"127.0.0.2:1\"\n",
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
