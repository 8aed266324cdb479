//! Runtime hook callbacks: what an agent Canopy launched reports from inside its run, turned
//! into Canopy events, and the answer in the runtime's own protocol.
//!
//! A callback of a phase that decides (`before_tool`, `before_complete`) is a question asked
//! of the sync hooks, the launch's runtime hooks first, then the graph's and the daemon's
//! ([`crate::hooks::decide`]): a denial tells the runtime not to run the tool (or to keep
//! working, with the reason), a patch rewrites the tool's input. Any other callback is an event
//! in the feed (`tool.post_call`, `agent.stopped`, ...), and the launch's hooks of that phase
//! run on it as any hook on an event does ([`RuntimeHookSource`]).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::bus::Bus;
use std::path::{Path, PathBuf};

use crate::bus::Queued;
use crate::bus::source::{CallParts, Chosen, HookCall, HookSource, Occurrence, Selection, Trigger};
use crate::hooks::catalog::{CatalogEntry, CatalogFilter};
use crate::hooks::daemon::DATA_MARKER;
use crate::hooks::decide::{GraphScope, Question, Verdict};
use crate::hooks::decide::{runtime_hook_name, runtime_hook_source};
use canopy_executors::plugins::launch::{Launch, LaunchEnd, claude_phases};
use canopy_executors::plugins::{SYNC_HOOK_TIMEOUT, split_work_config};
use canopy_model::events::agent::{
    AgentCompleted, AgentFailed, AgentNotification, AgentPreComplete, AgentSessionEnded,
    AgentStarted, AgentStopped, LaunchRef,
};
use canopy_model::events::tool::{ToolPostCall, ToolPreCall};
use canopy_model::events::{Actor, Cause, Event};
use canopy_model::records::hook_runs::{Dispatch, HookSourceKind};
use canopy_model::runtime_hooks::Phase;
use canopy_store::StoreError;

/// Why a callback was not answered.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    /// The runtime named a hook event Canopy never configures.
    #[error(
        "`{0}` is not a hook event Canopy configures (it configures SessionStart, PreToolUse, PostToolUse, Notification, Stop and SessionEnd)"
    )]
    UnknownEvent(String),
    /// The callback's body lacks a field its event needs.
    #[error("the {event} callback has no `{field}`")]
    Missing { event: String, field: &'static str },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Answers one callback of Claude Code's hook `event` (its body as the runtime sent it) for
/// `launch`: the JSON the runtime reads (`{}` when there is nothing to say).
pub async fn answer_claude(
    bus: &Bus,
    launch: Arc<Launch>,
    event: &str,
    body: &Value,
) -> Result<Value, CallbackError> {
    let phases = claude_phases(event);
    if phases.is_empty() {
        return Err(CallbackError::UnknownEvent(event.to_string()));
    }
    let at = launch_ref(&launch, body);
    let text = |field: &str| body.get(field).and_then(Value::as_str).map(str::to_string);
    let cause = Cause {
        actor: Actor::Agent,
        depth: launch.cause.as_ref().map_or(0, |cause| cause.depth),
    };
    for phase in phases {
        let declared = launch.hooks.declared().any(|p| p == *phase);
        match phase {
            Phase::BeforeTool => {
                let tool_name = text("tool_name").ok_or(CallbackError::Missing {
                    event: event.to_string(),
                    field: "tool_name",
                })?;
                let payload = ToolPreCall {
                    launch: at.clone(),
                    tool_name,
                    tool_input: body.get("tool_input").cloned().unwrap_or(json!({})),
                };
                let question = asked(Question::of(&payload, cause.clone()), &launch);
                let decision = bus.decide(question).await?;
                return Ok(match decision.verdict {
                    Verdict::Deny { hook, reason } => json!({
                        "hookSpecificOutput": {
                            "hookEventName": "PreToolUse",
                            "permissionDecision": "deny",
                            "permissionDecisionReason": format!("{reason} (Canopy hook `{hook}`)"),
                        }
                    }),
                    Verdict::Allow if decision.patch.contains_key("tool_input") => json!({
                        "hookSpecificOutput": {
                            "hookEventName": "PreToolUse",
                            "permissionDecision": "allow",
                            "permissionDecisionReason": "input rewritten by a Canopy runtime hook",
                            "updatedInput": decision.input.get("tool_input").cloned().unwrap_or(json!({})),
                        }
                    }),
                    Verdict::Allow => json!({}),
                });
            }
            Phase::BeforeComplete => {
                if !declared && !bus.asks("agent.pre_complete") {
                    continue;
                }
                let payload = AgentPreComplete {
                    launch: at.clone(),
                    message: text("last_assistant_message"),
                };
                let question = asked(Question::of(&payload, cause.clone()), &launch);
                let decision = bus.decide(question).await?;
                if let Verdict::Deny { hook, reason } = decision.verdict {
                    // The runtime keeps working, with the reason as what to do next.
                    return Ok(json!({
                        "decision": "block",
                        "reason": format!("{reason} (Canopy hook `{hook}`)"),
                    }));
                }
            }
            Phase::PostToolUse => {
                let payload = ToolPostCall {
                    launch: at.clone(),
                    tool_name: text("tool_name").unwrap_or_default(),
                    tool_input: body.get("tool_input").cloned().unwrap_or(Value::Null),
                    tool_response: body.get("tool_response").cloned().unwrap_or(Value::Null),
                };
                bus.emit(vec![Event::new(&payload)], cause.clone()).await?;
            }
            Phase::OnStart => {
                let payload = AgentStarted {
                    launch: at.clone(),
                    source: text("source"),
                };
                bus.emit(vec![Event::new(&payload)], cause.clone()).await?;
            }
            Phase::OnStop => {
                let payload = AgentStopped {
                    launch: at.clone(),
                    message: text("last_assistant_message"),
                };
                bus.emit(vec![Event::new(&payload)], cause.clone()).await?;
            }
            Phase::OnNotification => {
                let payload = AgentNotification {
                    launch: at.clone(),
                    message: text("message"),
                    notification_type: text("notification_type"),
                };
                bus.emit(vec![Event::new(&payload)], cause.clone()).await?;
            }
            Phase::OnSessionEnd => {
                let payload = AgentSessionEnded {
                    launch: at.clone(),
                    reason: text("reason"),
                };
                bus.emit(vec![Event::new(&payload)], cause.clone()).await?;
            }
            // Canopy fires these itself as the launch ends ([`launch_ended`]): no callback is
            // one of them.
            Phase::OnComplete | Phase::OnFailure => {}
        }
    }
    Ok(json!({}))
}

/// Records the end of a launch that declares `on_complete` or `on_failure`: `agent.completed`
/// or `agent.failed`, whose hooks are the launch's of that phase ([`RuntimeHookSource`]). The
/// launch is still live: its hooks are chosen as the event is recorded.
pub async fn launch_ended(bus: &Bus, launch: &Launch, ended: LaunchEnd) {
    let at = launch_ref(launch, &Value::Null);
    let event = match ended {
        LaunchEnd::Completed { summary } => Event::new(&AgentCompleted {
            launch: at,
            summary,
        }),
        LaunchEnd::Failed { failure, reason } => Event::new(&AgentFailed {
            launch: at,
            failure: failure.to_string(),
            reason,
        }),
    };
    let cause = Cause {
        actor: Actor::Agent,
        depth: launch.cause.as_ref().map_or(0, |cause| cause.depth),
    };
    if let Err(err) = bus.emit(vec![event], cause).await {
        tracing::error!(launch = %launch.id, error = %err, "cannot record the end of an agent launch");
    }
}

/// A question of `launch`: its runtime hooks first, then (for a graph node's launch whose graph
/// keys the question) the graph's sync hooks, then the daemon's.
fn asked(question: Question, launch: &Arc<Launch>) -> Question {
    let question = question.in_launch(launch.clone());
    match &launch.graph_hooks {
        Some(hooks) => {
            let provenance = &launch.provenance;
            question.in_graph(GraphScope {
                graph_id: provenance.graph_id.clone(),
                graph_name: provenance.graph_name.clone(),
                run_id: (!provenance.run_id.is_empty()).then(|| provenance.run_id.clone()),
                workdir: launch.workdir.to_string_lossy().into_owned(),
                hooks: hooks.clone(),
            })
        }
        None => question,
    }
}

/// The launch as its events name it, with the session id the runtime reports.
fn launch_ref(launch: &Launch, body: &Value) -> LaunchRef {
    let provenance = &launch.provenance;
    let some = |text: &str| (!text.is_empty()).then(|| text.to_string());
    LaunchRef {
        launch_id: launch.id.clone(),
        platform: launch.platform.clone(),
        workdir: launch.workdir.to_string_lossy().into_owned(),
        graph_id: some(&provenance.graph_id),
        graph_name: some(&provenance.graph_name),
        run_id: some(&provenance.run_id),
        spec_id: provenance.spec_id.clone(),
        session_id: body
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

/// The runtime hooks of the launches running now, on the events their callbacks record
/// (the phases that do not decide; those are asked as sync hooks).
pub(crate) struct RuntimeHookSource;

impl HookSource for RuntimeHookSource {
    fn kind(&self) -> HookSourceKind {
        HookSourceKind::Graph
    }

    fn select(&self, event: &Occurrence<'_>) -> Result<Option<Selection>, StoreError> {
        let envelope = event.envelope;
        let Some(phase) = Phase::of_event(&envelope.event).filter(|p| !p.decides()) else {
            return Ok(None);
        };
        let Some(launch) = envelope
            .payload
            .get("launch_id")
            .and_then(Value::as_str)
            .and_then(|id| event.bus.plugins().launches().by_id(id))
        else {
            return Ok(None);
        };
        let tool = phase
            .has_matcher()
            .then(|| envelope.payload.get("tool_name").and_then(Value::as_str))
            .flatten();
        let call: Arc<dyn HookCall> = Arc::new(RuntimeCall {
            workdir: launch.workdir.clone(),
            markers: event_markers(phase.event()),
        });
        let hooks = launch
            .hooks
            .matching(phase, tool)
            .flat_map(|(group_index, group)| {
                group.hooks.iter().enumerate().map({
                    let call = call.clone();
                    let launch = launch.clone();
                    move |(index, config)| Chosen {
                        name: runtime_hook_name(phase, group_index, index, group),
                        index,
                        config: Value::Object(config.clone()).to_string().into(),
                        work: split_work_config(config),
                        spec_id: launch.provenance.spec_id.clone(),
                        call: call.clone(),
                        declared_in: Some(runtime_hook_source(group)),
                    }
                })
            })
            .collect();
        Ok(Selection::of_envelope(envelope, hooks))
    }

    /// The runtime hooks of each agent node of the graphs in view, its profiles' first, as
    /// its launches get them (`canopy profile show` lists a profile's alone).
    fn catalog(&self, filter: &CatalogFilter<'_>) -> Vec<CatalogEntry> {
        let mut entries = Vec::new();
        for graph in filter.graphs {
            for node in &graph.nodes {
                let Ok(work) = split_work_config(&node.config) else {
                    continue;
                };
                // A config that no longer resolves (a profile removed since) fails its launch,
                // which says why; the catalog lists what does.
                let Ok(Some((platform, _, hooks))) =
                    filter
                        .plugins
                        .runtime_hooks_of(&work.mode, work.host(), Some(work.config()))
                else {
                    continue;
                };
                for (&phase, groups) in &hooks.phases {
                    if filter.event.is_some_and(|e| !e.names_event(phase.event())) {
                        continue;
                    }
                    for (group_index, group) in groups.iter().enumerate() {
                        for (index, config) in group.hooks.iter().enumerate() {
                            let hook = split_work_config(config).ok();
                            let mode = hook.as_ref().map(|w| w.mode.as_str());
                            let dispatch = if phase.decides() {
                                Dispatch::Sync
                            } else {
                                Dispatch::Async
                            };
                            if !filter.allows_mode(dispatch, mode) {
                                continue;
                            }
                            let host = hook.as_ref().map(|w| w.host().clone()).unwrap_or_default();
                            let timeout = host
                                .timeout()
                                .or_else(|| phase.decides().then_some(SYNC_HOOK_TIMEOUT));
                            entries.push(CatalogEntry {
                                event: phase.event().to_string(),
                                key: Some(phase.as_str().to_string()),
                                matcher: json!({
                                    "graph": graph.name, "node": node.name,
                                    "tool": group.matcher_text,
                                }),
                                metadata: crate::hooks::catalog::metadata([
                                    ("graph", graph.name.clone()),
                                    ("node", node.name.clone()),
                                    ("platform", platform.clone()),
                                    ("declared_in", group.from.clone()),
                                    ("workdir", graph.workdir.clone()),
                                ]),
                                graph: Some(graph.name.clone()),
                                graph_id: Some(graph.id.clone()),
                                config: Value::Object(config.clone()),
                                mode: dispatch,
                                priority: host.priority().unwrap_or(0),
                                required: host.required().unwrap_or(false),
                                ..crate::hooks::catalog::async_entry(
                                    runtime_hook_source(group),
                                    runtime_hook_name(phase, group_index, index, group),
                                    index,
                                    mode,
                                    timeout,
                                    filter.plugins,
                                )
                            });
                        }
                    }
                }
            }
        }
        entries
    }
}

/// How a runtime hook's call is made: in its launch's workdir, with its event's markers.
struct RuntimeCall {
    workdir: PathBuf,
    markers: Vec<&'static str>,
}

impl HookCall for RuntimeCall {
    fn parts(&self, trigger: &Trigger, queued: &Queued, fallback_dir: &Path) -> CallParts {
        CallParts::of_envelope(
            trigger,
            queued,
            fallback_dir,
            &self.markers,
            |_| Some(self.workdir.clone()),
            None,
        )
    }
}

/// The markers a hook on `event` may use: the envelope's, `{{data}}` and the event's own.
fn event_markers(event: &str) -> Vec<&'static str> {
    let mut markers: Vec<&'static str> = canopy_model::events::ENVELOPE_MARKERS.to_vec();
    markers.push(DATA_MARKER);
    if let Some(def) = canopy_model::events::find(event) {
        markers.extend(
            def.markers
                .iter()
                .filter(|m| !markers.contains(m))
                .collect::<Vec<_>>(),
        );
    }
    markers
}
