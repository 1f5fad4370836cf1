//! Rules files that load, and what they load to.

use super::*;

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
    let four = RuleSet::parse(
        FILE,
        text,
        LoadOptions {
            default_buckets: 4,
            ..LoadOptions::default()
        },
    )
    .unwrap();
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

#[test]
fn every_rule_has_a_descriptor_template_that_reaches_it() {
    let set = parse_ok(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: b\n    value: x*\n    rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: c\n    value: v\n    descriptors:\n      - key: d\n        rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: e\n    rate_limit: { unlimited: true }\n",
    );
    let templates = set.descriptor_templates();
    assert_eq!(templates.len(), set.rule_count());
    for t in &templates {
        // Fill the open values as a load generator would; the lookup must reach a rule.
        let values: Vec<String> = t
            .entries
            .iter()
            .map(|(_, v)| v.as_deref().map_or("z".to_owned(), |v| v.replace('*', "z")))
            .collect();
        let entries: Vec<DescriptorEntry<'_>> = t
            .entries
            .iter()
            .zip(&values)
            .map(|((k, _), v)| DescriptorEntry { key: k, value: v })
            .collect();
        assert!(
            matches!(set.lookup(&t.domain, &entries), Lookup::Matched(_)),
            "{t:?}"
        );
    }
    let c = templates.iter().find(|t| t.entries[0].0 == "c").unwrap();
    assert_eq!(
        c.entries,
        [
            ("c".to_owned(), Some("v".to_owned())),
            ("d".to_owned(), None)
        ]
    );
}
