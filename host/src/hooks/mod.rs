//! Event-keyed hooks: what a graph runs when its runs complete, fail, block, or complete a spec.
//!
//! - [`config`]: the `hooks` map on a graph (event → ordered hook configs), validated whole at
//!   edit time: one mode per hook, the executor's own validation, markers, `spec_ids`.
//! - [`HookDispatcher`]: the [`EventSink`](crate::engine::EventSink) the engine reports to. At
//!   each event it reads the graph's stored hooks *then* (live edits apply to the events still to
//!   come, nothing is retroactive), records a hook run per matching hook (durably, before the
//!   engine goes on), and runs them in declaration order off the engine's path. A failing hook
//!   is recorded; it never changes the graph and never stops the hooks after it.
//! - [`runs`]: the hook-run records (kept by the store, [`crate::store::hook_runs`]).
//! - [`dry_run`]: `canopy hooks test`, rendering (and optionally running) an event's hooks against
//!   a past run.

pub mod breaker;
pub mod config;
pub mod daemon;
pub mod dry_run;
mod firing;
pub mod runs;

use serde::{Deserialize, Serialize};

pub use config::{HookMap, SpecScope, validate_hooks};
pub use firing::{Firing, matches};

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

/// `{{completed_specs}}`: name and one-line summary of each spec, one per line.
pub fn completed_specs_text(specs: &[crate::engine::events::CompletedSpec]) -> String {
    specs
        .iter()
        .map(|s| match &s.summary {
            Some(summary) => format!("{} — {summary}", s.name),
            None => s.name.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
