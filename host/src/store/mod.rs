//! The database: SQLite in the data dir, WAL, foreign keys on, numbered migrations applied at
//! open. One connection, one writer; every state change is one transaction.

pub mod artifacts;
pub mod ids;
mod migrations;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{Context, Result};
use rusqlite::Connection;

/// A cheap, cloneable handle on the database.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Self> {
        let mut conn = Connection::open(path)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations::apply(&mut conn)
            .with_context(|| format!("cannot migrate database {}", path.display()))?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The connection, for one short piece of work. Hold it only as long as needed.
    pub fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (transactions roll back on
        // drop), so a poisoned lock is safe to reuse.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `work` in one transaction: all of it is written, or none.
    pub fn transaction<T>(
        &self,
        work: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let value = work(&tx)?;
        tx.commit()?;
        Ok(value)
    }
}

/// Now, as an RFC 3339 UTC timestamp with microseconds.
pub fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// A fresh random id: 32 lowercase hex digits.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
