//! A call's workdir, resolved once: canonical, and a directory when it was resolved.
//!
//! Resolving costs a `canonicalize` (one lookup per path component) and a `stat`; a graph run
//! resolves its workdir once and every node call of the run reuses it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::PluginError;

/// A resolved workdir. The guest sees it preopened as its only directory (more with grants);
/// `{{workdir}}` renders it.
#[derive(Clone, PartialEq, Eq)]
pub struct Workdir(Arc<Path>);

impl Workdir {
    /// Resolves `path`: it must exist and be a directory. The error names the path as given.
    pub fn resolve(path: &Path) -> Result<Self, PluginError> {
        let canonical = path
            .canonicalize()
            .map_err(|err| PluginError::Refused(format!("workdir {}: {err}", path.display())))?;
        if !canonical.is_dir() {
            return Err(PluginError::Refused(format!(
                "workdir {} is not a directory",
                canonical.display()
            )));
        }
        Ok(Self(canonical.into()))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn to_path_buf(&self) -> PathBuf {
        self.0.to_path_buf()
    }
}

impl fmt::Debug for Workdir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workdir_resolves_to_its_canonical_directory_and_nothing_else_resolves() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inner = dir.path().join("a");
        std::fs::create_dir(&inner).expect("mkdir");
        let dotted = dir.path().join("a/../a/.");
        let resolved = Workdir::resolve(&dotted).expect("a directory resolves");
        assert_eq!(resolved.path(), inner.canonicalize().expect("canonical"));

        let file = dir.path().join("f");
        std::fs::write(&file, "x").expect("write");
        let err = Workdir::resolve(&file).expect_err("a file is not a workdir");
        assert!(err.to_string().contains("is not a directory"), "{err}");
        let missing = dir.path().join("missing");
        let err = Workdir::resolve(&missing).expect_err("a missing path is not a workdir");
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
