//! Runs (`runs`), the specs each run reached (`run_specs`) and every executor call for a node
//! (`node_runs`).

use crate::sql::{self, Conn, Dialect, Queries, Row, params};

use super::states::{Sql, state};
use super::times::{At, time, time_opt};
use super::{Rd, StoreError, Tx};
use canopy_model::records::runs::{NodeRun, NodeRunStatus, Run, RunSpec, RunStatus, SpecResult};
use canopy_model::time::Timestamp;

/// What [`Tx::cancel_node_runs`] cancelled.
#[derive(Debug, Clone, Default)]
pub struct CancelledWork {
    /// The node that was running, and its spec.
    pub node: Option<(String, String)>,
    /// The specs in flight it marked cancelled.
    pub specs: Vec<String>,
}

/// A node run about to start.
#[derive(Debug, Clone)]
pub struct NewNodeRun<'a> {
    pub run_id: &'a str,
    pub graph_id: &'a str,
    pub spec_id: &'a str,
    pub node: &'a str,
    pub node_index: usize,
    pub mode: &'a str,
    pub resume_session: Option<&'a str>,
}

/// How a node run ended.
#[derive(Debug, Clone)]
pub struct NodeRunEnd {
    pub status: NodeRunStatus,
    pub summary: Option<String>,
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub harness_session: Option<String>,
    /// The executor that ran it: name, version, sha256.
    pub plugin: Option<(String, String, String)>,
    pub duration_ms: i64,
}

/// The spec a run is on: its id, the node it is at, and its group.
#[derive(Debug, Clone)]
pub struct OnSpec {
    pub spec_id: String,
    pub next_node: i64,
    pub group: Option<String>,
}

/// The next spec a run can take: its id, group and position in its source.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub spec_id: String,
    pub group: Option<String>,
    pub position: i64,
}

const RUN_COLUMNS: &str = "id, graph_id, workdir, queue_id, status, blocker, summary, start_node, started_at, finished_at, actor, dispatch_depth, resumes_at";

fn run_from_row(row: &Row<'_>) -> sql::Result<Run> {
    Ok(Run {
        id: row.get(0)?,
        graph_id: row.get(1)?,
        workdir: row.get(2)?,
        queue_id: row.get(3)?,
        status: state(row, 4)?,
        blocker: row.get(5)?,
        summary: row.get(6)?,
        start_node: row.get(7)?,
        started_at: time(row, 8)?,
        finished_at: time_opt(row, 9)?,
        actor: row.get(10)?,
        dispatch_depth: row.get(11)?,
        resumes_at: time_opt(row, 12)?,
    })
}

const NODE_RUN_COLUMNS: &str = "id, run_id, spec_id, node, node_index, mode, plugin, plugin_version, plugin_sha256, status, summary, reason, detail, harness_session, resume_session, started_at, finished_at, duration_ms";

fn node_run_from_row(row: &Row<'_>) -> sql::Result<NodeRun> {
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
        status: state(row, 9)?,
        summary: row.get(10)?,
        reason: row.get(11)?,
        detail: row.get(12)?,
        harness_session: row.get(13)?,
        resume_session: row.get(14)?,
        started_at: time(row, 15)?,
        finished_at: time_opt(row, 16)?,
        duration_ms: row.get(17)?,
    })
}

/// A run's spec records with their names, as [`run_spec_from_row`] reads them.
const RUN_SPEC_SELECT: &str = "SELECT rs.spec_id, s.name, rs.ordinal, rs.group_label, rs.status, rs.next_node, rs.summary, rs.harness_session, rs.started_at, rs.finished_at
     FROM run_specs rs LEFT JOIN specs s ON s.id = rs.spec_id";

/// One row of [`RUN_SPEC_SELECT`]; why it stopped is filled in after.
fn run_spec_from_row(r: &Row<'_>) -> sql::Result<RunSpec> {
    Ok(RunSpec {
        spec_id: r.get(0)?,
        spec_name: r.get(1)?,
        ordinal: r.get(2)?,
        group: r.get(3)?,
        status: state(r, 4)?,
        next_node: r.get(5)?,
        summary: r.get(6)?,
        harness_session: r.get(7)?,
        reason: None,
        reason_node: None,
        started_at: time(r, 8)?,
        finished_at: time_opt(r, 9)?,
    })
}

impl Rd<'_> {
    /// Resolves a run id or prefix.
    pub fn resolve_run(&self, prefix: &str) -> Result<String, StoreError> {
        self.resolve_id("runs", "run", prefix)
    }

    /// One run by full id.
    pub fn run(&self, id: &str) -> Result<Run, StoreError> {
        self.query_opt(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
            params![id],
            run_from_row,
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "run",
            id: id.to_string(),
        })
    }

    /// Runs, newest first, optionally of one graph.
    pub fn runs(&self, graph_id: Option<&str>, limit: usize) -> Result<Vec<Run>, StoreError> {
        let statement = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE CAST(?1 AS TEXT) IS NULL OR graph_id = ?1 ORDER BY started_at DESC, id LIMIT ?2"
        );
        Ok(self.query_map(&statement, params![graph_id, limit as i64], run_from_row)?)
    }

    /// The ids of the running runs this node drives (its lease is on their graph), and those
    /// no node holds (from before leases): what a daemon recovers at start and stops at shutdown.
    /// Another node's runs are its own, or, when its lease runs out, taken over
    /// ([`Tx::expired_leases`]).
    pub fn running_run_ids(&self) -> Result<Vec<String>, StoreError> {
        if self.exclusive() {
            let statement = "SELECT id FROM runs WHERE status = 'running'";
            return Ok(self.query_map(statement, params![], |r| r.get(0))?);
        }
        let statement = "SELECT r.id FROM runs r JOIN graphs g ON g.id = r.graph_id
             WHERE r.status = 'running' AND (g.lease_node = ?1 OR g.lease_node IS NULL)";
        Ok(self.query_map(statement, params![self.node()], |r| r.get(0))?)
    }

    /// The specs a run reached, in order, each with why it stopped if it did not complete.
    pub fn run_specs(&self, run_id: &str) -> Result<Vec<RunSpec>, StoreError> {
        let statement = format!("{RUN_SPEC_SELECT} WHERE rs.run_id = ?1 ORDER BY rs.ordinal");
        let mut specs: Vec<RunSpec> =
            self.query_map(&statement, params![run_id], run_spec_from_row)?;
        if specs.iter().any(|s| s.status.stopped()) {
            // One pass over the run's node runs that did not complete, oldest first, so the
            // last one of a spec wins.
            let mut reasons: std::collections::HashMap<String, (String, Option<String>)> =
                std::collections::HashMap::new();
            let statement = "SELECT spec_id, node, reason FROM node_runs
                 WHERE run_id = ?1 AND status IN ('failed', 'blocked', 'limit_blocked', 'interrupted', 'cancelled')
                 ORDER BY started_at, id";
            let rows = self.query_map(statement, params![run_id], |r| {
                Ok((
                    r.get::<String>(0)?,
                    r.get::<String>(1)?,
                    r.get::<Option<String>>(2)?,
                ))
            })?;
            for (spec_id, node, reason) in rows {
                reasons.insert(spec_id, (node, reason));
            }
            for spec in specs.iter_mut().filter(|s| s.status.stopped()) {
                if let Some((node, reason)) = reasons.remove(&spec.spec_id) {
                    spec.reason_node = Some(node);
                    spec.reason = reason;
                }
            }
        }
        Ok(specs)
    }

    /// The run's records of the specs `spec_ids` (those it reached), each with why it stopped
    /// if it did not complete.
    pub fn run_specs_among(
        &self,
        run_id: &str,
        spec_ids: &[String],
    ) -> Result<Vec<RunSpec>, StoreError> {
        // One statement for the whole page, not one per spec.
        let statement = format!(
            "{RUN_SPEC_SELECT} WHERE rs.run_id = ?1 AND {}",
            self.dialect().in_json_list("rs.spec_id", "?2")
        );
        let reason = "SELECT node, reason FROM node_runs
             WHERE run_id = ?1 AND spec_id = ?2 AND status IN ('failed', 'blocked', 'limit_blocked', 'interrupted', 'cancelled')
             ORDER BY started_at DESC, id DESC LIMIT 1";
        let ids = serde_json::Value::from(spec_ids.to_vec()).to_string();
        let mut found: Vec<RunSpec> =
            self.query_map(&statement, params![run_id, ids], run_spec_from_row)?;
        for spec in &mut found {
            if spec.status.stopped()
                && let Some((node, why)) =
                    self.query_opt(reason, params![run_id, spec.spec_id], |r| {
                        Ok((r.get::<String>(0)?, r.get::<Option<String>>(1)?))
                    })?
            {
                spec.reason_node = Some(node);
                spec.reason = why;
            }
        }
        found.sort_by_key(|s| s.ordinal);
        Ok(found)
    }

    /// How many specs the run reached, by result (from the tally triggers keep, not by
    /// counting the run's specs).
    pub fn run_spec_counts(&self, run_id: &str) -> Result<Vec<(SpecResult, usize)>, StoreError> {
        let statement = "SELECT status, specs FROM run_spec_tally WHERE run_id = ?1 AND specs > 0 ORDER BY status";
        Ok(self.query_map(statement, params![run_id], |r| {
            Ok((state(r, 0)?, usize::try_from(r.get::<i64>(1)?).unwrap_or(0)))
        })?)
    }

    /// The spec the run is on now (status running), if any.
    pub fn spec_in_progress(&self, run_id: &str) -> Result<Option<OnSpec>, StoreError> {
        Ok(self.query_opt("SELECT spec_id, next_node, group_label FROM run_specs WHERE run_id = ?1 AND status = 'running'", params![run_id], |r| {
                Ok(OnSpec {
                    spec_id: r.get(0)?,
                    next_node: r.get(1)?,
                    group: r.get(2)?,
                })
            })?)
    }

    /// The runs paused on a usage limit, with when each goes on: `(graph, run, resumes_at)`.
    pub fn limit_paused_runs(&self) -> Result<Vec<(String, String, Timestamp)>, StoreError> {
        let statement = "SELECT graph_id, id, resumes_at FROM runs WHERE status = 'paused' AND resumes_at IS NOT NULL";
        Ok(self.query_map(statement, params![], |r| {
            Ok((r.get(0)?, r.get(1)?, time(r, 2)?))
        })?)
    }

    /// The spec the run is blocked on (by its node, or by a usage limit), if any.
    pub fn blocked_spec(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt("SELECT spec_id FROM run_specs WHERE run_id = ?1 AND (status = 'blocked' OR status = 'limit_blocked')", params![run_id], |r| r.get(0))?)
    }

    /// The latest spec an interruption cut off in this run, if any.
    pub fn last_interrupted_spec(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt("SELECT spec_id FROM run_specs WHERE run_id = ?1 AND status = 'interrupted' ORDER BY ordinal DESC LIMIT 1", params![run_id], |r| r.get(0))?)
    }

    /// True once the run has reached any spec.
    pub fn run_reached_any(&self, run_id: &str) -> Result<bool, StoreError> {
        Ok(self.query_row(
            "SELECT EXISTS (SELECT 1 FROM run_specs WHERE run_id = ?1)",
            params![run_id],
            |r| r.get(0),
        )?)
    }

    /// The next spec the run should take: the first pending queue member (queue runs) or bound
    /// spec (graph runs) the run has not reached yet. The search starts at `from_position`
    /// (where the run last was, so a long run does not rescan what it did) and falls back to
    /// the whole list when nothing is found there (after a reorder, say).
    pub fn next_candidate(
        &self,
        graph_id: &str,
        run: &Run,
        from_position: i64,
    ) -> Result<Option<Candidate>, StoreError> {
        let find = |from: i64| -> Result<Option<Candidate>, StoreError> {
            let row = |r: &Row<'_>| {
                Ok(Candidate {
                    spec_id: r.get(0)?,
                    group: r.get(1)?,
                    position: r.get(2)?,
                })
            };
            let next = match &run.queue_id {
                Some(queue_id) => self.query_opt("SELECT m.spec_id, m.group_label, m.position FROM queue_members m
                         WHERE m.queue_id = ?1 AND m.position >= ?3
                           AND NOT EXISTS (SELECT 1 FROM run_specs rs WHERE rs.run_id = ?2 AND rs.spec_id = m.spec_id)
                           AND NOT EXISTS (SELECT 1 FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                                           WHERE rs.spec_id = m.spec_id AND rs.status IN ('completed', 'skipped') AND r.queue_id = m.queue_id)
                         ORDER BY m.position LIMIT 1", params![queue_id, run.id, from], row)?,
                None => self.query_opt("SELECT gs.spec_id, NULL, gs.position FROM graph_specs gs
                         WHERE gs.graph_id = ?1 AND gs.position >= ?3
                           AND NOT EXISTS (SELECT 1 FROM run_specs rs WHERE rs.run_id = ?2 AND rs.spec_id = gs.spec_id)
                         ORDER BY gs.position LIMIT 1", params![graph_id, run.id, from], row)?,
            };
            Ok(next)
        };
        match find(from_position)? {
            Some(found) => Ok(Some(found)),
            None if from_position > 0 => find(0),
            None => Ok(None),
        }
    }

    /// The harness session of the group's latest successfully completed sibling on this
    /// queue (other than this run's `spec_id`).
    pub fn warm_session(
        &self,
        queue_id: &str,
        group: &str,
        run_id: &str,
        spec_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt(
            "SELECT rs.harness_session FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                 WHERE r.queue_id = ?1 AND rs.group_label = ?2 AND rs.status = 'completed'
                   AND rs.harness_session IS NOT NULL AND NOT (rs.run_id = ?3 AND rs.spec_id = ?4)
                 ORDER BY rs.finished_at DESC LIMIT 1",
            params![queue_id, group, run_id, spec_id],
            |r| r.get(0),
        )?)
    }

    /// The session a spec's node goes on in after waiting for a usage limit: the one the run's
    /// last node run reported (else the one it was given), when that was this spec's node and
    /// ended `limit_blocked` (the wait's retry is the node run right after it). One row, read
    /// by the run's index: this is asked at every step.
    pub fn limit_blocked_session(
        &self,
        run_id: &str,
        spec_id: &str,
        node_index: usize,
    ) -> Result<Option<String>, StoreError> {
        let last: Option<(NodeRunStatus, String, i64, Option<String>)> = self.query_opt(
            "SELECT status, spec_id, node_index, COALESCE(harness_session, resume_session)
                 FROM node_runs WHERE run_id = ?1 ORDER BY started_at DESC, id DESC LIMIT 1",
            params![run_id],
            |r| {
                Ok((
                    state::<NodeRunStatus>(r, 0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                ))
            },
        )?;
        Ok(last.and_then(|(status, spec, index, session)| {
            (status == NodeRunStatus::LimitBlocked
                && spec == spec_id
                && usize::try_from(index).is_ok_and(|i| i == node_index))
            .then_some(session)?
        }))
    }

    /// One node run by id or unique prefix.
    pub fn node_run(&self, prefix: &str) -> Result<NodeRun, StoreError> {
        let id = self.resolve_id("node_runs", "node run", prefix)?;
        Ok(self.query_row(
            &format!("SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE id = ?1"),
            params![&id],
            node_run_from_row,
        )?)
    }

    /// The node runs of a run, oldest first.
    pub fn node_runs(&self, run_id: &str) -> Result<Vec<NodeRun>, StoreError> {
        let statement = format!(
            "SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE run_id = ?1 ORDER BY started_at, id"
        );
        Ok(self.query_map(&statement, params![run_id], node_run_from_row)?)
    }

    /// The latest `limit` node runs of a run, oldest first.
    pub fn recent_node_runs(&self, run_id: &str, limit: usize) -> Result<Vec<NodeRun>, StoreError> {
        // The newest `limit` through the index, put oldest first here: a second ORDER BY in SQL
        // sorted them again in a temporary b-tree.
        let statement = format!(
            "SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE run_id = ?1 ORDER BY started_at DESC, id DESC LIMIT ?2"
        );
        let mut runs: Vec<NodeRun> =
            self.query_map(&statement, params![run_id, limit as i64], node_run_from_row)?;
        runs.reverse();
        Ok(runs)
    }

    /// The node runs of every run of a graph, newest first, at most `limit`.
    pub fn graph_node_runs(
        &self,
        graph_id: &str,
        limit: usize,
    ) -> Result<Vec<NodeRun>, StoreError> {
        let statement = format!(
            "SELECT {NODE_RUN_COLUMNS} FROM node_runs WHERE graph_id = ?1 ORDER BY started_at DESC, id LIMIT ?2"
        );
        Ok(self.query_map(
            &statement,
            params![graph_id, limit as i64],
            node_run_from_row,
        )?)
    }

    /// True while a node run of this run is in flight.
    pub fn node_in_progress(&self, run_id: &str) -> Result<bool, StoreError> {
        Ok(self.query_row(
            "SELECT EXISTS (SELECT 1 FROM node_runs WHERE run_id = ?1 AND status = 'running')",
            params![run_id],
            |r| r.get(0),
        )?)
    }

    /// True while this node run is recorded running (a reset or a stop has not ended it).
    pub fn node_run_running(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.query_row(
            "SELECT EXISTS (SELECT 1 FROM node_runs WHERE id = ?1 AND status = 'running')",
            params![id],
            |r| r.get(0),
        )?)
    }

    /// The node and spec of the run's latest node run with one of `statuses`.
    pub fn last_node_run_with(
        &self,
        run_id: &str,
        statuses: &[NodeRunStatus],
    ) -> Result<Option<(String, String)>, StoreError> {
        let statement = "SELECT node, spec_id, status FROM node_runs WHERE run_id = ?1 ORDER BY started_at DESC, id DESC";
        let mut found = None;
        self.query(statement, params![run_id], &mut |row| {
            let status: NodeRunStatus = state(row, 2)?;
            if statuses.contains(&status) {
                found = Some((row.get(0)?, row.get(1)?));
                return Ok(false);
            }
            Ok(true)
        })?;
        Ok(found)
    }
}

impl Tx<'_> {
    /// Records who started (or continued) a run: its events from now on carry this cause.
    pub fn set_run_cause(
        &self,
        run_id: &str,
        cause: &canopy_model::events::Cause,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE runs SET actor = ?2, dispatch_depth = ?3 WHERE id = ?1",
            params![run_id, cause.actor.to_string(), cause.depth],
        )?;
        Ok(())
    }

    /// Inserts a new running run; returns its id.
    pub fn insert_run(
        &self,
        graph_id: &str,
        workdir: &str,
        queue_id: Option<&str>,
    ) -> Result<String, StoreError> {
        let id = super::new_id();
        self.execute(
            "INSERT INTO runs (id, graph_id, workdir, queue_id, status, started_at) VALUES (?1, ?2, ?3, ?4, 'running', ?5)", params![id, graph_id, workdir, queue_id, super::now()])?;
        Ok(id)
    }

    /// Sets a run's status and blocker.
    pub fn set_run_status(
        &self,
        id: &str,
        status: RunStatus,
        blocker: Option<&str>,
    ) -> Result<(), StoreError> {
        // Whatever the run does next, it no longer waits for a usage limit's reset.
        self.execute(
            "UPDATE runs SET status = ?2, blocker = ?3, resumes_at = NULL WHERE id = ?1",
            params![id, Sql(status), blocker],
        )?;
        Ok(())
    }

    /// Pauses a run on a usage limit until `resumes_at`, with its blocker.
    pub fn set_run_limit_paused(
        &self,
        id: &str,
        blocker: &str,
        resumes_at: Timestamp,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE runs SET status = 'paused', blocker = ?2, resumes_at = ?3 WHERE id = ?1",
            params![id, blocker, At(resumes_at)],
        )?;
        Ok(())
    }

    /// Ends a run: its final status, blocker and summary, and when it finished (kept if set).
    pub fn finish_run(
        &self,
        id: &str,
        status: RunStatus,
        blocker: Option<&str>,
        summary: Option<&str>,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE runs SET status = ?2, blocker = ?3, summary = COALESCE(?4, summary), finished_at = COALESCE(finished_at, ?5) WHERE id = ?1", params![id, Sql(status), blocker, summary, super::now()])?;
        Ok(())
    }

    /// Sets (or clears) the node the run's next spec starts at.
    pub fn set_run_start_node(&self, id: &str, node: Option<&str>) -> Result<(), StoreError> {
        self.execute(
            "UPDATE runs SET start_node = ?2 WHERE id = ?1",
            params![id, node],
        )?;
        Ok(())
    }

    /// Records that the run reached a spec, as the next in order.
    pub fn insert_run_spec(
        &self,
        run_id: &str,
        spec_id: &str,
        group: Option<&str>,
        status: SpecResult,
        next_node: usize,
    ) -> Result<(), StoreError> {
        let now = super::now();
        let finished = (status != SpecResult::Running).then_some(now.as_str());
        self.execute(
            "INSERT INTO run_specs (run_id, spec_id, ordinal, group_label, status, next_node, started_at, finished_at)
             VALUES (?1, ?2, (SELECT COALESCE(MAX(ordinal) + 1, 0) FROM run_specs WHERE run_id = ?1), ?3, ?4, ?5, ?6, ?7)", params![run_id, spec_id, group, Sql(status), next_node as i64, now, finished])?;
        Ok(())
    }

    /// Moves a spec of a run to `status`; a settled status records when, and a summary.
    pub fn set_run_spec_status(
        &self,
        run_id: &str,
        spec_id: &str,
        status: SpecResult,
        summary: Option<&str>,
    ) -> Result<(), StoreError> {
        let finished = match status {
            // `Unknown` is never written (its `ToSql` refuses it).
            SpecResult::Running
            | SpecResult::Blocked
            | SpecResult::LimitBlocked
            | SpecResult::Unknown => None,
            SpecResult::Completed
            | SpecResult::Failed
            | SpecResult::Skipped
            | SpecResult::Interrupted
            | SpecResult::Cancelled => Some(super::now()),
        };
        self.execute(
            "UPDATE run_specs SET status = ?3, summary = COALESCE(?4, summary), finished_at = COALESCE(?5, finished_at) WHERE run_id = ?1 AND spec_id = ?2", params![run_id, spec_id, Sql(status), summary, finished])?;
        Ok(())
    }

    /// Runs a spec of a run again from node `next_node`.
    pub fn restart_run_spec(
        &self,
        run_id: &str,
        spec_id: &str,
        next_node: usize,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE run_specs SET status = 'running', next_node = ?3, finished_at = NULL WHERE run_id = ?1 AND spec_id = ?2", params![run_id, spec_id, next_node as i64])?;
        Ok(())
    }

    /// Moves a spec of a run on to node `next_node`.
    pub fn set_run_spec_next_node(
        &self,
        run_id: &str,
        spec_id: &str,
        next_node: usize,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE run_specs SET next_node = ?3 WHERE run_id = ?1 AND spec_id = ?2",
            params![run_id, spec_id, next_node as i64],
        )?;
        Ok(())
    }

    /// Records the harness session a spec's node run reported.
    pub fn set_run_spec_session(
        &self,
        run_id: &str,
        spec_id: &str,
        session: &str,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE run_specs SET harness_session = ?3 WHERE run_id = ?1 AND spec_id = ?2",
            params![run_id, spec_id, session],
        )?;
        Ok(())
    }

    /// Records a node run as running; returns its id.
    pub fn insert_node_run(&self, new: &NewNodeRun<'_>) -> Result<String, StoreError> {
        let id = super::new_id();
        self.execute(
            "INSERT INTO node_runs (id, run_id, graph_id, spec_id, node, node_index, mode, status, resume_session, started_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9)", params![
                id,
                new.run_id,
                new.graph_id,
                new.spec_id,
                new.node,
                new.node_index as i64,
                new.mode,
                new.resume_session,
                super::now()
            ])?;
        Ok(id)
    }

    /// Records how a node run ended.
    pub fn finish_node_run(&self, id: &str, end: &NodeRunEnd) -> Result<(), StoreError> {
        let (plugin, version, sha256) = match &end.plugin {
            Some((name, version, sha256)) => (Some(name), Some(version), Some(sha256)),
            None => (None, None, None),
        };
        self.execute(
            "UPDATE node_runs SET status = ?2, summary = ?3, reason = ?4, detail = ?5, harness_session = ?6,
                    plugin = ?7, plugin_version = ?8, plugin_sha256 = ?9, finished_at = ?10, duration_ms = ?11
             WHERE id = ?1", params![
                id,
                Sql(end.status),
                end.summary,
                end.reason,
                end.detail,
                end.harness_session,
                plugin,
                version,
                sha256,
                super::now(),
                end.duration_ms
            ])?;
        Ok(())
    }

    /// Marks the run's running node runs and running spec interrupted, with why; returns the
    /// node and spec that was running, if one was.
    pub fn interrupt_node_runs(
        &self,
        run_id: &str,
        why: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        let running = self.running_node(run_id)?;
        let now = super::now();
        self.end_running_node_runs(run_id, NodeRunStatus::Interrupted, why, &now)?;
        self.execute(
            "UPDATE run_specs SET status = 'interrupted', finished_at = ?2 WHERE run_id = ?1 AND status = 'running'", params![run_id, now])?;
        Ok(running)
    }

    /// Marks the run's running node runs cancelled, with why, and its spec in flight (running,
    /// or blocked on a pause) cancelled.
    pub fn cancel_node_runs(&self, run_id: &str, why: &str) -> Result<CancelledWork, StoreError> {
        let running = self.running_node(run_id)?;
        let now = super::now();
        self.end_running_node_runs(run_id, NodeRunStatus::Cancelled, why, &now)?;
        let specs: Vec<String> = self.query_map(
            "UPDATE run_specs SET status = 'cancelled', finished_at = ?2 WHERE run_id = ?1 AND (status = 'running' OR status = 'blocked' OR status = 'limit_blocked') RETURNING spec_id",
            params![run_id, now],
            |r| r.get(0),
        )?;
        Ok(CancelledWork {
            node: running,
            specs,
        })
    }

    /// Ends the run's running node runs at `now` with `status` and why, and their duration.
    fn end_running_node_runs(
        &self,
        run_id: &str,
        status: NodeRunStatus,
        why: &str,
        now: &str,
    ) -> Result<(), StoreError> {
        let statement = match self.dialect() {
            Dialect::Sqlite => {
                "UPDATE node_runs SET status = ?2, reason = ?3, finished_at = ?4,
                     duration_ms = CAST((julianday(?4) - julianday(started_at)) * 86400000 AS INTEGER)
                 WHERE run_id = ?1 AND status = 'running'"
            }
            Dialect::Postgres => {
                "UPDATE node_runs SET status = ?2, reason = ?3, finished_at = ?4,
                     duration_ms = CAST(EXTRACT(EPOCH FROM (CAST(CAST(?4 AS text) AS timestamptz) - CAST(started_at AS timestamptz))) * 1000 AS BIGINT)
                 WHERE run_id = ?1 AND status = 'running'"
            }
        };
        self.execute(statement, params![run_id, Sql(status), why, now])?;
        Ok(())
    }

    /// The node (and its spec) the run is running now, if it is running one.
    fn running_node(&self, run_id: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(self.query_opt("SELECT node, spec_id FROM node_runs WHERE run_id = ?1 AND status = 'running' ORDER BY started_at DESC LIMIT 1", params![run_id], |r| Ok((r.get(0)?, r.get(1)?)))?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::Store;
    use super::super::graphs::GraphWrite;
    use super::*;

    /// The tally against a count of the rows themselves.
    fn counted(rd: &Rd<'_>, run_id: &str) -> Result<Vec<(SpecResult, usize)>, StoreError> {
        let counts = rd.query_map(
            "SELECT status, COUNT(*) FROM run_specs WHERE run_id = ?1 GROUP BY status ORDER BY status",
            params![run_id],
            |r| {
                Ok((
                    state(r, 0)?,
                    usize::try_from(r.get::<i64>(1)?).unwrap_or(0),
                ))
            })?;
        Ok(counts)
    }

    #[test]
    fn the_spec_tally_follows_every_change_of_a_runs_specs() {
        crate::each_backend::check(|store| {
            the_spec_tally_follows_every_change_of_a_runs_specs_on(store).unwrap();
        });
    }

    fn the_spec_tally_follows_every_change_of_a_runs_specs_on(store: &Store) -> anyhow::Result<()> {
        let (graph, run, other) = store.write_blocking(|tx| {
            let graph = tx.insert_graph(&GraphWrite {
                name: "g".into(),
                workdir: "/w".into(),
                nodes: Vec::new(),
                specs: Vec::new(),
                allow_dirty_start: false,
                hooks: Default::default(),
                node: None,
            })?;
            let run = tx.insert_run(&graph, "/w", None)?;
            let other = tx.insert_run(&graph, "/w", None)?;
            for spec in ["a", "b", "c", "d"] {
                tx.insert_run_spec(&run, spec, None, SpecResult::Running, 0)?;
            }
            tx.insert_run_spec(&other, "a", None, SpecResult::Completed, 0)?;
            tx.set_run_spec_status(&run, "a", SpecResult::Completed, Some("done"))?;
            tx.set_run_spec_status(&run, "b", SpecResult::Failed, None)?;
            tx.set_run_spec_status(&run, "c", SpecResult::Blocked, None)?;
            // Blocked, then run again from its second node; a change that keeps the status
            // counts nothing twice.
            tx.restart_run_spec(&run, "c", 1)?;
            tx.set_run_spec_status(&run, "d", SpecResult::Running, None)?;
            tx.interrupt_node_runs(&run, "the daemon stopped")?;
            Ok::<_, StoreError>((graph, run, other))
        })?;
        let (tally, count) = {
            let run = run.clone();
            store.read_blocking(move |rd| {
                Ok::<_, StoreError>((rd.run_spec_counts(&run)?, counted(rd, &run)?))
            })?
        };
        assert_eq!(tally, count);
        assert_eq!(
            tally,
            vec![
                (SpecResult::Completed, 1),
                (SpecResult::Failed, 1),
                (SpecResult::Interrupted, 2),
            ]
        );
        // Deleting the graph takes its runs, their specs and their tallies with it.
        store.write_blocking(move |tx| tx.delete_graph(&graph))?;
        let left = store.read_blocking(move |rd| {
            Ok::<_, StoreError>((
                rd.run_spec_counts(&run)?,
                rd.run_spec_counts(&other)?,
                rd.query_row("SELECT COUNT(*) FROM run_spec_tally", params![], |r| {
                    r.get::<i64>(0)
                })?,
            ))
        })?;
        assert_eq!(left, (Vec::new(), Vec::new(), 0));
        Ok(())
    }
}
