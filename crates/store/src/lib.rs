//! The database. The store owns all SQL: one module per group of tables adds its queries to
//! [`Rd`] (reads) and [`Tx`] (writes), taking and returning domain types. Callers run a
//! closure over them with [`Store::read`] or [`Store::write`]; nothing outside this crate sees a
//! connection.
//!
//! The modules speak to the database through one port (`sql.rs`): values, rows and statements
//! in the store's own types, which SQLite implements and a second backend implements beside
//! it. What only SQLite has (its pragmas, its file's pages, its migrations) stays in `db.rs`,
//! `retention.rs` and `migrations.rs`.
//!
//! SQLite in the data dir, WAL, foreign keys on, numbered migrations applied at open. Writes
//! go to one writer thread that group-commits; reads use a small pool (see [`db`]).

mod allocator;
pub mod artifacts;
pub mod crons;
mod db;
pub mod feed;
pub mod graphs;
pub mod hook_runs;
pub mod ids;
pub mod messages;
mod migrations;
pub mod nodes;
pub mod pg;
#[cfg(test)]
mod plans;
pub mod plugins;
pub mod projects;
pub mod queues;
pub mod retention;
pub mod runs;
pub mod sessions;
pub mod specs;
pub(crate) mod sql;
pub mod states;
mod times;
pub mod webhooks;

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use canopy_model::time::Timestamp;

pub use db::{Rd, Tx, WriterStats};

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No row matches an id, id prefix or name.
    #[error("no {kind} matches `{id}`")]
    NotFound { kind: &'static str, id: String },
    /// An id prefix (or a name) matches several rows.
    #[error("{kind} {by} `{prefix}` is ambiguous; it matches {}; {}", .candidates.join(", "), crate::ids::ambiguity_hint(by))]
    Ambiguous {
        kind: &'static str,
        /// What `prefix` was taken as: `id prefix` or `name`.
        by: &'static str,
        prefix: String,
        candidates: Vec<String>,
    },
    /// The store is shutting down.
    #[error("the database is closed (the daemon is stopping)")]
    Closed,
    /// The writer dropped the write without committing it; the daemon log says why.
    #[error("the database did not commit the write; see the daemon log")]
    Lost,
    /// SQLite or another internal failure.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> Self {
        Self::Internal(err.into())
    }
}

impl From<sql::Error> for StoreError {
    fn from(err: sql::Error) -> Self {
        Self::Internal(err.into())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(err: serde_json::Error) -> Self {
        Self::Internal(err.into())
    }
}

/// A cheap, cloneable handle on the database.
#[derive(Clone)]
pub struct Store {
    db: Arc<db::Db>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// The node a store works for when none is named: a store a tool or a test opens.
pub const LOCAL_NODE: &str = "local";

impl Store {
    /// Opens (creating if needed) the database and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_as(path, LOCAL_NODE)
    }

    /// [`Store::open`] for the daemon whose node name is `node`.
    pub fn open_as(path: &Path, node: &str) -> Result<Self> {
        let db = db::Db::open(path, node, migrations::apply)?;
        Ok(Self { db: Arc::new(db) })
    }

    /// Connects to a PostgreSQL database (`postgres://user:password@host:port/dbname`, or
    /// `host=... dbname=...`) and brings its schema up to date, for the daemon whose node name
    /// is `node`. Several daemons share one database, each under a node name of its own: a
    /// second store for a node already connected is refused.
    pub fn open_postgres(url: &str, node: &str) -> Result<Self> {
        let db = pg::open(url, node)?;
        Ok(Self { db: Arc::new(db) })
    }

    /// The node this store works for.
    pub fn node(&self) -> &str {
        self.db.node()
    }

    /// On PostgreSQL, woken whenever a daemon on the database (this one or another) appended
    /// to the feed: how a daemon learns of the others' events. `None` on SQLite, which one
    /// daemon uses.
    pub fn feed_notices(&self) -> Option<pg::listen::FeedNotices> {
        self.db.feed_notices.clone()
    }

    /// For a clean stop, once its last write is answered: copies the WAL back into the database
    /// file and empties it, so a stopped daemon's data is in `canopy.db` alone (a copy of that
    /// file is a whole copy). True when the log was emptied; false when a reader outlasted the
    /// wait, leaving the log as it was, which is just as safe.
    pub async fn empty_log(&self) -> Result<bool, StoreError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.empty_log())
            .await
            .map_err(|err| {
                StoreError::Internal(anyhow::anyhow!("the WAL checkpoint panicked: {err}"))
            })?
            .map_err(StoreError::from)
    }

    /// The PostgreSQL database this store keeps its records in (`user@host:port/dbname`);
    /// `None` for SQLite.
    pub fn postgres(&self) -> Option<String> {
        self.db.postgres.clone()
    }

    /// What the writer has done since the store was opened.
    pub fn writer_stats(&self) -> WriterStats {
        self.db.writer_stats()
    }

    #[cfg(test)]
    fn awaited_writes(&self) -> usize {
        self.db.awaited_writes()
    }

    /// Runs `work` on one consistent snapshot, off the async runtime.
    pub async fn read<T, E>(
        &self,
        work: impl FnOnce(&Rd<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.db.read(work).await
    }

    /// Runs `work` as one atomic write: all of it is committed, or (when it returns an error)
    /// none of it. Returns once the write is committed.
    pub async fn write<T, E>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.db.write(work, false).await
    }

    /// [`Store::write`] for a caller whose next step waits on this write alone, in a tight
    /// loop (a graph's driver between two nodes): when no other write is awaited, its task
    /// looks for the answer for a few hundred µs instead of sleeping at once, which saves
    /// the wake-up of a parked worker per step.
    pub async fn write_watched<T, E>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.db.write(work, true).await
    }

    /// [`Store::read`] for code outside the async runtime (tests, tools). Panics if called
    /// on a runtime thread.
    pub fn read_blocking<T, E>(
        &self,
        work: impl FnOnce(&Rd<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.db.read_blocking(work)
    }

    /// [`Store::write`] for code outside the async runtime (tests, tools). Panics if called
    /// on a runtime thread.
    pub fn write_blocking<T, E>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.db.write_blocking(work)
    }
}

/// Now, in the text form the store keeps (a [`Timestamp`]'s: RFC 3339, UTC, microseconds).
pub fn now() -> String {
    Timestamp::now().to_string()
}

/// A fresh random id: 32 lowercase hex digits.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A fresh time-ordered id, for rows written at a high rate (webhook deliveries): 32 lowercase
/// hex digits, the first 12 a count of 10 µs steps since 2020 that goes up by at least one per
/// id this process makes, the other 20 random. See [`ids::ordered`].
pub fn new_ordered_id() -> String {
    ids::ordered(std::time::SystemTime::now())
}

/// For the store's own tests: the same checks on each backend.
#[cfg(test)]
pub(crate) mod each_backend {
    use super::Store;

    /// A fresh store of each backend, named: SQLite in a temporary directory (kept while the
    /// store is), PostgreSQL in a database of its own on the tests' server.
    pub(crate) fn stores() -> Vec<(&'static str, Store, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let sqlite = Store::open(&dir.path().join("canopy.db")).expect("a SQLite store");
        let url = super::pg::cluster::scratch_database().expect("a PostgreSQL test database");
        let postgres = Store::open_postgres(&url, crate::LOCAL_NODE).expect("a PostgreSQL store");
        vec![("sqlite", sqlite, Some(dir)), ("postgres", postgres, None)]
    }

    /// Runs `check` on a fresh store of each backend, saying which one it is on.
    pub(crate) fn check(check: impl Fn(&Store)) {
        for (backend, store, _dir) in stores() {
            eprintln!("on {backend}:");
            check(&store);
        }
    }
}
