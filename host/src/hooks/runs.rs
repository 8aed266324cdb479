//! Hook-run records: one row per hook that fired, with the exact config that fired, the executor
//! that ran it, the rendered values, and how it ended.

use rusqlite::{Connection, Row, params};
use serde::Serialize;
use serde_json::Value;

use super::HookEvent;
use crate::plugins::PluginRef;
use crate::store;

/// Bytes of a hook's output kept in its record.
pub const OUTPUT_LIMIT: usize = 16 * 1024;

/// A hook run as the API returns it.
#[derive(Debug, Clone, Serialize)]
pub struct HookRun {
    pub id: String,
    pub graph_id: String,
    pub graph_name: String,
    pub run_id: Option<String>,
    pub event: String,
    pub hook_index: i64,
    /// A copy of the exact hook config that fired.
    pub hook_config: Value,
    pub spec_id: Option<String>,
    pub mode: Option<String>,
    pub plugin: Option<String>,
    pub plugin_version: Option<String>,
    pub plugin_sha256: Option<String>,
    /// `{"config": the rendered config, "markers": the marker values}`.
    pub rendered: Option<Value>,
    /// queued, running, completed, failed, timed_out, interrupted.
    pub status: String,
    pub summary: Option<String>,
    pub error: Option<String>,
    pub output: Option<String>,
    /// Recorded by `canopy hooks test --execute`.
    pub test: bool,
    pub fired_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
}

const COLUMNS: &str = "id, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, plugin, plugin_version, plugin_sha256, rendered, status, summary, error, output, test, fired_at, started_at, finished_at, duration_ms";

fn json_column(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<Value>> {
    let text: Option<String> = row.get(index)?;
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, e.into())
        })
}

fn from_row(row: &Row<'_>) -> rusqlite::Result<HookRun> {
    Ok(HookRun {
        id: row.get(0)?,
        graph_id: row.get(1)?,
        graph_name: row.get(2)?,
        run_id: row.get(3)?,
        event: row.get(4)?,
        hook_index: row.get(5)?,
        hook_config: json_column(row, 6)?.unwrap_or(Value::Null),
        spec_id: row.get(7)?,
        mode: row.get(8)?,
        plugin: row.get(9)?,
        plugin_version: row.get(10)?,
        plugin_sha256: row.get(11)?,
        rendered: json_column(row, 12)?,
        status: row.get(13)?,
        summary: row.get(14)?,
        error: row.get(15)?,
        output: row.get(16)?,
        test: row.get(17)?,
        fired_at: row.get(18)?,
        started_at: row.get(19)?,
        finished_at: row.get(20)?,
        duration_ms: row.get(21)?,
    })
}

/// What a fired hook is about.
#[derive(Debug, Clone)]
pub struct Fired<'a> {
    pub graph_id: &'a str,
    pub graph_name: &'a str,
    pub run_id: Option<&'a str>,
    pub event: HookEvent,
    pub hook_index: usize,
    pub hook_config: &'a Value,
    pub spec_id: Option<&'a str>,
    pub mode: Option<&'a str>,
    pub test: bool,
}

/// Records a hook as fired (queued behind the hooks before it); returns the record's id.
pub fn insert_queued(conn: &Connection, fired: &Fired<'_>) -> rusqlite::Result<String> {
    let id = store::new_id();
    conn.prepare_cached(
        "INSERT INTO hook_runs (id, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, status, test, fired_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'queued', ?10, ?11)",
    )?
    .execute(params![
        id,
        fired.graph_id,
        fired.graph_name,
        fired.run_id,
        fired.event.as_str(),
        fired.hook_index as i64,
        fired.hook_config.to_string(),
        fired.spec_id,
        fired.mode,
        fired.test,
        store::now()
    ])?;
    Ok(id)
}

/// Marks a queued hook run as running. False when it is no longer queued (interrupted by a
/// shutdown).
pub fn mark_started(
    conn: &Connection,
    id: &str,
    plugin: Option<&PluginRef>,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE hook_runs SET status = 'running', started_at = ?2, plugin = ?3, plugin_version = ?4, plugin_sha256 = ?5
             WHERE id = ?1 AND status = 'queued'",
        )?
        .execute(params![
            id,
            store::now(),
            plugin.map(|p| p.name.as_str()),
            plugin.map(|p| p.version.as_str()),
            plugin.map(|p| p.sha256.as_str())
        ])?;
    Ok(changed == 1)
}

/// How a hook run ended.
#[derive(Debug, Clone, Default)]
pub struct Finished {
    pub status: &'static str,
    pub summary: Option<String>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub rendered: Option<Value>,
    pub duration_ms: i64,
}

/// Records how a hook run ended.
pub fn finish(conn: &Connection, id: &str, finished: &Finished) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE hook_runs SET status = ?2, summary = ?3, error = ?4, output = ?5, rendered = ?6, finished_at = ?7, duration_ms = ?8
         WHERE id = ?1 AND status = 'running'",
    )?
    .execute(params![
        id,
        finished.status,
        finished.summary,
        finished.error,
        finished.output,
        finished.rendered.as_ref().map(Value::to_string),
        store::now(),
        finished.duration_ms
    ])?;
    Ok(())
}

/// Marks every queued or running hook run interrupted (at start-up and shutdown); they are
/// never re-run on their own.
pub fn interrupt_unfinished(conn: &Connection, why: &str) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE hook_runs SET status = 'interrupted', error = ?1, finished_at = ?2 WHERE status IN ('queued', 'running')",
        params![why, store::now()],
    )
}

/// Filters of `GET /api/hook-runs`.
#[derive(Debug, Clone, Default)]
pub struct HookRunFilter {
    pub graph_id: Option<String>,
    pub run_id: Option<String>,
    pub event: Option<HookEvent>,
    pub status: Option<String>,
    /// Only runs fired at or after this instant (RFC 3339, UTC, microseconds).
    pub since: Option<String>,
    pub last: usize,
}

/// Hook runs matching the filter, newest first.
pub fn query(conn: &Connection, filter: &HookRunFilter) -> rusqlite::Result<Vec<HookRun>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM hook_runs
         WHERE (?1 IS NULL OR graph_id = ?1) AND (?2 IS NULL OR run_id = ?2) AND (?3 IS NULL OR event = ?3)
           AND (?4 IS NULL OR status = ?4) AND (?5 IS NULL OR fired_at >= ?5)
         ORDER BY fired_at DESC, id DESC LIMIT ?6"
    ))?;
    statement
        .query_map(
            params![
                filter.graph_id,
                filter.run_id,
                filter.event.map(HookEvent::as_str),
                filter.status,
                filter.since,
                filter.last as i64
            ],
            from_row,
        )?
        .collect()
}

/// The statuses a hook run can have, for validating filters.
pub const STATUSES: [&str; 6] = [
    "queued",
    "running",
    "completed",
    "failed",
    "timed_out",
    "interrupted",
];
