//! The store's side of retention: deleting old rows of the tables that grow with use, a batch
//! per write, returning the freed pages to the file system, and measuring the database.
//!
//! Every prune deletes at most `limit` rows and is one write, committed with whatever else is
//! waiting: a backlog of a million rows never holds the writer for long. Rows still in use
//! (a hook run queued or running, a graph's current run, a delivery accepted or running) are
//! never deleted.
//!
//! The database uses SQLite's incremental auto-vacuum ([`ensure_incremental_vacuum`]): pages
//! freed by deletes go back to the file system in small steps ([`Tx::vacuum_step`]), so the
//! file shrinks as it is pruned instead of keeping its largest size for good.

pub use canopy_model::records::daemon::StoreSizes;
use rusqlite::Connection;

use crate::sql::{Conn, Queries, params};

use super::times::{At, time};
use super::{Rd, StoreError, Tx};
use canopy_model::time::Timestamp;

/// `PRAGMA auto_vacuum` value of incremental auto-vacuum.
const INCREMENTAL: i64 = 2;

/// Turns incremental auto-vacuum on for a database that does not have it: set before the first
/// table of a new database, or by one `VACUUM` (a rewrite of the file) of an older one, once.
/// Run when the store opens, before its migrations.
pub(super) fn ensure_incremental_vacuum(conn: &Connection) -> rusqlite::Result<()> {
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |row| row.get(0))?;
    if mode == INCREMENTAL {
        return Ok(());
    }
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |row| row.get(0))?;
    if mode != INCREMENTAL {
        let started = std::time::Instant::now();
        tracing::info!("turning on incremental auto-vacuum: rewriting the database once");
        conn.execute_batch("VACUUM")?;
        tracing::info!(
            millis = started.elapsed().as_millis(),
            "the database is rewritten with incremental auto-vacuum"
        );
    }
    Ok(())
}

/// A table that grows with use and is pruned oldest first: by a time column it has an index
/// on, never a row still in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growing {
    /// Hook runs by `fired_at`; never one queued or running.
    HookRuns,
    /// Graph runs by `started_at`, with their specs' and nodes' rows (cascaded); never one
    /// running or paused, never a graph's current run.
    Runs,
    /// Webhook deliveries by `received_at`; never one accepted or running.
    Deliveries,
}

impl Growing {
    /// Table, time column, and the condition a prunable row meets.
    fn parts(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::HookRuns => (
                "hook_runs",
                "fired_at",
                "status != 'queued' AND status != 'running'",
            ),
            Self::Runs => (
                "runs",
                "started_at",
                "status != 'running' AND status != 'paused' AND id NOT IN (SELECT current_run_id FROM graphs WHERE current_run_id IS NOT NULL)",
            ),
            Self::Deliveries => (
                "webhook_deliveries",
                "received_at",
                "status != 'accepted' AND status != 'running'",
            ),
        }
    }
}

impl Rd<'_> {
    /// The time before which a pass prunes `table`: `before` (its age limit), or later when the
    /// table holds more than `keep_rows` (0: no cap), the time of its `keep_rows`-th newest row
    /// (rows of that same instant are kept too). Read once per pass, not per batch.
    pub fn prune_cutoff(
        &self,
        table: Growing,
        before: Timestamp,
        keep_rows: u64,
    ) -> Result<Timestamp, StoreError> {
        if keep_rows == 0 {
            return Ok(before);
        }
        let (name, column, _) = table.parts();
        let newest_kept: Option<Timestamp> = self.query_opt(
            &format!("SELECT {column} FROM {name} ORDER BY {column} DESC LIMIT 1 OFFSET ?1"),
            params![i64::try_from(keep_rows - 1).unwrap_or(i64::MAX)],
            |row| time(row, 0),
        )?;
        Ok(match newest_kept {
            Some(cap) if cap > before => cap,
            _ => before,
        })
    }

    /// The sizes `canopy status` shows.
    pub fn sizes(&self) -> Result<StoreSizes, StoreError> {
        let (file_bytes, free_bytes) = match self.sqlite() {
            Some(conn) => {
                let pragma = |name: &str| -> Result<u64, StoreError> {
                    let value: i64 =
                        conn.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))?;
                    Ok(u64::try_from(value).unwrap_or(0))
                };
                let page = pragma("page_size")?;
                (
                    pragma("page_count")? * page,
                    pragma("freelist_count")? * page,
                )
            }
            // PostgreSQL: the database's size on disk; its free space is its own to reuse.
            None => {
                let bytes: i64 = self.query_row(
                    "SELECT pg_database_size(current_database())",
                    params![],
                    |row| row.get(0),
                )?;
                (u64::try_from(bytes).unwrap_or(0), 0)
            }
        };
        let count = |table: &str| -> Result<u64, StoreError> {
            let value: i64 =
                self.query_row(&format!("SELECT COUNT(*) FROM {table}"), params![], |row| {
                    row.get(0)
                })?;
            Ok(u64::try_from(value).unwrap_or(0))
        };
        Ok(StoreSizes {
            file_bytes,
            free_bytes,
            postgres: None,
            feed_rows: count("feed")?,
            hook_runs: count("hook_runs")?,
            runs: count("runs")?,
            node_runs: count("node_runs")?,
            deliveries: count("webhook_deliveries")?,
            cron_receipts: count("cron_receipts")?,
        })
    }
}

impl Tx<'_> {
    /// Deletes up to `limit` of the oldest feed rows past the newest `keep_rows` (0: no cap).
    pub fn prune_feed_rows(&self, keep_rows: u64, limit: usize) -> Result<usize, StoreError> {
        if keep_rows == 0 {
            return Ok(0);
        }
        let head: i64 =
            self.query_row("SELECT COALESCE(MAX(id), 0) FROM feed", params![], |row| {
                row.get(0)
            })?;
        let last_pruned = head.saturating_sub(i64::try_from(keep_rows).unwrap_or(i64::MAX));
        Ok(self.execute("DELETE FROM feed WHERE id IN (SELECT id FROM feed WHERE id <= ?1 ORDER BY id LIMIT ?2)", params![
                last_pruned,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ])?)
    }

    /// Deletes up to `limit` of the oldest prunable rows of `table` older than `cutoff` (see
    /// [`Rd::prune_cutoff`]); returns how many.
    pub fn prune_before(
        &self,
        table: Growing,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let (name, column, prunable) = table.parts();
        let handle = self.dialect().row_handle();
        Ok(self.execute(
            &format!(
                "DELETE FROM {name} WHERE {handle} IN (
                    SELECT {handle} FROM {name} WHERE {column} < ?1 AND {prunable}
                    ORDER BY {column} LIMIT ?2)"
            ),
            params![At(cutoff), i64::try_from(limit).unwrap_or(i64::MAX)],
        )?)
    }

    /// Returns up to `pages` free pages to the file system; how many were free before.
    /// PostgreSQL's autovacuum does this itself: 0 there.
    pub fn vacuum_step(&self, pages: u32) -> Result<u64, StoreError> {
        let Some(conn) = self.sqlite() else {
            return Ok(0);
        };
        let free: i64 = conn.query_row("PRAGMA freelist_count", [], |row| row.get(0))?;
        if free > 0 {
            // The pragma returns a row per page freed; step through them all.
            let mut statement = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
            let mut rows = statement.query([])?;
            while rows.next()?.is_some() {}
        }
        Ok(u64::try_from(free).unwrap_or(0))
    }
}
