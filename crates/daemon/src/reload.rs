//! Re-reading `canopy.toml` while the daemon runs (`canopy config reload`, SIGHUP), and checking
//! a file before it is put in force (`canopy config validate`).
//!
//! A file is checked whole first -- every section, every daemon hook, and each hook's action
//! by its executor -- and refused whole when anything is wrong: the configuration in force does
//! not change. A valid file puts its daemon hooks, roles, dispatch depth, agent platforms and
//! projects (their hooks and checkout watchers) in force at once; what is read only at start
//! (`listen`, `limits`, `process`, `log`, `feed`, `database`, and the node name, under which
//! the daemon's claims in the database are recorded) is named in the answer as needing a
//! restart when it changed.

pub use canopy_model::records::config::ReloadReport;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use canopy_core::bus::Bus;
use canopy_core::config::Config;
use canopy_core::hooks::daemon::{DaemonHooks, check_actions};
use canopy_executors::plugins::PluginHost;
use canopy_executors::plugins::platforms::Platform;

/// The agent platforms and profiles in force, shared with the executor host's services.
pub type Platforms = Arc<RwLock<AgentSettings>>;

/// What an agent call reads from `canopy.toml` when it runs: its platform and its profiles.
#[derive(Debug, Default)]
pub struct AgentSettings {
    pub platforms: BTreeMap<String, Platform>,
    /// Each profile's `runtime_hooks`.
    pub profiles: BTreeMap<String, serde_json::Value>,
}

impl AgentSettings {
    pub fn of(config: &Config) -> Self {
        Self {
            platforms: config.platforms(),
            profiles: config.profiles(),
        }
    }
}

/// Checks and applies `canopy.toml`.
pub struct Reloader {
    path: PathBuf,
    bus: Bus,
    plugins: PluginHost,
    platforms: Platforms,
    /// The configuration in force (what a reload compares against).
    current: Mutex<Config>,
    /// One reload at a time.
    gate: tokio::sync::Mutex<()>,
    /// The project watchers, once the daemon has started them.
    watchers: std::sync::OnceLock<Arc<canopy_core::projects::watch::Watchers>>,
    /// The crons, once the daemon has started them.
    crons: std::sync::OnceLock<canopy_core::crons::Crons>,
    webhooks: std::sync::OnceLock<canopy_core::webhooks::Ingress>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// The profiles in force, each with its `runtime_hooks` as written.
    pub fn profiles(&self) -> BTreeMap<String, serde_json::Value> {
        self.platforms
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .profiles
            .clone()
    }

    pub fn new(
        path: PathBuf,
        bus: Bus,
        plugins: PluginHost,
        platforms: Platforms,
        current: Config,
    ) -> Self {
        Self {
            path,
            bus,
            plugins,
            platforms,
            current: Mutex::new(current),
            gate: tokio::sync::Mutex::new(()),
            watchers: std::sync::OnceLock::new(),
            crons: std::sync::OnceLock::new(),
            webhooks: std::sync::OnceLock::new(),
        }
    }

    /// Hands the webhook ingress to the reloader: a reload that changes the webhooks' entries
    /// puts them in force.
    pub fn serve_webhooks(&self, ingress: canopy_core::webhooks::Ingress) {
        let _ = self.webhooks.set(ingress);
    }

    /// Hands the crons to the reloader: a reload that changes `[[crons]]` reschedules them.
    pub fn schedule_crons(&self, crons: canopy_core::crons::Crons) {
        let _ = self.crons.set(crons);
    }

    /// Hands the project watchers to the reloader: a reload that changes `[projects]` starts,
    /// stops or restarts them.
    pub fn watch_projects(&self, watchers: Arc<canopy_core::projects::watch::Watchers>) {
        let _ = self.watchers.set(watchers);
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Checks a configuration text whole: every problem, each with its TOML path.
    pub async fn check(&self, text: &str) -> Result<(Config, DaemonHooks), Vec<String>> {
        let config = Config::parse(text)?;
        let hooks = config.daemon_hooks()?;
        let mut problems = check_actions(&self.plugins, &hooks).await;
        let projects = canopy_core::projects::compile(&config.projects)?;
        problems.extend(canopy_core::projects::check_actions(&self.plugins, &projects).await);
        problems.extend(canopy_core::crons::check_actions(&self.plugins, &config.crons()?).await);
        let webhooks = canopy_core::webhooks::config::compile(&config)?;
        problems
            .extend(canopy_core::webhooks::config::check_actions(&self.plugins, &webhooks).await);
        if problems.is_empty() {
            Ok((config, hooks))
        } else {
            Err(problems)
        }
    }

    /// Re-reads the file and puts it in force, or changes nothing and returns every problem.
    pub async fn reload(&self) -> Result<ReloadReport, Vec<String>> {
        let _one = self.gate.lock().await;
        // Off the runtime: a file system can be slow, and nothing read may block a worker.
        let path = self.path.clone();
        let text = match tokio::task::spawn_blocking(move || canopy_core::config::read_file(&path))
            .await
        {
            Ok(Ok(text)) => text.unwrap_or_default(),
            Ok(Err(err)) => return Err(vec![err]),
            Err(err) => return Err(vec![format!("cannot read {}: {err}", self.path.display())]),
        };
        let (config, hooks) = self.check(&text).await?;
        let (report, changed) = self.apply(config, hooks);
        if let (Some(Ok(new_crons)), Some(crons)) = (changed.crons, self.crons.get())
            && let Err(err) = crons.replace(new_crons).await
        {
            tracing::error!(error = %err, "cannot reschedule the crons");
        }
        if let (Some(webhooks), Some(ingress)) = (changed.webhooks, self.webhooks.get()) {
            ingress.replace(webhooks).await;
        }
        tracing::info!(
            path = %self.path.display(),
            hooks = report.hooks,
            applied = %report.applied.join(", "),
            needs_restart = %report.needs_restart.join(", "),
            "configuration reloaded"
        );
        Ok(report)
    }

    /// Puts a checked configuration in force, all but the crons and the webhooks (returned
    /// when they changed: putting them in force awaits).
    fn apply(&self, config: Config, mut hooks: DaemonHooks) -> (ReloadReport, Changed) {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = current.clone();
        let mut applied = Vec::new();
        let mut needs_restart = Vec::new();
        let mut note = |changed: bool, section: &str, live: bool| {
            if changed {
                if live {
                    applied.push(section.to_string());
                } else {
                    needs_restart.push(section.to_string());
                }
            }
        };
        note(old.hooks != config.hooks, "hooks", true);
        // The node name is what this daemon's claims in the database are recorded under (its
        // leases, its hook runs, its crons' schedules): the one it started with stays in force
        // until a restart.
        let in_force = self.bus.node();
        let renamed = hooks.identity.node != in_force;
        if renamed {
            hooks.identity.node = in_force;
        }
        note(renamed, "node", false);
        note(old.roles != config.roles, "roles", true);
        note(old.platforms != config.platforms, "platforms", true);
        note(old.profiles != config.profiles, "profiles", true);
        let projects_changed = old.projects.len() != config.projects.len()
            || old.projects.iter().any(|(name, project)| {
                config
                    .projects
                    .get(name)
                    .is_none_or(|new| !new.same_lifecycle(project))
            });
        note(projects_changed, "projects", true);
        let crons_changed = old.crons != config.crons;
        note(crons_changed, "crons", true);
        // Webhooks: their entries (hooks, tokens' sources, the actions they run) are put in
        // force; the listener's own settings (its address, connection limits, flood rate) are
        // read at start, and an edit of them is named, to restart for. A project added or
        // removed without a `webhooks` section changes none.
        let project_webhooks =
            |c: &Config| -> Vec<(String, canopy_core::webhooks::config::ProjectWebhooks)> {
                c.projects
                    .iter()
                    .filter(|(_, p)| p.webhooks != Default::default())
                    .map(|(name, p)| (name.clone(), p.webhooks.clone()))
                    .collect()
            };
        let webhooks_changed = old.webhooks != config.webhooks
            || old.actions != config.actions
            || project_webhooks(&old) != project_webhooks(&config);
        let new_webhooks = webhooks_changed
            .then(|| canopy_core::webhooks::config::compile(&config).ok())
            .flatten();
        let listener_changed = webhooks_changed
            && match (
                canopy_core::webhooks::config::compile(&old).ok(),
                &new_webhooks,
            ) {
                (Some(old), Some(new)) => !old.same_listener(new),
                _ => true,
            };
        note(webhooks_changed, "webhooks", true);
        note(
            listener_changed,
            "webhooks listener (its address, connection limits, flood_rate)",
            false,
        );
        note(old.listen != config.listen, "listen", false);
        let mut old_limits = old.limits.clone();
        old_limits.max_dispatch_depth = config.limits.max_dispatch_depth;
        note(
            old.limits.max_dispatch_depth != config.limits.max_dispatch_depth,
            "limits.max_dispatch_depth",
            true,
        );
        old_limits.breaker_firings = config.limits.breaker_firings;
        old_limits.breaker_window_secs = config.limits.breaker_window_secs;
        note(
            old.limits.breaker_firings != config.limits.breaker_firings
                || old.limits.breaker_window_secs != config.limits.breaker_window_secs,
            "limits.breaker",
            true,
        );
        note(old_limits != config.limits, "limits", false);
        note(old.process != config.process, "process", false);
        note(old.log != config.log, "log", false);
        note(old.feed != config.feed, "feed", false);
        note(old.retention != config.retention, "retention", false);
        note(old.database != config.database, "database", false);
        *self
            .platforms
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = AgentSettings::of(&config);
        let report = ReloadReport {
            path: self.path.display().to_string(),
            hooks: hooks.hooks.len(),
            node: hooks.identity.node.clone(),
            applied,
            needs_restart,
        };
        self.bus.set_daemon_hooks(hooks);
        if projects_changed && let Ok(projects) = canopy_core::projects::compile(&config.projects) {
            if let Some(watchers) = self.watchers.get() {
                watchers.apply(&projects.projects);
            }
            self.bus.set_project_hooks(projects);
        }
        let changed = Changed {
            crons: crons_changed.then(|| config.crons()),
            webhooks: new_webhooks,
        };
        *current = config;
        (report, changed)
    }
}

/// What a reload changed that is put in force after [`Reloader::apply`] (it awaits).
struct Changed {
    crons: Option<Result<Vec<canopy_core::crons::Cron>, Vec<String>>>,
    webhooks: Option<canopy_core::webhooks::config::Webhooks>,
}
