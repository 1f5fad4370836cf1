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

/// What a watcher handed its observer.
#[derive(Debug, Default)]
struct ReloadCounts {
    loaded: AtomicU64,
    failed: AtomicU64,
    domains: AtomicU64,
}

impl ReloadCounts {
    fn observer(self: &Arc<Self>) -> impl FnMut(Reload<'_>) + Send + 'static {
        let counts = Arc::clone(self);
        move |reload| match reload {
            Reload::Loaded(set) => {
                counts.loaded.fetch_add(1, Ordering::Relaxed);
                counts
                    .domains
                    .store(set.domain_count() as u64, Ordering::Relaxed);
            }
            Reload::Failed => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn loaded(&self) -> u64 {
        self.loaded.load(Ordering::Relaxed)
    }

    fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    fn domains_in_force(&self) -> u64 {
        self.domains.load(Ordering::Relaxed)
    }
}

#[tokio::test]
async fn watcher_reloads_on_change_counts_failures_and_stops_on_shutdown() {
    let dir = TempDir::new("watch");
    dir.write_stamped("a.yaml", V1, 1_000_000);
    let handle = Arc::new(
        RulesHandle::load(RulesSource::Path(dir.path.clone()), LoadOptions::default()).unwrap(),
    );
    let counts = Arc::new(ReloadCounts::default());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(watch(
        Arc::clone(&handle),
        Duration::from_millis(5),
        counts.observer(),
        async move {
            let _ = stop_rx.await;
        },
    ));

    dir.write_stamped("a.yaml", V2, 1_000_100);
    // The observer runs after the swap: wait for both, then check there was one reload.
    eventually("v2 in force and handed on", || {
        current_rule(&handle).as_deref() == Some("v2") && counts.loaded() >= 1
    })
    .await;
    assert_eq!(counts.loaded(), 1);

    dir.write_stamped("a.yaml", BROKEN, 1_000_200);
    eventually("a failed reload", || counts.failed() == 1).await;
    assert_eq!(
        current_rule(&handle).as_deref(),
        Some("v2"),
        "old rules stay"
    );

    // A new file in the directory is a change too.
    dir.write_stamped("a.yaml", V1, 1_000_300);
    dir.write_stamped("b.yaml", "domain: other\n", 1_000_300);
    eventually("v1 and the new domain, handed on", || {
        let set = handle.current();
        set.has_domain("other")
            && current_rule(&handle).as_deref() == Some("v1")
            && counts.domains_in_force() == 2
    })
    .await;

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
async fn watcher_without_changes_reloads_nothing_and_stops_on_shutdown() {
    let dir = TempDir::new("watch-quiet");
    dir.write("a.yaml", V1);
    let handle = Arc::new(
        RulesHandle::load(RulesSource::Path(dir.path.clone()), LoadOptions::default()).unwrap(),
    );
    let counts = Arc::new(ReloadCounts::default());
    let report = tokio::time::timeout(
        Duration::from_secs(5),
        watch(
            handle,
            Duration::from_millis(1),
            counts.observer(),
            tokio::time::sleep(Duration::from_millis(300)),
        ),
    )
    .await
    .expect("stops on shutdown");
    assert!(report.polls >= 2, "{report:?}");
    assert_eq!((report.reloads, report.failures), (0, 0));
    assert_eq!((counts.loaded(), counts.failed()), (0, 0));
}
