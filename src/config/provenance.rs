//! Where each setting's value came from, so that an error names the file and line, or the
//! environment variable, that set it.

use std::collections::BTreeMap;
use std::fmt;

/// Where a setting's value was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetIn {
    Default,
    File { file: String, line: usize },
    Env { var: String },
}

impl fmt::Display for SetIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetIn::Default => f.write_str("default value"),
            SetIn::File { file, line } => write!(f, "{file}:{line}"),
            SetIn::Env { var } => write!(f, "environment variable {var}"),
        }
    }
}

/// Where each setting that was set came from, by `section.key`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Provenance {
    pub file: String,
    pub file_lines: BTreeMap<String, usize>,
    pub env_vars: BTreeMap<String, String>,
}

impl Provenance {
    /// Where `section.key` was set; the environment wins over the file.
    pub fn set_in(&self, field: &str) -> SetIn {
        if let Some(var) = self.env_vars.get(field) {
            SetIn::Env { var: var.clone() }
        } else if let Some(line) = self.file_lines.get(field) {
            SetIn::File {
                file: self.file.clone(),
                line: *line,
            }
        } else {
            SetIn::Default
        }
    }
}
