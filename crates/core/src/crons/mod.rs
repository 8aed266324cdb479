//! Crons: `[[crons]]` in `canopy.toml`, schedule-driven work with a durable receipt per firing.
//!
//! ```toml
//! [[crons]]
//! name = "prune-preview"            # required, unique, stable
//! schedule = "0 */6 * * *"          # 5 fields (or 6, seconds first); @hourly, @daily; @every 10m
//! timezone = "Europe/Paris"         # optional IANA zone; default UTC
//! nodes = ["build-1"]               # optional: run only on these nodes; roles_permitted too
//! timeout_secs = 60
//! overlap = "forbid"                # forbid | allow | replace
//! jitter_secs = 0                   # random delay after the scheduled second
//! catch_up = "none"                 # none | once: one late run after firings were missed
//! keep_receipts = 100               # receipts kept for this cron
//! action = { command = "canopy graph list --json" }   # any executor config
//! ```

pub mod runner;
pub mod schedule;

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use canopy_executors::plugins::{WorkConfig, split_work_config};
pub use canopy_model::records::crons::{CatchUp, CronView, Overlap};
pub use runner::{CronError, Crons};
pub use schedule::Schedule;

/// Receipts kept per cron unless `keep_receipts` says otherwise.
pub const DEFAULT_KEEP_RECEIPTS: u32 = 100;

/// One `[[crons]]` entry as written.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CronConfig {
    pub name: String,
    pub schedule: String,
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles_permitted: Vec<String>,
    pub timeout_secs: Option<u64>,
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    pub jitter_secs: u64,
    #[serde(default)]
    pub catch_up: CatchUp,
    pub keep_receipts: Option<u32>,
    /// Working directory of the action; default: the data dir.
    pub cwd: Option<String>,
    pub action: Map<String, Value>,
}

/// A checked cron.
#[derive(Debug, Clone)]
pub struct Cron {
    /// Its place in `canopy.toml` (`crons[index]`).
    pub index: usize,
    pub config: CronConfig,
    pub schedule: Schedule,
    pub timeout: Option<Duration>,
    pub jitter: Duration,
    pub keep_receipts: u32,
    /// The executor work of `action`.
    pub work: WorkConfig,
}

impl Cron {
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether this daemon runs the cron.
    pub fn serves(&self, identity: &crate::node::Identity) -> bool {
        identity.runs(&self.config.nodes, &self.config.roles_permitted)
    }
}

/// The most receipts a cron may keep.
const MAX_KEEP_RECEIPTS: u32 = 100_000;

/// The longest jitter.
const MAX_JITTER_SECS: u64 = 3600;

/// Checks the `[[crons]]` entries; every problem with its TOML path.
pub fn compile(entries: &[CronConfig]) -> Result<Vec<Cron>, Vec<String>> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    let mut crons = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let at = |field: &str| format!("crons[{index}].{field}");
        let before = problems.len();
        if !crate::node::is_name(&entry.name) {
            problems.push(format!(
                "{}: `{}` is not a cron name (ASCII letters, digits, `-`, `_`, `.`; at most 100)",
                at("name"),
                entry.name
            ));
        } else if !names.insert(entry.name.clone()) {
            problems.push(format!(
                "{}: `{}` names another cron too; cron names are unique",
                at("name"),
                entry.name
            ));
        }
        let schedule = Schedule::parse(&entry.schedule, entry.timezone.as_deref())
            .map_err(|err| {
                let field = if matches!(err, schedule::ScheduleError::Timezone(_)) {
                    "timezone"
                } else {
                    "schedule"
                };
                problems.push(format!("{}: {err}", at(field)));
            })
            .ok();
        for (i, name) in entry.nodes.iter().enumerate() {
            if !crate::node::is_name(name) {
                problems.push(format!(
                    "{}: `{name}` is not a node name",
                    at(&format!("nodes[{i}]"))
                ));
            }
        }
        let max_timeout = canopy_executors::plugins::MAX_TIMEOUT.as_secs();
        let timeout = match entry.timeout_secs {
            Some(secs) if !(1..=max_timeout).contains(&secs) => {
                problems.push(format!(
                    "{}: must be from 1 to {max_timeout} (7 days)",
                    at("timeout_secs")
                ));
                None
            }
            other => other.map(Duration::from_secs),
        };
        if entry.jitter_secs > MAX_JITTER_SECS {
            problems.push(format!(
                "{}: must be at most {MAX_JITTER_SECS} (an hour)",
                at("jitter_secs")
            ));
        }
        let keep_receipts = entry.keep_receipts.unwrap_or(DEFAULT_KEEP_RECEIPTS);
        if !(1..=MAX_KEEP_RECEIPTS).contains(&keep_receipts) {
            problems.push(format!(
                "{}: must be from 1 to {MAX_KEEP_RECEIPTS}",
                at("keep_receipts")
            ));
        }
        if let Some(cwd) = &entry.cwd
            && !std::path::Path::new(cwd).is_absolute()
        {
            problems.push(format!(
                "{}: `{cwd}` is not an absolute path (the action runs there; default: the data dir)",
                at("cwd")
            ));
        }
        let work = split_work_config(&entry.action)
            .map_err(|err| problems.push(format!("{}: {err}", at("action"))))
            .ok();
        if problems.len() > before {
            continue;
        }
        let (Some(schedule), Some(work)) = (schedule, work) else {
            continue;
        };
        crons.push(Cron {
            index,
            config: entry.clone(),
            schedule,
            timeout,
            jitter: Duration::from_secs(entry.jitter_secs),
            keep_receipts,
            work,
        });
    }
    if problems.is_empty() {
        Ok(crons)
    } else {
        Err(problems)
    }
}

/// The executors' own checks of each cron's `action` (the mode is served, the config is valid
/// for it, its markers are ones a cron offers); every problem with its TOML path.
pub async fn check_actions(
    plugins: &canopy_executors::plugins::PluginHost,
    crons: &[Cron],
) -> Vec<String> {
    let mut problems = Vec::new();
    for cron in crons {
        if let Err(err) = plugins.validate(&cron.work, runner::CRON_MARKERS).await {
            problems.push(format!("crons[{}].action: {err}", cron.index));
        }
    }
    problems
}
