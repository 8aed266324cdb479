//! The daemon's configuration: `canopy.toml` in the data dir, every key optional.
//!
//! ```toml
//! listen = "127.0.0.1:7461"
//!
//! [limits]
//! plugin_memory_mib = 256        # memory cap of one plugin call
//! default_timeout_seconds = 600  # deadline of a call whose config names none (at most 7 days)
//! max_concurrent_calls = 128     # plugin calls running at once; more wait for a slot
//!
//! # An agent platform: how to launch that agent CLI. `claude` and `codex` have defaults.
//! [platforms.my-agent]
//! command = ["my-agent", "--print", "{prompt}"]
//! model_args = ["--model", "{model}"]
//! effort_args = ["--effort", "{effort}"]
//! resume_args = ["--resume", "{session}"]
//!
//! # How processes run for plugins (see `canopy_executors::procs`).
//! [process]
//! pass_env = ["SSH_AUTH_SOCK", "ANTHROPIC_API_KEY"]  # beyond PATH, HOME, LANG, TZ, TERM
//! kill_orphans_on_start = true   # kill what calls left running when the daemon last died
//!
//! # The daemon's log file, daemon.log in the data dir.
//! [log]
//! max_file_kib = 10240           # rotated past this size; two old files are kept
//!
//! # This daemon's name and roles, which daemon hooks may be narrowed to.
//! node = "build-1"               # default: the host name
//! roles = ["controller"]
//!
//! # The event feed.
//! [feed]
//! keep_days = 30                 # rows older than this are pruned
//!
//! # How long the growing tables keep their rows: see `crate::retention`.
//! [retention]
//! hook_runs_rows = 500000
//!
//! # Where the state is kept: SQLite in the data dir unless PostgreSQL is named (see
//! # `database`).
//! [database]
//! url_env = "CANOPY_DATABASE_URL"
//!
//! # Daemon hooks: see `crate::hooks::daemon`.
//! [[hooks]]
//! name = "announce-blocked"
//! event = "graph.run.blocked"
//! action = { command = "notify-send {{graph_name}} {{blocker}}" }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use canopy_executors::plugins::platforms::{Platform, builtin_platforms};
use canopy_executors::procs::ProcessConfig;
use canopy_model::text::is_env_name;
use serde::Deserialize;

pub mod database;
mod shape;

/// The default address of the HTTP API.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7461";

/// The whole configuration.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address of the HTTP API (loopback only).
    pub listen: Option<String>,
    /// This daemon's node name (default: the host name).
    pub node: Option<String>,
    /// This daemon's roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// The event feed.
    #[serde(default)]
    pub feed: FeedConfig,
    /// Daemon hooks.
    #[serde(default)]
    pub hooks: Vec<crate::hooks::daemon::DaemonHookConfig>,
    /// Crons.
    #[serde(default)]
    pub crons: Vec<crate::crons::CronConfig>,
    /// Projects: named checkouts with their lifecycle hooks and webhooks.
    #[serde(default)]
    pub projects: BTreeMap<String, crate::projects::ProjectConfig>,
    /// Webhook ingress (off unless configured).
    #[serde(default)]
    pub webhooks: crate::webhooks::config::WebhooksConfig,
    /// Named actions (executor configs) a webhook's `action` handler runs.
    #[serde(default)]
    pub actions: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Agent platforms, on top of the built-in `claude` and `codex`.
    #[serde(default)]
    pub platforms: BTreeMap<String, Platform>,
    /// Named profiles an agent config lists (`"profiles": ["base"]`): their runtime hooks come
    /// before its own, in the order it lists them.
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
    /// How processes run for plugins.
    #[serde(default)]
    pub process: ProcessConfig,
    /// The daemon's log file.
    #[serde(default)]
    pub log: LogConfig,
    /// How long rows of the growing tables are kept (see [`crate::retention`]).
    #[serde(default)]
    pub retention: crate::retention::RetentionConfig,
    /// Where the state is kept: SQLite in the data dir, or PostgreSQL.
    #[serde(default)]
    pub database: database::DatabaseConfig,
}

/// The event feed (`[feed]`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct FeedConfig {
    /// Days a feed row is kept.
    pub keep_days: u32,
}

impl Default for FeedConfig {
    fn default() -> Self {
        Self { keep_days: 30 }
    }
}

/// The daemon's log file (`[log]`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Size past which `daemon.log` is rotated, in KiB.
    pub max_file_kib: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            max_file_kib: LOG_MAX_BYTES / 1024,
        }
    }
}

/// Limits applied to plugin calls.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory cap of one plugin call, in MiB.
    pub plugin_memory_mib: u64,
    /// Deadline of a call whose config sets no `timeout_seconds` / `timeout_minutes`.
    pub default_timeout_seconds: u64,
    /// Plugin calls that run at once; the rest wait for a slot within their own deadline.
    pub max_concurrent_calls: u32,
    /// Dispatch depth past which hooks no longer fire (a hook loop ends here).
    pub max_dispatch_depth: u32,
    /// A hook (graph, daemon or project hook) fired more than this many times within
    /// `breaker_window_secs` is tripped: its further firings are dropped until a reload or
    /// `canopy hooks reset NAME`. 0 turns the breaker off.
    pub breaker_firings: u32,
    pub breaker_window_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            plugin_memory_mib: 256,
            default_timeout_seconds: 600,
            max_concurrent_calls: 128,
            max_dispatch_depth: crate::hooks::daemon::DEFAULT_MAX_DEPTH,
            breaker_firings: crate::hooks::breaker::DEFAULT_FIRINGS,
            breaker_window_secs: crate::hooks::breaker::DEFAULT_WINDOW.as_secs(),
        }
    }
}

impl Limits {
    /// The limits of one executor call.
    pub fn calls(&self) -> canopy_executors::plugins::CallLimits {
        canopy_executors::plugins::CallLimits {
            memory_mib: self.plugin_memory_mib,
            default_timeout: std::time::Duration::from_secs(self.default_timeout_seconds),
            max_concurrent_calls: self.max_concurrent_calls,
        }
    }
}

/// The largest `canopy.toml` read.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a configuration file: `None` when there is none. Only a regular file is read, and at
/// most [`MAX_CONFIG_BYTES`]: a FIFO put in its place would block the reader until someone
/// writes to it, a device could be read for ever. It is opened without blocking and checked
/// again once open, so nothing swapped in between can block either. Blocking I/O: call it off
/// the async runtime.
pub fn read_file(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let not_a_file = || {
        format!(
            "{} is not a regular file (a FIFO, a folder or a device); the configuration must be a file",
            path.display()
        )
    };
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => return Err(not_a_file()),
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("cannot read {}: {err}", path.display())),
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    if !meta.is_file() {
        return Err(not_a_file());
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "{} is {} bytes; a configuration may be at most {} MiB",
            path.display(),
            meta.len(),
            MAX_CONFIG_BYTES >> 20
        ));
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    Ok(Some(text))
}

/// The keys of `canopy.toml` that are not tables: they must come before the first `[table]`.
const TOP_LEVEL_KEYS: [&str; 3] = ["listen", "node", "roles"];

impl Config {
    /// Reads `canopy.toml` if it exists; a missing file is the default configuration.
    pub fn load(path: &Path) -> Result<Self> {
        let Some(text) = read_file(path).map_err(|err| anyhow::anyhow!(err))? else {
            return Ok(Self::default());
        };
        let config = Self::parse(&text)
            .map_err(|problems| anyhow::anyhow!("{}: {}", path.display(), problems.join("\n  ")))?;
        Ok(config)
    }

    /// Parses and checks a configuration; every problem found, each naming its TOML path.
    ///
    /// (Read the file with [`read_file`]: never a FIFO, never without bound.)
    ///
    /// A value of the wrong shape (a missing field, an unknown one, a string for a number) is
    /// reported and taken out, and the rest is read again, so one run lists every such problem.
    /// The checks of meaning (an unknown event, a bad schedule) then run on the sections that
    /// had none: a section's own are reported once its shape is right.
    pub fn parse(text: &str) -> Result<Self, Vec<String>> {
        let mut table: toml::Table = toml::from_str(text).map_err(|err| vec![err.to_string()])?;
        let mut problems = Vec::new();
        let mut pruned = shape::Pruned::default();
        let config: Config = loop {
            match serde_path_to_error::deserialize(toml::Value::Table(table.clone())) {
                Ok(config) => break config,
                Err(err) => {
                    let path: Vec<serde_path_to_error::Segment> =
                        err.path().iter().cloned().collect();
                    let mut message = shape::readable(err.into_inner().message());
                    // TOML's trap: a top-level key written after a `[table]` header belongs to
                    // that table.
                    if let [_, .., serde_path_to_error::Segment::Map { key }] = path.as_slice()
                        && TOP_LEVEL_KEYS.contains(&key.as_str())
                        && message.starts_with("unknown field")
                    {
                        message.push_str(&format!(
                            "; `{key}` is a top-level key: in TOML every key after a [table] header belongs to that table, so write `{key}` before the first one"
                        ));
                    }
                    let shown = pruned.original(&path);
                    problems.push(if shown.is_empty() {
                        message
                    } else {
                        format!("{shown}: {message}")
                    });
                    if problems.len() >= shape::MAX_PROBLEMS || !pruned.remove(&mut table, &path) {
                        return Err(problems);
                    }
                }
            }
        };
        if !problems.is_empty() {
            // The checks of meaning, for the sections whose shape was right.
            let broken = pruned.sections();
            let mut more = config.all_problems();
            more.retain(|problem| !broken.iter().any(|s| shape::in_section(problem, s)));
            problems.extend(more);
            return Err(problems);
        }
        match config.all_problems() {
            problems if problems.is_empty() => Ok(config),
            problems => Err(problems),
        }
    }

    /// Every problem of meaning in a configuration of the right shape.
    fn all_problems(&self) -> Vec<String> {
        let config = self;
        let mut problems = config.check();
        if let Err(more) = config.daemon_hooks() {
            problems.extend(more);
        }
        if let Err(more) = config.crons() {
            problems.extend(more);
        }
        problems.extend(crate::projects::check(&config.projects));
        problems.extend(crate::webhooks::config::check(config));
        problems
    }

    /// The daemon hooks and identity this configuration sets.
    pub fn daemon_hooks(&self) -> Result<crate::hooks::daemon::DaemonHooks, Vec<String>> {
        let mut hooks = crate::hooks::daemon::compile(
            self.identity(),
            self.limits.max_dispatch_depth,
            &self.hooks,
        )?;
        hooks.breaker_firings = self.limits.breaker_firings;
        hooks.breaker_window = std::time::Duration::from_secs(self.limits.breaker_window_secs);
        Ok(hooks)
    }

    /// Which daemon this configuration makes (`node`, `roles`), checked.
    pub fn identity(&self) -> Result<crate::node::Identity, Vec<String>> {
        crate::node::Identity::of(self.node.as_deref(), &self.roles)
    }

    /// This daemon's node name: `node`, else the host name.
    pub fn node_name(&self) -> String {
        self.node.clone().unwrap_or_else(crate::node::host_name)
    }

    /// The crons this configuration sets, checked.
    pub fn crons(&self) -> Result<Vec<crate::crons::Cron>, Vec<String>> {
        crate::crons::compile(&self.crons)
    }

    /// The checks of every section but the hooks.
    fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let config = self;
        for (name, platform) in &config.platforms {
            if platform.command.is_empty() {
                problems.push(format!("platforms.{name}.command: must name a program"));
            }
        }
        problems.extend(config.database.check());
        if let Some(bad) = config.process.pass_env.iter().find(|n| !is_env_name(n)) {
            problems.push(format!(
                "process.pass_env: `{bad}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"
            ));
        }
        let max_timeout = canopy_executors::plugins::MAX_TIMEOUT.as_secs();
        if !(1..=max_timeout).contains(&config.limits.default_timeout_seconds) {
            problems.push(format!(
                "limits.default_timeout_seconds: must be from 1 to {max_timeout} (7 days)"
            ));
        }
        if !(1..=1024).contains(&config.limits.max_concurrent_calls) {
            problems.push("limits.max_concurrent_calls: must be from 1 to 1024".to_string());
        }
        if !(1..=1024 * 1024).contains(&config.log.max_file_kib) {
            problems.push("log.max_file_kib: must be from 1 to 1048576 (1 GiB)".to_string());
        }
        if config.limits.plugin_memory_mib < 16 {
            problems.push("limits.plugin_memory_mib: must be at least 16".to_string());
        }
        if config.limits.max_dispatch_depth > 64 {
            problems.push("limits.max_dispatch_depth: must be at most 64".to_string());
        }
        if config.limits.breaker_firings > 1_000_000 {
            problems.push(
                "limits.breaker_firings: must be at most 1000000 (0 turns the breaker off)"
                    .to_string(),
            );
        }
        if !(1..=3600).contains(&config.limits.breaker_window_secs) {
            problems.push("limits.breaker_window_secs: must be from 1 to 3600".to_string());
        }
        if !(1..=36_500).contains(&config.feed.keep_days) {
            problems.push("feed.keep_days: must be from 1 to 36500".to_string());
        }
        problems.extend(config.retention.check());
        for (name, profile) in &config.profiles {
            if let Err(err) = canopy_model::runtime_hooks::RuntimeHooks::parse(
                &profile.runtime_hooks,
                &format!("profiles.{name}.runtime_hooks"),
                &format!("profile {name}"),
            ) {
                problems.push(err);
            }
        }
        problems
    }

    /// Each profile's `runtime_hooks`, as JSON (what an agent config naming it composes).
    pub fn profiles(&self) -> BTreeMap<String, serde_json::Value> {
        self.profiles
            .iter()
            .map(|(name, profile)| (name.clone(), profile.runtime_hooks.clone()))
            .collect()
    }

    /// Built-in platforms overlaid with the configured ones.
    pub fn platforms(&self) -> BTreeMap<String, Platform> {
        let mut platforms = builtin_platforms();
        platforms.extend(self.platforms.clone());
        platforms
    }
}

/// The default size of the daemon's log file before it rolls over (`[log] max_file_kib`).
pub const LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// The default `max_connections`: a quarter of this process's file descriptor limit, from 16
/// to 1024, so a flood of connections leaves the daemon most of its descriptors.
pub fn default_max_connections() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    };
    u32::try_from(soft / 4).unwrap_or(u32::MAX).clamp(16, 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("canopy.toml");
        std::fs::write(&path, text)?;
        Config::load(&path)
    }

    #[test]
    fn a_top_level_key_after_a_table_is_said_to_belong_before_it() {
        let text = "[platforms.fake]\ncommand = [\"x\", \"{prompt}\"]\nnode = \"build-1\"\n";
        let problems = Config::parse(text).err().unwrap_or_default().join("\n");
        assert!(
            problems.contains("platforms.fake.node: unknown field `node`")
                && problems.contains("`node` is a top-level key")
                && problems.contains("write `node` before the first one"),
            "{problems}"
        );
        // An unknown key that is not a top-level one gets no such hint.
        let typo = "[platforms.fake]\ncommand = [\"x\"]\ncolour = \"red\"\n";
        let problems = Config::parse(typo).err().unwrap_or_default().join("\n");
        assert!(!problems.contains("top-level"), "{problems}");
    }

    #[test]
    fn a_platform_limit_is_checked_naming_its_field() {
        let problems = |limit: &str| {
            let text =
                format!("[platforms.fake]\ncommand = [\"x\", \"{{prompt}}\"]\nlimit = {limit}\n");
            Config::parse(&text).err().unwrap_or_default().join("\n")
        };
        let bad_regex = problems(r#"{ pattern = "limit (" }"#);
        assert!(
            bad_regex.contains("platforms.fake.limit")
                && bad_regex.contains("field `pattern` is not a valid regex"),
            "{bad_regex}"
        );
        let bad_backoff = problems(r#"{ pattern = "limit", backoff = "soon" }"#);
        assert!(
            bad_backoff.contains("field `backoff`: `soon` is not a duration"),
            "{bad_backoff}"
        );
        let typo = problems(r#"{ pattern = "limit", exitcode = 1 }"#);
        assert!(typo.contains("unknown field `exitcode`"), "{typo}");
        let fine = "[platforms.fake]\ncommand = [\"x\", \"{prompt}\"]\nlimit = { pattern = \"usage limit\", exit_code = 1, backoff = \"5m\" }\n";
        assert!(Config::parse(fine).is_ok());
    }

    #[test]
    fn process_section_defaults_to_no_extra_env_and_killing_orphans() -> Result<()> {
        let config = load("")?;
        assert_eq!(config.process, ProcessConfig::default());
        assert!(config.process.kill_orphans_on_start);
        let config = load(
            "[process]\npass_env = [\"SSH_AUTH_SOCK\", \"_X1\"]\nkill_orphans_on_start = false\n",
        )?;
        assert_eq!(config.process.pass_env, ["SSH_AUTH_SOCK", "_X1"]);
        assert!(!config.process.kill_orphans_on_start);
        Ok(())
    }

    #[test]
    fn an_invalid_pass_env_name_is_refused_naming_the_field() {
        for bad in ["1ABC", "A-B", "", "A=B", "PATH "] {
            let err = load(&format!("[process]\npass_env = [{bad:?}]\n"))
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default();
            assert!(
                err.contains("process.pass_env") && err.contains(&format!("`{bad}`")),
                "{bad:?}: {err}"
            );
        }
        let err = load("[process]\nkill_orphans_on_start = \"yes\"\n")
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("kill_orphans_on_start"), "{err}");
    }
}

/// A named profile (`[profiles.NAME]`): runtime hooks by phase, for the agents that list it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// `[profiles.NAME.runtime_hooks]`: phase → list of `{ matcher, hooks }`.
    #[serde(default = "empty_object")]
    pub runtime_hooks: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}
