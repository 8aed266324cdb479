//! The hook catalog (`GET /api/hooks/catalog`): every configured hook, resolved across its
//! sources, as each source lists its own ([`crate::bus::source::HookSource::catalog`]). This
//! module holds what the sources share: the filters a request gives, and the entry's common
//! shape.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use canopy_executors::plugins::PluginHost;
use canopy_model::events::EventPattern;
use canopy_model::hook_keys::{EVENTS, HookEvent};
use canopy_model::records::graphs::Graph;
use canopy_model::records::hook_runs::{Dispatch, HookSourceKind};

use super::daemon::DaemonHook;
use crate::bus::Bus;

/// What one catalog request asks every source.
pub struct CatalogFilter<'a> {
    /// Only hooks firing on what this names.
    pub event: Option<&'a EventFilter>,
    /// Only hooks of this dispatch mode or executor mode.
    pub mode: Option<&'a ModeFilter>,
    /// Only hooks that may fire for this workspace (an absolute path).
    pub workspace: Option<&'a str>,
    /// The graphs in view: every graph, or the one the request named.
    pub graphs: &'a [Graph],
    /// Whether the request named a graph (`graph=`): then only hooks that may fire for it.
    pub graph_named: bool,
    /// The executors, to say which one would run each hook now.
    pub plugins: &'a PluginHost,
    /// The hooks in force.
    pub bus: &'a Bus,
}

impl CatalogFilter<'_> {
    /// Whether the mode filter lets a hook of this dispatch and executor mode through.
    pub fn allows_mode(&self, dispatch: Dispatch, executor: Option<&str>) -> bool {
        self.mode.is_none_or(|m| m.allows(dispatch, executor))
    }
}

/// An `event` filter: a graph hook's key (`on_completed`: that key's hooks), or a taxonomy
/// event or glob (`graph.run.completed`, `spec.*`: every hook that fires on a matching event,
/// graph hooks by their key's event included).
#[derive(Debug, Clone)]
pub enum EventFilter {
    Key(HookEvent),
    Pattern(EventPattern),
}

impl EventFilter {
    /// Parses a filter: a graph hook's key, else an event or glob of the taxonomy; the error
    /// says what is allowed.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(key) = HookEvent::parse(text) {
            return Ok(Self::Key(key));
        }
        EventPattern::parse(text).map(Self::Pattern).map_err(|err| {
            if err.contains("matches no event") {
                let names = EVENTS
                    .iter()
                    .map(|e| e.as_str())
                    .chain(canopy_model::events::all().map(|def| def.name));
                format!(
                    "unknown event `{text}`{}; give a graph hook key ({}) or an event of the taxonomy, or a glob of them (graph.run.completed, spec.*; `canopy hooks events` lists them)",
                    canopy_model::text::did_you_mean(text, names),
                    HookEvent::names()
                )
            } else {
                err
            }
        })
    }

    /// The events hook runs record that this filter names: the key itself, or the matching
    /// taxonomy events (daemon hooks) and the keys firing on them (graph hooks).
    pub fn recorded(&self) -> Vec<String> {
        match self {
            Self::Key(key) => vec![key.as_str().to_string()],
            Self::Pattern(pattern) => pattern
                .events()
                .map(|def| def.name.to_string())
                .chain(
                    EVENTS
                        .iter()
                        .filter(|key| pattern.matches(key.taxonomy_event()))
                        .map(|key| key.as_str().to_string()),
                )
                .collect(),
        }
    }

    /// Whether it names a graph-hook key.
    pub fn names_key(&self, key: HookEvent) -> bool {
        match self {
            Self::Key(wanted) => *wanted == key,
            Self::Pattern(pattern) => pattern.matches(key.taxonomy_event()),
        }
    }

    /// Whether it names this taxonomy event (a key names none).
    pub fn names_event(&self, event: &str) -> bool {
        match self {
            Self::Key(_) => false,
            Self::Pattern(pattern) => pattern.matches(event),
        }
    }

    /// Whether a daemon hook fires on an event this filter names.
    pub fn names_daemon_hook(&self, hook: &DaemonHook) -> bool {
        match self {
            Self::Key(_) => false,
            Self::Pattern(pattern) => pattern.events().any(|def| hook.pattern.matches(def.name)),
        }
    }
}

/// The `mode` filter of the catalog.
pub enum ModeFilter {
    /// `sync` or `async`, the hook API's mode.
    Dispatch(String),
    /// An executor mode.
    Executor(String),
}

impl ModeFilter {
    /// Parses a filter: `sync`, `async`, or an executor mode.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "" => Err(
                "it is empty; give sync, async, or an executor mode (command, agent, ...)"
                    .to_string(),
            ),
            "sync" | "async" => Ok(Self::Dispatch(text.trim().to_string())),
            other => Ok(Self::Executor(other.to_string())),
        }
    }

    fn allows(&self, dispatch: Dispatch, executor: Option<&str>) -> bool {
        match self {
            Self::Dispatch(mode) => mode == dispatch.as_str(),
            Self::Executor(mode) => executor == Some(mode.as_str()),
        }
    }
}

/// One hook as the catalog lists it: the hook API's fields (seed 004) and Canopy's own beside
/// them, in alphabetical order (the order the API writes JSON objects in).
#[derive(Debug, Serialize)]
pub struct CatalogEntry {
    /// A project hook's checkout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkout: Option<String>,
    /// The hook's config as written.
    pub config: Value,
    /// The event it fires on: a taxonomy event, or a daemon hook's pattern.
    pub event: String,
    /// The events a daemon hook's pattern matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<&'static str>>,
    /// The executor that would run it now (`null`: none serves its mode).
    pub executor: Value,
    pub executor_kind: Option<String>,
    pub graph: Option<String>,
    pub graph_id: Option<String>,
    pub index: usize,
    /// The key it is declared under (a graph hook's `on_completed`, a project hook's event).
    pub key: Option<String>,
    pub matcher: Value,
    pub metadata: BTreeMap<&'static str, String>,
    /// `sync` (decides before its action) or `async`.
    pub mode: Dispatch,
    pub name: String,
    pub order: usize,
    pub priority: i64,
    /// A project hook's project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub required: bool,
    pub source: HookSourceKind,
    pub spec_ids: Value,
    /// Its deadline: its own, else the default of its kind of hook.
    pub timeout_ms: u64,
}

impl CatalogEntry {
    /// An async hook's entry (priority 0, not required, in the order of its list), run by the
    /// executor of `mode` when one serves it; its deadline is `timeout`, else the executor's
    /// default. The source fills in what it knows beyond that (a sync hook's rule included).
    pub fn of_async_hook(
        source: HookSourceKind,
        name: String,
        index: usize,
        mode: Option<&str>,
        timeout: Option<Duration>,
        plugins: &PluginHost,
    ) -> Self {
        let timeout = timeout.unwrap_or_else(|| plugins.timeout_for(&Default::default()));
        let executor = mode
            .and_then(|m| plugins.plugin_ref(m).ok())
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or(Value::Null);
        Self {
            checkout: None,
            config: Value::Null,
            event: String::new(),
            events: None,
            executor,
            executor_kind: mode.map(str::to_string),
            graph: None,
            graph_id: None,
            index,
            key: None,
            matcher: Value::Null,
            metadata: BTreeMap::new(),
            mode: Dispatch::Async,
            name,
            order: index,
            priority: 0,
            project: None,
            required: false,
            source,
            spec_ids: Value::Null,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }
}
