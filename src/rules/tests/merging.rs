//! `rules.merge_domains`: one domain spread over several files, as envoyproxy/ratelimit's
//! `MERGE_DOMAIN_CONFIG`.

use super::*;

fn e<'a>(key: &'a str, value: &'a str) -> DescriptorEntry<'a> {
    DescriptorEntry { key, value }
}

const MERGING: LoadOptions = LoadOptions {
    default_buckets: crate::window::DEFAULT_BUCKETS,
    merge_domains: true,
    shadow_mode: false,
    quota_mode: false,
};

fn load(dir: &TempDir, options: LoadOptions) -> Result<RuleSet, RulesError> {
    RuleSet::load(&RulesSource::Path(dir.path.clone()), options)
}

fn per_minute(set: &RuleSet, domain: &str, entries: &[DescriptorEntry<'_>]) -> Option<u32> {
    match set.lookup(domain, entries) {
        Lookup::Matched(m) => match &m.rule.limit {
            RuleLimit::Limited {
                requests_per_unit,
                unit: Unit::Minute,
                ..
            } => Some(*requests_per_unit),
            _ => None,
        },
        _ => None,
    }
}

/// The two files of envoyproxy/ratelimit's own merge test: one domain, a top-level
/// descriptor in each.
fn two_files_of_one_domain(dir: &TempDir) {
    dir.write(
        "merge_domain_key1.yaml",
        "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n",
    );
    dir.write(
        "merge_domain_key2.yaml",
        "domain: test-domain\ndescriptors:\n  - key: key2\n    value: value2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n",
    );
}

#[test]
fn a_domain_in_two_files_is_merged_when_asked_and_refused_otherwise() {
    let dir = TempDir::new("merge");
    two_files_of_one_domain(&dir);
    let set = load(&dir, MERGING).unwrap();
    assert_eq!(set.domain_count(), 1);
    assert_eq!(set.rule_count(), 2);
    assert_eq!(set.files().len(), 2);
    assert_eq!(
        per_minute(&set, "test-domain", &[e("key1", "value1")]),
        Some(10)
    );
    assert_eq!(
        per_minute(&set, "test-domain", &[e("key2", "value2")]),
        Some(20)
    );
    assert_eq!(
        set.lookup("test-domain", &[e("key1", "value2")]),
        Lookup::NoMatch
    );

    let err = load(&dir, LoadOptions::default()).unwrap_err();
    assert!(matches!(err, RulesError::DuplicateDomain { .. }), "{err}");
    assert!(err.file().ends_with("merge_domain_key2.yaml"), "{err}");
    assert_eq!(err.line(), Some(1));
    assert!(err.to_string().contains("rules.merge_domains"), "{err}");
}

#[test]
fn the_same_descriptor_in_two_files_is_an_error_naming_both() {
    for (first, second, named) in [
        // Same key and value.
        (
            "  - key: k\n    value: v\n",
            "  - key: k\n    value: v\n",
            "`k: v`",
        ),
        // Same key alone.
        ("  - key: k\n", "  - key: k\n", "`k`"),
        // Same wildcard.
        (
            "  - key: k\n    value: a*\n",
            "  - key: k\n    value: a*\n",
            "`k: a*`",
        ),
    ] {
        let dir = TempDir::new("merge-clash");
        dir.write(
            "a.yaml",
            &format!("domain: d\ndescriptors:\n  - key: other\n{first}"),
        );
        dir.write(
            "b.yaml",
            &format!("domain: d\ndescriptors:\n  - key: x\n  - key: y\n{second}"),
        );
        let err = load(&dir, MERGING).unwrap_err();
        let RulesError::DuplicateAcrossFiles {
            file,
            line,
            descriptor,
            first: at,
            ..
        } = &err
        else {
            panic!("{err}");
        };
        assert!(file.ends_with("b.yaml"), "{err}");
        assert_eq!(*line, 5, "{err}");
        assert_eq!(descriptor, named, "{err}");
        assert!(at.ends_with("a.yaml:4"), "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains("b.yaml:5") && shown.contains("a.yaml:4"),
            "{shown}"
        );
    }
}

#[test]
fn a_descriptor_with_children_in_both_files_is_not_merged_level_by_level() {
    let dir = TempDir::new("merge-nested");
    dir.write(
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: route\n    value: /login\n    descriptors:\n      - key: ip\n        rate_limit: { unit: minute, requests_per_unit: 5 }\n",
    );
    dir.write(
        "b.yaml",
        "domain: d\ndescriptors:\n  - key: route\n    value: /login\n    descriptors:\n      - key: user\n        rate_limit: { unit: minute, requests_per_unit: 7 }\n",
    );
    let err = load(&dir, MERGING).unwrap_err();
    assert!(
        matches!(err, RulesError::DuplicateAcrossFiles { .. }),
        "{err}"
    );
}

#[test]
fn values_of_one_key_merge_and_wildcards_keep_file_order() {
    let dir = TempDir::new("merge-order");
    dir.write(
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n  - key: path\n    value: /x\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
    );
    dir.write(
        "b.yaml",
        "domain: d\ndescriptors:\n  - key: path\n    value: /api/v1/*\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n  - key: path\n    rate_limit: { unit: minute, requests_per_unit: 4 }\n  - key: other\n    rate_limit: { unit: minute, requests_per_unit: 6 }\n",
    );
    let set = load(&dir, MERGING).unwrap();
    assert_eq!(set.rule_count(), 5);
    // a.yaml's wildcard was loaded first, so it wins, as within one file.
    assert_eq!(
        per_minute(&set, "d", &[e("path", "/api/v1/users")]),
        Some(1)
    );
    assert_eq!(per_minute(&set, "d", &[e("path", "/x")]), Some(3));
    assert_eq!(per_minute(&set, "d", &[e("path", "/y")]), Some(4));
    assert_eq!(per_minute(&set, "d", &[e("other", "z")]), Some(6));
}
