//! `graph_control`: starting, resetting and continuing runs, and marking runs interrupted when
//! the daemon stops or died. Each function is one transaction's worth of work on `tx`.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Deserialize;

use super::events::{self, EngineEvent};
use super::graphs::{self, GraphStatus};
use super::{EngineError, driver, invalid, queues, runs};
use crate::store::{self, ids};

/// A `graph_control` request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    /// `run`, `reset` or `continue`.
    pub action: String,
    /// run: drain this queue instead of the bound specs.
    #[serde(default)]
    pub queue_id: Option<String>,
    /// run: use this workdir for this run.
    #[serde(default)]
    pub workdir: Option<String>,
    /// continue: `run_from_node` or `skip_next_spec`; none resumes.
    #[serde(default)]
    pub mode: Option<String>,
    /// continue with `run_from_node`: the node to start the next spec at.
    #[serde(default)]
    pub node: Option<String>,
}

pub(super) fn start_run(
    tx: &Connection,
    graph_id: &str,
    queue: Option<&str>,
    workdir: Option<&str>,
) -> Result<String, EngineError> {
    let graph = graphs::get_by_id(tx, graph_id)?;
    match graph.status {
        GraphStatus::Running => {
            return Err(EngineError::Conflict(format!(
                "graph `{}` is already running; wait for it or reset it",
                graph.name
            )));
        }
        GraphStatus::Paused => {
            return Err(EngineError::Conflict(format!(
                "graph `{}` is paused ({}); continue it or reset it before starting a new run",
                graph.name,
                graph.blocker.as_deref().unwrap_or("no blocker")
            )));
        }
        GraphStatus::Idle | GraphStatus::Completed | GraphStatus::Failed => {}
    }
    let queue_id = queue
        .map(|q| {
            queues::resolve(tx, q)
                .map_err(|err| EngineError::Invalid(format!("field `queue_id`: {err}")))
        })
        .transpose()?;
    if let Some(queue_id) = &queue_id {
        refuse_drained(tx, queue_id)?;
    }
    if queue_id.is_none() && graph.specs.is_empty() {
        return invalid(format!(
            "graph `{}` has no bound specs; bind specs (field `specs`) or run it with a queue (`queue_id`)",
            graph.name
        ));
    }
    let workdir = match workdir {
        Some(dir) => graphs::check_workdir("workdir", dir)?,
        None => graph.workdir.clone(),
    };
    let run_id = store::new_id();
    tx.execute(
        "INSERT INTO runs (id, graph_id, workdir, queue_id, status, started_at) VALUES (?1, ?2, ?3, ?4, 'running', ?5)",
        params![run_id, graph_id, workdir, queue_id, store::now()],
    )?;
    tx.execute(
        "UPDATE graphs SET status = 'running', blocker = NULL, current_run_id = ?2, updated_at = ?3 WHERE id = ?1",
        params![graph_id, run_id, store::now()],
    )?;
    Ok(run_id)
}

/// Refuses a run on a queue with nothing pending: it would settle at once with nothing done.
fn refuse_drained(tx: &Connection, queue_id: &str) -> Result<(), EngineError> {
    let members = queues::members(tx, queue_id)?;
    if members.iter().any(|m| m.pending) {
        return Ok(());
    }
    let name: String = tx.query_row("SELECT name FROM queues WHERE id = ?1", [queue_id], |r| {
        r.get(0)
    })?;
    // How to name the queue on the command line: by its name while that is unique.
    let holders: i64 = tx.query_row(
        "SELECT COUNT(*) FROM queues WHERE name = ?1",
        [&name],
        |r| r.get(0),
    )?;
    let arg = if holders == 1 {
        shlex::try_quote(&name).map_or_else(|_| ids::short(queue_id).to_string(), String::from)
    } else {
        ids::short(queue_id).to_string()
    };
    let why = if members.is_empty() {
        "it has no members".to_string()
    } else {
        format!(
            "each of its {} member(s) was completed or skipped by an earlier run",
            members.len()
        )
    };
    Err(EngineError::Conflict(format!(
        "nothing is pending in queue `{name}` ({}): {why}; no run was started. Add specs with `canopy queue add {arg} SPEC` (`canopy spec add` creates one first)",
        ids::short(queue_id)
    )))
}

fn interrupt_node_runs(
    tx: &Connection,
    run_id: &str,
    why: &str,
) -> Result<Option<(String, String)>, EngineError> {
    let running: Option<(String, String)> = tx
        .query_row(
            "SELECT node, spec_id FROM node_runs WHERE run_id = ?1 AND status = 'running' ORDER BY started_at DESC LIMIT 1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    tx.execute(
        "UPDATE node_runs SET status = 'interrupted', reason = ?2, finished_at = ?3 WHERE run_id = ?1 AND status = 'running'",
        params![run_id, why, store::now()],
    )?;
    tx.execute(
        "UPDATE run_specs SET status = 'interrupted', finished_at = ?2 WHERE run_id = ?1 AND status = 'running'",
        params![run_id, store::now()],
    )?;
    Ok(running)
}

pub(super) fn reset(tx: &Connection, graph_id: &str) -> Result<(), EngineError> {
    let graph = graphs::get_by_id(tx, graph_id)?;
    if let Some(run_id) = &graph.current_run_id {
        interrupt_node_runs(tx, run_id, "the graph was reset while this node ran")?;
        tx.execute(
            "UPDATE runs SET status = 'reset', finished_at = COALESCE(finished_at, ?2) WHERE id = ?1 AND status IN ('running', 'paused', 'interrupted')",
            params![run_id, store::now()],
        )?;
    }
    tx.execute(
        "UPDATE graphs SET status = 'idle', blocker = NULL, current_run_id = NULL, updated_at = ?2 WHERE id = ?1",
        params![graph_id, store::now()],
    )?;
    Ok(())
}

pub(super) fn continue_run(
    tx: &Connection,
    graph_id: &str,
    mode: Option<&str>,
    node: Option<&str>,
) -> Result<String, EngineError> {
    let graph = graphs::get_by_id(tx, graph_id)?;
    let Some(run_id) = graph.current_run_id.clone() else {
        return Err(EngineError::Conflict(format!(
            "graph `{}` has no run to continue; start one with `run`",
            graph.name
        )));
    };
    let run = runs::get(tx, &run_id)?;
    let resumable = matches!(run.status.as_str(), "paused" | "interrupted")
        || (run.status == "running" && !runs::node_in_progress(tx, &run_id)?);
    if !resumable {
        return Err(EngineError::Conflict(format!(
            "graph `{}` is {}; only a paused or interrupted run can be continued",
            graph.name, run.status
        )));
    }
    let blocked: Option<String> = tx
        .query_row(
            "SELECT spec_id FROM run_specs WHERE run_id = ?1 AND status = 'blocked'",
            [&run_id],
            |r| r.get(0),
        )
        .optional()?;
    match (mode, node) {
        (None, None) => {
            if let Some(spec) = &blocked {
                tx.execute(
                    "UPDATE run_specs SET status = 'running' WHERE run_id = ?1 AND spec_id = ?2",
                    params![run_id, spec],
                )?;
            }
        }
        (Some("run_from_node"), Some(node)) => {
            let Some(index) = graph.nodes.iter().position(|n| n.name == node) else {
                let names: Vec<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
                return invalid(format!(
                    "field `node`: graph `{}` has no node `{node}`; its nodes: {}",
                    graph.name,
                    names.join(", ")
                ));
            };
            // The spec the run stopped on -- blocked, or cut off by an interruption -- is the
            // one a directed start runs again; otherwise it applies to the next spec.
            let stopped_on = match &blocked {
                Some(spec) => Some(spec.clone()),
                None if run.status == "interrupted" => tx
                    .query_row(
                        "SELECT spec_id FROM run_specs WHERE run_id = ?1 AND status = 'interrupted' ORDER BY ordinal DESC LIMIT 1",
                        [&run_id],
                        |r| r.get(0),
                    )
                    .optional()?,
                None => None,
            };
            match &stopped_on {
                Some(spec) => {
                    tx.execute(
                        "UPDATE run_specs SET status = 'running', next_node = ?3, finished_at = NULL WHERE run_id = ?1 AND spec_id = ?2",
                        params![run_id, spec, index as i64],
                    )?;
                }
                None => {
                    tx.execute(
                        "UPDATE runs SET start_node = ?2 WHERE id = ?1",
                        params![run_id, node],
                    )?;
                }
            }
        }
        (Some("run_from_node"), None) => {
            return invalid("field `node` is required with mode `run_from_node`");
        }
        (Some("skip_next_spec"), None) => match &blocked {
            Some(spec) => {
                tx.execute(
                    "UPDATE run_specs SET status = 'skipped', finished_at = ?3 WHERE run_id = ?1 AND spec_id = ?2",
                    params![run_id, spec, store::now()],
                )?;
            }
            None => {
                let next = driver::next_candidate_for(tx, graph_id, &run, 0)?;
                let Some((spec, group, _)) = next else {
                    return invalid(format!("graph `{}` has no next spec to skip", graph.name));
                };
                let now = store::now();
                tx.execute(
                    "INSERT INTO run_specs (run_id, spec_id, ordinal, group_label, status, next_node, started_at, finished_at)
                     VALUES (?1, ?2, (SELECT COALESCE(MAX(ordinal) + 1, 0) FROM run_specs WHERE run_id = ?1), ?3, 'skipped', 0, ?4, ?4)",
                    params![run_id, spec, group, now],
                )?;
            }
        },
        (Some("skip_next_spec"), Some(_)) => {
            return invalid("field `node` belongs to mode `run_from_node`");
        }
        (Some(other), _) => {
            return invalid(format!(
                "field `mode` must be `run_from_node` or `skip_next_spec`, got `{other}`"
            ));
        }
        (None, Some(_)) => return invalid("field `node` needs mode `run_from_node`"),
    }
    tx.execute(
        "UPDATE runs SET status = 'running', blocker = NULL WHERE id = ?1",
        [&run_id],
    )?;
    graphs::set_status(tx, graph_id, GraphStatus::Running, None, None)?;
    Ok(run_id)
}

/// Marks every active run interrupted and pauses its graph; returns the pause events.
pub(super) fn interrupt_active(
    tx: &Connection,
    why: &str,
) -> Result<Vec<EngineEvent>, EngineError> {
    let active: Vec<String> = tx
        .prepare("SELECT id FROM runs WHERE status = 'running'")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut events = Vec::new();
    for run_id in active {
        let run = runs::get(tx, &run_id)?;
        let graph = graphs::get_by_id(tx, &run.graph_id)?;
        let stopped = interrupt_node_runs(tx, &run_id, why)?;
        let at = match &stopped {
            Some((node, spec)) => format!(
                " (node `{node}` on spec {} was interrupted and will not be re-run on its own)",
                ids::short(spec)
            ),
            None => String::new(),
        };
        let blocker = format!(
            "interrupted: {why}{at}; `canopy graph continue {g}` goes on with the next spec, `--mode run_from_node --node NODE` runs the interrupted spec again, `canopy graph reset {g}` abandons the run",
            g = graph.name
        );
        tx.execute(
            "UPDATE runs SET status = 'interrupted', blocker = ?2 WHERE id = ?1",
            params![run_id, blocker],
        )?;
        graphs::set_status(tx, &graph.id, GraphStatus::Paused, Some(&blocker), None)?;
        events.push(EngineEvent::RunBlocked {
            run: events::RunContext {
                graph_id: graph.id.clone(),
                graph_name: graph.name.clone(),
                run_id: run_id.clone(),
                workdir: run.workdir.clone(),
                queue_id: run.queue_id.clone(),
            },
            blocker,
            node: stopped.as_ref().map(|(node, _)| node.clone()),
            spec_id: stopped.map(|(_, spec)| spec),
        });
    }
    Ok(events)
}
