//! Digests of the compiled plugin artifacts in the data dir's cache (`compiled_artifacts`).

use crate::sql::{Conn, Queries, params};

use super::{Rd, StoreError, Tx};

impl Rd<'_> {
    /// The digest recorded for the artifact file `file` when it was written, if any.
    pub fn artifact_digest(&self, file: &str) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt(
            "SELECT sha256 FROM compiled_artifacts WHERE file = ?1",
            params![file],
            |row| row.get(0),
        )?)
    }
}

impl Tx<'_> {
    /// Records (or replaces) the digest of the artifact file `file`.
    pub fn record_artifact(&self, file: &str, sha256: &str) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO compiled_artifacts (file, sha256, created_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (file) DO UPDATE SET sha256 = excluded.sha256, created_at = excluded.created_at", params![file, sha256, super::now()])?;
        Ok(())
    }

    /// Forgets the digest of an artifact that was removed.
    pub fn forget_artifact(&self, file: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM compiled_artifacts WHERE file = ?1",
            params![file],
        )?;
        Ok(())
    }
}
