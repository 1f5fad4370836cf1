//! Rules: parsing, every validation error (with its file and line), matching, and reload.

mod digest;
mod errors;
mod matching;
mod merging;
mod parsing;
mod reload;

pub(super) use std::path::PathBuf;
pub(super) use std::sync::Arc;
pub(super) use std::sync::atomic::{AtomicU64, Ordering};
pub(super) use std::time::{Duration, SystemTime};

pub(super) use super::*;
pub(super) use crate::window::WindowError;

pub(super) const FILE: &str = "rules.yaml";

pub(super) fn parse(text: &str) -> Result<RuleSet, RulesError> {
    RuleSet::parse(FILE, text, LoadOptions::default())
}

pub(super) fn parse_ok(text: &str) -> RuleSet {
    match parse(text) {
        Ok(set) => set,
        Err(e) => panic!("rules should parse: {e}"),
    }
}

pub(super) fn parse_err(text: &str) -> RulesError {
    match parse(text) {
        Ok(set) => panic!("rules should be refused: {set:?}"),
        Err(e) => e,
    }
}

/// Asserts the error names the file and `line`, both as data and in its message.
pub(super) fn assert_at(err: &RulesError, line: u64) {
    assert_eq!(err.file(), FILE, "{err}");
    assert_eq!(err.line(), Some(line), "{err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{FILE}:{line}:")),
        "message should start with file:line: {shown}"
    );
}

pub(super) fn e<'a>(key: &'a str, value: &'a str) -> DescriptorEntry<'a> {
    DescriptorEntry::new(key, value)
}

/// The label of the rule that applies to `entries` in `domain`, if any.
pub(super) fn applied(
    set: &RuleSet,
    domain: &str,
    entries: &[DescriptorEntry<'_>],
) -> Option<String> {
    match set.lookup(domain, entries) {
        Lookup::Matched(m) => Some(m.rule.label().to_owned()),
        Lookup::NoMatch | Lookup::UnknownDomain => None,
    }
}

pub(super) fn limit_of(
    set: &RuleSet,
    domain: &str,
    entries: &[DescriptorEntry<'_>],
) -> (u32, Unit, u64, u16) {
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

/// A scratch directory removed on drop.
pub(super) struct TempDir {
    _dir: tempfile::TempDir,
    pub(super) path: PathBuf,
}

impl TempDir {
    pub(super) fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("limitmesh-rules-{tag}-"))
            .tempdir()
            .unwrap();
        let path = dir.path().to_owned();
        Self { _dir: dir, path }
    }

    pub(super) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes and stamps a distinct modification time, so a change is seen whatever the
    /// file system's timestamp resolution. The text is written and stamped under a hidden name
    /// and renamed into place, so a watcher polling meanwhile sees the old file or the new one,
    /// never a half-written one or the new text under the clock's time (a second change).
    pub(super) fn write_stamped(&self, name: &str, text: &str, stamp_secs: u64) -> PathBuf {
        let staged = self.write(&format!(".{name}.staged"), text);
        let file = std::fs::File::options().write(true).open(&staged).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(stamp_secs))
            .unwrap();
        drop(file);
        let path = self.path.join(name);
        std::fs::rename(&staged, &path).unwrap();
        path
    }
}
