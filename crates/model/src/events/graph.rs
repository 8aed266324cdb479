//! Graph events: a graph defined, changed or deleted, and its runs starting and ending.
//!
//! The seed-000 graph-hook keys map onto these: `on_completed` is `graph.run.completed` (for a
//! run that completed at least one spec), `on_failed` is `graph.run.failed`, `on_blocked` is
//! `graph.run.blocked`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};
use crate::hook_keys::{FiringParts, GraphHook, HookEvent};
use crate::time::Timestamp;

/// The graph an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GraphRef {
    pub graph_id: String,
    pub graph_name: String,
    /// The graph's workdir (for a run: the workdir it was launched with).
    pub workdir: String,
}

/// The run an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunRef {
    #[serde(flatten)]
    pub graph: GraphRef,
    pub run_id: String,
    /// The queue the run takes its specs from, when it is queue-driven.
    pub queue_id: Option<String>,
}

/// A spec a run completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompletedSpec {
    pub id: String,
    pub name: String,
    pub summary: Option<String>,
}

/// `graph.created`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphCreated {
    #[serde(flatten)]
    pub graph: GraphRef,
}

/// `graph.updated`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphUpdated {
    #[serde(flatten)]
    pub graph: GraphRef,
    /// The graph's version after the edit.
    pub version: i64,
    /// The fields the edit set.
    pub fields: Vec<String>,
}

/// `graph.deleted`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphDeleted {
    #[serde(flatten)]
    pub graph: GraphRef,
}

/// `graph.run.pre_start`: a run of a graph is asked for. Sync hooks decide: allow, deny (the
/// request is answered 409 with the hook and its reason; nothing starts) or patch its
/// `workdir` or `queue_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunPreStart {
    #[serde(flatten)]
    pub graph: GraphRef,
    /// The queue the run would take its specs from, when it is queue-driven.
    pub queue_id: Option<String>,
    /// Who asked for the run (`user`, `cron:<name>`, `hook:<name>`, ...).
    pub actor: String,
}

/// What a sync hook on `graph.run.pre_start` may change: only a field the request has.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStartPatch {
    /// Another workdir for this run (an absolute path to a git repository).
    pub workdir: Option<String>,
    /// Another queue for this run (a queue's id or name).
    pub queue_id: Option<String>,
}

/// `graph.run.started`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunStarted {
    #[serde(flatten)]
    pub run: RunRef,
    /// `run` for a new run, `continue` for a paused run going on.
    pub how: String,
    /// `continue`'s mode (`plain`, `skip_next_spec`, `run_from_node`).
    pub mode: Option<String>,
}

/// `graph.run.completed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunCompleted {
    #[serde(flatten)]
    pub run: RunRef,
    /// Name and one-line summary of each completed spec, one per line.
    pub completed_specs: String,
    pub specs: Vec<CompletedSpec>,
}

/// `graph.run.failed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunFailed {
    #[serde(flatten)]
    pub run: RunRef,
    pub blocker: String,
    /// The node that ended the run, when one did.
    pub node: Option<String>,
    /// The spec the failure belongs to, when it belongs to one.
    pub spec_id: Option<String>,
    /// Every spec of the run that failed or was interrupted, in run order.
    pub failed_specs: Vec<String>,
}

/// `graph.run.blocked`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunBlocked {
    #[serde(flatten)]
    pub run: RunRef,
    pub blocker: String,
    pub node: Option<String>,
    pub spec_id: Option<String>,
    /// Paused on an agent's usage limit: when the run goes on by itself (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumes_at: Option<Timestamp>,
}

/// `graph.run.reset`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunReset {
    #[serde(flatten)]
    pub graph: GraphRef,
    /// The run the reset ended, if one was active.
    pub run_id: Option<String>,
}

/// `graph.run.cancelled`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunCancelled {
    #[serde(flatten)]
    pub run: RunRef,
    /// Who cancelled it (the request's actor).
    pub by: String,
    /// The node that was running and was stopped, if one was.
    pub node: Option<String>,
    /// The spec in flight (running, or blocked on a pause), if there was one.
    pub spec_id: Option<String>,
}

declare_events! { Family::Graph;
    GraphCreated => "graph.created", false,
        "a graph was created",
        ["graph_id", "graph_name", "workdir"],
        target: |e| Some(e.graph.graph_name.clone()), project: |e| Some(e.graph.workdir.clone());
    GraphUpdated => "graph.updated", false,
        "a graph's definition was edited (nodes, specs, hooks, workdir or settings); `fields` names what the edit set",
        ["graph_id", "graph_name", "workdir", "version"],
        target: |e| Some(e.graph.graph_name.clone()), project: |e| Some(e.graph.workdir.clone());
    GraphDeleted => "graph.deleted", false,
        "a graph was deleted",
        ["graph_id", "graph_name", "workdir"],
        target: |e| Some(e.graph.graph_name.clone()), project: |e| Some(e.graph.workdir.clone());
    RunPreStart => "graph.run.pre_start", true,
        "asked before a run starts: sync hooks allow it, deny it (the request is answered 409 and nothing starts) or patch its workdir or queue",
        ["graph_id", "graph_name", "workdir", "queue_id", "actor"],
        target: |e| Some(e.graph.graph_name.clone()), project: |e| Some(e.graph.workdir.clone()),
        patch: RunStartPatch;
    RunStarted => "graph.run.started", false,
        "a run started (`how` = run) or a paused run went on (`how` = continue)",
        ["graph_id", "graph_name", "workdir", "run_id", "queue_id", "how", "mode"],
        target: |e| Some(e.run.graph.graph_name.clone()), project: |e| Some(e.run.graph.workdir.clone());
    RunCompleted => "graph.run.completed", false,
        "a run completed: every spec it reached completed or was skipped (graph hooks: on_completed, for a run that completed at least one spec)",
        ["graph_id", "graph_name", "workdir", "run_id", "queue_id", "completed_specs"],
        target: |e| Some(e.run.graph.graph_name.clone()), project: |e| Some(e.run.graph.workdir.clone()),
        graph_hook: GraphHook {
            key: HookEvent::OnCompleted,
            takes_spec_ids: false,
            markers: &["completed_specs"],
            description: "a run reached completed, having completed at least one spec; once per completing run",
        },
        fires: |e| (!e.specs.is_empty())
            .then(|| FiringParts::of(&e.run).marker("completed_specs", e.completed_specs.clone()));
    RunFailed => "graph.run.failed", false,
        "a run and its graph failed; `spec_id` is set when the failure belongs to one spec (graph hooks: on_failed)",
        ["graph_id", "graph_name", "workdir", "run_id", "queue_id", "blocker", "node", "spec_id", "failed_specs"],
        target: |e| Some(e.run.graph.graph_name.clone()), project: |e| Some(e.run.graph.workdir.clone()),
        graph_hook: GraphHook {
            key: HookEvent::OnFailed,
            takes_spec_ids: true,
            markers: &["blocker", "node", "spec_id"],
            description: "the graph reached failed; {{spec_id}} is set when the failure belongs to a spec",
        },
        fires: |e| {
            // A filtered hook runs for the specs that failed; none listed: the one it is about.
            let specs = if e.failed_specs.is_empty() {
                e.spec_id.iter().cloned().collect()
            } else {
                e.failed_specs.clone()
            };
            Some(
                FiringParts::of(&e.run)
                    .marker("blocker", e.blocker.clone())
                    .marker_if("node", e.node.as_ref())
                    .marker_if("spec_id", e.spec_id.as_ref())
                    .about(e.spec_id.clone(), specs),
            )
        };
    RunBlocked => "graph.run.blocked", false,
        "a graph paused with a blocker: a blocked node, a dirty tree, an interruption (graph hooks: on_blocked)",
        ["graph_id", "graph_name", "workdir", "run_id", "queue_id", "blocker", "node", "spec_id"],
        target: |e| Some(e.run.graph.graph_name.clone()), project: |e| Some(e.run.graph.workdir.clone()),
        graph_hook: GraphHook {
            key: HookEvent::OnBlocked,
            takes_spec_ids: false,
            markers: &["blocker", "node"],
            description: "the graph paused with a blocker (a blocked node, a dirty tree, an interruption); once per pause",
        },
        fires: |e| Some(
            FiringParts::of(&e.run)
                .marker("blocker", e.blocker.clone())
                .marker_if("node", e.node.as_ref()),
        );
    RunCancelled => "graph.run.cancelled", false,
        "a run was cancelled (`graph cancel`): its running node was stopped and its processes killed; the run, its spec in flight and the graph are `cancelled`. Graph hooks do not fire (a cancel is a decision, not a failure)",
        ["graph_id", "graph_name", "workdir", "run_id", "queue_id", "by", "node", "spec_id"],
        target: |e| Some(e.run.graph.graph_name.clone()), project: |e| Some(e.run.graph.workdir.clone());
    RunReset => "graph.run.reset", false,
        "a graph was reset: its active run (if any) ended and it is idle again",
        ["graph_id", "graph_name", "workdir", "run_id"],
        target: |e| Some(e.graph.graph_name.clone()), project: |e| Some(e.graph.workdir.clone());
}
