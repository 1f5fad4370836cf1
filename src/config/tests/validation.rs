//! Ranges and cross-field rules, each error naming the field and where its value was set.

use super::*;

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
    parse_ok(&format!("{text}keys = [\"{KEY_ONES}\"]\n"), &[]);
    parse_ok(
        &format!("{text}key_file = \"/run/secrets/limitmesh\"\n"),
        &[],
    );
}

#[test]
fn insecure_gossip_stays_on_this_machine_and_the_error_says_so() {
    let ok = "[cluster]\nadvertise = \"127.0.0.1:7946\"\n\
              seeds = [\"127.0.0.2:7946\", \"localhost:7947\", \"[::1]:7948\"]\n\
              seed_dns = \"localhost:7946\"\ninsecure = true\n";
    parse_ok(ok, &[]);
    // Each address that leaves the machine, in the file or from the environment.
    // The field, a line of the file, variables of the environment.
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: [Case; 5] = [
        // Listening on every interface, even if it advertises loopback.
        (
            "cluster.bind",
            "bind = \"0.0.0.0:7946\"\nadvertise = \"127.0.0.1:7946\"\n",
            &[],
        ),
        ("cluster.advertise", "advertise = \"10.0.0.1:7946\"\n", &[]),
        (
            "cluster.seeds",
            "seeds = [\"127.0.0.2:7946\", \"10.0.0.2:7946\"]\n",
            &[],
        ),
        (
            "cluster.seed_dns",
            "seed_dns = \"limitmesh.svc:7946\"\n",
            &[],
        ),
        (
            "cluster.seeds",
            "",
            &[("LIMITMESH__CLUSTER__SEEDS", "seed.example:7946")],
        ),
    ];
    for (field, line, env) in cases {
        let text = format!("[cluster]\ninsecure = true\nseeds = [\"127.0.0.2:1\"]\n{line}");
        // A later `seeds` line replaces the first (TOML refuses a key twice: keep one).
        let text = if line.starts_with("seeds") {
            text.replacen("seeds = [\"127.0.0.2:1\"]\n", "", 1)
        } else {
            text
        };
        let err = parse_err(&text, env);
        let ConfigError::Invalid { field: got, .. } = &err else {
            panic!("{field}: {err}");
        };
        assert_eq!(*got, field, "{err}");
        let message = err.to_string();
        assert!(
            message.contains("not a loopback address")
                && message.contains("tests on one machine")
                && message.contains("cluster.keys"),
            "{message}"
        );
    }
    // With keys, the same addresses are what a cluster is.
    parse_ok(
        &format!(
            "[cluster]\nbind = \"0.0.0.0:7946\"\nadvertise = \"10.0.0.1:7946\"\n\
             seeds = [\"10.0.0.2:7946\"]\nkeys = [\"{KEY_ONES}\"]\n"
        ),
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

/// Windows are named under a secret no rotation moves: the naming key when one is set, else
/// one derived from the cluster id; never a sealing key.
#[test]
fn the_naming_secret_is_the_naming_key_or_comes_from_the_cluster_id_never_from_the_keys() {
    let with = |cluster: ClusterConfig| Config {
        cluster,
        ..Config::default()
    };
    let by_id = with(ClusterConfig {
        cluster_id: "payments".to_owned(),
        ..ClusterConfig::default()
    });
    let rotated = with(ClusterConfig {
        cluster_id: "payments".to_owned(),
        keys: vec![KEY_ONES.to_owned(), KEY_SEQ.to_owned()],
        ..ClusterConfig::default()
    });
    let secret = by_id.naming_secret().unwrap();
    assert_eq!(
        rotated.naming_secret().unwrap(),
        secret,
        "keys name nothing"
    );
    let other_cluster = with(ClusterConfig {
        cluster_id: "search".to_owned(),
        ..ClusterConfig::default()
    });
    assert_ne!(other_cluster.naming_secret().unwrap(), secret);
    let named = with(ClusterConfig {
        naming_key: KEY_SEQ.to_owned(),
        keys: vec![KEY_ONES.to_owned()],
        ..ClusterConfig::default()
    });
    assert_eq!(
        named.naming_secret().unwrap(),
        core::array::from_fn::<u8, 32, _>(|i| i as u8)
    );

    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("naming");
    std::fs::write(&file, format!("# never rotated\n{KEY_SEQ}\n")).unwrap();
    let from_file = with(ClusterConfig {
        naming_key_file: file.display().to_string(),
        ..ClusterConfig::default()
    });
    assert_eq!(
        from_file.naming_secret().unwrap(),
        named.naming_secret().unwrap()
    );
    std::fs::write(&file, format!("{KEY_SEQ}\n{KEY_ONES}\n")).unwrap();
    let two = from_file.naming_secret().unwrap_err().to_string();
    assert!(two.contains("holds one"), "{two}");

    let err = parse_err(&format!("[cluster]\nnaming_key = \"{KEY_SHORT}\"\n"), &[]);
    assert_invalid(&err, "cluster.naming_key", &at_line(2));
    let err = parse_err(
        &format!("[cluster]\nnaming_key = \"{KEY_SEQ}\"\nnaming_key_file = \"/k\"\n"),
        &[],
    );
    assert_invalid(&err, "cluster.naming_key_file", &at_line(3));
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
            "[limiter]\nmax_clock_drift_ms = 30001\n",
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
