//! Hook runs: each firing of a hook, with its status and, for a sync hook, its decision.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state_enum;
use crate::time::Timestamp;

state_enum! {
    /// Where a hook run is: waiting its turn, running, or how it ended.
    pub enum HookRunStatus {
        /// Recorded when its event fired; waiting for the hooks before it or for a free slot.
        Queued = "queued",
        /// Its executor is running.
        Running = "running",
        /// The executor reported completed.
        Completed = "completed",
        /// The executor failed, reported blocked (hooks cannot block), or could not run.
        Failed = "failed",
        /// The call was stopped at its deadline.
        TimedOut = "timed_out",
        /// The daemon stopped before it finished; it is never re-run on its own.
        Interrupted = "interrupted",
        /// Never run: its event was caused, through a chain of hooks, deeper than the
        /// dispatch depth allows (a hook loop ends here).
        Dropped = "dropped",
        /// A sync hook never run: a hook before it denied the action.
        Skipped = "skipped",
    }
}

state_enum! {
    /// How a hook is dispatched.
    pub enum Dispatch {
        /// It runs after its event, off the emitter's path, and cannot change what happened.
        Async = "async",
        /// It runs before its action, which waits for its answer: allow, deny or patch.
        Sync = "sync",
    }
}

state_enum! {
    /// Where a hook is declared.
    pub enum HookSourceKind {
        /// A graph's `hooks` map.
        Graph = "graph",
        /// A daemon hook in `canopy.toml`.
        Config = "config",
        /// A project's lifecycle hook (`[projects.NAME.hooks]` in `canopy.toml`).
        Project = "project",
    }
}

state_enum! {
    /// How a hook run turned out, in the terms of the hook API (seed 004): what it meant for
    /// the action that fired it. Async hooks are `applied`, `failed` or `dropped`; `denied`,
    /// `skipped` and `rejected` belong to sync hooks.
    pub enum HookOutcome {
        /// It ran to completion.
        Applied = "applied",
        /// A sync hook denied its operation.
        Denied = "denied",
        /// It failed, timed out or was interrupted.
        Failed = "failed",
        /// A sync hook was skipped.
        Skipped = "skipped",
        /// It never ran (past the dispatch depth).
        Dropped = "dropped",
        /// A sync hook's patch was rejected.
        Rejected = "rejected",
    }
}

impl HookRunStatus {
    /// The outcome of a hook run with this status; `None` while it is queued or running.
    pub fn outcome(self) -> Option<HookOutcome> {
        match self {
            Self::Queued | Self::Running => None,
            Self::Completed => Some(HookOutcome::Applied),
            Self::Failed | Self::TimedOut | Self::Interrupted => Some(HookOutcome::Failed),
            Self::Dropped => Some(HookOutcome::Dropped),
            Self::Skipped => Some(HookOutcome::Skipped),
            Self::Unknown => Some(HookOutcome::Unknown),
        }
    }

    /// Whether the hook run has ended (it will not change again). A newer daemon's status is
    /// taken as ended: a client waiting on it shows it rather than wait for nothing.
    pub fn is_finished(self) -> bool {
        match self {
            Self::Queued | Self::Running => false,
            Self::Completed
            | Self::Failed
            | Self::TimedOut
            | Self::Interrupted
            | Self::Dropped
            | Self::Skipped
            | Self::Unknown => true,
        }
    }
}

/// The name a graph's hook goes by in hook runs and the catalog: `<graph>.<key>[<index>]`.
pub fn graph_hook_name(graph_name: &str, key: &str, index: usize) -> String {
    format!("{graph_name}.{key}[{index}]")
}

/// A hook run as the API returns it: its record, and the fields of the hook API (seed 004)
/// derived from it (`outcome`, `recorded_at`, `required`, `patch_applied`, `executor_kind`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct HookRun {
    pub id: String,
    /// Where the hook is declared: `graph`, `config` or `project`.
    pub source: HookSourceKind,
    /// The hook's name: a daemon hook's `name`, `<graph>.<key>[<index>]` for a graph's,
    /// `<project>/<event>[<index>]` for a project's.
    pub hook_name: String,
    /// The graph the event belongs to (always, for a graph's hook).
    pub graph_id: Option<String>,
    pub graph_name: Option<String>,
    pub run_id: Option<String>,
    /// The graph-hook key (`on_completed`) for a graph's hook; the taxonomy event
    /// (`graph.run.blocked`) for a daemon or project hook.
    pub event: String,
    pub hook_index: i64,
    /// A copy of the exact hook config that fired.
    pub hook_config: Value,
    pub spec_id: Option<String>,
    /// The executor mode that runs it (`command`, `agent`, ...); the same as `executor_kind`.
    pub mode: Option<String>,
    /// The executor mode that runs it.
    pub executor_kind: Option<String>,
    pub plugin: Option<String>,
    pub plugin_version: Option<String>,
    pub plugin_sha256: Option<String>,
    /// `{"config": the rendered config, "markers": the marker values}`.
    pub rendered: Option<Value>,
    pub status: HookRunStatus,
    pub summary: Option<String>,
    pub error: Option<String>,
    pub output: Option<String>,
    /// Recorded by `canopy hooks test --execute`.
    pub test: bool,
    pub fired_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub duration_ms: Option<i64>,
    /// How deep in a chain of hooks its event was caused (0: not by a hook).
    pub dispatch_depth: u32,
    /// The feed row of the event that fired it.
    pub feed_id: Option<i64>,
    /// The project (workdir) of its event, when known.
    pub project: Option<String>,
    /// What it meant for its action once it ended; null while queued or running.
    pub outcome: Option<HookOutcome>,
    /// The patch a sync hook applied (null when it applied none).
    pub patch_applied: Option<Value>,
    /// When it was recorded: its event's firing time (`fired_at`).
    pub recorded_at: Timestamp,
    /// Whether its failure denies its action (sync hooks).
    pub required: bool,
    /// `sync` (it decided before its action) or `async`.
    pub dispatch: Dispatch,
    /// The daemon (its node name) that ran it; null for a run recorded before daemons had
    /// names on record.
    pub node: Option<String>,
}

impl HookRun {
    /// The taxonomy event that fired it: a graph hook's key mapped to its event
    /// (`on_completed` is `graph.run.completed`), a daemon hook's event as it is.
    pub fn taxonomy_event(&self) -> &str {
        match self.source {
            HookSourceKind::Graph => match crate::hook_keys::HookEvent::parse(&self.event) {
                Some(key) => key.taxonomy_event(),
                None => &self.event,
            },
            HookSourceKind::Config | HookSourceKind::Project | HookSourceKind::Unknown => {
                &self.event
            }
        }
    }

    /// The hook run in exactly the hook API's terms (seed 004).
    pub fn seed(&self) -> SeedHookRun {
        SeedHookRun {
            dispatch_depth: self.dispatch_depth,
            duration_ms: self.duration_ms,
            error: self.error.clone(),
            event: self.taxonomy_event().to_string(),
            hook_name: self.hook_name.clone(),
            mode: self.dispatch,
            outcome: self.outcome,
            patch_applied: self.patch_applied.clone(),
            recorded_at: self.recorded_at,
            required: self.required,
            source: self.source,
        }
    }
}

/// A hook run as the hook API (seed 004) shows it, and nothing more.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct SeedHookRun {
    pub dispatch_depth: u32,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
    /// The taxonomy event that fired it.
    pub event: String,
    pub hook_name: String,
    /// `sync` or `async`.
    pub mode: Dispatch,
    pub outcome: Option<HookOutcome>,
    pub patch_applied: Option<Value>,
    pub recorded_at: Timestamp,
    pub required: bool,
    pub source: HookSourceKind,
}
