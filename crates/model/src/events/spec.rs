//! Spec events: the backlog changing, and a spec finishing in a run.
//!
//! The seed-000 graph-hook key `on_spec_completed` is `spec.completed`; `on_spec_failed` is
//! `spec.failed`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::graph::RunRef;
use super::{Family, declare_events};
use crate::hook_keys::{FiringParts, GraphHook, HookEvent};

/// `spec.created`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecCreated {
    pub spec_id: String,
    pub spec_name: String,
    /// The project the spec belongs to, when it names one.
    pub workdir: Option<String>,
}

/// `spec.updated`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecUpdated {
    pub spec_id: String,
    pub spec_name: String,
    pub workdir: Option<String>,
    /// The fields the edit set.
    pub fields: Vec<String>,
}

/// `spec.deleted`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecDeleted {
    pub spec_id: String,
    pub spec_name: String,
    pub workdir: Option<String>,
}

/// `spec.completed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecCompleted {
    #[serde(flatten)]
    pub run: RunRef,
    pub spec_id: String,
    pub spec_name: String,
    /// The last node's one-line summary.
    pub summary: Option<String>,
}

/// `spec.failed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecFailed {
    #[serde(flatten)]
    pub run: RunRef,
    pub spec_id: String,
    pub spec_name: String,
    /// The node that failed.
    pub node: String,
    /// Why, as the executor (or the host) said.
    pub reason: String,
}

declare_events! { Family::Spec;
    SpecCreated => "spec.created", false,
        "a spec was added to the backlog",
        ["spec_id", "spec_name", "workdir"],
        target: |e| Some(e.spec_id.clone()), project: |e| e.workdir.clone();
    SpecUpdated => "spec.updated", false,
        "a spec's name, body or workdir was edited",
        ["spec_id", "spec_name", "workdir"],
        target: |e| Some(e.spec_id.clone()), project: |e| e.workdir.clone();
    SpecDeleted => "spec.deleted", false,
        "a spec was deleted from the backlog",
        ["spec_id", "spec_name", "workdir"],
        target: |e| Some(e.spec_id.clone()), project: |e| e.workdir.clone();
    SpecCompleted => "spec.completed", false,
        "a spec reached completed in a run, from the graph's bound specs or a queue (graph hooks: on_spec_completed)",
        ["graph_id", "graph_name", "workdir", "run_id", "queue_id", "spec_id", "spec_name", "summary"],
        target: |e| Some(e.spec_id.clone()), project: |e| Some(e.run.graph.workdir.clone()),
        graph_hook: GraphHook {
            key: HookEvent::OnSpecCompleted,
            takes_spec_ids: true,
            markers: &["spec_name", "spec_id"],
            description: "a spec reached completed, from the graph's bound specs or from a queue; once per spec",
        },
        fires: |e| Some(
            FiringParts::of(&e.run)
                .marker("spec_name", e.spec_name.clone())
                .marker("spec_id", e.spec_id.clone())
                .about(Some(e.spec_id.clone()), vec![e.spec_id.clone()]),
        );
    SpecFailed => "spec.failed", false,
        "a spec failed in a run: one of its nodes failed (graph hooks: on_spec_failed)",
        ["graph_id", "graph_name", "workdir", "run_id", "queue_id", "spec_id", "spec_name", "node", "reason"],
        target: |e| Some(e.spec_id.clone()), project: |e| Some(e.run.graph.workdir.clone()),
        graph_hook: GraphHook {
            key: HookEvent::OnSpecFailed,
            takes_spec_ids: true,
            markers: &["spec_name", "spec_id", "node", "blocker"],
            description: "a spec failed (one of its nodes failed); {{node}} is that node and {{blocker}} why; once per failing spec",
        },
        fires: |e| Some(
            FiringParts::of(&e.run)
                .marker("spec_name", e.spec_name.clone())
                .marker("spec_id", e.spec_id.clone())
                .marker("node", e.node.clone())
                .marker("blocker", e.reason.clone())
                .about(Some(e.spec_id.clone()), vec![e.spec_id.clone()]),
        );
}
