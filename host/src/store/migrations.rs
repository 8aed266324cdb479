//! Numbered schema migrations. `PRAGMA user_version` records how many have been applied; each
//! runs in its own transaction, so a crash leaves the schema at the old or the new version.
//! Append new migrations; never edit one that has shipped.

use anyhow::{Context, Result};
use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: installed plugins and queued session messages.
    r#"
    CREATE TABLE plugins (
        name         TEXT PRIMARY KEY,
        version      TEXT NOT NULL,
        sha256       TEXT NOT NULL,
        manifest     TEXT NOT NULL,          -- JSON of the plugin's describe()
        granted      TEXT NOT NULL,          -- JSON array of granted capabilities, pinned to sha256
        builtin      INTEGER NOT NULL,
        enabled      INTEGER NOT NULL,
        installed_at TEXT NOT NULL
    );
    CREATE TABLE messages (
        id           TEXT PRIMARY KEY,
        target_kind  TEXT NOT NULL CHECK (target_kind IN ('id', 'name')),
        target       TEXT NOT NULL,
        text         TEXT NOT NULL,
        provenance   TEXT NOT NULL,          -- JSON: graph id, event, run, hook index, spec
        origin       TEXT NOT NULL,          -- 'hook' for messages a hook queued
        plugin       TEXT NOT NULL,
        status       TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'undeliverable')),
        created_at   TEXT NOT NULL
    );
    CREATE INDEX messages_pending ON messages (status, created_at);
    "#,
];

/// Applies every migration the database has not seen yet.
pub fn apply(conn: &mut Connection) -> Result<()> {
    let current: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if current > MIGRATIONS.len() {
        anyhow::bail!(
            "the database is at schema version {current}, newer than this canopy ({}); use a newer canopy",
            MIGRATIONS.len()
        );
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let version = index + 1;
        let tx = conn.transaction()?;
        tx.execute_batch(sql)
            .with_context(|| format!("migration {version} failed"))?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}

/// The schema version this build migrates to.
#[cfg(test)]
pub fn latest() -> usize {
    MIGRATIONS.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_and_record_the_version() -> Result<()> {
        let mut conn = Connection::open_in_memory()?;
        apply(&mut conn)?;
        apply(&mut conn)?;
        let version: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        assert_eq!(version, latest());
        Ok(())
    }
}
