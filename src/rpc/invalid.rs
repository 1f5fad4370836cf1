//! A malformed request (or one malformed descriptor of it), named by the field at fault
//! (`descriptors[2].entries[0].key`), so that the client sees exactly what to fix.

use std::fmt;

/// What is malformed in a request: the request refused before anything was consumed, or one
/// descriptor answered on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRequest {
    /// The field's path in the request message, e.g. `checks[3].limit.window_ms`.
    pub field: String,
    pub problem: String,
}

impl InvalidRequest {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for InvalidRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for InvalidRequest {}

impl From<InvalidRequest> for tonic::Status {
    fn from(e: InvalidRequest) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}
