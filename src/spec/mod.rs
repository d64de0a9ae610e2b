//! Cluster definitions: the first stage of the data flow.
//!
//! `clusters/*.yaml` → [`yaml`] (located tree) → [`load`] (`extends` chain,
//! [`merge`]) → [`check`] (structural, against the [`schema`]) → serde →
//! [`validate`] (semantic) → a fully defaulted [`Cluster`]. Every problem
//! found on the way is a [`Diagnostic`] with file, line, column and field
//! path; all of them are reported at once. Nothing here does IO except
//! reading the cluster files themselves.

pub mod check;
pub mod load;
pub mod merge;
pub mod schema;
pub mod selector;
pub mod types;
pub mod validate;
pub mod versions;
pub mod yaml;

use std::fmt;

pub use load::{load_cluster, load_dir, load_paths, load_source, LoadOptions, Loaded};
pub use types::*;
pub use yaml::Loc;

/// One problem in a cluster file, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub loc: Loc,
    /// Field path such as `spec.instanceGroups[2].minSize` (empty for the file).
    pub path: String,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.loc, self.message)
        } else {
            write!(f, "{}: {}: {}", self.loc, self.path, self.message)
        }
    }
}

/// All the problems found in one or more cluster files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

impl From<yaml::SyntaxError> for Diagnostic {
    fn from(e: yaml::SyntaxError) -> Self {
        Diagnostic { loc: e.loc, path: String::new(), message: e.message }
    }
}
