//! Where rules come from: a file, a directory of files (one domain each, as envoyproxy/ratelimit
//! reads them), or text built into the binary. Reading is bounded in file size and count.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::error::RulesError;

/// Largest rules file read.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Most rules files read from one directory.
pub const MAX_FILES: usize = 1024;

/// The origin of a rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesSource {
    /// Text built into the binary (the demo rules); never changes.
    Embedded {
        name: &'static str,
        text: &'static str,
    },
    /// A file, or a directory whose `*.yaml` and `*.yml` files (not hidden ones, not in
    /// subdirectories) are read in name order.
    Path(PathBuf),
}

/// One rules file's name (for errors) and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Document {
    pub name: String,
    pub text: String,
}

/// What a change of the source is detected by: each file's path, length and modification time
/// (`None` if it could not be read, so that a file reappearing is a change too).
pub(crate) type Fingerprint = Vec<(PathBuf, Option<(u64, SystemTime)>)>;

impl RulesSource {
    pub(crate) fn documents(&self) -> Result<Vec<Document>, RulesError> {
        match self {
            RulesSource::Embedded { name, text } => Ok(vec![Document {
                name: (*name).to_owned(),
                text: (*text).to_owned(),
            }]),
            RulesSource::Path(path) => {
                let meta = std::fs::metadata(path).map_err(|source| RulesError::Read {
                    file: path.display().to_string(),
                    source,
                })?;
                if meta.is_file() {
                    Ok(vec![read_document(path)?])
                } else if meta.is_dir() {
                    let files = rules_files(path)?;
                    if files.is_empty() {
                        return Err(RulesError::NoRulesFiles {
                            dir: path.display().to_string(),
                        });
                    }
                    files.iter().map(|f| read_document(f)).collect()
                } else {
                    Err(RulesError::NotFileOrDirectory { path: path.clone() })
                }
            }
        }
    }

    /// The current fingerprint; equal fingerprints mean nothing to reload. Embedded text has
    /// an empty, constant one.
    pub(crate) fn fingerprint(&self) -> Fingerprint {
        let RulesSource::Path(path) = self else {
            return Vec::new();
        };
        let stamp = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?)))
        };
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => match rules_files(path) {
                Ok(files) => files
                    .into_iter()
                    .map(|f| {
                        let s = stamp(&f);
                        (f, s)
                    })
                    .collect(),
                Err(_) => vec![(path.clone(), None)],
            },
            _ => vec![(path.clone(), stamp(path))],
        }
    }

    /// How logs and errors name the source.
    pub fn describe(&self) -> String {
        match self {
            RulesSource::Embedded { name, .. } => (*name).to_owned(),
            RulesSource::Path(p) => p.display().to_string(),
        }
    }
}

fn is_rules_file(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    // Hidden entries are skipped: Kubernetes mounts a ConfigMap with `..data` links beside the
    // files themselves.
    !hidden && yaml && path.is_file()
}

/// The rules files of `dir`, sorted by name so that loading (and its first error) is
/// deterministic.
fn rules_files(dir: &Path) -> Result<Vec<PathBuf>, RulesError> {
    let read_err = |source| RulesError::Read {
        file: dir.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        if is_rules_file(&path) {
            files.push(path);
            if files.len() > MAX_FILES {
                return Err(RulesError::TooManyFiles {
                    dir: dir.display().to_string(),
                    count: files.len(),
                    max: MAX_FILES,
                });
            }
        }
    }
    files.sort();
    Ok(files)
}

fn read_document(path: &Path) -> Result<Document, RulesError> {
    let name = path.display().to_string();
    let read_err = |source| RulesError::Read {
        file: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    // Bounded even if the file grows while it is read.
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(RulesError::FileTooLarge {
            file: name,
            max: MAX_FILE_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8: {e}"),
        ))
    })?;
    Ok(Document { name, text })
}
