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

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::{Rd, StoreError, Tx};

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

/// The newest value of `column` past which a table keeps `keep` rows: the `keep`-th newest.
fn cap_cutoff(
    rd: &Rd<'_>,
    table: &str,
    column: &str,
    keep: u64,
) -> Result<Option<String>, StoreError> {
    if keep == 0 {
        return Ok(None);
    }
    Ok(rd
        .conn()
        .prepare_cached(&format!(
            "SELECT {column} FROM {table} ORDER BY {column} DESC LIMIT 1 OFFSET ?1"
        ))?
        .query_row([i64::try_from(keep - 1).unwrap_or(i64::MAX)], |row| {
            row.get(0)
        })
        .optional()?)
}

/// The later of an age cutoff and a row-cap cutoff (times as the store writes them sort as
/// text).
fn later(age: &str, cap: Option<String>) -> String {
    match cap {
        Some(cap) if cap.as_str() > age => cap,
        _ => age.to_string(),
    }
}

/// How many rows each growing table holds, and the database's size.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct StoreSizes {
    /// The database file, in bytes.
    pub file_bytes: u64,
    /// Bytes of pages free inside the file (returned to the file system as they are vacuumed).
    pub free_bytes: u64,
    pub feed_rows: u64,
    pub hook_runs: u64,
    pub runs: u64,
    pub node_runs: u64,
    pub deliveries: u64,
    pub cron_receipts: u64,
}

impl Rd<'_> {
    /// The sizes `canopy status` shows.
    pub fn sizes(&self) -> Result<StoreSizes, StoreError> {
        let pragma = |name: &str| -> Result<u64, StoreError> {
            let value: i64 = self
                .conn()
                .query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))?;
            Ok(u64::try_from(value).unwrap_or(0))
        };
        let count = |table: &str| -> Result<u64, StoreError> {
            let value: i64 = self
                .conn()
                .prepare_cached(&format!("SELECT COUNT(*) FROM {table}"))?
                .query_row([], |row| row.get(0))?;
            Ok(u64::try_from(value).unwrap_or(0))
        };
        let page = pragma("page_size")?;
        Ok(StoreSizes {
            file_bytes: pragma("page_count")? * page,
            free_bytes: pragma("freelist_count")? * page,
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
        let head: i64 = self
            .conn()
            .prepare_cached("SELECT COALESCE(MAX(id), 0) FROM feed")?
            .query_row([], |row| row.get(0))?;
        let last_pruned = head.saturating_sub(i64::try_from(keep_rows).unwrap_or(i64::MAX));
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM feed WHERE id IN (SELECT id FROM feed WHERE id <= ?1 ORDER BY id LIMIT ?2)",
            )?
            .execute(params![
                last_pruned,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ])?)
    }

    /// Deletes up to `limit` of the oldest finished hook runs fired before `before`, or past
    /// the newest `keep_rows` (0: no cap).
    pub fn prune_hook_runs(
        &self,
        before: &str,
        keep_rows: u64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let cutoff = later(
            before,
            cap_cutoff(self, "hook_runs", "fired_at", keep_rows)?,
        );
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM hook_runs WHERE rowid IN (
                    SELECT rowid FROM hook_runs WHERE fired_at < ?1
                    AND status != 'queued' AND status != 'running'
                    ORDER BY fired_at LIMIT ?2)",
            )?
            .execute(params![cutoff, i64::try_from(limit).unwrap_or(i64::MAX)])?)
    }

    /// Deletes up to `limit` of the oldest finished graph runs (with their specs' and nodes'
    /// rows) started before `before`, or past the newest `keep_rows`; never a graph's current
    /// run.
    pub fn prune_runs(
        &self,
        before: &str,
        keep_rows: u64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let cutoff = later(before, cap_cutoff(self, "runs", "started_at", keep_rows)?);
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM runs WHERE id IN (
                    SELECT id FROM runs WHERE started_at < ?1
                    AND status != 'running' AND status != 'paused'
                    AND id NOT IN (SELECT current_run_id FROM graphs WHERE current_run_id IS NOT NULL)
                    ORDER BY started_at LIMIT ?2)",
            )?
            .execute(params![cutoff, i64::try_from(limit).unwrap_or(i64::MAX)])?)
    }

    /// Deletes up to `limit` of the oldest finished webhook deliveries received before
    /// `before`, or past the newest `keep_rows`.
    pub fn prune_deliveries(
        &self,
        before: &str,
        keep_rows: u64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let cutoff = later(
            before,
            cap_cutoff(self, "webhook_deliveries", "received_at", keep_rows)?,
        );
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM webhook_deliveries WHERE rowid IN (
                    SELECT rowid FROM webhook_deliveries WHERE received_at < ?1
                    AND status != 'accepted' AND status != 'running'
                    ORDER BY received_at LIMIT ?2)",
            )?
            .execute(params![cutoff, i64::try_from(limit).unwrap_or(i64::MAX)])?)
    }

    /// Returns up to `pages` free pages to the file system; how many were free before.
    pub fn vacuum_step(&self, pages: u32) -> Result<u64, StoreError> {
        let free: i64 = self
            .conn()
            .query_row("PRAGMA freelist_count", [], |row| row.get(0))?;
        if free > 0 {
            // The pragma returns a row per page freed; step through them all.
            let mut statement = self
                .conn()
                .prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
            let mut rows = statement.query([])?;
            while rows.next()?.is_some() {}
        }
        Ok(u64::try_from(free).unwrap_or(0))
    }
}
