//! What the hook API reports beyond the hook runs themselves: the catalog of configured
//! hooks, a graph hook's dry run (`hooks test`), what the sync hooks of an event answer
//! (`hooks decide`), and the hooks their firing breaker tripped.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::hook_runs::{Dispatch, HookOutcome, HookRun, HookRunStatus, HookSourceKind};
use crate::hook_keys::HookEvent;
use crate::markers::MarkerValues;
use crate::state_enum;
use crate::time::Timestamp;
use crate::work::PluginRef;

/// One hook as the catalog lists it: the hook API's fields (seed 004) and Canopy's own beside
/// them, in alphabetical order (the order the API writes JSON objects in).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct CatalogEntry {
    /// A project hook's checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkout: Option<String>,
    /// The hook's config as written.
    pub config: Value,
    /// The event it fires on: a taxonomy event, or a daemon hook's pattern.
    pub event: String,
    /// The events a daemon hook's pattern matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// The executor that would run it now (`null`: none serves its mode).
    pub executor: Option<PluginRef>,
    pub executor_kind: Option<String>,
    pub graph: Option<String>,
    pub graph_id: Option<String>,
    pub index: usize,
    /// The key it is declared under (a graph hook's `on_completed`, a project hook's event).
    pub key: Option<String>,
    pub matcher: Value,
    pub metadata: BTreeMap<String, String>,
    /// `sync` (decides before its action) or `async`.
    pub mode: Dispatch,
    pub name: String,
    pub order: usize,
    pub priority: i64,
    /// A project hook's project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub required: bool,
    pub source: HookSourceKind,
    pub spec_ids: Value,
    /// Its deadline: its own, else the default of its kind of hook.
    pub timeout_ms: u64,
}

/// What `hooks test` says about one hook.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct HookCheck {
    pub index: usize,
    /// The hook as stored.
    pub config: Value,
    pub mode: Option<String>,
    /// Whether it would fire for this event.
    pub would_fire: bool,
    /// Why it would not, when it would not.
    pub reason: Option<String>,
    /// The config as the executor would receive it.
    pub rendered: Option<Value>,
    /// What validation says about it now (empty when it is fine).
    pub problems: Vec<String>,
    /// The plugin serving its mode is disabled: the hook would fail without running (`reason`
    /// says which plugin and how to enable it).
    pub executor_disabled: bool,
}

/// The whole dry run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct DryRun {
    pub graph: String,
    pub run_id: String,
    pub event: HookEvent,
    /// The marker values the event provides (every other known marker renders `(none)`).
    pub markers: MarkerValues,
    /// Why the event itself would not fire, when it would not.
    pub event_note: Option<String>,
    pub hooks: Vec<HookCheck>,
    /// With `execute`: the hook runs recorded (as test runs), once they finished.
    pub runs: Vec<HookRun>,
}

/// One sync hook's answer, as a dry run shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct HookAnswer {
    pub hook_name: String,
    pub source: HookSourceKind,
    /// The executor mode that ran it.
    pub mode: Option<String>,
    pub status: HookRunStatus,
    pub outcome: HookOutcome,
    pub required: bool,
    pub error: Option<String>,
    pub patch_applied: Option<Value>,
    pub duration_ms: i64,
}

state_enum! {
    /// Whether an action goes ahead, as the sync hooks decided.
    pub enum DecisionKind {
        Allow = "allow",
        Deny = "deny",
    }
}

/// `POST /api/hooks/decide`: what the sync hooks of an event answered about an input.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct DecideReport {
    pub event: String,
    pub decision: DecisionKind,
    /// The hook that denied it.
    pub hook: Option<String>,
    /// Why it was denied.
    pub reason: Option<String>,
    /// Whether a hook's patch changed the input.
    pub patched: bool,
    /// The input as the action would get it (patched).
    pub input: Value,
    /// Each hook's answer, in the order they ran.
    pub hooks: Vec<HookAnswer>,
}

/// A tripped hook, as `canopy hooks tripped` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrippedHook {
    pub source: String,
    pub hook_name: String,
    /// When it tripped (RFC 3339).
    pub tripped_at: Timestamp,
    /// Firings refused since.
    pub dropped: u64,
    pub reason: String,
}

/// `GET /api/hooks/events`: the event taxonomy, and the keys graph and project hooks are
/// declared under.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Taxonomy {
    pub events: Vec<EventInfo>,
    /// The markers every event offers on top of its own.
    pub envelope_markers: Vec<String>,
    pub graph_hooks: Vec<HookKeyInfo>,
    pub project_hooks: Vec<HookKeyInfo>,
    /// The markers a graph hook's config may use.
    pub markers: Vec<String>,
    /// What a marker the event does not give renders as.
    pub unset_marker_value: String,
}

/// One event of the taxonomy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct EventInfo {
    pub event: String,
    pub family: crate::events::Family,
    pub description: String,
    pub markers: Vec<String>,
    /// Whether sync hooks are asked before its action.
    pub sync_eligible: bool,
    /// The payload's JSON schema.
    pub payload_schema: Value,
    /// A sync hook's patch's JSON schema (sync-eligible events).
    pub patch_schema: Option<Value>,
}

/// A key a graph's `hooks` map (or a project's) declares hooks under.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct HookKeyInfo {
    /// The key (`on_completed`).
    pub event: String,
    /// The taxonomy event it fires on (`graph.run.completed`).
    pub taxonomy_event: String,
    pub description: String,
    pub markers: Vec<String>,
    /// Whether its hooks may name `spec_ids` (graph hooks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_ids: Option<bool>,
}
