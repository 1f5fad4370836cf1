use super::*;

#[test]
fn a_descriptor_value_cannot_end_its_label_or_write_series_of_its_own() {
    let m = Metrics::new();
    let hostile = "x\"} 999\nlimitmesh_decisions_total{domain=\"api\",result=\"allowed\\";
    m.record_detailed("api", hostile, DecisionResult::Allowed);
    m.record_decisions("api\"\n", DecisionResult::Allowed, 1);
    let text = m.encode_classic();
    assert!(
        text.contains(
            r#"descriptor="x\"} 999\nlimitmesh_decisions_total{domain=\"api\",result=\"allowed\\""#
        ),
        "{text}"
    );
    assert!(text.contains(r#"domain="api\"\n""#), "{text}");
    // One line each for the two series, none injected.
    let decisions = |name: &str| text.lines().filter(|l| l.starts_with(name)).count();
    assert_eq!(decisions("limitmesh_decisions_total{"), 1, "{text}");
    assert_eq!(
        decisions("limitmesh_descriptor_decisions_total{"),
        1,
        "{text}"
    );
    assert!(!text.contains("} 999\n"), "{text}");
}

#[test]
fn detailed_series_are_capped_and_the_rest_overflow() {
    let m = Metrics::new();
    for i in 0..MAX_DETAILED_DESCRIPTORS + 5 {
        m.record_detailed("api", &format!("user_{i}"), DecisionResult::Allowed);
    }
    // Known values keep their series after the cap.
    m.record_detailed("api", "user_0", DecisionResult::OverLimit);
    let text = m.encode();
    let own = text
        .lines()
        .filter(|l| {
            l.starts_with("limitmesh_descriptor_decisions_total{")
                && !l.contains(OVERFLOW_DESCRIPTOR)
        })
        .count();
    assert_eq!(
        own,
        MAX_DETAILED_DESCRIPTORS + 1,
        "1000 values, one of them twice"
    );
    assert!(
        text.contains(r#"limitmesh_descriptor_decisions_total{domain="api",descriptor="_overflow",result="allowed"} 5"#),
        "{text}"
    );
    assert!(
        text.contains(r#"descriptor="user_0",result="over_limit"} 1"#),
        "{text}"
    );
    // Labels are cut, at a character boundary.
    let long = "é".repeat(MAX_DESCRIPTOR_LABEL);
    let m = Metrics::new();
    m.record_detailed("api", &long, DecisionResult::Allowed);
    let cut = "é".repeat(MAX_DESCRIPTOR_LABEL / 2);
    assert!(m.encode().contains(&format!("descriptor=\"{cut}\"")));
}

#[test]
fn the_classic_format_names_counters_by_their_samples_and_has_no_eof() {
    let m = Metrics::new();
    m.record_decisions("api", DecisionResult::Allowed, 2);
    let open = m.encode();
    assert!(
        open.contains("# TYPE limitmesh_decisions counter"),
        "{open}"
    );
    let classic = m.encode_classic();
    assert!(
        classic.contains("# TYPE limitmesh_decisions_total counter\n"),
        "{classic}"
    );
    assert!(
        classic.contains("# HELP limitmesh_decisions_total "),
        "{classic}"
    );
    assert!(
        classic.contains(r#"limitmesh_decisions_total{domain="api",result="allowed"} 2"#),
        "{classic}"
    );
    // Gauges keep their names.
    assert!(
        classic.contains("# TYPE limitmesh_rules_loaded gauge\n"),
        "{classic}"
    );
    assert!(!classic.contains("# EOF"), "{classic}");
    assert!(
        !classic.contains("limitmesh_decisions counter"),
        "{classic}"
    );
}

#[test]
fn encodes_counters_with_labels_and_gauges() {
    let m = Metrics::new();
    m.record_decisions("api", DecisionResult::OverLimit, 3);
    m.record_decisions("api", DecisionResult::Allowed, 0);
    m.record_unmatched(UNCONFIGURED_DOMAIN, 2);
    m.record_rules_reload(true);
    m.record_rules_reload(false);
    m.record_rules_reload(false);
    m.set_rules_loaded(2, 7);
    let text = m.encode();
    assert!(
        text.contains(r#"limitmesh_decisions_total{domain="api",result="over_limit"} 3"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"result="allowed""#),
        "zero adds create no series"
    );
    assert!(text.contains(r#"limitmesh_unmatched_descriptors_total{domain="_unconfigured"} 2"#));
    assert!(text.contains(r#"limitmesh_rules_reloads_total{outcome="success"} 1"#));
    assert!(text.contains(r#"limitmesh_rules_reloads_total{outcome="failure"} 2"#));
    assert!(text.contains("limitmesh_rules_loaded 7"));
    assert!(text.contains("limitmesh_rules_domains 2"));
    assert!(text.ends_with("# EOF\n"));
}
