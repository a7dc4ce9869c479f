//! A file of the tree that does not follow its layout, named by its path.
//!
//! Every reader of the tree meets them (the daemon's scans skip them and
//! show them, `compactd check` reports them all), so the type lives with the
//! layouts they break rather than with any one reader.

use serde::Serialize;

/// Something in the tree that compactd did not expect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    pub path: String,
    pub problem: String,
}

impl Anomaly {
    pub fn new(path: &str, problem: impl Into<String>) -> Self {
        Anomaly { path: path.to_string(), problem: problem.into() }
    }
}

/// One line of text output: control and bidirectional characters of the
/// path (a name anyone with write access chose) and of the problem escaped,
/// so that an anomaly never prints as two lines or reorders its line.
impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", crate::name::shown(&self.path), crate::name::shown(&self.problem))
    }
}
