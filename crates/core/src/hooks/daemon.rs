//! Daemon hooks: `[[hooks]]` in `canopy.toml`, reacting to any event of the feed.
//!
//! ```toml
//! node = "build-1"                 # this daemon's node name; default: the host name
//! roles = ["controller"]
//!
//! [[hooks]]
//! name = "announce-blocked"        # required, unique, stable
//! event = "graph.run.blocked"      # an event of the taxonomy, or a glob ("spec.*")
//! match = { graph_name = "web" }   # optional: exact, glob ("web-*") or regex ("re:^web")
//! nodes = ["build-1"]              # optional: run only on these nodes
//! roles_permitted = ["controller"] # optional: run only on nodes holding one of these roles
//! timeout_secs = 15
//! cwd = "{{workdir}}"              # rendered; default: the event's project, else the data dir
//! action = { command = "notify-send {{graph_name}} {{blocker}}" }   # any executor config
//!
//! [[hooks]]
//! name = "no-force-push"
//! event = "node.pre_dispatch"      # a sync-eligible event: asked before its action
//! mode = "sync"                    # decides: allow, deny or patch (default "async")
//! priority = 10                    # higher runs first (default 0), then canopy.toml order
//! required = true                  # a failure denies the action (default false: it goes on)
//! timeout_ms = 500                 # default 1000 for a sync hook
//! action = { command = "! grep -q 'push --force' <<< \"$CANOPY_HOOK_COMMAND\"" }
//! ```
//!
//! [`compile`] checks every hook and reports every problem with its TOML path
//! (`hooks[2].event: ...`); the executor's own validation of `action` needs the running plugins
//! and is done by [`check_actions`].

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use canopy_executors::plugins::{PluginHost, WorkConfig, split_work_config};
use canopy_model::events::{ENVELOPE_MARKERS, Envelope, EventPattern};
use canopy_model::pattern::Pattern;
use canopy_model::records::hook_runs::{Dispatch, HookSourceKind};
use canopy_store::StoreError;

use crate::bus::Queued;
use crate::bus::source::{
    CallParts, Chosen, HookCall, HookSource, Occurrence, Selection, Trigger, config_text,
};
use crate::hooks::catalog::{CatalogEntry, CatalogFilter};
use crate::node::{Identity, is_name};

/// The marker holding the whole event as JSON (`CANOPY_HOOK_DATA` in a command).
pub const DATA_MARKER: &str = "data";

/// A sync hook's deadline when it names none: its action waits for it.
pub const SYNC_TIMEOUT: Duration = Duration::from_millis(1000);

/// The events asked of sync hooks, by name.
pub fn sync_events() -> Vec<&'static str> {
    canopy_model::events::all()
        .filter(|def| def.sync_eligible)
        .map(|def| def.name)
        .collect()
}

/// Dispatch depth past which hooks no longer fire (their runs are recorded `dropped`).
pub const DEFAULT_MAX_DEPTH: u32 = 4;

/// One `[[hooks]]` entry as written.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DaemonHookConfig {
    pub name: String,
    pub event: String,
    #[serde(default, rename = "match", skip_serializing_if = "BTreeMap::is_empty")]
    pub matcher: BTreeMap<String, Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles_permitted: Vec<String>,
    pub timeout_secs: Option<u64>,
    /// `sync` (decides before its action) or `async` (reacts after it; the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// A sync hook's place among its event's hooks: higher first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Whether a sync hook's failure denies its action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    pub cwd: Option<String>,
    pub action: Map<String, Value>,
}

/// A checked daemon hook, ready to match events.
#[derive(Debug, Clone)]
pub struct DaemonHook {
    /// Its place in `canopy.toml` (`hooks[index]`).
    pub index: usize,
    pub config: DaemonHookConfig,
    pub pattern: EventPattern,
    pub matchers: Vec<(String, Pattern)>,
    pub timeout: Option<Duration>,
    /// How it is dispatched; a sync hook's rule (priority, required).
    pub dispatch: Dispatch,
    pub priority: i64,
    pub required: bool,
    /// The executor work of `action`.
    pub work: WorkConfig,
    /// The markers its events offer: the envelope's, `data`, and every matching event's.
    pub markers: Vec<&'static str>,
    /// Its config as its hook runs record it, serialized once at load (not at every firing,
    /// inside the event's write).
    pub recorded_config: Arc<str>,
}

impl DaemonHook {
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether this daemon runs the hook at all.
    pub fn serves(&self, identity: &Identity) -> bool {
        identity.runs(&self.config.nodes, &self.config.roles_permitted)
    }

    /// Whether the hook fires for this event: its event pattern and every `match` field.
    /// Whether it may fire for events with these field values: none of its `match` fields on
    /// one of them refuses the value.
    pub fn allows(&self, facts: &[(&str, &str)]) -> bool {
        self.matchers.iter().all(|(field, matcher)| {
            facts
                .iter()
                .filter(|(name, _)| name == field)
                .all(|(_, value)| matcher.matches(value))
        })
    }

    pub fn matches(&self, envelope: &Envelope) -> bool {
        self.dispatch == Dispatch::Async
            && self.pattern.matches(&envelope.event)
            && self.matchers.iter().all(|(field, matcher)| {
                field_text(&EventFields::of(envelope), field)
                    .is_some_and(|value| matcher.matches(&value))
            })
    }

    /// Whether the hook decides this question: a sync hook whose pattern and `match` fields
    /// match it.
    pub fn decides(&self, question: &EventFields<'_>) -> bool {
        self.dispatch == Dispatch::Sync
            && self.pattern.matches(question.event)
            && self.matchers.iter().all(|(field, matcher)| {
                field_text(question, field).is_some_and(|value| matcher.matches(&value))
            })
    }
}

/// What a `match` field may name: an envelope's fields (of an event, or of a question asked
/// of sync hooks) and its payload's.
pub struct EventFields<'a> {
    pub event: &'a str,
    pub node: &'a str,
    pub actor: &'a str,
    pub project: Option<&'a str>,
    pub target: Option<&'a str>,
    pub payload: &'a Value,
}

impl<'a> EventFields<'a> {
    pub fn of(envelope: &'a Envelope) -> Self {
        Self {
            event: &envelope.event,
            node: &envelope.node,
            actor: &envelope.actor,
            project: envelope.project.as_deref(),
            target: envelope.target.as_deref(),
            payload: &envelope.payload,
        }
    }
}

/// A field of an event as text: an envelope field, or a payload field (dotted for nested).
fn field_text(fields: &EventFields<'_>, field: &str) -> Option<String> {
    match field {
        "event" => return Some(fields.event.to_string()),
        "node" => return Some(fields.node.to_string()),
        "actor" => return Some(fields.actor.to_string()),
        "project" => return fields.project.map(str::to_string),
        "target" => return fields.target.map(str::to_string),
        _ => {}
    }
    let mut value = fields.payload;
    for part in field.split('.') {
        value = value.get(part)?;
    }
    canopy_model::events::scalar_text(value)
}

/// The daemon's hooks and identity, as configured.
#[derive(Debug, Clone)]
pub struct DaemonHooks {
    /// Which daemon this is (its node name and roles).
    pub identity: Identity,
    /// Dispatch depth past which hooks no longer fire.
    pub max_depth: u32,
    /// A hook firing more than this many times within [`Self::breaker_window`] trips (see
    /// [`crate::hooks::breaker`]); 0 never trips.
    pub breaker_firings: u32,
    pub breaker_window: std::time::Duration,
    pub hooks: Vec<Arc<DaemonHook>>,
}

impl Default for DaemonHooks {
    fn default() -> Self {
        Self {
            identity: Identity::default(),
            max_depth: DEFAULT_MAX_DEPTH,
            breaker_firings: crate::hooks::breaker::DEFAULT_FIRINGS,
            breaker_window: crate::hooks::breaker::DEFAULT_WINDOW,
            hooks: Vec::new(),
        }
    }
}

/// Checks the `[[hooks]]` entries; returns every problem, each with its TOML path.
pub fn compile(
    identity: Result<Identity, Vec<String>>,
    max_depth: u32,
    entries: &[DaemonHookConfig],
) -> Result<DaemonHooks, Vec<String>> {
    let (identity, mut problems) = match identity {
        Ok(identity) => (identity, Vec::new()),
        Err(problems) => (Identity::default(), problems),
    };
    let mut names = HashSet::new();
    let mut hooks = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let at = |field: &str| format!("hooks[{index}].{field}");
        let before = problems.len();
        if !is_name(&entry.name) {
            problems.push(format!(
                "{}: `{}` is not a hook name (ASCII letters, digits, `-`, `_`, `.`; at most 100)",
                at("name"),
                entry.name
            ));
        } else if !names.insert(entry.name.clone()) {
            problems.push(format!(
                "{}: `{}` names another hook too; hook names are unique",
                at("name"),
                entry.name
            ));
        }
        let pattern = EventPattern::parse(&entry.event)
            .map_err(|err| problems.push(format!("{}: {err}", at("event"))))
            .ok();
        let mut matchers = Vec::new();
        for (field, value) in &entry.matcher {
            match Pattern::parse(value) {
                Ok(matcher) => matchers.push((field.clone(), matcher)),
                Err(err) => problems.push(format!("{}: {err}", at(&format!("match.{field}")))),
            }
        }
        for (i, name) in entry.nodes.iter().enumerate() {
            if !is_name(name) {
                problems.push(format!(
                    "{}: `{name}` is not a node name",
                    at(&format!("nodes[{i}]"))
                ));
            }
        }
        let dispatch = match entry.mode.as_deref() {
            None | Some("async") => Dispatch::Async,
            Some("sync") => Dispatch::Sync,
            Some(other) => {
                problems.push(format!(
                    "{}: `{other}` is not a hook mode; it is sync (decides before its action) or async (reacts after it; the default)",
                    at("mode")
                ));
                Dispatch::Async
            }
        };
        if let Some(pattern) = &pattern {
            let (asked, told): (Vec<&str>, Vec<&str>) = {
                let mut asked = Vec::new();
                let mut told = Vec::new();
                for def in pattern.events() {
                    if def.sync_eligible {
                        asked.push(def.name);
                    } else {
                        told.push(def.name);
                    }
                }
                (asked, told)
            };
            match dispatch {
                Dispatch::Sync if asked.is_empty() => problems.push(format!(
                    "{}: a sync hook decides before an action, and `{}` names none; the events asked of sync hooks are {}",
                    at("event"),
                    entry.event,
                    sync_events().join(", ")
                )),
                Dispatch::Async if told.is_empty() => problems.push(format!(
                    "{}: {} {} asked before {} action, of sync hooks only; add mode = \"sync\"",
                    at("mode"),
                    asked.join(", "),
                    if asked.len() == 1 { "is" } else { "are" },
                    if asked.len() == 1 { "its" } else { "their" },
                )),
                _ => {}
            }
        }
        if dispatch == Dispatch::Async {
            for (field, given) in [
                ("priority", entry.priority.is_some()),
                ("required", entry.required.is_some()),
                ("timeout_ms", entry.timeout_ms.is_some()),
            ] {
                if given {
                    problems.push(format!(
                        "{}: only a sync hook (mode = \"sync\") takes `{field}`; an async hook runs after its event, in canopy.toml order, and never stops anything",
                        at(field)
                    ));
                }
            }
        }
        if entry.timeout_ms.is_some() && entry.timeout_secs.is_some() {
            problems.push(format!(
                "{}: give timeout_ms or timeout_secs, not both",
                at("timeout_ms")
            ));
        }
        let timeout_ms = match entry.timeout_ms {
            Some(0) => {
                problems.push(format!("{}: must be at least 1", at("timeout_ms")));
                None
            }
            Some(ms) if ms > canopy_executors::plugins::MAX_TIMEOUT.as_millis() as u64 => {
                problems.push(format!(
                    "{}: must be at most {} (7 days)",
                    at("timeout_ms"),
                    canopy_executors::plugins::MAX_TIMEOUT.as_millis()
                ));
                None
            }
            Some(ms) => Some(Duration::from_millis(ms)),
            None => None,
        };
        let timeout = match entry.timeout_secs {
            Some(0) => {
                problems.push(format!("{}: must be at least 1", at("timeout_secs")));
                None
            }
            Some(secs) if secs > canopy_executors::plugins::MAX_TIMEOUT.as_secs() => {
                problems.push(format!(
                    "{}: must be at most {} (7 days)",
                    at("timeout_secs"),
                    canopy_executors::plugins::MAX_TIMEOUT.as_secs()
                ));
                None
            }
            Some(secs) => Some(Duration::from_secs(secs)),
            None => None,
        };
        let timeout = timeout_ms.or(timeout).or(match dispatch {
            Dispatch::Sync => Some(SYNC_TIMEOUT),
            Dispatch::Async | Dispatch::Unknown => None,
        });
        let work = split_work_config(&entry.action)
            .map_err(|err| problems.push(format!("{}: {err}", at("action"))))
            .ok();
        if problems.len() > before {
            continue;
        }
        let (Some(pattern), Some(work)) = (pattern, work) else {
            continue;
        };
        let mut markers: Vec<&'static str> = ENVELOPE_MARKERS.to_vec();
        markers.push(DATA_MARKER);
        for def in pattern
            .events()
            .filter(|def| def.sync_eligible == (dispatch == Dispatch::Sync))
        {
            for marker in def.markers {
                if !markers.contains(marker) {
                    markers.push(marker);
                }
            }
        }
        if let Some(cwd) = &entry.cwd {
            for used in canopy_model::markers::used(cwd) {
                if !markers.contains(&used) {
                    problems.push(format!(
                        "{}: marker {{{{{used}}}}} is not offered by {}; it offers {}",
                        at("cwd"),
                        entry.event,
                        markers.join(", ")
                    ));
                }
            }
        }
        hooks.push(Arc::new(DaemonHook {
            index,
            recorded_config: config_text(entry),
            config: entry.clone(),
            pattern,
            matchers,
            timeout,
            dispatch,
            priority: entry.priority.unwrap_or(0),
            required: entry.required.unwrap_or(false),
            work,
            markers,
        }));
    }
    if problems.is_empty() {
        Ok(DaemonHooks {
            identity,
            max_depth,
            hooks,
            ..DaemonHooks::default()
        })
    } else {
        Err(problems)
    }
}

/// The executors' own checks of each hook's `action` (the mode is served, the config is valid
/// for it, its markers are ones the event offers); every problem with its TOML path.
pub async fn check_actions(plugins: &PluginHost, hooks: &DaemonHooks) -> Vec<String> {
    let mut problems = Vec::new();
    for hook in &hooks.hooks {
        if let Err(err) = plugins.validate(&hook.work, &hook.markers).await {
            problems.push(format!("hooks[{}].action: {err}", hook.index));
        }
    }
    problems
}

/// Daemon hooks as a hook source: those whose event pattern and `match` fields match the event,
/// on nodes (and roles) that serve them, in `canopy.toml` order.
pub(crate) struct DaemonHookSource;

impl HookSource for DaemonHookSource {
    fn kind(&self) -> HookSourceKind {
        HookSourceKind::Config
    }

    fn select(&self, event: &Occurrence<'_>) -> Result<Option<Selection>, StoreError> {
        let (daemon, envelope) = (event.daemon, event.envelope);
        let spec_id = envelope
            .payload
            .get("spec_id")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let hooks = daemon
            .hooks
            .iter()
            .filter(|hook| hook.serves(&daemon.identity) && hook.matches(envelope))
            .map(|hook| Chosen {
                name: hook.name().to_string(),
                index: hook.index,
                config: hook.recorded_config.clone(),
                work: Ok(hook.work.clone()),
                spec_id: spec_id.clone(),
                call: hook.clone(),
                declared_in: None,
            })
            .collect();
        Ok(Selection::of_envelope(envelope, hooks))
    }

    fn catalog(&self, filter: &CatalogFilter<'_>) -> Vec<CatalogEntry> {
        let daemon = filter.bus.daemon_hooks();
        daemon
            .hooks
            .iter()
            .filter(|hook| {
                if filter.event.is_some_and(|e| !e.names_daemon_hook(hook))
                    || !filter.allows_mode(hook.dispatch, Some(&hook.work.mode))
                {
                    return false;
                }
                if let Some(workspace) = filter.workspace
                    && !hook.allows(&[("project", workspace), ("workdir", workspace)])
                {
                    return false;
                }
                // With `graph`: the daemon hooks that may fire for one of its events.
                !filter.graph_named
                    || filter.graphs.iter().any(|g| {
                        hook.allows(&[
                            ("graph_name", &g.name),
                            ("graph_id", &g.id),
                            ("project", &g.workdir),
                            ("workdir", &g.workdir),
                        ])
                    })
            })
            .map(|hook| catalog_entry(filter.plugins, hook, &daemon.identity))
            .collect()
    }
}

/// A daemon hook as the catalog lists it.
fn catalog_entry(plugins: &PluginHost, hook: &DaemonHook, identity: &Identity) -> CatalogEntry {
    let config = &hook.config;
    let mut matcher: Map<String, Value> = config
        .matcher
        .iter()
        .map(|(field, value)| (field.clone(), value.clone()))
        .collect();
    if !config.nodes.is_empty() {
        matcher.insert("nodes".to_string(), json!(config.nodes));
    }
    if !config.roles_permitted.is_empty() {
        matcher.insert("roles_permitted".to_string(), json!(config.roles_permitted));
    }
    let mut metadata = crate::hooks::catalog::metadata([
        ("index", hook.index.to_string()),
        ("serves_this_node", hook.serves(identity).to_string()),
    ]);
    if !config.nodes.is_empty() {
        metadata.insert("nodes".to_string(), config.nodes.join(","));
    }
    if !config.roles_permitted.is_empty() {
        metadata.insert(
            "roles_permitted".to_string(),
            config.roles_permitted.join(","),
        );
    }
    if let Some(cwd) = &config.cwd {
        metadata.insert("cwd".to_string(), cwd.clone());
    }
    CatalogEntry {
        event: hook.pattern.as_str().to_string(),
        events: Some(
            hook.pattern
                .events()
                .map(|def| def.name.to_string())
                .collect(),
        ),
        matcher: Value::Object(matcher),
        metadata,
        config: serde_json::to_value(config).unwrap_or(Value::Null),
        mode: hook.dispatch,
        priority: hook.priority,
        required: hook.required,
        ..crate::hooks::catalog::async_entry(
            HookSourceKind::Config,
            hook.name().to_string(),
            hook.index,
            Some(&hook.work.mode),
            hook.timeout.or_else(|| hook.work.host().timeout()),
            plugins,
        )
    }
}

/// A daemon hook's call: the envelope's markers, in its `cwd` (a template) or the event's
/// project, with its own timeout.
impl HookCall for DaemonHook {
    fn parts(&self, trigger: &Trigger, queued: &Queued, fallback_dir: &Path) -> CallParts {
        CallParts::of_envelope(
            trigger,
            queued,
            fallback_dir,
            &self.markers,
            |markers| {
                self.config
                    .cwd
                    .as_deref()
                    .map(|cwd| PathBuf::from(canopy_model::markers::render_plain(cwd, markers)))
            },
            self.timeout,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(toml_text: &str) -> DaemonHookConfig {
        toml::from_str(toml_text).unwrap()
    }

    fn envelope(event: &str, payload: Value) -> Envelope {
        Envelope {
            id: 1,
            node: "n1".into(),
            project: Some("/w".into()),
            target: None,
            event: event.into(),
            family: canopy_model::events::find(event).unwrap().family,
            timestamp: "2026-01-01T00:00:00Z".parse().unwrap(),
            actor: "user".into(),
            dispatch_depth: 0,
            payload,
        }
    }

    #[test]
    fn a_hook_matches_its_event_glob_and_payload_fields() {
        let hooks = compile(
            Identity::of(Some("n1"), &[]),
            4,
            &[entry(
                r#"
                name = "a"
                event = "graph.run.*"
                match = { graph_name = "web-*", blocker = "re:^dirty" }
                action = { command = "true" }
                "#,
            )],
        )
        .unwrap();
        let hook = &hooks.hooks[0];
        let hit = envelope(
            "graph.run.blocked",
            serde_json::json!({ "graph_name": "web-1", "blocker": "dirty tree" }),
        );
        assert!(hook.matches(&hit));
        let other_name = envelope(
            "graph.run.blocked",
            serde_json::json!({ "graph_name": "api", "blocker": "dirty tree" }),
        );
        assert!(!hook.matches(&other_name));
        let other_event = envelope(
            "spec.completed",
            serde_json::json!({ "graph_name": "web-1" }),
        );
        assert!(!hook.matches(&other_event));
    }

    #[test]
    fn nodes_and_roles_narrow_where_a_hook_runs() {
        let hooks = compile(
            Identity::of(Some("n1"), &["worker".to_string()]),
            4,
            &[
                entry("name = \"a\"\nevent = \"*\"\nnodes = [\"n2\"]\naction = { command = \"true\" }"),
                entry(
                    "name = \"b\"\nevent = \"*\"\nroles_permitted = [\"controller\"]\naction = { command = \"true\" }",
                ),
                entry(
                    "name = \"c\"\nevent = \"*\"\nnodes = [\"n1\"]\nroles_permitted = [\"worker\"]\naction = { command = \"true\" }",
                ),
            ],
        )
        .unwrap();
        let serves: Vec<bool> = hooks
            .hooks
            .iter()
            .map(|h| h.serves(&hooks.identity))
            .collect();
        assert_eq!(serves, [false, false, true]);
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let problems = compile(
            Identity::of(Some("n1"), &[]),
            4,
            &[
                entry("name = \"a\"\nevent = \"graph.ran\"\naction = { command = \"true\" }"),
                entry("name = \"a\"\nevent = \"spec.*\"\nmatch = { x = \"re:(\" }\naction = {}"),
                entry("name = \"ok\"\nevent = \"spec.*\"\ntimeout_secs = 0\naction = { command = \"true\" }"),
            ],
        )
        .unwrap_err();
        let text = problems.join("\n");
        for expected in [
            "hooks[0].event: `graph.ran` matches no event",
            "hooks[1].name: `a` names another hook too",
            "hooks[1].match.x: `(` is not a valid regex",
            "hooks[1].action: sets no mode",
            "hooks[2].timeout_secs: must be at least 1",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }
}
