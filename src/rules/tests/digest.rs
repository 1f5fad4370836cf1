//! The digest of what a rule set decides: the same for the same rules however they are
//! written, different when anything that decides differs.

use super::*;

const RULES: &str = "\
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 100 }
    descriptors:
      - key: path
        value: \"/admin/*\"
        rate_limit: { unit: minute, requests_per_unit: 10, name: admin }
      - key: path
        value: \"/a*\"
        rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: ip
    value: 10.0.0.1
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1000, buckets: 20 }
";

#[test]
fn the_same_rules_written_otherwise_have_the_same_digest() {
    let digest = parse_ok(RULES).digest();
    assert_ne!(digest, 0);
    assert_eq!(parse_ok(RULES).digest(), digest, "reloaded");
    // Comments, blank lines, flow or block style, key order, another file name.
    let rewritten = "\
# the API's limits
domain: api

descriptors:
  - key: ip
    value: 10.0.0.1
    rate_limit:
      buckets: 20
      requests_per_unit: 1000
      unit: hour
    shadow_mode: true
  - key: tenant
    rate_limit:
      requests_per_unit: 100
      unit: second
    descriptors:
      - key: path
        value: \"/admin/*\"
        rate_limit: { name: admin, requests_per_unit: 10, unit: minute }
      - key: path
        value: \"/a*\"
        rate_limit: { unit: minute, requests_per_unit: 20 }
";
    let elsewhere = RuleSet::parse("other.yaml", rewritten, LoadOptions::default()).unwrap();
    assert_eq!(elsewhere.digest(), digest);
}

#[test]
fn any_difference_in_what_the_rules_decide_changes_the_digest() {
    let digest = parse_ok(RULES).digest();
    let changed = [
        ("requests_per_unit: 100 }", "requests_per_unit: 101 }"),
        ("unit: second", "unit: minute"),
        ("buckets: 20", "buckets: 10"),
        ("shadow_mode: true", "shadow_mode: false"),
        ("value: 10.0.0.1", "value: 10.0.0.2"),
        ("name: admin", "name: admins"),
        ("domain: api", "domain: apis"),
        ("key: ip", "key: addr"),
    ];
    let mut seen = std::collections::BTreeSet::from([digest]);
    for (from, to) in changed {
        assert!(RULES.contains(from), "{from}");
        let digest = parse_ok(&RULES.replacen(from, to, 1)).digest();
        assert!(seen.insert(digest), "{from} -> {to}: a digest already seen");
    }
    // The wildcards' order decides which applies ("/admin/x" matches both).
    let swapped = RULES
        .replacen("\"/admin/*\"", "\"/TMP\"", 1)
        .replacen("\"/a*\"", "\"/admin/*\"", 1)
        .replacen("\"/TMP\"", "\"/a*\"", 1);
    assert!(
        seen.insert(parse_ok(&swapped).digest()),
        "wildcards swapped"
    );
    // So do the options every rule is loaded under.
    let shadow = LoadOptions {
        shadow_mode: true,
        ..LoadOptions::default()
    };
    let under_shadow = RuleSet::parse(FILE, RULES, shadow).unwrap().digest();
    assert!(seen.insert(under_shadow), "rules.shadow_mode");
}
