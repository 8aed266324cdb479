//! The hook catalog (`GET /api/hooks/catalog`): every configured hook, resolved across its
//! sources, as each source lists its own ([`crate::bus::source::HookSource::catalog`]). This
//! module holds what the sources share: the filters a request gives, and the entry's common
//! shape.

pub use canopy_model::records::hook_reports::CatalogEntry;
use std::collections::BTreeMap;
use std::time::Duration;

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

/// A catalog entry's `metadata`, from its pairs.
pub fn metadata<const N: usize>(pairs: [(&str, String); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
}

/// An async hook's entry (priority 0, not required, in the order of its list), run by the
/// executor of `mode` when one serves it; its deadline is `timeout`, else the executor's
/// default. The source fills in what it knows beyond that (a sync hook's rule included).
pub fn async_entry(
    source: HookSourceKind,
    name: String,
    index: usize,
    mode: Option<&str>,
    timeout: Option<Duration>,
    plugins: &PluginHost,
) -> CatalogEntry {
    let timeout = timeout.unwrap_or_else(|| plugins.timeout_for(&Default::default()));
    let executor = mode.and_then(|m| plugins.plugin_ref(m).ok());
    CatalogEntry {
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
