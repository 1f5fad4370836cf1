//! Why a rules file was refused. Every message starts with `file:line:` (the line of the
//! offending node), except for errors about a file as a whole (it cannot be read, is too
//! large, or a directory holds no rules), which name only the file.

use std::path::PathBuf;

use thiserror::Error;

use crate::window::WindowError;

#[derive(Debug, Error)]
pub enum RulesError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: larger than {max} bytes, the most a rules file may have")]
    FileTooLarge { file: String, max: u64 },
    #[error("{dir}: holds {count} rules files; at most {max} are read")]
    TooManyFiles {
        dir: String,
        count: usize,
        max: usize,
    },
    #[error("{dir}: no *.yaml or *.yml files")]
    NoRulesFiles { dir: String },
    #[error("{}: not a file or a directory", path.display())]
    NotFileOrDirectory { path: PathBuf },
    /// Malformed YAML, a value of the wrong type, an unknown field, or a breached parsing
    /// budget.
    #[error("{file}:{line}:{column}: {message}")]
    Yaml {
        file: String,
        line: u64,
        column: u64,
        message: String,
    },
    #[error("{file}:{line}: `domain` is missing")]
    MissingDomain { file: String, line: u64 },
    #[error("{file}:{line}: `domain` is empty")]
    EmptyDomain { file: String, line: u64 },
    #[error(
        "{file}:{line}: domain `{domain}` is already defined at {first} (set \
         rules.merge_domains = true to spread a domain over several files)"
    )]
    DuplicateDomain {
        file: String,
        line: u64,
        domain: String,
        first: String,
    },
    #[error(
        "{file}:{line}: descriptor {descriptor} of domain `{domain}` is already defined at \
         {first} (rules.merge_domains merges a domain's files, not the same descriptor twice)"
    )]
    DuplicateAcrossFiles {
        file: String,
        line: u64,
        domain: String,
        descriptor: String,
        first: String,
    },
    #[error("{file}:{line}: descriptor `key` is missing or empty")]
    EmptyKey { file: String, line: u64 },
    #[error("{file}:{line}: duplicate descriptor {descriptor} (first at line {first_line})")]
    DuplicateDescriptor {
        file: String,
        line: u64,
        descriptor: String,
        first_line: u64,
    },
    #[error("{file}:{line}: `rate_limit` has no `unit`")]
    MissingUnit { file: String, line: u64 },
    #[error(
        "{file}:{line}: unknown unit `{unit}` (expected second, minute, hour, day, week, month or year)"
    )]
    UnknownUnit {
        file: String,
        line: u64,
        unit: String,
    },
    #[error("{file}:{line}: an `unlimited` rate limit must not have a `unit`")]
    UnitWithUnlimited { file: String, line: u64 },
    #[error("{file}:{line}: `rate_limit` has no `requests_per_unit`")]
    MissingRequestsPerUnit { file: String, line: u64 },
    #[error("{file}:{line}: bad bucket count {buckets} for a {unit} window: {source}")]
    BadBuckets {
        file: String,
        line: u64,
        buckets: u64,
        unit: super::Unit,
        #[source]
        source: WindowError,
    },
    #[error("{file}:{line}: `replaces` entry has no `name`")]
    EmptyReplaces { file: String, line: u64 },
    #[error("{file}:{line}: rule `{name}` replaces itself")]
    SelfReplace {
        file: String,
        line: u64,
        name: String,
    },
    #[error("{file}:{line}: `share_threshold` needs a wildcard value (one containing `*`)")]
    ShareThresholdWithoutWildcard { file: String, line: u64 },
}

impl RulesError {
    /// The file the error is about.
    pub fn file(&self) -> String {
        match self {
            RulesError::Read { file, .. }
            | RulesError::FileTooLarge { file, .. }
            | RulesError::Yaml { file, .. }
            | RulesError::MissingDomain { file, .. }
            | RulesError::EmptyDomain { file, .. }
            | RulesError::DuplicateDomain { file, .. }
            | RulesError::DuplicateAcrossFiles { file, .. }
            | RulesError::EmptyKey { file, .. }
            | RulesError::DuplicateDescriptor { file, .. }
            | RulesError::MissingUnit { file, .. }
            | RulesError::UnknownUnit { file, .. }
            | RulesError::UnitWithUnlimited { file, .. }
            | RulesError::MissingRequestsPerUnit { file, .. }
            | RulesError::BadBuckets { file, .. }
            | RulesError::EmptyReplaces { file, .. }
            | RulesError::SelfReplace { file, .. }
            | RulesError::ShareThresholdWithoutWildcard { file, .. } => file.clone(),
            RulesError::TooManyFiles { dir, .. } | RulesError::NoRulesFiles { dir } => dir.clone(),
            RulesError::NotFileOrDirectory { path } => path.display().to_string(),
        }
    }

    /// The 1-based line of the offending node, when the error is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            RulesError::Yaml { line, .. }
            | RulesError::MissingDomain { line, .. }
            | RulesError::EmptyDomain { line, .. }
            | RulesError::DuplicateDomain { line, .. }
            | RulesError::DuplicateAcrossFiles { line, .. }
            | RulesError::EmptyKey { line, .. }
            | RulesError::DuplicateDescriptor { line, .. }
            | RulesError::MissingUnit { line, .. }
            | RulesError::UnknownUnit { line, .. }
            | RulesError::UnitWithUnlimited { line, .. }
            | RulesError::MissingRequestsPerUnit { line, .. }
            | RulesError::BadBuckets { line, .. }
            | RulesError::EmptyReplaces { line, .. }
            | RulesError::SelfReplace { line, .. }
            | RulesError::ShareThresholdWithoutWildcard { line, .. } => Some(*line),
            RulesError::Read { .. }
            | RulesError::FileTooLarge { .. }
            | RulesError::TooManyFiles { .. }
            | RulesError::NoRulesFiles { .. }
            | RulesError::NotFileOrDirectory { .. } => None,
        }
    }
}
