//! `graph_control`: starting, resetting and continuing runs, and marking runs interrupted when
//! the daemon stops or died. Each function is one transaction's worth of work on `tx`.

use super::events;
use super::graphs::{self, GraphStatus};
use super::runs::{RunStatus, SpecResult};
use super::{EngineError, invalid, queues};
use canopy_model::events::graph::{GraphRef, RunCancelled, RunRef};
use canopy_model::events::{Cause, Event};
use canopy_store::{Tx, ids};

pub use canopy_model::requests::graphs::ControlRequest;

pub(super) fn start_run(
    tx: &Tx<'_>,
    graph_id: &str,
    queue: Option<&str>,
    workdir: Option<&str>,
) -> Result<String, EngineError> {
    let graph = tx.graph(graph_id)?;
    refuse_other_node(tx, &graph)?;
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
        GraphStatus::Idle
        | GraphStatus::Completed
        | GraphStatus::Failed
        | GraphStatus::Cancelled
        | GraphStatus::Unknown => {}
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
    let run_id = tx.insert_run(graph_id, &workdir, queue_id.as_deref())?;
    tx.set_graph_status(graph_id, GraphStatus::Running, None, Some(&run_id))?;
    Ok(run_id)
}

/// Refuses a run on a queue with nothing pending: it would settle at once with nothing done.
fn refuse_drained(tx: &Tx<'_>, queue_id: &str) -> Result<(), EngineError> {
    let queue = tx.queue(queue_id)?;
    let members = queue.members;
    if members.iter().any(|m| m.pending) {
        return Ok(());
    }
    let name = queue.name;
    // How to name the queue on the command line: by its name (names are unique).
    let arg = if tx.queue_named(&name)?.as_deref() == Some(queue_id) {
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

pub(super) fn reset(tx: &Tx<'_>, graph_id: &str) -> Result<(), EngineError> {
    let graph = tx.graph_shallow(graph_id)?;
    if let Some(run_id) = &graph.current_run_id {
        tx.interrupt_node_runs(run_id, "the graph was reset while this node ran")?;
        let run = tx.run(run_id)?;
        if run.status.is_active() {
            tx.finish_run(run_id, RunStatus::Reset, run.blocker.as_deref(), None)?;
        }
    }
    // No driver may go on with the abandoned run.
    tx.take_driver_lease(graph_id)?;
    tx.clear_graph_run(graph_id)?;
    Ok(())
}

/// Cancels the graph's run in flight (running, paused or interrupted): its running node run,
/// its spec in flight, the run and the graph become `cancelled`, and no driver may go on with
/// it. The graph's blocker says what was stopped. The caller stops the driver, whose
/// processes are killed as it ends. Returns the `graph.run.cancelled` event.
pub(super) fn cancel(tx: &Tx<'_>, graph_id: &str, by: &str) -> Result<Event, EngineError> {
    let graph = tx.graph_shallow(graph_id)?;
    let run = match &graph.current_run_id {
        Some(run_id) => Some(tx.run(run_id)?),
        None => None,
    };
    let Some(run) = run.filter(|run| run.status.is_active()) else {
        return Err(EngineError::Conflict(format!(
            "graph `{}` has no run in flight to cancel; it is {}",
            graph.name, graph.status
        )));
    };
    let was = run.status;
    let cancelled = tx.cancel_node_runs(&run.id, &format!("cancelled by {by}"))?;
    let (stopped, specs) = (cancelled.node, cancelled.specs);
    let spec_name = |id: &str| {
        tx.spec(id)
            .map(|spec| format!("spec `{}`", spec.name))
            .unwrap_or_else(|_| format!("spec {}", ids::short(id)))
    };
    let what = match (&stopped, specs.first()) {
        (Some((node, spec)), _) => format!(
            "node `{node}` on {} was stopped and its processes killed",
            spec_name(spec)
        ),
        (None, Some(spec)) => format!(
            "the run was {was} on {}; no node was running",
            spec_name(spec)
        ),
        (None, None) => format!("the run was {was}; no node was running"),
    };
    let reason = format!("cancelled by {by}: {what}");
    tx.finish_run(&run.id, RunStatus::Cancelled, Some(&reason), None)?;
    tx.set_graph_status(graph_id, GraphStatus::Cancelled, Some(&reason), None)?;
    tx.take_driver_lease(graph_id)?;
    Ok(Event::new(&RunCancelled {
        run: RunRef {
            graph: GraphRef {
                graph_id: graph.id.clone(),
                graph_name: graph.name.clone(),
                workdir: run.workdir.clone(),
            },
            run_id: run.id.clone(),
            queue_id: run.queue_id.clone(),
        },
        by: by.to_string(),
        node: stopped.as_ref().map(|(node, _)| node.clone()),
        spec_id: stopped
            .map(|(_, spec)| spec)
            .or_else(|| specs.into_iter().next()),
    }))
}

pub(super) fn continue_run(
    tx: &Tx<'_>,
    graph_id: &str,
    mode: Option<&str>,
    node: Option<&str>,
) -> Result<String, EngineError> {
    let graph = tx.graph(graph_id)?;
    refuse_other_node(tx, &graph)?;
    let Some(run_id) = graph.current_run_id.clone() else {
        return Err(EngineError::Conflict(format!(
            "graph `{}` has no run to continue; start one with `run`",
            graph.name
        )));
    };
    let run = tx.run(&run_id)?;
    let resumable = match run.status {
        RunStatus::Paused | RunStatus::Interrupted => true,
        RunStatus::Running => !tx.node_in_progress(&run_id)?,
        RunStatus::Completed
        | RunStatus::Failed
        | RunStatus::Reset
        | RunStatus::Cancelled
        | RunStatus::Unknown => false,
    };
    if !resumable {
        return Err(EngineError::Conflict(format!(
            "graph `{}` is {}; only a paused or interrupted run can be continued",
            graph.name, run.status
        )));
    }
    let blocked = tx.blocked_spec(&run_id)?;
    match (mode, node) {
        (None, None) => {
            if let Some(spec) = &blocked {
                tx.set_run_spec_status(&run_id, spec, SpecResult::Running, None)?;
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
                None if run.status == RunStatus::Interrupted => {
                    tx.last_interrupted_spec(&run_id)?
                }
                None => None,
            };
            match &stopped_on {
                Some(spec) => tx.restart_run_spec(&run_id, spec, index)?,
                None => tx.set_run_start_node(&run_id, Some(node))?,
            }
        }
        (Some("run_from_node"), None) => {
            return invalid("field `node` is required with mode `run_from_node`");
        }
        (Some("skip_next_spec"), None) => match &blocked {
            Some(spec) => tx.set_run_spec_status(&run_id, spec, SpecResult::Skipped, None)?,
            None => {
                let Some(next) = tx.next_candidate(graph_id, &run, 0)? else {
                    return invalid(format!("graph `{}` has no next spec to skip", graph.name));
                };
                tx.insert_run_spec(
                    &run_id,
                    &next.spec_id,
                    next.group.as_deref(),
                    SpecResult::Skipped,
                    0,
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
    tx.set_run_status(&run_id, RunStatus::Running, None)?;
    tx.set_graph_status(graph_id, GraphStatus::Running, None, None)?;
    Ok(run_id)
}

/// Marks every active run this node drives interrupted and pauses its graph; returns the pause
/// events, each with its run's cause.
pub(super) fn interrupt_active(tx: &Tx<'_>, why: &str) -> Result<Vec<(Event, Cause)>, EngineError> {
    tx.running_run_ids()?
        .iter()
        .map(|run_id| interrupt_run(tx, run_id, why))
        .collect()
}

/// Marks one run interrupted (with its running node run) and pauses its graph with a blocker
/// that says why and the ways on; no driver may go on with it. Returns the pause event, with
/// the run's cause.
pub(super) fn interrupt_run(
    tx: &Tx<'_>,
    run_id: &str,
    why: &str,
) -> Result<(Event, Cause), EngineError> {
    let run = tx.run(run_id)?;
    let graph = tx.graph_shallow(&run.graph_id)?;
    let stopped = tx.interrupt_node_runs(run_id, why)?;
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
    tx.set_run_status(run_id, RunStatus::Interrupted, Some(&blocker))?;
    tx.set_graph_status(&graph.id, GraphStatus::Paused, Some(&blocker), None)?;
    tx.take_driver_lease(&graph.id)?;
    let context = events::RunContext {
        graph_id: graph.id.clone(),
        graph_name: graph.name.clone(),
        run_id: run_id.to_string(),
        workdir: run.workdir.clone(),
        queue_id: run.queue_id.clone(),
        cause: run.cause(),
    };
    let event = context.blocked(
        blocker,
        stopped.as_ref().map(|(node, _)| node.clone()),
        stopped.map(|(_, spec)| spec),
    );
    Ok((event, context.cause))
}

/// A graph that names its node (`node`: where its workdir lives) runs there only: asked of
/// another daemon, the start is refused naming that node and where its API listens.
pub(super) fn refuse_other_node(tx: &Tx<'_>, graph: &graphs::Graph) -> Result<(), EngineError> {
    let Some(node) = graph.node.as_deref() else {
        return Ok(());
    };
    if node == tx.node() {
        return Ok(());
    }
    let known = tx.nodes()?.into_iter().find(|n| n.name == node);
    let reach = match known.and_then(|n| n.api_url) {
        Some(url) => format!("ask that daemon (its API is {url})"),
        None => "no daemon of that name has used this database yet: start one there".to_string(),
    };
    Err(EngineError::Conflict(format!(
        "graph `{}` runs on node `{node}` (its field `node`: its workdir is there), not on this daemon (`{}`); {reach}, or clear the graph's `node` (\"\") to let any daemon run it",
        graph.name,
        tx.node()
    )))
}
