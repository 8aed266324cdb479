//! Hooks: their run history, the taxonomy, the catalog, breakers, dry runs and decisions.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `GET /api/hook-runs`: which hook runs.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookRunsQuery {
    /// Only this graph's hook runs (its name, id or unique id prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
    /// A graph hook's key (`on_completed`), or a taxonomy event or glob (`graph.run.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// A run status: `queued`, `running`, `completed`, `failed`, `timed_out`, `interrupted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// An outcome: `applied`, `denied`, `failed`, `skipped`, `dropped`, `rejected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// `graph` (a graph's `hooks`), `config` (`[[hooks]]` in canopy.toml) or `project`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A hook's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// RFC 3339 instant, or a duration back from now (`10m`, `2h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The newest this many (default 50, at most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<usize>,
}

/// `GET /api/workspaces/{workspace_id}/hooks/runs`: which of a workspace's hook runs.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceRunsQuery {
    /// A graph run id, or an interactive session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// A taxonomy event or glob (`graph.run.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// An outcome: `applied`, `denied`, `failed`, `skipped`, `dropped`, `rejected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// RFC 3339 instant, or a duration back from now (`10m`, `2h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The newest this many (default 50, at most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<usize>,
}

/// `GET /api/hooks/events`: which part of the taxonomy.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only this family's events: `graph`, `spec`, `node`, `hook`, `session`, `plugin`,
    /// `cron`, `webhook` or `project`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Only the events a sync hook may decide.
    #[serde(default)]
    pub sync_only: bool,
}

/// `GET /api/hooks/catalog`: which hooks.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CatalogQuery {
    /// Only this graph's hooks (and the daemon hooks that may fire for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
    /// A project path or a graph name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Accepted; every hook applies to every agent today (agent definitions are a later hook
    /// source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A taxonomy event or glob, or a graph hook's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// `graph`, `config` or `project`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `sync` or `async`; any other value is an executor mode (`command`, `docs-maintenance`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `POST /api/hooks/reset`: the tripped hook to put back.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "name": "notify-slack" }))]
pub struct ResetBody {
    /// The hook's name, as `hooks runs` shows it.
    pub name: String,
}

/// `POST /api/graphs/{name}/hooks/test`: the event to build, and whether to run its hooks.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "event": "on_completed" }))]
#[schemars(example = serde_json::json!({ "event": "on_spec_completed", "spec": "3f2a", "execute": true }))]
pub struct HookTestBody {
    /// The graph hook key to test: `on_completed`, `on_failed`, `on_blocked` or
    /// `on_spec_completed`.
    pub event: String,
    /// Only the hook at this position of the event's list (0-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// The spec the event is about (id or unique prefix), for per-spec events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// The run whose history the event is built from (default: the latest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Really run the hooks (and wait for them), instead of only rendering them.
    #[serde(default)]
    pub execute: bool,
}

/// `POST /api/hooks/decide`: the event and the action's input to ask its sync hooks about.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "event": "node.pre_dispatch",
    "graph": "web",
    "input": { "node": "test", "spec_name": "Add a health check" }
}))]
pub struct DecideBody {
    /// A sync-eligible event: `node.pre_dispatch`, `graph.run.pre_start`, ...
    pub event: String,
    /// The action's input: the event's payload fields (a graph's own fields are filled in
    /// from `graph` when it names one).
    #[serde(default)]
    pub input: Map<String, Value>,
    /// The graph whose own sync hooks are asked first (its name, id or id prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
}
