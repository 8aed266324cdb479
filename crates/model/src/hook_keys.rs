//! The keys of a graph's `hooks` map (`on_completed`, `on_spec_failed`, ...): which taxonomy
//! event each fires on, whether it takes `spec_ids`, and the markers it gives values to.

use serde::{Deserialize, Serialize};

/// The events a graph's hooks are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// A run reached completed, having completed at least one spec.
    OnCompleted,
    /// The graph reached failed.
    OnFailed,
    /// The graph paused with a blocker.
    OnBlocked,
    /// A spec reached completed (bound or from a queue).
    OnSpecCompleted,
    /// A spec failed: one of its nodes failed.
    OnSpecFailed,
}

/// Every event, in the order they are documented.
pub const EVENTS: [HookEvent; 5] = [
    HookEvent::OnCompleted,
    HookEvent::OnFailed,
    HookEvent::OnBlocked,
    HookEvent::OnSpecCompleted,
    HookEvent::OnSpecFailed,
];

impl HookEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnCompleted => "on_completed",
            Self::OnFailed => "on_failed",
            Self::OnBlocked => "on_blocked",
            Self::OnSpecCompleted => "on_spec_completed",
            Self::OnSpecFailed => "on_spec_failed",
        }
    }

    /// The taxonomy event this key fires on.
    pub fn taxonomy_event(self) -> &'static str {
        match self {
            Self::OnCompleted => "graph.run.completed",
            Self::OnFailed => "graph.run.failed",
            Self::OnBlocked => "graph.run.blocked",
            Self::OnSpecCompleted => "spec.completed",
            Self::OnSpecFailed => "spec.failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        EVENTS.into_iter().find(|e| e.as_str() == text)
    }

    /// Whether hooks of this event may filter by `spec_ids`.
    pub fn takes_spec_ids(self) -> bool {
        match self {
            Self::OnSpecCompleted | Self::OnSpecFailed | Self::OnFailed => true,
            Self::OnCompleted | Self::OnBlocked => false,
        }
    }

    /// The markers this event gives values to (besides `graph_name` and `workdir`, which every
    /// event has); every other known marker renders `(none)`.
    pub fn markers(self) -> &'static [&'static str] {
        match self {
            Self::OnCompleted => &["completed_specs"],
            Self::OnFailed => &["blocker", "node", "spec_id"],
            Self::OnBlocked => &["blocker", "node"],
            Self::OnSpecCompleted => &["spec_name", "spec_id"],
            Self::OnSpecFailed => &["spec_name", "spec_id", "node", "blocker"],
        }
    }

    /// What the event means, for the event taxonomy.
    pub fn description(self) -> &'static str {
        match self {
            Self::OnCompleted => {
                "a run reached completed, having completed at least one spec; once per completing run"
            }
            Self::OnFailed => {
                "the graph reached failed; {{spec_id}} is set when the failure belongs to a spec"
            }
            Self::OnBlocked => {
                "the graph paused with a blocker (a blocked node, a dirty tree, an interruption); once per pause"
            }
            Self::OnSpecCompleted => {
                "a spec reached completed, from the graph's bound specs or from a queue; once per spec"
            }
            Self::OnSpecFailed => {
                "a spec failed (one of its nodes failed); {{node}} is that node and {{blocker}} why; once per failing spec"
            }
        }
    }

    /// The list of all event names, for error messages.
    pub fn names() -> String {
        EVENTS
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
