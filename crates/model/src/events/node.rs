//! Node events: one node of a graph run, over one spec, starting and ending.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::graph::RunRef;
use super::{Family, declare_events};

/// `node.started`: a node's executor call is about to start for a spec (its node run is
/// recorded running in the same write).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeStarted {
    #[serde(flatten)]
    pub run: RunRef,
    pub spec_id: String,
    pub spec_name: String,
    pub node: String,
    pub node_run_id: String,
    /// The executor mode the node runs.
    pub mode: String,
}

/// `node.completed`, `node.failed` and `node.blocked` share their fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct NodeEnded {
    #[serde(flatten)]
    pub run: RunRef,
    pub spec_id: String,
    pub spec_name: String,
    pub node: String,
    pub node_run_id: String,
    /// The executor mode the node ran.
    pub mode: String,
    pub duration_ms: i64,
    pub summary: Option<String>,
    /// Why it failed or what blocks it (`node.failed`, `node.blocked`).
    pub reason: Option<String>,
}

/// `node.completed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct NodeCompleted(pub NodeEnded);

/// `node.failed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct NodeFailed(pub NodeEnded);

/// `node.blocked`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct NodeBlocked(pub NodeEnded);

/// `node.pre_dispatch`: a node is about to run for a spec. Sync hooks decide: allow, deny (the
/// spec is blocked with the reason as its blocker) or patch the node's `prompt`, `command` or
/// `model`. Those are as the node's config writes them: markers are rendered after the
/// decision, into the patched text too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodePreDispatch {
    #[serde(flatten)]
    pub run: RunRef,
    pub spec_id: String,
    pub spec_name: String,
    pub node: String,
    /// The executor mode the node runs.
    pub mode: String,
    /// The node's prompt (agent and interactive nodes).
    pub prompt: Option<String>,
    /// The node's command (command nodes).
    pub command: Option<String>,
    /// The node's model (agent nodes that name one).
    pub model: Option<String>,
}

/// What a sync hook on `node.pre_dispatch` may change: only a field the node has.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeDispatchPatch {
    pub prompt: Option<String>,
    pub command: Option<String>,
    pub model: Option<String>,
}

declare_events! { Family::Node;
    NodePreDispatch => "node.pre_dispatch", true,
        "asked before a node runs for a spec: sync hooks allow it, deny it (the spec is blocked with the reason) or patch its prompt, command or model",
        ["graph_id", "graph_name", "workdir", "run_id", "spec_id", "spec_name", "node", "mode", "prompt", "command", "model"],
        target: |e| Some(e.node.clone()), project: |e| Some(e.run.graph.workdir.clone()),
        patch: NodeDispatchPatch;
    NodeStarted => "node.started", false,
        "a node's executor call started for a spec",
        ["graph_id", "graph_name", "workdir", "run_id", "spec_id", "spec_name", "node", "node_run_id", "mode"],
        target: |e| Some(e.node_run_id.clone()), project: |e| Some(e.run.graph.workdir.clone());
    NodeCompleted => "node.completed", false,
        "a node completed its executor call for a spec",
        ["graph_id", "graph_name", "workdir", "run_id", "spec_id", "spec_name", "node", "node_run_id", "mode", "duration_ms", "summary"],
        target: |e| Some(e.0.node_run_id.clone()), project: |e| Some(e.0.run.graph.workdir.clone());
    NodeFailed => "node.failed", false,
        "a node's executor call failed (or could not run) for a spec; `reason` says why",
        ["graph_id", "graph_name", "workdir", "run_id", "spec_id", "spec_name", "node", "node_run_id", "mode", "duration_ms", "reason"],
        target: |e| Some(e.0.node_run_id.clone()), project: |e| Some(e.0.run.graph.workdir.clone());
    NodeBlocked => "node.blocked", false,
        "a node reported blocked for a spec; `reason` is its blocker",
        ["graph_id", "graph_name", "workdir", "run_id", "spec_id", "spec_name", "node", "node_run_id", "mode", "duration_ms", "reason"],
        target: |e| Some(e.0.node_run_id.clone()), project: |e| Some(e.0.run.graph.workdir.clone());
}
