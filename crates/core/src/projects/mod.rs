//! Projects: `[projects.NAME]` in `canopy.toml`, a named git checkout with its lifecycle hooks
//! (`checkout_updated`, `tag_pushed`) and its webhooks.
//!
//! ```toml
//! [projects.web]
//! checkout = "/home/me/src/web"      # an absolute path to a git checkout (its workdir)
//! poll_secs = 30                     # the fallback re-check, besides filesystem notifications
//!
//! [[projects.web.hooks.checkout_updated]]
//! command = "./scripts/install-git-hooks.sh"
//! timeout_secs = 30
//!
//! [[projects.web.hooks.tag_pushed]]
//! prompt = "New tag {{tag}}: check release freshness"
//! target_session_name = "release-helper"
//! ```
//!
//! A project hook is any executor config plus `timeout_secs`. It runs in daemon context with
//! the checkout as its workdir, and goes by `<project>/<event>[<index>]` in hook runs, the
//! catalog and the feed (its actor is `hook:<project>/<event>[<index>]`). The watcher that
//! fires them is [`watch`]; what it last saw is kept by the store
//! ([`canopy_store::projects`]).
//!
//! [`check`] reports every problem with its TOML path (`projects.web.hooks.tag_pushed[0].…`);
//! the executors' own checks of each hook need the running plugins and are done by
//! [`check_actions`].

pub mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::hooks::daemon::DATA_MARKER;
use crate::node::is_name;
use canopy_executors::plugins::{PluginHost, WorkConfig, split_work_config};
use canopy_model::events::{ENVELOPE_MARKERS, Envelope, Payload};
use canopy_model::records::hook_runs::{Dispatch, HookSourceKind};
use canopy_store::StoreError;

use crate::bus::Queued;
use crate::bus::source::{
    CallParts, Chosen, HookCall, HookSource, Occurrence, Selection, Trigger, config_text,
};
use crate::hooks::catalog::{CatalogEntry, CatalogFilter};

/// How often a checkout is re-read when no filesystem notification came, by default.
pub const DEFAULT_POLL_SECS: u64 = 30;

/// The longest `poll_secs` allowed.
pub const MAX_POLL_SECS: u64 = 3600;

/// One `[projects.NAME]` section as written.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// The project's git checkout (its workdir): an absolute path.
    pub checkout: Option<PathBuf>,
    /// Seconds between re-reads of the checkout when no filesystem notification came
    /// (default [`DEFAULT_POLL_SECS`]).
    pub poll_secs: Option<u64>,
    /// Lifecycle hooks by event.
    #[serde(default)]
    pub hooks: ProjectHooksConfig,
    /// The project's webhooks, served at `/hooks/<project>/<id>`.
    #[serde(default)]
    pub webhooks: crate::webhooks::config::ProjectWebhooks,
    /// The nodes that watch the checkout and run its lifecycle hooks (default: every node
    /// whose configuration names the project). Its webhooks name their own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Only nodes holding one of these roles watch it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles_permitted: Vec<String>,
}

impl ProjectConfig {
    /// Whether what the watcher and the lifecycle hooks read (checkout, poll interval, hooks)
    /// is the same in both: the webhooks aside.
    pub fn same_lifecycle(&self, other: &Self) -> bool {
        self.checkout == other.checkout
            && self.poll_secs == other.poll_secs
            && self.hooks == other.hooks
            && self.nodes == other.nodes
            && self.roles_permitted == other.roles_permitted
    }
}

/// `[projects.NAME.hooks]`: the hooks of each lifecycle event, in firing order.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProjectHooksConfig {
    /// HEAD moved to a new commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkout_updated: Vec<ProjectHookConfig>,
    /// A new tag appeared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag_pushed: Vec<ProjectHookConfig>,
}

impl ProjectHooksConfig {
    /// The hooks of one event.
    pub fn of(&self, event: ProjectEvent) -> &[ProjectHookConfig] {
        match event {
            ProjectEvent::CheckoutUpdated => &self.checkout_updated,
            ProjectEvent::TagPushed => &self.tag_pushed,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.checkout_updated.is_empty() && self.tag_pushed.is_empty()
    }
}

/// One project hook as written: any executor config, and its timeout.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ProjectHookConfig {
    /// The call's deadline, in seconds (at most 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// The executor config (`command = ...`, `prompt` + `target_session_name`, ...).
    #[serde(flatten)]
    pub action: Map<String, Value>,
}

/// The lifecycle events a project's hooks are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProjectEvent {
    CheckoutUpdated,
    TagPushed,
}

/// Every project event, in the order they are documented.
pub const EVENTS: [ProjectEvent; 2] = [ProjectEvent::CheckoutUpdated, ProjectEvent::TagPushed];

impl ProjectEvent {
    /// The key in `[projects.NAME.hooks]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CheckoutUpdated => "checkout_updated",
            Self::TagPushed => "tag_pushed",
        }
    }

    /// The taxonomy event it is.
    pub fn def(self) -> &'static canopy_model::events::EventDef {
        match self {
            Self::CheckoutUpdated => canopy_model::events::project::CheckoutUpdated::DEF,
            Self::TagPushed => canopy_model::events::project::TagPushed::DEF,
        }
    }

    /// The taxonomy event's name (`project.checkout_updated`).
    pub fn taxonomy_event(self) -> &'static str {
        self.def().name
    }

    /// The project event a taxonomy event name is, if any.
    pub fn of_taxonomy(name: &str) -> Option<Self> {
        EVENTS.into_iter().find(|e| e.taxonomy_event() == name)
    }
}

/// The name a project hook goes by: `<project>/<event>[<index>]`.
pub fn hook_name(project: &str, event: ProjectEvent, index: usize) -> String {
    format!("{project}/{}[{index}]", event.as_str())
}

/// A checked project hook, ready to run.
#[derive(Debug, Clone)]
pub struct ProjectHook {
    /// `<project>/<event>[<index>]`.
    pub name: String,
    pub project: String,
    pub event: ProjectEvent,
    /// Its place in its event's list.
    pub index: usize,
    /// The project's checkout: the hook's workdir.
    pub checkout: PathBuf,
    pub config: ProjectHookConfig,
    pub timeout: Option<Duration>,
    /// The executor work of the config.
    pub work: WorkConfig,
    /// The markers its event offers: the envelope's, `data`, and the event's own.
    pub markers: Vec<&'static str>,
    /// Its config as its hook runs record it, serialized once at load.
    pub recorded_config: Arc<str>,
}

impl ProjectHook {
    /// Whether this hook fires for this feed event: its event, of its project.
    pub fn matches(&self, envelope: &Envelope) -> bool {
        envelope.event == self.event.taxonomy_event()
            && envelope.payload.get("project_name").and_then(Value::as_str)
                == Some(self.project.as_str())
    }

    /// Its place in `canopy.toml`.
    pub fn path(&self) -> String {
        format!(
            "projects.{}.hooks.{}[{}]",
            self.project,
            self.event.as_str(),
            self.index
        )
    }
}

/// One configured project, checked: what its watcher needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    pub name: String,
    /// The checkout as configured (absolute).
    pub checkout: PathBuf,
    pub poll: Duration,
    /// The nodes that watch it (none: every node), and the roles one must hold.
    pub nodes: Vec<String>,
    pub roles_permitted: Vec<String>,
}

/// Every project and project hook in force.
#[derive(Debug, Clone, Default)]
pub struct Projects {
    /// Projects with a checkout (the ones watched), by name.
    pub projects: Vec<Project>,
    /// Their hooks, project by project, `checkout_updated` before `tag_pushed`, in order.
    pub hooks: Vec<Arc<ProjectHook>>,
}

impl Projects {
    /// The hooks a feed event fires, in order.
    pub fn fired_by<'a>(
        &'a self,
        envelope: &'a Envelope,
    ) -> impl Iterator<Item = &'a Arc<ProjectHook>> + 'a {
        self.hooks.iter().filter(move |h| h.matches(envelope))
    }
}

/// The markers a project event offers its hooks.
fn markers_of(event: ProjectEvent) -> Vec<&'static str> {
    let mut markers: Vec<&'static str> = ENVELOPE_MARKERS.to_vec();
    markers.push(DATA_MARKER);
    for marker in event.def().markers {
        if !markers.contains(marker) {
            markers.push(marker);
        }
    }
    markers
}

/// Checks the `[projects]` sections and compiles what the watchers and the bus need; returns
/// every problem, each with its TOML path.
pub fn compile(projects: &BTreeMap<String, ProjectConfig>) -> Result<Projects, Vec<String>> {
    let mut problems = Vec::new();
    let mut compiled = Projects::default();
    let max_timeout = canopy_executors::plugins::MAX_TIMEOUT.as_secs();
    for (name, project) in projects {
        let at = |field: &str| format!("projects.{name}.{field}");
        if !is_name(name) {
            problems.push(format!(
                "projects.{name}: `{name}` is not a project name (ASCII letters, digits, `-`, `_`, `.`; at most 100)"
            ));
            continue;
        }
        let checkout = match &project.checkout {
            Some(path) if !path.is_absolute() => {
                // Written as from the home folder, most likely: say it in full.
                let home = std::env::var_os("HOME")
                    .map_or_else(|| PathBuf::from("/home/me"), PathBuf::from);
                problems.push(format!(
                    "{}: `{}` is not an absolute path; give the checkout's full path (such as {})",
                    at("checkout"),
                    path.display(),
                    home.join(path).display()
                ));
                None
            }
            Some(path) => Some(path.clone()),
            None if !project.hooks.is_empty() => {
                problems.push(format!(
                    "{}: missing; a project with hooks needs the absolute path of its git checkout",
                    at("checkout")
                ));
                None
            }
            None => None,
        };
        let poll = match project.poll_secs {
            Some(secs) if !(1..=MAX_POLL_SECS).contains(&secs) => {
                problems.push(format!(
                    "{}: must be from 1 to {MAX_POLL_SECS} (an hour)",
                    at("poll_secs")
                ));
                Duration::from_secs(DEFAULT_POLL_SECS)
            }
            Some(secs) => Duration::from_secs(secs),
            None => Duration::from_secs(DEFAULT_POLL_SECS),
        };
        for event in EVENTS {
            for (index, hook) in project.hooks.of(event).iter().enumerate() {
                let at = |field: Option<&str>| {
                    let base = format!("projects.{name}.hooks.{}[{index}]", event.as_str());
                    match field {
                        Some(field) => format!("{base}.{field}"),
                        None => base,
                    }
                };
                let before = problems.len();
                let timeout = match hook.timeout_secs {
                    Some(secs) if !(1..=max_timeout).contains(&secs) => {
                        problems.push(format!(
                            "{}: must be from 1 to {max_timeout} (7 days)",
                            at(Some("timeout_secs"))
                        ));
                        None
                    }
                    secs => secs.map(Duration::from_secs),
                };
                let work = split_work_config(&hook.action)
                    .map_err(|err| problems.push(format!("{}: {err}", at(None))))
                    .ok();
                if let Some(work) = &work
                    && let Err(err) = work.host().check()
                {
                    problems.push(format!("{}: {err}", at(None)));
                }
                let (Some(work), Some(checkout)) = (work, &checkout) else {
                    continue;
                };
                if problems.len() > before {
                    continue;
                }
                compiled.hooks.push(Arc::new(ProjectHook {
                    name: hook_name(name, event, index),
                    project: name.clone(),
                    event,
                    index,
                    checkout: checkout.clone(),
                    recorded_config: config_text(hook),
                    config: hook.clone(),
                    timeout,
                    work,
                    markers: markers_of(event),
                }));
            }
        }
        if let Some(checkout) = checkout {
            compiled.projects.push(Project {
                name: name.clone(),
                checkout,
                poll,
                nodes: project.nodes.clone(),
                roles_permitted: project.roles_permitted.clone(),
            });
        }
    }
    if problems.is_empty() {
        Ok(compiled)
    } else {
        Err(problems)
    }
}

/// Puts the configured projects in force at the daemon's start: their hooks on the bus and a
/// watcher per checkout (the daemon hands the watchers to its reloader). A hook whose action
/// its executor refuses is logged; its runs fail until the file is fixed.
pub async fn start(
    config: &crate::config::Config,
    plugins: &PluginHost,
    bus: &crate::bus::Bus,
    drain: &crate::drain::Drain,
) -> anyhow::Result<Arc<watch::Watchers>> {
    let projects =
        compile(&config.projects).map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
    for problem in check_actions(plugins, &projects).await {
        tracing::warn!(%problem, "a project hook's action does not validate; its runs will fail until it does");
    }
    let watchers = Arc::new(watch::Watchers::new(bus.clone(), drain.clone()));
    let watched = projects.projects.clone();
    bus.set_project_hooks(projects);
    watchers.apply(&watched);
    Ok(watchers)
}

/// Checks the `[projects]` sections; every problem with its TOML path.
pub fn check(projects: &BTreeMap<String, ProjectConfig>) -> Vec<String> {
    compile(projects).err().unwrap_or_default()
}

/// The executors' own checks of each project hook (the mode is served, the config is valid for
/// it, its markers are ones the event offers); every problem with its TOML path.
pub async fn check_actions(plugins: &PluginHost, projects: &Projects) -> Vec<String> {
    let mut problems = Vec::new();
    for hook in &projects.hooks {
        if let Err(err) = plugins.validate(&hook.work, &hook.markers).await {
            problems.push(format!("{}: {err}", hook.path()));
        }
    }
    problems
}

/// Project hooks as a hook source: a project event's project's hooks for that event, in order.
pub(crate) struct ProjectHookSource;

impl HookSource for ProjectHookSource {
    fn kind(&self) -> HookSourceKind {
        HookSourceKind::Project
    }

    fn select(&self, event: &Occurrence<'_>) -> Result<Option<Selection>, StoreError> {
        if event.envelope.family != canopy_model::events::Family::Project {
            return Ok(None);
        }
        let hooks = event
            .bus
            .project_hooks()
            .fired_by(event.envelope)
            .map(|hook| Chosen {
                name: hook.name.clone(),
                index: hook.index,
                config: hook.recorded_config.clone(),
                work: Ok(hook.work.clone()),
                spec_id: None,
                call: hook.clone(),
                declared_in: None,
            })
            .collect();
        Ok(Selection::of_envelope(event.envelope, hooks))
    }

    fn catalog(&self, filter: &CatalogFilter<'_>) -> Vec<CatalogEntry> {
        // Project hooks fire on project events, never on a graph's.
        if filter.graph_named {
            return Vec::new();
        }
        let projects = filter.bus.project_hooks();
        projects
            .hooks
            .iter()
            .filter(|hook| {
                if filter
                    .event
                    .is_some_and(|e| !e.names_event(hook.event.taxonomy_event()))
                    || !filter.allows_mode(Dispatch::Async, Some(&hook.work.mode))
                {
                    return false;
                }
                filter.workspace.is_none_or(|workspace| {
                    let real = std::fs::canonicalize(&hook.checkout)
                        .unwrap_or_else(|_| hook.checkout.clone());
                    Path::new(workspace) == real || Path::new(workspace) == hook.checkout
                })
            })
            .map(|hook| catalog_entry(filter.plugins, hook))
            .collect()
    }
}

/// A project's hook as the catalog lists it.
fn catalog_entry(plugins: &PluginHost, hook: &ProjectHook) -> CatalogEntry {
    let checkout = hook.checkout.to_string_lossy().into_owned();
    CatalogEntry {
        event: hook.event.taxonomy_event().to_string(),
        key: Some(hook.event.as_str().to_string()),
        matcher: json!({ "project": hook.project }),
        metadata: crate::hooks::catalog::metadata([
            ("project", hook.project.clone()),
            ("checkout", checkout.clone()),
            ("key", hook.event.as_str().to_string()),
            ("index", hook.index.to_string()),
        ]),
        project: Some(hook.project.clone()),
        checkout: Some(checkout),
        config: serde_json::to_value(&hook.config).unwrap_or(Value::Null),
        ..crate::hooks::catalog::async_entry(
            HookSourceKind::Project,
            hook.name.clone(),
            hook.index,
            Some(&hook.work.mode),
            hook.timeout.or_else(|| hook.work.host().timeout()),
            plugins,
        )
    }
}

/// A project hook's call: the envelope's markers, in the project's checkout, with its own
/// timeout.
impl HookCall for ProjectHook {
    fn parts(&self, trigger: &Trigger, queued: &Queued, fallback_dir: &Path) -> CallParts {
        CallParts::of_envelope(
            trigger,
            queued,
            fallback_dir,
            &self.markers,
            |_| Some(self.checkout.clone()),
            self.timeout,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<crate::config::Config, Vec<String>> {
        crate::config::Config::parse(text)
    }

    #[test]
    fn hooks_of_both_events_compile_with_their_names_and_markers() {
        let config = parse(
            r#"
[projects.web]
checkout = "/srv/web"

[[projects.web.hooks.checkout_updated]]
command = "./scripts/install-git-hooks.sh {{commit_sha}}"
timeout_secs = 30

[[projects.web.hooks.tag_pushed]]
prompt = "New tag {{tag}}: check release freshness"
target_session_name = "release-helper"
"#,
        )
        .unwrap();
        let projects = compile(&config.projects).unwrap();
        assert_eq!(
            projects.projects,
            [Project {
                name: "web".into(),
                checkout: "/srv/web".into(),
                poll: Duration::from_secs(DEFAULT_POLL_SECS),
                nodes: Vec::new(),
                roles_permitted: Vec::new(),
            }]
        );
        let names: Vec<&str> = projects.hooks.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["web/checkout_updated[0]", "web/tag_pushed[0]"]);
        let first = &projects.hooks[0];
        assert_eq!(first.work.mode, "command");
        assert_eq!(first.timeout, Some(Duration::from_secs(30)));
        assert!(first.markers.contains(&"commit_sha"));
        assert!(!first.work.config().contains_key("timeout_secs"));
        assert_eq!(projects.hooks[1].work.mode, "interactive");
        assert!(projects.hooks[1].markers.contains(&"tag"));
    }

    #[test]
    fn every_problem_names_its_path() {
        let problems = parse(
            r#"
[projects.web]
checkout = "src/web"
poll_secs = 0

[[projects.web.hooks.tag_pushed]]
comand = "x"

[[projects.web.hooks.tag_pushed]]
command = "true"
timeout_secs = 0

[projects.api]
[[projects.api.hooks.checkout_updated]]
command = "true"
"#,
        )
        .unwrap_err()
        .join("\n");
        for expected in [
            "projects.web.checkout: `src/web` is not an absolute path; give the checkout's full path (such as /",
            "/src/web)",
            "projects.web.poll_secs: must be from 1 to 3600",
            "projects.web.hooks.tag_pushed[0]: unknown field `comand`; did you mean `command`?",
            "projects.web.hooks.tag_pushed[1].timeout_secs: must be from 1 to",
            "projects.api.checkout: missing",
        ] {
            assert!(
                problems.contains(expected),
                "missing {expected:?} in:\n{problems}"
            );
        }
    }

    #[test]
    fn an_unknown_event_is_refused_listing_the_events() {
        let problems = parse(
            "[projects.web]\ncheckout = \"/srv/web\"\n[[projects.web.hooks.tag_push]]\ncommand = \"true\"\n",
        )
        .unwrap_err()
        .join("\n");
        assert!(
            problems.contains("projects.web.hooks")
                && problems.contains("tag_push")
                && problems.contains("checkout_updated")
                && problems.contains("tag_pushed"),
            "{problems}"
        );
    }

    #[test]
    fn a_project_without_hooks_needs_no_checkout() {
        let config = parse("[projects.web]\n").unwrap();
        let projects = compile(&config.projects).unwrap();
        assert!(projects.projects.is_empty() && projects.hooks.is_empty());
    }
}
