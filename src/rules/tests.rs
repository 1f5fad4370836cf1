//! Rules: parsing, every validation error (with its file and line), matching, and reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use super::*;
use crate::metrics::Metrics;
use crate::window::WindowError;

const FILE: &str = "rules.yaml";

fn parse(text: &str) -> Result<RuleSet, RulesError> {
    RuleSet::parse(FILE, text, LoadOptions::default())
}

fn parse_ok(text: &str) -> RuleSet {
    match parse(text) {
        Ok(set) => set,
        Err(e) => panic!("rules should parse: {e}"),
    }
}

fn parse_err(text: &str) -> RulesError {
    match parse(text) {
        Ok(set) => panic!("rules should be refused: {set:?}"),
        Err(e) => e,
    }
}

/// Asserts the error names the file and `line`, both as data and in its message.
fn assert_at(err: &RulesError, line: u64) {
    assert_eq!(err.file(), FILE, "{err}");
    assert_eq!(err.line(), Some(line), "{err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{FILE}:{line}:")),
        "message should start with file:line: {shown}"
    );
}

fn e<'a>(key: &'a str, value: &'a str) -> DescriptorEntry<'a> {
    DescriptorEntry::new(key, value)
}

/// The label of the rule that applies to `entries` in `domain`, if any.
fn applied(set: &RuleSet, domain: &str, entries: &[DescriptorEntry<'_>]) -> Option<String> {
    match set.lookup(domain, entries) {
        Lookup::Matched(m) => Some(m.rule.label().to_owned()),
        Lookup::NoMatch | Lookup::UnknownDomain => None,
    }
}

fn limit_of(set: &RuleSet, domain: &str, entries: &[DescriptorEntry<'_>]) -> (u32, Unit, u64, u16) {
    let Lookup::Matched(m) = set.lookup(domain, entries) else {
        panic!("no rule for {entries:?}");
    };
    let RuleLimit::Limited {
        requests_per_unit,
        unit,
        limit,
    } = &m.rule.limit
    else {
        panic!("rule is unlimited");
    };
    (
        *requests_per_unit,
        *unit,
        limit.window.window_ms(),
        limit.window.buckets(),
    )
}

// ---- parsing and units ----

#[test]
fn parses_envoyproxy_ratelimit_example_with_every_unit() {
    let set = parse_ok(
        r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: { unit: second, requests_per_unit: 500 }
  - key: database
    value: default
    rate_limit: { unit: MINUTE, requests_per_unit: 500 }
  - key: h
    rate_limit: { unit: Hour, requests_per_unit: 1 }
  - key: d
    rate_limit: { unit: day, requests_per_unit: 2 }
  - key: w
    rate_limit: { unit: week, requests_per_unit: 3 }
  - key: m
    rate_limit: { unit: month, requests_per_unit: 4 }
  - key: y
    rate_limit: { unit: year, requests_per_unit: 5 }
"#,
    );
    assert_eq!(set.domains().collect::<Vec<_>>(), ["mongo_cps"]);
    assert_eq!(set.rule_count(), 7);
    assert_eq!(
        limit_of(&set, "mongo_cps", &[e("database", "users")]),
        (500, Unit::Second, 1_000, 10)
    );
    assert_eq!(
        limit_of(&set, "mongo_cps", &[e("database", "default")]).1,
        Unit::Minute
    );
    let day = 86_400_000;
    for (key, unit, ms) in [
        ("h", Unit::Hour, 3_600_000),
        ("d", Unit::Day, day),
        ("w", Unit::Week, 7 * day),
        ("m", Unit::Month, 30 * day),
        ("y", Unit::Year, 365 * day),
    ] {
        let (_, u, window_ms, _) = limit_of(&set, "mongo_cps", &[e(key, "x")]);
        assert_eq!((u, window_ms), (unit, ms), "{key}");
    }
}

#[test]
fn buckets_extension_and_configured_default() {
    let text = r#"
domain: d
descriptors:
  - key: a
    rate_limit: { unit: second, requests_per_unit: 5, buckets: 20 }
  - key: b
    rate_limit: { unit: second, requests_per_unit: 5 }
"#;
    let set = parse_ok(text);
    assert_eq!(limit_of(&set, "d", &[e("a", "1")]).3, 20);
    assert_eq!(limit_of(&set, "d", &[e("b", "1")]).3, 10);
    let four = RuleSet::parse(FILE, text, LoadOptions { default_buckets: 4 }).unwrap();
    assert_eq!(limit_of(&four, "d", &[e("b", "1")]).3, 4);
    assert_eq!(four.default_buckets(), 4);
}

#[test]
fn accepts_and_ignores_metric_options_of_envoyproxy_ratelimit() {
    let set = parse_ok(
        r#"
domain: d
descriptors:
  - key: route
    detailed_metric: true
    value_to_metric: true
    metadata:
      owner: team-a
      tags: [a, b]
    rate_limit: { unit: second, requests_per_unit: 1 }
"#,
    );
    assert_eq!(
        applied(&set, "d", &[e("route", "r")]).as_deref(),
        Some("route")
    );
}

#[test]
fn scalar_values_of_other_types_are_read_as_text() {
    let set = parse_ok(
        r#"
domain: d
descriptors:
  - key: code
    value: 404
    rate_limit: { unit: second, requests_per_unit: 1, name: not-found }
"#,
    );
    assert_eq!(
        applied(&set, "d", &[e("code", "404")]).as_deref(),
        Some("not-found")
    );
}

#[test]
fn an_empty_file_and_a_file_without_descriptors() {
    assert_at(&parse_err(""), 1);
    assert!(matches!(parse_err(""), RulesError::MissingDomain { .. }));
    let set = parse_ok("domain: quiet\n");
    assert_eq!(set.rule_count(), 0);
    assert_eq!(set.lookup("quiet", &[e("k", "v")]), Lookup::NoMatch);
}

// ---- one test per validation error ----

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
        LoadOptions { default_buckets: 7 },
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
fn error_quota_mode_is_refused_rather_than_ignored() {
    let err = parse_err(
        "domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
    );
    assert!(
        matches!(err, RulesError::QuotaModeUnsupported { .. }),
        "{err}"
    );
    assert_at(&err, 4);
    parse_ok("domain: d\ndescriptors:\n  - key: a\n    quota_mode: false\n");
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

#[test]
fn a_directory_reads_yaml_and_yml_files_only_and_skips_hidden_ones() {
    let dir = TempDir::new("dir-load");
    dir.write("one.yaml", "domain: one\n");
    dir.write("two.yml", "domain: two\n");
    dir.write("notes.txt", "not rules");
    dir.write(".hidden.yaml", "domain: [broken\n");
    let set = RuleSet::load(&RulesSource::Path(dir.path.clone()), LoadOptions::default()).unwrap();
    assert_eq!(set.domains().collect::<Vec<_>>(), ["one", "two"]);
    assert_eq!(set.files().len(), 2);
    let empty = TempDir::new("dir-empty");
    let err = RuleSet::load(
        &RulesSource::Path(empty.path.clone()),
        LoadOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, RulesError::NoRulesFiles { .. }), "{err}");
    let missing = RuleSet::load(
        &RulesSource::Path(empty.path.join("absent.yaml")),
        LoadOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(missing, RulesError::Read { .. }), "{missing}");
}

// ---- matching ----

const TREE: &str = r#"
domain: api
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 10, name: per-ip }
  - key: remote_address
    value: 10.0.0.1
    rate_limit: { unit: second, requests_per_unit: 1000, name: trusted-ip }
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: { unit: second, requests_per_unit: 7, name: files }
  - key: path
    value: /api/*/action
    rate_limit: { unit: second, requests_per_unit: 8, name: action }
  - key: path
    value: /api/*
    rate_limit: { unit: second, requests_per_unit: 9, name: api-any }
  - key: path
    rate_limit: { unit: second, requests_per_unit: 11, name: any-path }
  - key: tenant
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 5, name: per-user }
      - key: user
        value: root
        rate_limit: { unlimited: true, name: root }
  - key: auth
    value: "false"
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 3
      name: anon
      replaces:
        - name: per-ip
"#;

#[test]
fn exact_value_beats_key_only() {
    let set = parse_ok(TREE);
    assert_eq!(
        applied(&set, "api", &[e("remote_address", "10.0.0.1")]).as_deref(),
        Some("trusted-ip")
    );
    assert_eq!(
        applied(&set, "api", &[e("remote_address", "10.0.0.2")]).as_deref(),
        Some("per-ip")
    );
}

#[test]
fn wildcards_rank_between_exact_and_key_only_and_the_first_in_file_order_wins() {
    let set = parse_ok(TREE);
    let rule = |v| applied(&set, "api", &[e("path", v)]);
    assert_eq!(rule("/files/a.pdf").as_deref(), Some("files"));
    // Both `/api/*/action` and `/api/*` match; the first in the file wins.
    assert_eq!(rule("/api/v1/action").as_deref(), Some("action"));
    assert_eq!(rule("/api/v1/other").as_deref(), Some("api-any"));
    assert_eq!(rule("/elsewhere").as_deref(), Some("any-path"));
}

#[test]
fn share_threshold_names_the_pattern_for_the_counter() {
    let set = parse_ok(TREE);
    let Lookup::Matched(m) = set.lookup("api", &[e("path", "/files/a.pdf")]) else {
        panic!("no match");
    };
    assert_eq!(m.shared.as_slice(), &[(0, "/files/*")]);
    let Lookup::Matched(m) = set.lookup("api", &[e("path", "/api/x")]) else {
        panic!("no match");
    };
    assert!(
        m.shared.is_empty(),
        "values of unshared wildcards count apart"
    );
}

#[test]
fn nested_rules_apply_only_at_the_depth_of_the_last_entry() {
    let set = parse_ok(TREE);
    assert_eq!(
        applied(&set, "api", &[e("tenant", "t1"), e("user", "u1")]).as_deref(),
        Some("per-user")
    );
    // The tenant node has no rate_limit of its own.
    assert_eq!(applied(&set, "api", &[e("tenant", "t1")]), None);
    // Longer than the tree: nothing applies (not even the rule above).
    assert_eq!(
        applied(
            &set,
            "api",
            &[e("tenant", "t1"), e("user", "u1"), e("extra", "x")]
        ),
        None
    );
    assert_eq!(
        applied(
            &set,
            "api",
            &[e("remote_address", "1.2.3.4"), e("extra", "x")]
        ),
        None
    );
    // Order matters: entries are levels.
    assert_eq!(
        applied(&set, "api", &[e("user", "u1"), e("tenant", "t1")]),
        None
    );
}

#[test]
fn unlimited_shadow_and_replaces_are_carried_by_the_rule() {
    let set = parse_ok(TREE);
    let Lookup::Matched(root) = set.lookup("api", &[e("tenant", "t"), e("user", "root")]) else {
        panic!("no match");
    };
    assert_eq!(root.rule.limit, RuleLimit::Unlimited);
    let Lookup::Matched(anon) = set.lookup("api", &[e("auth", "false")]) else {
        panic!("no match");
    };
    assert!(anon.rule.shadow);
    assert_eq!(anon.rule.replaces, ["per-ip"]);
    // A block mapping is located at its first key.
    assert_eq!(anon.rule.location, format!("{FILE}:32"));
    assert!(!root.rule.shadow);
}

#[test]
fn unknown_domains_and_unmatched_descriptors_are_told_apart() {
    let set = parse_ok(TREE);
    assert_eq!(
        set.lookup("other", &[e("path", "/x")]),
        Lookup::UnknownDomain
    );
    assert_eq!(set.lookup("api", &[e("nothing", "here")]), Lookup::NoMatch);
    assert_eq!(set.lookup("api", &[e("auth", "true")]), Lookup::NoMatch);
    assert_eq!(set.lookup("api", &[]), Lookup::NoMatch);
}

#[test]
fn pairs_are_compared_as_pairs_not_joined_strings() {
    let set = parse_ok(
        "domain: d\ndescriptors:\n  - key: a_b\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
    );
    assert_eq!(applied(&set, "d", &[e("a", "b")]), None);
    assert_eq!(applied(&set, "d", &[e("a_b", "")]).as_deref(), Some("a_b"));
}

#[test]
fn unnamed_rules_are_labelled_by_their_path() {
    let set = parse_ok(
        "domain: d\ndescriptors:\n  - key: a\n    value: x\n    descriptors:\n      - key: b\n        rate_limit: { unit: second, requests_per_unit: 1 }\n",
    );
    assert_eq!(
        applied(&set, "d", &[e("a", "x"), e("b", "y")]).as_deref(),
        Some("a_x.b")
    );
}

#[test]
fn per_value_counters_come_from_the_request_values() {
    // A key-only rule matches every value; the counter key holds the request's value, so each
    // value counts apart. The same value always gives the same key.
    let set = parse_ok(TREE);
    let key = |v: &str| {
        let entries = [e("remote_address", v)];
        let Lookup::Matched(m) = set.lookup("api", &entries) else {
            panic!("no match");
        };
        descriptor_key("api", &entries, &m.shared)
    };
    assert_ne!(key("1.1.1.1"), key("2.2.2.2"));
    assert_eq!(key("1.1.1.1"), key("1.1.1.1"));
}

// ---- reload ----

static TEMP_SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch directory removed on drop.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new(tag: &str) -> Self {
        let n = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("limitmesh-rules-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes and stamps a distinct modification time, so a change is seen whatever the
    /// file system's timestamp resolution.
    fn write_stamped(&self, name: &str, text: &str, stamp_secs: u64) -> PathBuf {
        let path = self.write(name, text);
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(stamp_secs))
            .unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

const V1: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, name: v1 }\n";
const V2: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 2, name: v2 }\n";
const BROKEN: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: lightyear, requests_per_unit: 2 }\n";

fn current_rule(handle: &RulesHandle) -> Option<String> {
    applied(&handle.current(), "d", &[e("k", "x")])
}

#[test]
fn reload_swaps_valid_rules_and_keeps_the_old_ones_on_error() {
    let dir = TempDir::new("reload");
    let path = dir.write("rules.yaml", V1);
    let handle =
        RulesHandle::load(RulesSource::Path(path.clone()), LoadOptions::default()).unwrap();
    assert_eq!(current_rule(&handle).as_deref(), Some("v1"));
    let held = handle.current();

    dir.write("rules.yaml", BROKEN);
    let err = handle.reload().unwrap_err();
    assert!(
        matches!(err, RulesError::UnknownUnit { line: 4, .. }),
        "{err}"
    );
    assert_eq!(
        current_rule(&handle).as_deref(),
        Some("v1"),
        "old rules stay"
    );

    std::fs::remove_file(&path).unwrap();
    assert!(matches!(handle.reload(), Err(RulesError::Read { .. })));
    assert_eq!(current_rule(&handle).as_deref(), Some("v1"));

    dir.write("rules.yaml", V2);
    handle.reload().unwrap();
    assert_eq!(current_rule(&handle).as_deref(), Some("v2"));
    assert_eq!(
        applied(&held, "d", &[e("k", "x")]).as_deref(),
        Some("v1"),
        "a set held across a reload is unchanged"
    );
}

#[test]
fn load_at_startup_fails_on_invalid_rules() {
    let dir = TempDir::new("startup");
    let path = dir.write("rules.yaml", BROKEN);
    assert!(RulesHandle::load(RulesSource::Path(path), LoadOptions::default()).is_err());
}

/// Polls `cond` every 5 ms for at most 5 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn reloads(metrics: &Metrics, outcome: &str) -> u64 {
    let text = metrics.encode();
    let prefix = format!("limitmesh_rules_reloads_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn watcher_reloads_on_change_counts_failures_and_stops_on_shutdown() {
    let dir = TempDir::new("watch");
    dir.write_stamped("a.yaml", V1, 1_000_000);
    let handle = Arc::new(
        RulesHandle::load(RulesSource::Path(dir.path.clone()), LoadOptions::default()).unwrap(),
    );
    let metrics = Arc::new(Metrics::new());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(watch(
        Arc::clone(&handle),
        Arc::clone(&metrics),
        Duration::from_millis(5),
        Some(100_000),
        async move {
            let _ = stop_rx.await;
        },
    ));

    dir.write_stamped("a.yaml", V2, 1_000_100);
    eventually("v2 in force", || {
        current_rule(&handle).as_deref() == Some("v2")
    })
    .await;
    assert_eq!(reloads(&metrics, "success"), 1);

    dir.write_stamped("a.yaml", BROKEN, 1_000_200);
    eventually("a failed reload", || reloads(&metrics, "failure") == 1).await;
    assert_eq!(
        current_rule(&handle).as_deref(),
        Some("v2"),
        "old rules stay"
    );

    // A new file in the directory is a change too.
    dir.write_stamped("a.yaml", V1, 1_000_300);
    dir.write_stamped("b.yaml", "domain: other\n", 1_000_300);
    eventually("v1 and the new domain", || {
        let set = handle.current();
        set.has_domain("other") && current_rule(&handle).as_deref() == Some("v1")
    })
    .await;
    assert!(metrics.encode().contains("limitmesh_rules_domains 2"));

    stop_tx.send(()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("the watcher stops on shutdown")
        .unwrap();
    assert_eq!(report.failures, 1);
    assert!(report.reloads >= 2, "{report:?}");
    assert!(report.polls >= 3, "{report:?}");
}

#[tokio::test]
async fn watcher_stops_after_its_poll_budget() {
    let dir = TempDir::new("watch-budget");
    dir.write("a.yaml", V1);
    let handle = Arc::new(
        RulesHandle::load(RulesSource::Path(dir.path.clone()), LoadOptions::default()).unwrap(),
    );
    let report = tokio::time::timeout(
        Duration::from_secs(5),
        watch(
            handle,
            Arc::new(Metrics::new()),
            Duration::from_millis(1),
            Some(3),
            std::future::pending(),
        ),
    )
    .await
    .expect("bounded");
    assert_eq!(
        report,
        WatchReport {
            polls: 3,
            reloads: 0,
            failures: 0
        }
    );
}
