//! How descriptors match rules: exact, wildcard, key-only, nesting, sharing.

use super::*;

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
