//! Hook events: a hook run ending. A hook on these events fires one dispatch level deeper than
//! the run it reports, so a hook on `hook.*` cannot loop for ever (see the dispatch depth).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};
use crate::records::hook_runs::HookRunStatus;

/// `hook.run.completed` and `hook.run.failed` share their fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct HookRunEnded {
    pub hook_run_id: String,
    /// Where the hook is declared: `graph` or `config`.
    pub source: String,
    /// The hook's name (`<graph>/<key>[<index>]` for a graph's hook).
    pub hook_name: String,
    /// The event that fired it.
    pub fired_by: String,
    /// `completed`, `failed` or `timed_out`.
    pub status: HookRunStatus,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub project: Option<String>,
}

/// `hook.run.completed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct HookRunCompleted(pub HookRunEnded);

/// `hook.run.failed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct HookRunFailed(pub HookRunEnded);

/// `hook.tripped`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HookTripped {
    /// Where the hook is declared: `graph`, `config` or `project`.
    pub source: String,
    pub hook_name: String,
    /// The event whose firing tripped it.
    pub fired_by: String,
    /// The rate it went past: more than `firings` in `window_secs`.
    pub firings: u32,
    pub window_secs: u64,
    pub project: Option<String>,
}

declare_events! { Family::Hook;
    HookTripped => "hook.tripped", false,
        "a hook fired too often and is tripped: its further firings are dropped until a reload or `canopy hooks reset`",
        ["source", "hook_name", "fired_by", "firings", "window_secs"],
        target: |e| Some(e.hook_name.clone()), project: |e| e.project.clone();
    HookRunCompleted => "hook.run.completed", false,
        "a hook run completed",
        ["hook_run_id", "source", "hook_name", "fired_by", "status", "duration_ms"],
        target: |e| Some(e.0.hook_name.clone()), project: |e| e.0.project.clone();
    HookRunFailed => "hook.run.failed", false,
        "a hook run failed or timed out; `error` says why",
        ["hook_run_id", "source", "hook_name", "fired_by", "status", "error", "duration_ms"],
        target: |e| Some(e.0.hook_name.clone()), project: |e| e.0.project.clone();
}
