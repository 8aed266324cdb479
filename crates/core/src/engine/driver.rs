//! The driver: one task per running graph, taking the run's specs through the graph's nodes.
//!
//! Each step is: one transaction that decides what runs next and records the node run as
//! running; the executor call (no lock held); one transaction that records the outcome and moves
//! the spec on. Between specs (at the start of every run, and between the specs of a queue run)
//! the dirty-tree guard checks the workdir; a dirty tree pauses the graph.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::events::RunContext;
use super::git::{self, LISTED_PATHS, TreeState};
use super::graphs::{Graph, GraphStatus};
use super::runs::{NodeRunStatus, Run, RunStatus, SpecResult};
use super::{Engine, EngineError};
use crate::bus::Recorded;
use crate::hooks::HookMap;
use crate::hooks::decide::{DecisionRecord, GraphScope, Question, Verdict};
use crate::runner::{self, Job, Kind, Place};
use canopy_executors::plugins::{Ending, Workdir, split_work_config};
use canopy_model::events::graph::CompletedSpec;
use canopy_model::events::{self as taxonomy, Cause, Event};
use canopy_model::markers::{MarkerValues, NODE_MARKERS};
use canopy_model::time::Timestamp;
use canopy_model::work::Provenance;
use canopy_store::runs::{NewNodeRun, NodeRunEnd};
use canopy_store::{Rd, Tx, ids};

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
    /// The graph's hooks map, when it has sync hooks on `node.pre_dispatch`.
    dispatch_hooks: Option<Arc<HookMap>>,
    /// The graph's hooks map, when it has sync hooks on what an agent's launch asks
    /// (`tool.pre_call`, `agent.pre_complete`).
    launch_hooks: Option<Arc<HookMap>>,
}

/// The run a driver works on, and the lease it holds on it.
#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub graph_id: String,
    pub run_id: String,
    /// The graph's driver generation this driver was started with; once the graph's moves
    /// on (a newer driver, a reset, a stop), this driver changes nothing more.
    pub generation: i64,
}

impl Lease {
    /// True while this driver still holds the graph's lease.
    fn held(&self, rd: &Rd<'_>) -> Result<bool, EngineError> {
        Ok(rd.graph_shallow(&self.graph_id)?.driver_lease == self.generation)
    }
}

/// The run's workdir, resolved for its first node and reused by every node after it.
#[derive(Default)]
struct RunPlace {
    resolved: Option<(String, Workdir)>,
}

impl RunPlace {
    /// Where a node of the run with this workdir runs.
    fn of(&mut self, workdir: &str) -> Place {
        match &self.resolved {
            Some((path, resolved)) if path == workdir => Place::Resolved(resolved.clone()),
            _ => match Workdir::resolve(Path::new(workdir)) {
                Ok(resolved) => {
                    self.resolved = Some((workdir.to_string(), resolved.clone()));
                    Place::Resolved(resolved)
                }
                // The runner resolves it again and the node fails naming it.
                Err(_) => Place::Path(PathBuf::from(workdir)),
            },
        }
    }
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
    /// The run paused on an agent's usage limit; it goes on by itself at this time (RFC 3339).
    WaitForReset(Timestamp),
}

/// Runs the graph's current run until it pauses, settles, or is stopped.
pub(super) async fn drive(engine: Engine, lease: Lease) {
    if let Err(err) = drive_run(&engine, &lease).await {
        let message = format!("the engine stopped this run: {err}");
        tracing::error!(graph = %lease.graph_id, run = %lease.run_id, error = %message, "driver failed");
        let held = lease.clone();
        let paused = engine
            .store()
            .write(move |tx| -> Result<(), EngineError> {
                if held.held(tx)? {
                    pause(tx, &held.graph_id, &held.run_id, &message)?;
                }
                Ok(())
            })
            .await;
        if let Err(err) = paused {
            tracing::error!(error = %err, "cannot record the driver failure");
        }
    }
    engine.driver_finished(&lease.graph_id);
}

async fn drive_run(engine: &Engine, lease: &Lease) -> Result<(), EngineError> {
    let mut hint = 0;
    let mut place = RunPlace::default();
    let mut next = decide(engine, lease, None, hint).await?;
    loop {
        match next {
            (Next::Stop, _) => return Ok(()),
            (Next::WaitForReset(resumes_at), _) => {
                engine.wake_at(&lease.graph_id, &lease.run_id, resumes_at);
                return Ok(());
            }
            (Next::Settle, _) => {
                let held = lease.clone();
                let bus = engine.bus().clone();
                let recorded = engine
                    .store()
                    .write(move |tx| {
                        if !held.held(tx)? {
                            return Ok(Recorded::default());
                        }
                        let (event, cause) = settle(tx, &held.graph_id, &held.run_id)?;
                        Ok::<_, EngineError>(bus.record(tx, [event], &cause)?)
                    })
                    .await?;
                engine.publish(recorded).await;
                return Ok(());
            }
            (Next::Guard { spec_id }, at) => {
                hint = at;
                let run_id = lease.run_id.clone();
                let run = engine.store().read(move |rd| rd.run(&run_id)).await?;
                match git::tree_state(&PathBuf::from(&run.workdir)).await {
                    TreeState::Clean => {}
                    TreeState::NotARepo(why) => {
                        tracing::debug!(workdir = %run.workdir, %why, "not a git work tree; the dirty-tree guard does not apply");
                    }
                    TreeState::Dirty(lines) => {
                        let held = lease.clone();
                        let bus = engine.bus().clone();
                        let recorded = engine
                            .store()
                            .write(move |tx| {
                                if !held.held(tx)? {
                                    return Ok(Recorded::default());
                                }
                                let (event, cause) = dirty_pause(
                                    tx,
                                    &held.graph_id,
                                    &held.run_id,
                                    &spec_id,
                                    &lines,
                                )?;
                                Ok::<_, EngineError>(bus.record(tx, [event], &cause)?)
                            })
                            .await?;
                        engine.publish(recorded).await;
                        return Ok(());
                    }
                }
                next = decide(engine, lease, Some(spec_id), hint).await?;
            }
            (Next::Node(step), at) => {
                let (recorded, following, at) =
                    run_node(engine, lease, &mut place, *step, at).await?;
                hint = at;
                engine.publish(recorded).await;
                next = (following, hint);
            }
        }
    }
}

/// One write that decides the next step (see [`next_step`]); returns it with the new hint.
async fn decide(
    engine: &Engine,
    lease: &Lease,
    guard_passed: Option<String>,
    hint: i64,
) -> Result<(Next, i64), EngineError> {
    let lease = lease.clone();
    let bus = engine.bus().clone();
    let (recorded, next, hint) = engine
        .store()
        .write_watched(move |tx| {
            let mut hint = hint;
            let next = next_step(tx, &lease, guard_passed.as_deref(), &mut hint)?;
            let recorded = record_start(&bus, tx, &next)?;
            Ok::<_, EngineError>((recorded, next, hint))
        })
        .await?;
    engine.publish(recorded).await;
    Ok((next, hint))
}

/// Records `node.started` when the next step is a node, in the write that recorded its node
/// run running.
fn record_start(bus: &crate::bus::Bus, tx: &Tx<'_>, next: &Next) -> Result<Recorded, EngineError> {
    let Next::Node(step) = next else {
        return Ok(Recorded::default());
    };
    let mode = split_work_config(&step.node_config)
        .map(|w| w.mode)
        .unwrap_or_default();
    let started = taxonomy::node::NodeStarted {
        run: step.run.run_ref(),
        spec_id: step.spec_id.clone(),
        spec_name: step.spec_name.clone(),
        node: step.node_name.clone(),
        node_run_id: step.node_run_id.clone(),
        mode,
    };
    Ok(bus.record(tx, [Event::new(&started)], &step.run.cause)?)
}

fn context(graph: &Graph, run: &Run) -> RunContext {
    RunContext {
        graph_id: graph.id.clone(),
        graph_name: graph.name.clone(),
        run_id: run.id.clone(),
        workdir: run.workdir.clone(),
        queue_id: run.queue_id.clone(),
        cause: run.cause(),
    }
}

/// Decides the next step; when it is a node, records the node run as running.
fn next_step(
    tx: &Tx<'_>,
    lease: &Lease,
    guard_passed: Option<&str>,
    hint: &mut i64,
) -> Result<Next, EngineError> {
    let (graph_id, run_id) = (lease.graph_id.as_str(), lease.run_id.as_str());
    let graph = tx.graph_shallow(graph_id)?;
    if graph.driver_lease != lease.generation {
        return Ok(Next::Stop);
    }
    let run = tx.run(run_id)?;
    if run.status != RunStatus::Running {
        return Ok(Next::Stop);
    }
    // Whether the spec was under way before this step (only such a spec can go on after a
    // usage limit's wait).
    let under_way = tx.spec_in_progress(run_id)?;
    let continued = under_way.is_some();
    let (spec_id, node_index, group) = match under_way {
        Some(on) => (
            on.spec_id,
            usize::try_from(on.next_node).unwrap_or(0),
            on.group,
        ),
        None => {
            let Some(next) = tx.next_candidate(graph_id, &run, *hint)? else {
                return Ok(Next::Settle);
            };
            let first = !tx.run_reached_any(run_id)?;
            let directed = run.start_node.is_some();
            let guarded =
                (first || run.queue_id.is_some()) && !directed && !graph.allow_dirty_start;
            if guarded && guard_passed != Some(next.spec_id.as_str()) {
                return Ok(Next::Guard {
                    spec_id: next.spec_id,
                });
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
            tx.insert_run_spec(
                run_id,
                &next.spec_id,
                next.group.as_deref(),
                SpecResult::Running,
                start,
            )?;
            *hint = next.position;
            if directed {
                tx.set_run_start_node(run_id, None)?;
            }
            (next.spec_id, start, next.group)
        }
    };
    let Some(node) = graph.nodes.get(node_index) else {
        // The graph lost nodes since this spec started: the spec is done with the nodes it has.
        tx.set_run_spec_status(run_id, &spec_id, SpecResult::Completed, None)?;
        return next_step(tx, lease, guard_passed, hint);
    };
    let (spec_name, spec_body) = tx
        .spec_text(&spec_id)?
        .unwrap_or_else(|| ("(deleted spec)".to_string(), String::new()));
    // A node that waited for a usage limit goes on in the session it had; otherwise a queue
    // group's specs share the warm session of the one before.
    let after_limit = match continued {
        true => tx.limit_blocked_session(run_id, &spec_id, node_index)?,
        false => None,
    };
    let resume_session = match after_limit {
        Some(session) => Some(session),
        None => match (&run.queue_id, &group) {
            (Some(queue_id), Some(group)) => tx.warm_session(queue_id, group, run_id, &spec_id)?,
            _ => None,
        },
    };
    let mode = split_work_config(&node.config)
        .map(|w| w.mode)
        .unwrap_or_default();
    let node_run_id = tx.insert_node_run(&NewNodeRun {
        run_id,
        graph_id,
        spec_id: &spec_id,
        node: &node.name,
        node_index,
        mode: &mode,
        resume_session: resume_session.as_deref(),
    })?;
    let (node_name, node_config) = (node.name.clone(), node.config.clone());
    let run = context(&graph, &run);
    let node_count = graph.nodes.len();
    // The graph was read for this step: its hooks move over, uncopied.
    let decides_dispatch = graph.hooks.contains_key(PRE_DISPATCH);
    let decides_in_launch = LAUNCH_QUESTIONS
        .iter()
        .any(|event| graph.hooks.contains_key(*event));
    let hooks = (decides_dispatch || decides_in_launch).then(|| Arc::new(graph.hooks));
    Ok(Next::Node(Box::new(NodeStep {
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
        dispatch_hooks: hooks.clone().filter(|_| decides_dispatch),
        launch_hooks: hooks.filter(|_| decides_in_launch),
    })))
}

/// The question a node's dispatch asks of the sync hooks.
const PRE_DISPATCH: &str = "node.pre_dispatch";

/// The questions an agent node's launch asks of the sync hooks (see
/// [`canopy_executors::plugins::CallRequest::graph_hooks`]).
const LAUNCH_QUESTIONS: [&str; 2] = ["tool.pre_call", "agent.pre_complete"];

/// What the sync hooks said about a node's dispatch.
enum Dispatched {
    /// It runs as configured.
    AsConfigured,
    /// It runs with these fields of its config replaced (checked by the event's patch type).
    Patched(serde_json::Map<String, Value>),
    /// It does not run; the spec is blocked with this.
    Denied(String),
}

/// Asks the sync hooks whether a node runs ([`crate::hooks::decide`]).
async fn dispatch_decision(
    engine: &Engine,
    step: &NodeStep,
    mode: &str,
) -> (Dispatched, Option<DecisionRecord>) {
    if step.dispatch_hooks.is_none() && !engine.bus().asks(PRE_DISPATCH) {
        return (Dispatched::AsConfigured, None);
    }
    let text = |field: &str| {
        step.node_config
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let question = taxonomy::node::NodePreDispatch {
        run: step.run.run_ref(),
        spec_id: step.spec_id.clone(),
        spec_name: step.spec_name.clone(),
        node: step.node_name.clone(),
        mode: mode.to_string(),
        prompt: text("prompt"),
        command: text("command"),
        model: text("model"),
    };
    let mut question = Question::of(&question, step.run.cause.clone()).about_spec(&step.spec_id);
    if let Some(hooks) = &step.dispatch_hooks {
        question = question.in_graph(GraphScope {
            graph_id: step.run.graph_id.clone(),
            graph_name: step.run.graph_name.clone(),
            run_id: Some(step.run.run_id.clone()),
            workdir: step.run.workdir.clone(),
            hooks: hooks.clone(),
        });
    }
    // Its hook runs are recorded in the write of the node run's end.
    let mut decision = engine.bus().decide_unrecorded(question).await;
    let record = decision.record.take();
    if let Verdict::Deny { hook, reason } = &decision.verdict {
        let blocker = format!("sync hook `{hook}` denied the dispatch: {reason}");
        return (Dispatched::Denied(blocker), record);
    }
    if !decision.patched() {
        return (Dispatched::AsConfigured, record);
    }
    (Dispatched::Patched(decision.patch), record)
}

/// The specs this run completed so far.
fn completed_specs(rd: &Rd<'_>, run_id: &str) -> Result<Vec<CompletedSpec>, EngineError> {
    Ok(rd
        .run_specs(run_id)?
        .into_iter()
        .filter(|s| s.status == SpecResult::Completed)
        .map(|s| CompletedSpec {
            name: s.spec_name.unwrap_or_else(|| s.spec_id.clone()),
            id: s.spec_id,
            summary: s.summary,
        })
        .collect())
}

/// Calls the executor for one node and records what came of it, with its events (nothing when
/// the run was taken from this driver meanwhile: a reset, a stop).
///
/// The write that records the outcome also decides the driver's next step (and records the
/// next node run as running), so a spec moving on costs one transaction, not two.
async fn run_node(
    engine: &Engine,
    lease: &Lease,
    place: &mut RunPlace,
    step: NodeStep,
    hint: i64,
) -> Result<(Recorded, Next, i64), EngineError> {
    // A planned stop has closed admission: the node run is not started. It stays recorded
    // running, and the stop records it (and its run) interrupted; a continue runs it again.
    let Some(_admitted) = engine.bus().drain().admit() else {
        tracing::info!(graph = %step.run.graph_name, node = %step.node_name, "the daemon is stopping; the node run is not started");
        return Ok((Recorded::default(), Next::Stop, hint));
    };
    let mode = split_work_config(&step.node_config)
        .map(|w| w.mode)
        .unwrap_or_default();
    // The sync hooks on `node.pre_dispatch` decide whether it runs, and may patch it.
    let (decided, decision) = dispatch_decision(engine, &step, &mode).await;
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
        dispatch_hooks: _,
        launch_hooks,
    } = step;
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
    let provenance = Provenance {
        graph_id: run.graph_id.clone(),
        graph_name: run.graph_name.clone(),
        run_id: run.run_id.clone(),
        event: "node".to_string(),
        hook_index: None,
        spec_id: Some(spec_id.clone()),
        // The runner says what kind of work it is.
        ..Default::default()
    };
    let work = || {
        split_work_config(&node_config).map_err(|message| format!("node `{node_name}`: {message}"))
    };
    let work = match decided {
        Dispatched::AsConfigured => Ok(work()),
        Dispatched::Patched(fields) => Ok(work().map(|work| work.patched(&fields))),
        Dispatched::Denied(blocker) => Err(blocker),
    };
    let (ending, result, duration_ms) = match work {
        // Denied: the node does not run, and the spec is blocked with the reason.
        Err(blocker) => (Ending::Blocked(blocker), None, 0),
        Ok(work) => {
            let job = Job {
                markers,
                supported_markers: std::borrow::Cow::Borrowed(NODE_MARKERS),
                resume_session,
                graph_hooks: launch_hooks,
                ..Job::new(
                    Kind::Node,
                    work,
                    place.of(&run.workdir),
                    provenance,
                    run.cause.clone(),
                )
            };
            let ran = runner::run(engine.plugins(), job).await;
            (ran.ending, ran.result.ok(), ran.duration_ms)
        }
    };
    let mut limit = None;
    let (status, reason) = match ending {
        Ending::Interrupted(_) => {
            // A planned stop forced the node: what it reports is not its outcome. The node run
            // stays running; the stop records it and its run interrupted.
            tracing::info!(graph = %run.graph_name, node = %node_name, "the node run was forced by a planned stop");
            let recorded = match decision {
                Some(record) => {
                    let bus = engine.bus().clone();
                    engine
                        .store()
                        .write(move |tx| bus.record_decision(tx, record))
                        .await?
                }
                None => Recorded::default(),
            };
            return Ok((recorded, Next::Stop, hint));
        }
        Ending::Completed => (NodeRunStatus::Completed, None),
        // A node past its deadline failed: the reason says it timed out.
        Ending::Failed(reason) | Ending::TimedOut(reason) => (NodeRunStatus::Failed, Some(reason)),
        Ending::Blocked(blocker) => (NodeRunStatus::Blocked, Some(blocker)),
        Ending::LimitBlocked(hit) => {
            let reason = format!(
                "usage limit reached (resumes by itself at {}): {}",
                hit.resets_at
                    .round(jiff::Unit::Second)
                    .unwrap_or(hit.resets_at),
                hit.line
            );
            limit = Some(hit);
            (NodeRunStatus::LimitBlocked, Some(reason))
        }
    };
    let (summary, detail, session, plugin) = match &result {
        Some(report) => (
            report.outcome.summary.clone(),
            Some(canopy_model::text::tail(
                &report.outcome.detail,
                DETAIL_LIMIT,
            )),
            report.outcome.harness_session.clone(),
            Some(report.plugin.clone()),
        ),
        None => (None, None, None, None),
    };
    let end = NodeRunEnd {
        status,
        summary: summary.clone(),
        reason: reason.clone(),
        detail,
        harness_session: session.clone(),
        plugin: plugin.map(|p| (p.name, p.version, p.sha256)),
        duration_ms,
    };
    let lease = lease.clone();
    let bus = engine.bus().clone();
    engine
        .store()
        .write_watched(move |tx| {
            // The sync hooks that decided the dispatch, whatever became of the run since.
            let mut recorded = match decision {
                Some(record) => bus.record_decision(tx, record)?,
                None => Recorded::default(),
            };
            // A reset or shutdown may have ended the run while the call was in flight.
            if !tx.node_run_running(&node_run_id)? || !lease.held(tx)? {
                return Ok((recorded, Next::Stop, hint));
            }
            tx.finish_node_run(&node_run_id, &end)?;
            let ended = taxonomy::node::NodeEnded {
                run: run.run_ref(),
                spec_id: spec_id.clone(),
                spec_name: spec_name.clone(),
                node: node_name.clone(),
                node_run_id: node_run_id.clone(),
                mode: mode.clone(),
                duration_ms,
                summary: summary.clone(),
                reason: reason.clone(),
            };
            let node_event = match status {
                NodeRunStatus::Completed => Event::new(&taxonomy::node::NodeCompleted(ended)),
                NodeRunStatus::Blocked | NodeRunStatus::LimitBlocked => {
                    Event::new(&taxonomy::node::NodeBlocked(ended))
                }
                _ => Event::new(&taxonomy::node::NodeFailed(ended)),
            };
            recorded.extend(bus.record(tx, [node_event], &run.cause)?);
            if let Some(session) = &session {
                tx.set_run_spec_session(&run.run_id, &spec_id, session)?;
            }
            // The spec's event, and whether the run paused with it.
            let (event, blocked) = match status {
                NodeRunStatus::Completed if node_index + 1 < node_count => {
                    tx.set_run_spec_next_node(&run.run_id, &spec_id, node_index + 1)?;
                    (None, false)
                }
                NodeRunStatus::Completed => {
                    tx.set_run_spec_status(
                        &run.run_id,
                        &spec_id,
                        SpecResult::Completed,
                        summary.as_deref(),
                    )?;
                    tx.set_spec_summary(&spec_id, summary.as_deref())?;
                    let spec = CompletedSpec {
                        id: spec_id.clone(),
                        name: spec_name.clone(),
                        summary: summary.clone(),
                    };
                    (Some(run.spec_completed(spec)), false)
                }
                NodeRunStatus::Blocked => {
                    tx.set_run_spec_status(&run.run_id, &spec_id, SpecResult::Blocked, None)?;
                    let blocker = format!(
                        "node `{node_name}` is blocked on spec {} ({}): {}\n{}",
                        spec_name,
                        ids::short(&spec_id),
                        reason.clone().unwrap_or_default(),
                        blocked_ways_out(&run.graph_name, &node_name)
                    );
                    pause(tx, &run.graph_id, &run.run_id, &blocker)?;
                    let event =
                        run.blocked(blocker, Some(node_name.clone()), Some(spec_id.clone()));
                    (Some(event), true)
                }
                NodeRunStatus::LimitBlocked => {
                    let Some(hit) = &limit else {
                        return Err(EngineError::Internal(anyhow::anyhow!(
                            "a node run ended limit_blocked without its limit"
                        )));
                    };
                    tx.set_run_spec_status(
                        &run.run_id,
                        &spec_id,
                        SpecResult::LimitBlocked,
                        None,
                    )?;
                    let resumes_at = Timestamp::from(hit.resets_at);
                    let blocker = format!(
                        "node `{node_name}` on spec {} ({}) waits for its agent's usage limit to reset\n{}\n{}",
                        spec_name,
                        ids::short(&spec_id),
                        hit.describe(jiff::Timestamp::now()),
                        limit_ways_out(&run.graph_name)
                    );
                    tx.set_run_limit_paused(&run.run_id, &blocker, resumes_at)?;
                    tx.set_graph_status(&run.graph_id, GraphStatus::Paused, Some(&blocker), None)?;
                    let event = run.limit_blocked(
                        blocker,
                        node_name.clone(),
                        spec_id.clone(),
                        resumes_at,
                    );
                    recorded.extend(bus.record(tx, [event], &run.cause)?);
                    return Ok((recorded, Next::WaitForReset(resumes_at), hint));
                }
                NodeRunStatus::Failed => {
                    tx.set_run_spec_status(&run.run_id, &spec_id, SpecResult::Failed, None)?;
                    let spec = CompletedSpec {
                        id: spec_id.clone(),
                        name: spec_name.clone(),
                        summary: None,
                    };
                    let event = run.spec_failed(
                        spec,
                        node_name.clone(),
                        reason.clone().unwrap_or_default(),
                    );
                    (Some(event), false)
                }
                NodeRunStatus::Running
                | NodeRunStatus::Interrupted
                | NodeRunStatus::Cancelled
                | NodeRunStatus::Unknown => {
                    return Err(EngineError::Internal(anyhow::anyhow!(
                        "a node run cannot end {status}"
                    )));
                }
            };
            recorded.extend(bus.record(tx, event, &run.cause)?);
            if blocked {
                return Ok((recorded, Next::Stop, hint));
            }
            let mut hint = hint;
            let next = next_step(tx, &lease, None, &mut hint)?;
            recorded.extend(record_start(&bus, tx, &next)?);
            Ok((recorded, next, hint))
        })
        .await
}

/// Pauses the run and its graph with a blocker.
pub(super) fn pause(
    tx: &Tx<'_>,
    graph_id: &str,
    run_id: &str,
    blocker: &str,
) -> Result<(), EngineError> {
    tx.set_run_status(run_id, RunStatus::Paused, Some(blocker))?;
    tx.set_graph_status(graph_id, GraphStatus::Paused, Some(blocker), None)?;
    Ok(())
}

/// The ways out of a pause on a node that reported `blocked`, as `graph continue` offers them.
fn blocked_ways_out(graph: &str, node: &str) -> String {
    format!(
        "ways out:\n  - answer it, then run `{node}` again: canopy graph continue {graph}\n  - run that spec again from a node: canopy graph continue {graph} --mode run_from_node --node NODE\n  - skip that spec: canopy graph continue {graph} --mode skip_next_spec"
    )
}

/// The ways out of a pause on a usage limit, besides waiting.
fn limit_ways_out(graph: &str) -> String {
    format!(
        "ways out:\n  - wait: the node runs again by itself at that time, in the session it had\n  - run it now: canopy graph continue {graph}\n  - skip that spec: canopy graph continue {graph} --mode skip_next_spec\n  - stop the run: canopy graph cancel {graph}"
    )
}

/// Pauses for a dirty tree, with the first paths and the ways out.
fn dirty_pause(
    tx: &Tx<'_>,
    graph_id: &str,
    run_id: &str,
    spec_id: &str,
    lines: &[String],
) -> Result<(Event, Cause), EngineError> {
    let graph = tx.graph_shallow(graph_id)?;
    let run = tx.run(run_id)?;
    let spec_name = tx
        .spec_text(spec_id)?
        .map_or_else(|| spec_id.to_string(), |(name, _)| name);
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
        "ways out:\n  - clean the tree (commit, or git stash -u), then check again and start it: canopy graph continue {g}\n  - start that spec anyway, on the dirty tree: canopy graph continue {g} --mode run_from_node --node {first_node}\n  - skip that spec (the next one is checked again): canopy graph continue {g} --mode skip_next_spec\n  - let runs start on a dirty tree: set allow_dirty_start on the graph (canopy graph edit), then canopy graph continue {g}",
        g = graph.name
    ));
    pause(tx, graph_id, run_id, &blocker)?;
    let run = context(&graph, &run);
    Ok((
        run.blocked(blocker, None, Some(spec_id.to_string())),
        run.cause,
    ))
}

/// Settles a drained run: completed when every spec it reached completed or was skipped,
/// failed naming the others.
fn settle(tx: &Tx<'_>, graph_id: &str, run_id: &str) -> Result<(Event, Cause), EngineError> {
    let graph = tx.graph_shallow(graph_id)?;
    let run = tx.run(run_id)?;
    let specs = tx.run_specs(run_id)?;
    let completed = completed_specs(tx, run_id)?;
    let skipped = specs
        .iter()
        .filter(|s| s.status == SpecResult::Skipped)
        .count();
    let bad: Vec<&super::runs::RunSpec> = specs
        .iter()
        .filter(|s| !matches!(s.status, SpecResult::Completed | SpecResult::Skipped))
        .collect();
    if bad.is_empty() {
        let summary = format!("{} spec(s) completed, {skipped} skipped", completed.len());
        tx.finish_run(run_id, RunStatus::Completed, None, Some(&summary))?;
        tx.set_graph_status(graph_id, GraphStatus::Completed, None, None)?;
        let run = context(&graph, &run);
        return Ok((run.completed(completed), run.cause));
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
    tx.finish_run(run_id, RunStatus::Failed, Some(&blocker), Some(&blocker))?;
    tx.set_graph_status(graph_id, GraphStatus::Failed, Some(&blocker), None)?;
    let last_failed =
        tx.last_node_run_with(run_id, &[NodeRunStatus::Failed, NodeRunStatus::Interrupted])?;
    let spec_id = match bad.as_slice() {
        [one] => Some(one.spec_id.clone()),
        _ => last_failed.as_ref().map(|(_, spec)| spec.clone()),
    };
    let failed_specs = bad
        .iter()
        .filter(|s| matches!(s.status, SpecResult::Failed | SpecResult::Interrupted))
        .map(|s| s.spec_id.clone())
        .collect();
    let run = context(&graph, &run);
    let event = run.failed(
        blocker,
        last_failed.map(|(node, _)| node),
        spec_id,
        failed_specs,
    );
    Ok((event, run.cause))
}
