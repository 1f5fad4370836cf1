//! Hot reload: the current rule set behind an atomic pointer, and a task that reloads it when
//! its files change.
//!
//! Invariant: the handle always holds a valid rule set. A reload that fails (unreadable file,
//! bad YAML, a semantic error) leaves the previous one in place; the error is returned, and the
//! watcher logs it with its file and line and counts it.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::source::Fingerprint;
use super::{LoadOptions, RuleSet, RulesError, RulesSource};

/// The rules in force, shared by every request handler.
#[derive(Debug)]
pub struct RulesHandle {
    current: ArcSwap<RuleSet>,
    source: RulesSource,
    /// The source's fingerprint taken just before the rules in force were read: a watcher
    /// started later still sees a change made since.
    loaded_from: Mutex<Fingerprint>,
}

impl RulesHandle {
    /// Loads the rules of `source`; fails if they are invalid (at startup there is nothing to
    /// fall back to).
    pub fn load(source: RulesSource, options: LoadOptions) -> Result<Self, RulesError> {
        let fingerprint = source.fingerprint();
        let set = RuleSet::load(&source, options)?;
        Ok(Self {
            current: ArcSwap::from_pointee(set),
            source,
            loaded_from: Mutex::new(fingerprint),
        })
    }

    /// A handle holding `set`, to be reloaded from `source` once it changes.
    pub fn with_rule_set(source: RulesSource, set: RuleSet) -> Self {
        Self {
            current: ArcSwap::from_pointee(set),
            loaded_from: Mutex::new(source.fingerprint()),
            source,
        }
    }

    /// The rules in force. Cheap; the returned set stays valid however long it is held, even
    /// across a reload.
    pub fn current(&self) -> Arc<RuleSet> {
        self.current.load_full()
    }

    pub fn source(&self) -> &RulesSource {
        &self.source
    }

    /// Reads the source again and swaps the new rules in. On error the rules in force stay.
    pub fn reload(&self) -> Result<Arc<RuleSet>, RulesError> {
        let options = self.current.load().options();
        let fingerprint = self.source.fingerprint();
        let set = Arc::new(RuleSet::load(&self.source, options)?);
        self.current.store(Arc::clone(&set));
        *self.loaded_from.lock().unwrap_or_else(|e| e.into_inner()) = fingerprint;
        Ok(set)
    }

    fn loaded_from(&self) -> Fingerprint {
        self.loaded_from
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// What a watcher did, for tests and shutdown logs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WatchReport {
    pub polls: u64,
    pub reloads: u64,
    pub failures: u64,
}

/// How a reload went, for whoever counts reloads.
#[derive(Debug, Clone, Copy)]
pub enum Reload<'a> {
    /// These rules are now in force.
    Loaded(&'a RuleSet),
    /// The files did not load; the rules in force stay.
    Failed,
}

/// Polls the source of `handle` every `interval` and reloads when a file's length or
/// modification time changes, or files appear or disappear, since the rules in force were read.
/// Each reload is logged, a failure with its exact error, and handed to `on_reload`. A failed
/// reload is retried only after the files change again, so one bad edit logs one error.
///
/// Runs until `shutdown` completes.
pub async fn watch(
    handle: Arc<RulesHandle>,
    interval: Duration,
    mut on_reload: impl FnMut(Reload<'_>),
    shutdown: impl Future<Output = ()>,
) -> WatchReport {
    let mut report = WatchReport::default();
    let mut last = handle.loaded_from();
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once: the first poll comes one interval from now.
    ticks.tick().await;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            _ = ticks.tick() => {}
        }
        report.polls += 1;
        let now = fingerprint(&handle).await;
        if now == last {
            continue;
        }
        last = now;
        let reloading = Arc::clone(&handle);
        let outcome = tokio::task::spawn_blocking(move || reloading.reload()).await;
        match outcome {
            Ok(Ok(set)) => {
                report.reloads += 1;
                tracing::info!(
                    source = %handle.source().describe(),
                    domains = set.domain_count(),
                    rules = set.rule_count(),
                    "rules reloaded"
                );
                on_reload(Reload::Loaded(&set));
            }
            Ok(Err(error)) => {
                report.failures += 1;
                tracing::error!(%error, "rules reload failed; the previous rules stay in force");
                on_reload(Reload::Failed);
            }
            Err(join) => {
                report.failures += 1;
                tracing::error!(error = %join, "rules reload task failed; the previous rules stay in force");
                on_reload(Reload::Failed);
            }
        }
    }
    report
}

async fn fingerprint(handle: &Arc<RulesHandle>) -> Fingerprint {
    let handle = Arc::clone(handle);
    tokio::task::spawn_blocking(move || handle.source().fingerprint())
        .await
        .unwrap_or_default()
}
