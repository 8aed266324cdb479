//! The hook catalog (`GET /api/hooks/catalog`): every configured hook, resolved across its
//! sources, as each source lists its own ([`crate::bus::source::HookSource::catalog`]). This
//! module holds what the sources share: the filters a request gives, and the entry's common
//! shape.

use std::time::Duration;

use canopy_executors::plugins::PluginHost;
use canopy_model::events::EventPattern;
use canopy_model::hook_keys::HookEvent;
use canopy_store::graphs::Graph;
use canopy_store::hook_runs::ASYNC_MODE;

use super::daemon::DaemonHook;
use crate::bus::Bus;

/// What one catalog request asks every source.
pub(crate) struct CatalogFilter<'a> {
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
    /// Whether the mode filter lets a hook of this executor mode through.
    pub fn allows_mode(&self, executor: Option<&str>) -> bool {
        self.mode.is_none_or(|m| m.allows(executor))
    }
}

/// An `event` filter: a graph hook's key (`on_completed`: that key's hooks), or a taxonomy
/// event or glob (`graph.run.completed`, `spec.*`: every hook that fires on a matching event,
/// graph hooks by their key's event included).
#[derive(Debug, Clone)]
pub(crate) enum EventFilter {
    Key(HookEvent),
    Pattern(EventPattern),
}

impl EventFilter {
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
pub(crate) enum ModeFilter {
    /// `sync` or `async`, the hook API's mode.
    Dispatch(String),
    /// An executor mode.
    Executor(String),
}

impl ModeFilter {
    fn allows(&self, executor: Option<&str>) -> bool {
        match self {
            Self::Dispatch(mode) => mode == ASYNC_MODE,
            Self::Executor(mode) => executor == Some(mode.as_str()),
        }
    }
}

/// Milliseconds of a timeout, for the catalog.
pub(crate) fn millis(timeout: Option<Duration>) -> Option<u64> {
    timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
}
