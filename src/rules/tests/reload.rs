//! Reloading: the old rules stay on any error; the watcher reloads on change.

use super::*;

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
    let metrics = Arc::new(Metrics::new());
    let report = tokio::time::timeout(
        Duration::from_secs(5),
        watch(
            handle,
            Arc::clone(&metrics),
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
    let text = metrics.encode();
    assert!(
        text.contains("limitmesh_rules_loaded 1"),
        "set at start: {text}"
    );
    assert!(text.contains("limitmesh_rules_domains 1"), "{text}");
}
