//! One test per validation error, each naming the file and line.

use super::*;

#[test]
fn error_yaml_syntax() {
    let err = parse_err("domain: d\ndescriptors:\n  - key: a\n   value: [unclosed\n");
    assert!(matches!(err, RulesError::Yaml { .. }), "{err}");
    assert_eq!(err.file(), FILE);
    let line = err.line().unwrap();
    assert!((3..=5).contains(&line), "{err}");
}

#[test]
fn error_unknown_field_names_its_line() {
    let err = parse_err("domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n");
    assert!(matches!(err, RulesError::Yaml { .. }), "{err}");
    assert_at(&err, 4);
    assert!(err.to_string().contains("rate_limt"), "{err}");
    assert!(
        !err.to_string().contains("at line"),
        "location given once: {err}"
    );
}

#[test]
fn error_wrong_type_names_its_line() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: lots\n",
    );
    assert!(matches!(err, RulesError::Yaml { .. }), "{err}");
    assert_at(&err, 6);
    let negative = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
    );
    assert_at(&negative, 6);
}

#[test]
fn error_missing_domain() {
    let err = parse_err("descriptors:\n  - key: a\n");
    assert!(matches!(err, RulesError::MissingDomain { .. }), "{err}");
    assert_at(&err, 1);
}

#[test]
fn error_empty_domain() {
    let err = parse_err("# rules\n\ndomain: \"\"\n");
    assert!(matches!(err, RulesError::EmptyDomain { .. }), "{err}");
    assert_at(&err, 3);
}

#[test]
fn error_empty_key() {
    for text in [
        "domain: d\ndescriptors:\n  - key: a\n  - value: b\n",
        "domain: d\ndescriptors:\n  - key: a\n  - key: \"\"\n",
    ] {
        let err = parse_err(text);
        assert!(matches!(err, RulesError::EmptyKey { .. }), "{err}");
        assert_at(&err, 4);
    }
}

#[test]
fn error_duplicate_descriptor_at_one_level() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: b\n  - key: a\n    value: x\n",
    );
    let RulesError::DuplicateDescriptor { first_line, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*first_line, 3);
    assert_at(&err, 6);
    // Key-only duplicates too, nested.
    let nested = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n",
    );
    assert!(matches!(nested, RulesError::DuplicateDescriptor { .. }));
    assert_at(&nested, 6);
    // The same key at different levels or with different values is fine.
    parse_ok(
        "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: a\n  - key: a\n    value: x\n",
    );
}

#[test]
fn error_unknown_unit() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n      unit: fortnight\n",
    );
    let RulesError::UnknownUnit { unit, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(unit, "fortnight");
    assert_at(&err, 6);
}

#[test]
fn error_missing_unit() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n",
    );
    assert!(matches!(err, RulesError::MissingUnit { .. }), "{err}");
    assert_at(&err, 5);
}

#[test]
fn error_unit_with_unlimited() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n",
    );
    assert!(matches!(err, RulesError::UnitWithUnlimited { .. }), "{err}");
    assert_at(&err, 6);
}

#[test]
fn error_missing_requests_per_unit() {
    let err =
        parse_err("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n");
    assert!(
        matches!(err, RulesError::MissingRequestsPerUnit { .. }),
        "{err}"
    );
    assert_at(&err, 5);
    // An explicit 0 is a limit that refuses everything, not an error.
    parse_ok(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 0 }\n",
    );
}

#[test]
fn error_bad_bucket_counts() {
    type IsKind = fn(&WindowError) -> bool;
    let cases: [(u64, IsKind); 4] = [
        (0, |e| matches!(e, WindowError::ZeroBuckets)),
        (65, |e| matches!(e, WindowError::TooManyBuckets { .. })),
        (3, |e| matches!(e, WindowError::NotDivisible { .. })),
        (70_000, |e| matches!(e, WindowError::TooManyBuckets { .. })),
    ];
    for (buckets, kind) in cases {
        let err = parse_err(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      buckets: {buckets}\n"
        ));
        let RulesError::BadBuckets {
            source, buckets: b, ..
        } = &err
        else {
            panic!("{err}");
        };
        assert!(kind(source), "{buckets}: {err}");
        assert_eq!(*b, buckets);
        assert_at(&err, 7);
    }
}

#[test]
fn error_default_buckets_that_do_not_divide_the_window_name_the_rule() {
    let err = RuleSet::parse(
        FILE,
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n",
        LoadOptions {
            default_buckets: 7,
            ..LoadOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, RulesError::BadBuckets { buckets: 7, .. }),
        "{err}"
    );
    assert_at(&err, 5);
}

#[test]
fn error_replaces_without_name() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: x\n        - {}\n",
    );
    assert!(matches!(err, RulesError::EmptyReplaces { .. }), "{err}");
    assert_at(&err, 9);
}

#[test]
fn error_rule_replacing_itself() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: me\n",
    );
    assert!(matches!(err, RulesError::SelfReplace { .. }), "{err}");
    assert_at(&err, 9);
}

#[test]
fn error_share_threshold_without_wildcard() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    value: plain\n    share_threshold: true\n",
    );
    assert!(
        matches!(err, RulesError::ShareThresholdWithoutWildcard { .. }),
        "{err}"
    );
    assert_at(&err, 5);
}

#[test]
fn quota_mode_is_read_per_descriptor() {
    let set = parse_ok(
        "domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n    rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: b\n    quota_mode: false\n    rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: c\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
    );
    let quota = |key: &str| match set.lookup("d", &[DescriptorEntry { key, value: "v" }]) {
        Lookup::Matched(m) => m.rule.quota,
        other => panic!("{other:?}"),
    };
    assert!(quota("a"));
    assert!(!quota("b"));
    assert!(!quota("c"));
}

#[test]
fn error_duplicate_domain_across_files_names_both() {
    let dir = TempDir::new("dup-domain");
    dir.write("a.yaml", "domain: shared\n");
    dir.write("b.yml", "# second\ndomain: shared\n");
    let err =
        RuleSet::load(&RulesSource::Path(dir.path.clone()), LoadOptions::default()).unwrap_err();
    let RulesError::DuplicateDomain {
        first, line, file, ..
    } = &err
    else {
        panic!("{err}");
    };
    assert!(file.ends_with("b.yml"), "{err}");
    assert_eq!(*line, 2);
    assert!(first.ends_with("a.yaml:1"), "{err}");
}

#[test]
fn hostile_input_fails_within_budget_without_panicking() {
    // Deep nesting.
    let deep = format!(
        "domain: d\ndescriptors: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert!(matches!(parse_err(&deep), RulesError::Yaml { .. }));
    // An alias bomb.
    let mut bomb =
        String::from("domain: d\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let prev = i - 1;
        bomb.push_str(&format!(
            "x{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    assert!(matches!(parse_err(&bomb), RulesError::Yaml { .. }));
    // Descriptors nested 11 deep, each with a rate_limit, are fine; 12 deep is refused, and
    // neither overflows this (2 MiB) test thread's stack.
    let nested = |levels: usize| {
        let mut text = String::from("domain: d\ndescriptors:\n");
        for depth in 0..levels {
            let pad = "  ".repeat(2 * depth);
            text.push_str(&format!(
                "{pad}  - key: k{depth}\n{pad}    rate_limit: {{ unit: second, requests_per_unit: 1 }}\n{pad}    descriptors:\n"
            ));
        }
        text
    };
    assert_eq!(parse_ok(&nested(11)).rule_count(), 11);
    let err = parse_err(&nested(12));
    assert!(matches!(err, RulesError::Yaml { .. }), "{err}");
    assert!(parse(&nested(500)).is_err());
    // Garbage bytes and stray documents.
    assert!(parse("\u{0}\u{1}{{{{").is_err());
    assert!(parse("domain: a\n---\ndomain: b\n").is_err());
    assert!(parse("- just\n- a list\n").is_err());
}

#[test]
fn an_oversized_file_is_refused_before_parsing() {
    let dir = TempDir::new("oversized");
    let big = format!("domain: d\n#{}\n", "x".repeat(MAX_FILE_BYTES as usize));
    let path = dir.write("big.yaml", &big);
    let err = RuleSet::load(&RulesSource::Path(path), LoadOptions::default()).unwrap_err();
    assert!(matches!(err, RulesError::FileTooLarge { .. }), "{err}");
}
