//! What `graph get` shows beyond the stored graph: the current run with its specs and latest
//! node runs, the progress of the run's source reconstructed from the run history, the hook runs,
//! and warnings.

use rusqlite::Connection;
use serde::Serialize;

use super::{EngineError, Graph, NodeRun, Run, RunSpec, queues};
use crate::hooks::HookEvent;
use crate::hooks::runs::HookRun;

/// A graph with what `graph get` adds: the current run, progress, warnings.
#[derive(Debug, Clone, Serialize)]
pub struct GraphView {
    #[serde(flatten)]
    pub graph: Graph,
    /// Set when the graph says running but nothing runs and nothing is scheduled.
    pub consistency_warning: Option<String>,
    pub current_run: Option<RunView>,
    /// Each spec of the current run's source (its queue's members, or the bound specs) and
    /// what the run did with it, reconstructed from the run history.
    pub progress: Vec<Progress>,
    /// The hook runs of the current run, newest first.
    pub completion_hook_runs: Vec<HookRun>,
    /// After an update that changed hooks while a run is active: the events of that run still
    /// to come, which the new hooks will serve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_events: Option<Vec<String>>,
}

/// The events an active run can still fire.
pub(super) fn remaining_events(view: &GraphView, _run: &RunView) -> Vec<String> {
    let mut events = Vec::new();
    if view
        .progress
        .iter()
        .any(|p| matches!(p.result.as_str(), "not_reached" | "running" | "blocked"))
    {
        events.push(HookEvent::OnSpecCompleted.as_str().to_string());
    }
    for event in [
        HookEvent::OnBlocked,
        HookEvent::OnCompleted,
        HookEvent::OnFailed,
    ] {
        events.push(event.as_str().to_string());
    }
    events
}

/// Node runs `graph get` shows of the current run (the latest ones; `GET /api/runs/{id}` has all).
pub(super) const RECENT_NODE_RUNS: usize = 20;

/// Hook runs `graph get` shows of the current run.
pub(super) const RECENT_HOOK_RUNS: usize = 50;

/// A run with its specs and node runs.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    #[serde(flatten)]
    pub run: Run,
    pub specs: Vec<RunSpec>,
    pub node_runs: Vec<NodeRun>,
}

/// One spec of a run's source and what the run did with it.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    pub position: usize,
    pub spec_id: String,
    pub spec_name: String,
    pub group: Option<String>,
    /// The spec's status in this run; for a queue member another run on the queue completed or
    /// skipped (an earlier one, or another graph's), that (see `done_in_run`); else
    /// `not_reached`.
    pub result: String,
    pub summary: Option<String>,
    /// Why a failed, blocked or interrupted spec stopped, and at which node.
    pub reason: Option<String>,
    pub reason_node: Option<String>,
    /// The other run on the queue that completed or skipped this member, so this run did not
    /// take it.
    pub done_in_run: Option<String>,
}

/// Each spec of the run's source and what this run did with it.
pub(super) fn progress(
    conn: &Connection,
    graph: &Graph,
    run: &RunView,
) -> Result<Vec<Progress>, EngineError> {
    // Each source spec, with how an earlier run on the queue settled it (status, run).
    type Source = (String, String, Option<String>, Option<(String, String)>);
    let source: Vec<Source> = match &run.run.queue_id {
        Some(queue_id) => queues::members(conn, queue_id)?
            .into_iter()
            .map(|m| {
                let earlier = m
                    .done_in_run
                    .filter(|r| *r != run.run.id)
                    .map(|r| (m.status, r));
                (m.spec_id, m.spec_name, m.group, earlier)
            })
            .collect(),
        None => graph
            .specs
            .iter()
            .map(|s| (s.id.clone(), s.name.clone(), None, None))
            .collect(),
    };
    let mut seen: Vec<Progress> = source
        .into_iter()
        .enumerate()
        .map(|(index, (spec_id, spec_name, group, earlier))| {
            let reached = run.specs.iter().find(|s| s.spec_id == spec_id);
            let (result, done_in_run) = match (reached, earlier) {
                (Some(s), _) => (s.status.clone(), None),
                (None, Some((status, run))) => (status, Some(run)),
                (None, None) => ("not_reached".to_string(), None),
            };
            Progress {
                position: index + 1,
                result,
                summary: reached.and_then(|s| s.summary.clone()),
                reason: reached.and_then(|s| s.reason.clone()),
                reason_node: reached.and_then(|s| s.reason_node.clone()),
                done_in_run,
                spec_id,
                spec_name,
                group,
            }
        })
        .collect();
    // Specs the run reached that have since left the source still show.
    for reached in &run.specs {
        if !seen.iter().any(|p| p.spec_id == reached.spec_id) {
            seen.push(Progress {
                position: seen.len() + 1,
                spec_id: reached.spec_id.clone(),
                spec_name: reached
                    .spec_name
                    .clone()
                    .unwrap_or_else(|| "(deleted spec)".to_string()),
                group: reached.group.clone(),
                result: reached.status.clone(),
                summary: reached.summary.clone(),
                reason: reached.reason.clone(),
                reason_node: reached.reason_node.clone(),
                done_in_run: None,
            });
        }
    }
    Ok(seen)
}
