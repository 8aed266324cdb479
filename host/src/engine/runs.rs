//! Runs: the records of a graph taking its specs (or a queue's pending members) through its
//! nodes, and the reads that reconstruct progress from them.
//!
//! Every state change is one transaction. A run row holds where the run stands; `run_specs`
//! holds each spec the run reached and how it ended; `node_runs` every executor call.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use super::EngineError;
use crate::store::ids;

/// A run as stored.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub id: String,
    pub graph_id: String,
    pub workdir: String,
    pub queue_id: Option<String>,
    /// running, paused, completed, failed, interrupted, reset.
    pub status: String,
    pub blocker: Option<String>,
    pub summary: Option<String>,
    /// The node the next spec starts at (a directed start), if one was asked for.
    pub start_node: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
}

/// A spec the run reached.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    pub spec_id: String,
    pub spec_name: Option<String>,
    pub ordinal: i64,
    pub group: Option<String>,
    /// running, blocked, completed, failed, skipped, interrupted.
    pub status: String,
    pub next_node: i64,
    pub summary: Option<String>,
    pub harness_session: Option<String>,
    /// Why a failed, blocked or interrupted spec stopped: the reason of its last node run.
    pub reason: Option<String>,
    /// The node that run was of.
    pub reason_node: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
}

/// One executor call for a node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRun {
    pub id: String,
    pub run_id: String,
    pub spec_id: String,
    pub node: String,
    pub node_index: i64,
    pub mode: String,
    /// The executor: plugin name, version and sha256.
    pub plugin: Option<String>,
    pub plugin_version: Option<String>,
    pub plugin_sha256: Option<String>,
    /// running, completed, failed, blocked, interrupted.
    pub status: String,
    pub summary: Option<String>,
    /// Failure reason or blocker.
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub harness_session: Option<String>,
    pub resume_session: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
}

const RUN_COLUMNS: &str = "id, graph_id, workdir, queue_id, status, blocker, summary, start_node, started_at, finished_at";

fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: row.get(0)?,
        graph_id: row.get(1)?,
        workdir: row.get(2)?,
        queue_id: row.get(3)?,
        status: row.get(4)?,
        blocker: row.get(5)?,
        summary: row.get(6)?,
        start_node: row.get(7)?,
        started_at: row.get(8)?,
        finished_at: row.get(9)?,
    })
}

const NODE_RUN_COLUMNS: &str = "id, run_id, spec_id, node, node_index, mode, plugin, plugin_version, plugin_sha256, status, summary, reason, detail, harness_session, resume_session, started_at, finished_at, duration_ms";

fn node_run_from_row(row: &Row<'_>) -> rusqlite::Result<NodeRun> {
    Ok(NodeRun {
        id: row.get(0)?,
        run_id: row.get(1)?,
        spec_id: row.get(2)?,
        node: row.get(3)?,
        node_index: row.get(4)?,
        mode: row.get(5)?,
        plugin: row.get(6)?,
        plugin_version: row.get(7)?,
        plugin_sha256: row.get(8)?,
        status: row.get(9)?,
        summary: row.get(10)?,
        reason: row.get(11)?,
        detail: row.get(12)?,
        harness_session: row.get(13)?,
        resume_session: row.get(14)?,
        started_at: row.get(15)?,
        finished_at: row.get(16)?,
        duration_ms: row.get(17)?,
    })
}

/// True while a run can still go on (running, paused, or interrupted awaiting a continue).
pub fn is_active(run: &Run) -> bool {
    matches!(run.status.as_str(), "running" | "paused" | "interrupted")
}

/// One run by full id.
pub fn get(conn: &Connection, id: &str) -> Result<Run, EngineError> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))?
        .query_row([id], run_from_row)
        .optional()?
        .ok_or_else(|| EngineError::NotFound {
            kind: "run",
            id: id.to_string(),
        })
}

/// Resolves a run id or prefix.
pub fn resolve(conn: &Connection, prefix: &str) -> Result<String, EngineError> {
    Ok(ids::resolve(conn, "runs", "run", prefix)?)
}

/// One node run by id or unique prefix.
pub fn get_node_run(conn: &Connection, prefix: &str) -> Result<NodeRun, EngineError> {
    let id = ids::resolve(conn, "node_runs", "node run", prefix)?;
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE id = ?1"
        ))?
        .query_row([&id], node_run_from_row)?)
}

/// Runs, newest first, optionally of one graph.
pub fn list(
    conn: &Connection,
    graph_id: Option<&str>,
    limit: usize,
) -> Result<Vec<Run>, EngineError> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE ?1 IS NULL OR graph_id = ?1 ORDER BY started_at DESC, id LIMIT ?2"
    ))?;
    let runs = statement
        .query_map(params![graph_id, limit as i64], run_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(runs)
}

/// The specs a run reached, in order.
pub fn specs_of(conn: &Connection, run_id: &str) -> Result<Vec<RunSpec>, EngineError> {
    let mut statement = conn.prepare_cached(
        "SELECT rs.spec_id, s.name, rs.ordinal, rs.group_label, rs.status, rs.next_node, rs.summary, rs.harness_session, rs.started_at, rs.finished_at
         FROM run_specs rs LEFT JOIN specs s ON s.id = rs.spec_id WHERE rs.run_id = ?1 ORDER BY rs.ordinal",
    )?;
    let mut specs: Vec<RunSpec> = statement
        .query_map([run_id], |r| {
            Ok(RunSpec {
                spec_id: r.get(0)?,
                spec_name: r.get(1)?,
                ordinal: r.get(2)?,
                group: r.get(3)?,
                status: r.get(4)?,
                next_node: r.get(5)?,
                summary: r.get(6)?,
                harness_session: r.get(7)?,
                reason: None,
                reason_node: None,
                started_at: r.get(8)?,
                finished_at: r.get(9)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    if specs.iter().any(|s| stopped(&s.status)) {
        // One pass over the run's node runs that did not complete, oldest first, so the last one
        // of a spec wins.
        let mut reasons: std::collections::HashMap<String, (String, Option<String>)> =
            std::collections::HashMap::new();
        let mut statement = conn.prepare_cached(
            "SELECT spec_id, node, reason FROM node_runs
             WHERE run_id = ?1 AND status IN ('failed', 'blocked', 'interrupted')
             ORDER BY started_at, id",
        )?;
        let rows = statement.query_map([run_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })?;
        for row in rows {
            let (spec_id, node, reason) = row?;
            reasons.insert(spec_id, (node, reason));
        }
        for spec in specs.iter_mut().filter(|s| stopped(&s.status)) {
            if let Some((node, reason)) = reasons.remove(&spec.spec_id) {
                spec.reason_node = Some(node);
                spec.reason = reason;
            }
        }
    }
    Ok(specs)
}

/// A spec status that has a reason to show: it did not complete.
fn stopped(status: &str) -> bool {
    matches!(status, "failed" | "blocked" | "interrupted")
}

/// The node runs of a run, oldest first.
pub fn node_runs_of(conn: &Connection, run_id: &str) -> Result<Vec<NodeRun>, EngineError> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE run_id = ?1 ORDER BY started_at, id"
    ))?;
    let runs = statement
        .query_map([run_id], node_run_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(runs)
}

/// The latest `limit` node runs of a run, oldest first.
pub fn recent_node_runs_of(
    conn: &Connection,
    run_id: &str,
    limit: usize,
) -> Result<Vec<NodeRun>, EngineError> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT * FROM (SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE run_id = ?1 ORDER BY started_at DESC, id DESC LIMIT ?2)
         ORDER BY started_at, id"
    ))?;
    let runs = statement
        .query_map(params![run_id, limit as i64], node_run_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(runs)
}

/// The node runs of every run of a graph, newest first, at most `limit`.
pub fn node_runs_of_graph(
    conn: &Connection,
    graph_id: &str,
    limit: usize,
) -> Result<Vec<NodeRun>, EngineError> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE graph_id = ?1 ORDER BY started_at DESC, id LIMIT ?2"
    ))?;
    let runs = statement
        .query_map(params![graph_id, limit as i64], node_run_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(runs)
}

/// True while a node run of this run is in flight.
pub fn node_in_progress(conn: &Connection, run_id: &str) -> Result<bool, EngineError> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM node_runs WHERE run_id = ?1 AND status = 'running')",
        [run_id],
        |r| r.get(0),
    )?)
}
