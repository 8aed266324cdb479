//! The driver: one task per running graph, taking the run's specs through the graph's nodes.
//!
//! Each step is: one transaction that decides what runs next and records the node run as
//! running; the executor call (no lock held); one transaction that records the outcome and moves
//! the spec on. Between specs (at the start of every run, and between the specs of a queue run)
//! the dirty-tree guard checks the workdir; a dirty tree pauses the graph.

use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::events::{CompletedSpec, EngineEvent, RunContext};
use super::git::{self, LISTED_PATHS, TreeState};
use super::graphs::{self, Graph, GraphStatus};
use super::runs::{self, Run};
use super::{Engine, EngineError};
use crate::markers::{MarkerValues, NODE_MARKERS};
use crate::plugins::{CallRequest, PluginError, Provenance, Status, split_work_config};
use crate::store;
use crate::store::ids;

/// Bytes of a node's detail kept in its record.
const DETAIL_LIMIT: usize = 16 * 1024;

/// A node about to run, with everything its call needs.
struct NodeStep {
    run: RunContext,
    node_run_id: String,
    spec_id: String,
    spec_name: String,
    spec_body: String,
    node_index: usize,
    node_name: String,
    node_config: serde_json::Map<String, Value>,
    node_count: usize,
    resume_session: Option<String>,
}

/// What the driver does next.
enum Next {
    Node(Box<NodeStep>),
    /// The guard must look at the tree before this spec starts.
    Guard {
        spec_id: String,
    },
    Settle,
    Stop,
}

/// Runs the graph's current run until it pauses, settles, or is stopped.
pub(super) async fn drive(engine: Engine, graph_id: String, run_id: String) {
    if let Err(err) = drive_run(&engine, &graph_id, &run_id).await {
        let message = format!("the engine stopped this run: {err}");
        tracing::error!(graph = %graph_id, run = %run_id, error = %message, "driver failed");
        let paused = engine.store().transaction(|tx| {
            pause(tx, &graph_id, &run_id, &message)?;
            Ok(())
        });
        if let Err(err) = paused {
            tracing::error!(error = %format!("{err:#}"), "cannot record the driver failure");
        }
    }
    engine.driver_finished(&graph_id);
}

async fn drive_run(engine: &Engine, graph_id: &str, run_id: &str) -> Result<(), EngineError> {
    let mut guard_passed: Option<String> = None;
    let mut hint = 0;
    loop {
        let next = engine.store().transaction(|tx| {
            Ok(next_step(
                tx,
                graph_id,
                run_id,
                guard_passed.as_deref(),
                &mut hint,
            )?)
        })?;
        match next {
            Next::Stop => return Ok(()),
            Next::Settle => {
                let event = engine
                    .store()
                    .transaction(|tx| Ok(settle(tx, graph_id, run_id)?))?;
                engine.emit(event);
                return Ok(());
            }
            Next::Guard { spec_id } => {
                let run = engine
                    .store()
                    .transaction(|tx| Ok(runs::get(tx, run_id)?))?;
                match git::tree_state(&PathBuf::from(&run.workdir)).await {
                    TreeState::Clean => guard_passed = Some(spec_id),
                    TreeState::NotARepo(why) => {
                        tracing::debug!(workdir = %run.workdir, %why, "not a git work tree; the dirty-tree guard does not apply");
                        guard_passed = Some(spec_id);
                    }
                    TreeState::Dirty(lines) => {
                        let event = engine.store().transaction(|tx| {
                            Ok(dirty_pause(tx, graph_id, run_id, &spec_id, &lines)?)
                        })?;
                        engine.emit(event);
                        return Ok(());
                    }
                }
            }
            Next::Node(step) => {
                guard_passed = None;
                let events = run_node(engine, *step).await?;
                let stop = events
                    .iter()
                    .any(|e| matches!(e, EngineEvent::RunBlocked { .. }));
                for event in events {
                    engine.emit(event);
                }
                if stop {
                    return Ok(());
                }
            }
        }
    }
}

fn context(graph: &Graph, run: &Run) -> RunContext {
    RunContext {
        graph_id: graph.id.clone(),
        graph_name: graph.name.clone(),
        run_id: run.id.clone(),
        workdir: run.workdir.clone(),
        queue_id: run.queue_id.clone(),
    }
}

/// The next spec the run should take: the first pending queue member (queue runs) or bound
/// spec the run has not reached yet, with its group and position. The search starts at
/// `from_position` (where the run last was, so a long run does not rescan what it did) and falls
/// back to the whole list when nothing is found there (after a reorder, say).
pub(super) fn next_candidate_for(
    tx: &Connection,
    graph_id: &str,
    run: &Run,
    from_position: i64,
) -> Result<Option<(String, Option<String>, i64)>, EngineError> {
    let find = |from: i64| -> Result<Option<(String, Option<String>, i64)>, EngineError> {
        let next = match &run.queue_id {
            Some(queue_id) => tx
                .prepare_cached(
                    "SELECT m.spec_id, m.group_label, m.position FROM queue_members m
                     WHERE m.queue_id = ?1 AND m.position >= ?3
                       AND NOT EXISTS (SELECT 1 FROM run_specs rs WHERE rs.run_id = ?2 AND rs.spec_id = m.spec_id)
                       AND NOT EXISTS (SELECT 1 FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                                       WHERE rs.spec_id = m.spec_id AND rs.status IN ('completed', 'skipped') AND r.queue_id = m.queue_id)
                     ORDER BY m.position LIMIT 1",
                )?
                .query_row(params![queue_id, run.id, from], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?,
            None => tx
                .prepare_cached(
                    "SELECT gs.spec_id, NULL, gs.position FROM graph_specs gs
                     WHERE gs.graph_id = ?1 AND gs.position >= ?3
                       AND NOT EXISTS (SELECT 1 FROM run_specs rs WHERE rs.run_id = ?2 AND rs.spec_id = gs.spec_id)
                     ORDER BY gs.position LIMIT 1",
                )?
                .query_row(params![graph_id, run.id, from], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?,
        };
        Ok(next)
    };
    match find(from_position)? {
        Some(found) => Ok(Some(found)),
        None if from_position > 0 => find(0),
        None => Ok(None),
    }
}

/// Decides the next step; when it is a node, records the node run as running.
fn next_step(
    tx: &Connection,
    graph_id: &str,
    run_id: &str,
    guard_passed: Option<&str>,
    hint: &mut i64,
) -> Result<Next, EngineError> {
    let run = runs::get(tx, run_id)?;
    if run.status != "running" {
        return Ok(Next::Stop);
    }
    let graph = graphs::get_shallow(tx, graph_id)?;
    let current: Option<(String, i64, Option<String>)> = tx
        .prepare_cached("SELECT spec_id, next_node, group_label FROM run_specs WHERE run_id = ?1 AND status = 'running'")?
        .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let (spec_id, node_index, group) = match current {
        Some((spec_id, next_node, group)) => {
            (spec_id, usize::try_from(next_node).unwrap_or(0), group)
        }
        None => {
            let Some((spec_id, group, position)) = next_candidate_for(tx, graph_id, &run, *hint)?
            else {
                return Ok(Next::Settle);
            };
            let first = !tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM run_specs WHERE run_id = ?1)",
                [run_id],
                |r| r.get::<_, bool>(0),
            )?;
            let directed = run.start_node.is_some();
            let guarded =
                (first || run.queue_id.is_some()) && !directed && !graph.allow_dirty_start;
            if guarded && guard_passed != Some(spec_id.as_str()) {
                return Ok(Next::Guard { spec_id });
            }
            let start = match &run.start_node {
                Some(name) => match graph.nodes.iter().position(|n| &n.name == name) {
                    Some(index) => index,
                    None => {
                        let blocker = format!(
                            "the directed start names node `{name}`, which the graph no longer has; continue with another node"
                        );
                        pause(tx, graph_id, run_id, &blocker)?;
                        return Ok(Next::Stop);
                    }
                },
                None => 0,
            };
            tx.execute(
                "INSERT INTO run_specs (run_id, spec_id, ordinal, group_label, status, next_node, started_at)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(ordinal) + 1, 0) FROM run_specs WHERE run_id = ?1), ?3, 'running', ?4, ?5)",
                params![run_id, spec_id, group, start as i64, store::now()],
            )?;
            *hint = position;
            if directed {
                tx.execute("UPDATE runs SET start_node = NULL WHERE id = ?1", [run_id])?;
            }
            (spec_id, start, group)
        }
    };
    let Some(node) = graph.nodes.get(node_index) else {
        // The graph lost nodes since this spec started: the spec is done with the nodes it has.
        finish_spec(tx, run_id, &spec_id, "completed", None)?;
        return next_step(tx, graph_id, run_id, guard_passed, hint);
    };
    let (spec_name, spec_body): (String, String) = tx
        .query_row(
            "SELECT name, body FROM specs WHERE id = ?1",
            [&spec_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or_else(|| ("(deleted spec)".to_string(), String::new()));
    let resume_session = match (&run.queue_id, &group) {
        (Some(queue_id), Some(group)) => warm_session(tx, queue_id, group, run_id, &spec_id)?,
        _ => None,
    };
    let node_run_id = store::new_id();
    tx.execute(
        "INSERT INTO node_runs (id, run_id, graph_id, spec_id, node, node_index, mode, status, resume_session, started_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9)",
        params![
            node_run_id,
            run_id,
            graph_id,
            spec_id,
            node.name,
            node_index as i64,
            split_work_config(&node.config).map(|w| w.mode).unwrap_or_default(),
            resume_session,
            store::now()
        ],
    )?;
    Ok(Next::Node(Box::new(NodeStep {
        run: context(&graph, &run),
        node_run_id,
        spec_id,
        spec_name,
        spec_body,
        node_index,
        node_name: node.name.clone(),
        node_config: node.config.clone(),
        node_count: graph.nodes.len(),
        resume_session,
    })))
}

/// The harness session of the group's latest successfully completed sibling on this queue.
fn warm_session(
    tx: &Connection,
    queue_id: &str,
    group: &str,
    run_id: &str,
    spec_id: &str,
) -> Result<Option<String>, EngineError> {
    let session = tx
        .prepare_cached(
            "SELECT rs.harness_session FROM run_specs rs JOIN runs r ON r.id = rs.run_id
             WHERE r.queue_id = ?1 AND rs.group_label = ?2 AND rs.status = 'completed'
               AND rs.harness_session IS NOT NULL AND NOT (rs.run_id = ?3 AND rs.spec_id = ?4)
             ORDER BY rs.finished_at DESC LIMIT 1",
        )?
        .query_row(params![queue_id, group, run_id, spec_id], |r| r.get(0))
        .optional()?;
    Ok(session)
}

/// The specs this run completed so far.
fn completed_specs(tx: &Connection, run_id: &str) -> Result<Vec<CompletedSpec>, EngineError> {
    let specs = tx
        .prepare_cached(
            "SELECT rs.spec_id, COALESCE(s.name, rs.spec_id), rs.summary FROM run_specs rs LEFT JOIN specs s ON s.id = rs.spec_id
             WHERE rs.run_id = ?1 AND rs.status = 'completed' ORDER BY rs.ordinal",
        )?
        .query_map([run_id], |r| Ok(CompletedSpec { id: r.get(0)?, name: r.get(1)?, summary: r.get(2)? }))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(specs)
}

fn finish_spec(
    tx: &Connection,
    run_id: &str,
    spec_id: &str,
    status: &str,
    summary: Option<&str>,
) -> Result<(), EngineError> {
    tx.execute(
        "UPDATE run_specs SET status = ?3, summary = COALESCE(?4, summary), finished_at = ?5 WHERE run_id = ?1 AND spec_id = ?2",
        params![run_id, spec_id, status, summary, store::now()],
    )?;
    Ok(())
}

/// How a node run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Completed,
    Failed,
    Blocked,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Blocked => "blocked",
        }
    }
}

/// Calls the executor for one node and records what came of it. Returns the events to emit.
async fn run_node(engine: &Engine, step: NodeStep) -> Result<Vec<EngineEvent>, EngineError> {
    let NodeStep {
        run,
        node_run_id,
        spec_id,
        spec_name,
        spec_body,
        node_index,
        node_name,
        node_config,
        node_count,
        resume_session,
    } = step;
    let started = std::time::Instant::now();
    let result = match split_work_config(&node_config) {
        Ok(work) => {
            let markers: MarkerValues = [
                ("graph_name", run.graph_name.clone()),
                ("workdir", run.workdir.clone()),
                ("spec_name", spec_name.clone()),
                ("spec_id", spec_id.clone()),
                ("spec_body", spec_body),
                ("node", node_name.clone()),
            ]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            engine
                .plugins()
                .execute(CallRequest {
                    work,
                    markers,
                    supported_markers: NODE_MARKERS,
                    workdir: PathBuf::from(&run.workdir),
                    provenance: Provenance {
                        graph_id: run.graph_id.clone(),
                        graph_name: run.graph_name.clone(),
                        run_id: run.run_id.clone(),
                        event: "node".to_string(),
                        hook_index: None,
                        spec_id: Some(spec_id.clone()),
                    },
                    timeout: None,
                    resume_session,
                })
                .await
        }
        Err(message) => Err(PluginError::InvalidConfig(format!(
            "node `{node_name}`: {message}"
        ))),
    };
    let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);

    engine.store().transaction(|tx| {
        let mut events = Vec::new();
        // A reset or shutdown may have ended the run while the call was in flight.
        let still_running: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM node_runs WHERE id = ?1 AND status = 'running')",
            [&node_run_id],
            |r| r.get(0),
        )?;
        if !still_running {
            return Ok(events);
        }
        let (status, summary, reason, detail, session, plugin) = match &result {
            Ok(report) => {
                let (status, reason) = match &report.outcome.status {
                    Status::Completed => (Ended::Completed, None),
                    Status::Failed { reason } => (Ended::Failed, Some(reason.clone())),
                    Status::Blocked { blocker } => (Ended::Blocked, Some(blocker.clone())),
                };
                (
                    status,
                    report.outcome.summary.clone(),
                    reason,
                    Some(crate::text::tail(&report.outcome.detail, DETAIL_LIMIT)),
                    report.outcome.harness_session.clone(),
                    Some(report.plugin.clone()),
                )
            }
            Err(err) => (Ended::Failed, None, Some(err.to_string()), None, None, None),
        };
        tx.execute(
            "UPDATE node_runs SET status = ?2, summary = ?3, reason = ?4, detail = ?5, harness_session = ?6,
                    plugin = ?7, plugin_version = ?8, plugin_sha256 = ?9, finished_at = ?10, duration_ms = ?11
             WHERE id = ?1",
            params![
                node_run_id,
                status.as_str(),
                summary,
                reason,
                detail,
                session,
                plugin.as_ref().map(|p| p.name.clone()),
                plugin.as_ref().map(|p| p.version.clone()),
                plugin.as_ref().map(|p| p.sha256.clone()),
                store::now(),
                duration_ms
            ],
        )?;
        if let Some(session) = &session {
            tx.execute(
                "UPDATE run_specs SET harness_session = ?3 WHERE run_id = ?1 AND spec_id = ?2",
                params![run.run_id, spec_id, session],
            )?;
        }
        match status {
            Ended::Completed if node_index + 1 < node_count => {
                tx.execute(
                    "UPDATE run_specs SET next_node = ?3 WHERE run_id = ?1 AND spec_id = ?2",
                    params![run.run_id, spec_id, (node_index + 1) as i64],
                )?;
            }
            Ended::Completed => {
                finish_spec(tx, &run.run_id, &spec_id, "completed", summary.as_deref())?;
                super::specs::set_summary(tx, &spec_id, summary.as_deref())?;
                events.push(EngineEvent::SpecCompleted {
                    run: run.clone(),
                    spec: CompletedSpec { id: spec_id.clone(), name: spec_name.clone(), summary: summary.clone() },
                });
            }
            Ended::Blocked => {
                tx.execute(
                    "UPDATE run_specs SET status = 'blocked' WHERE run_id = ?1 AND spec_id = ?2",
                    params![run.run_id, spec_id],
                )?;
                let blocker = format!(
                    "node `{node_name}` is blocked on spec {} ({}): {}",
                    spec_name,
                    ids::short(&spec_id),
                    reason.clone().unwrap_or_default()
                );
                pause(tx, &run.graph_id, &run.run_id, &blocker)?;
                events.push(EngineEvent::RunBlocked { run: run.clone(), blocker, node: Some(node_name.clone()), spec_id: Some(spec_id.clone()) });
            }
            Ended::Failed => finish_spec(tx, &run.run_id, &spec_id, "failed", None)?,
        }
        Ok(events)
    })
    .map_err(EngineError::from)
}

/// Pauses the run and its graph with a blocker.
pub(super) fn pause(
    tx: &Connection,
    graph_id: &str,
    run_id: &str,
    blocker: &str,
) -> Result<(), EngineError> {
    tx.execute(
        "UPDATE runs SET status = 'paused', blocker = ?2 WHERE id = ?1",
        params![run_id, blocker],
    )?;
    graphs::set_status(tx, graph_id, GraphStatus::Paused, Some(blocker), None)
}

/// Pauses for a dirty tree, with the first paths and the ways out.
fn dirty_pause(
    tx: &Connection,
    graph_id: &str,
    run_id: &str,
    spec_id: &str,
    lines: &[String],
) -> Result<EngineEvent, EngineError> {
    let graph = graphs::get_by_id(tx, graph_id)?;
    let run = runs::get(tx, run_id)?;
    let spec_name: String = tx
        .query_row("SELECT name FROM specs WHERE id = ?1", [spec_id], |r| {
            r.get(0)
        })
        .optional()?
        .unwrap_or_else(|| spec_id.to_string());
    let mut blocker = format!(
        "dirty tree: {} has {} uncommitted change(s) before spec {} ({}):\n",
        run.workdir,
        lines.len(),
        spec_name,
        ids::short(spec_id)
    );
    for line in lines.iter().take(LISTED_PATHS) {
        blocker.push_str(&format!("  {line}\n"));
    }
    if lines.len() > LISTED_PATHS {
        blocker.push_str(&format!("  … and {} more\n", lines.len() - LISTED_PATHS));
    }
    let first_node = graph.nodes.first().map_or("NODE", |n| n.name.as_str());
    blocker.push_str(&format!(
        "ways out:\n  - start that spec anyway: canopy graph continue {g} --mode run_from_node --node {first_node}\n  - clean the tree by hand, then skip that spec: canopy graph continue {g} --mode skip_next_spec\n  - let runs start on a dirty tree: set allow_dirty_start on the graph (canopy graph edit), then canopy graph continue {g}",
        g = graph.name
    ));
    pause(tx, graph_id, run_id, &blocker)?;
    Ok(EngineEvent::RunBlocked {
        run: context(&graph, &run),
        blocker,
        node: None,
        spec_id: Some(spec_id.to_string()),
    })
}

/// Settles a drained run: completed when every spec it reached completed or was skipped,
/// failed naming the others.
fn settle(tx: &Connection, graph_id: &str, run_id: &str) -> Result<EngineEvent, EngineError> {
    let graph = graphs::get_by_id(tx, graph_id)?;
    let run = runs::get(tx, run_id)?;
    let specs = runs::specs_of(tx, run_id)?;
    let completed = completed_specs(tx, run_id)?;
    let skipped = specs.iter().filter(|s| s.status == "skipped").count();
    let bad: Vec<&runs::RunSpec> = specs
        .iter()
        .filter(|s| !matches!(s.status.as_str(), "completed" | "skipped"))
        .collect();
    let now = store::now();
    if bad.is_empty() {
        let summary = format!("{} spec(s) completed, {skipped} skipped", completed.len());
        tx.execute(
            "UPDATE runs SET status = 'completed', blocker = NULL, summary = ?2, finished_at = ?3 WHERE id = ?1",
            params![run_id, summary, now],
        )?;
        graphs::set_status(tx, graph_id, GraphStatus::Completed, None, None)?;
        return Ok(EngineEvent::RunCompleted {
            run: context(&graph, &run),
            completed,
        });
    }
    let names: Vec<String> = bad
        .iter()
        .map(|s| {
            format!(
                "{} ({}, {})",
                s.spec_name.as_deref().unwrap_or("(deleted spec)"),
                ids::short(&s.spec_id),
                s.status
            )
        })
        .collect();
    let blocker = format!(
        "{} spec(s) did not complete: {}",
        bad.len(),
        names.join(", ")
    );
    tx.execute(
        "UPDATE runs SET status = 'failed', blocker = ?2, summary = ?2, finished_at = ?3 WHERE id = ?1",
        params![run_id, blocker, now],
    )?;
    graphs::set_status(tx, graph_id, GraphStatus::Failed, Some(&blocker), None)?;
    let last_failed: Option<(String, String)> = tx
        .query_row(
            "SELECT node, spec_id FROM node_runs WHERE run_id = ?1 AND status IN ('failed', 'interrupted') ORDER BY started_at DESC LIMIT 1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let spec_id = match bad.as_slice() {
        [one] => Some(one.spec_id.clone()),
        _ => last_failed.as_ref().map(|(_, spec)| spec.clone()),
    };
    let failed_specs = bad
        .iter()
        .filter(|s| matches!(s.status.as_str(), "failed" | "interrupted"))
        .map(|s| s.spec_id.clone())
        .collect();
    Ok(EngineEvent::RunFailed {
        run: context(&graph, &run),
        blocker,
        node: last_failed.map(|(node, _)| node),
        spec_id,
        failed_specs,
    })
}
