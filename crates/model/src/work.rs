//! What a piece of work carries through the executors and into its records: where it came from
//! ([`Provenance`]), which plugin ran it ([`PluginRef`]), where a queued message goes
//! ([`MessageTarget`]), and how its call ended ([`Outcome`], [`CallReport`]).

use serde::{Deserialize, Serialize};

/// What kind of work a call is, and which automation it runs for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Origin {
    /// A graph's node.
    Node,
    /// A hook, by its name.
    Hook(String),
    /// A cron's action, by the cron's name.
    Cron(String),
    /// A webhook's handler, by the webhook (`<scope>/<id>`).
    Webhook(String),
    /// A direct call (`canopy plugin run`, a benchmark).
    #[default]
    Manual,
}

/// Where a piece of work came from. The graph fields are empty outside a graph run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Provenance {
    /// Set by the one runner from the kind of job (see `canopy_core::runner`).
    #[serde(default)]
    pub origin: Origin,
    pub graph_id: String,
    pub graph_name: String,
    pub run_id: String,
    pub event: String,
    pub hook_index: Option<u32>,
    pub spec_id: Option<String>,
}

/// Which session a queued message is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum MessageTarget {
    Id(String),
    Name(String),
}

/// A plugin's identity, as recorded with every run it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PluginRef {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// How a piece of work ended, as the plugin reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    Completed,
    Failed {
        reason: String,
    },
    Blocked {
        blocker: String,
    },
    /// Something the work waited on was stopped at its deadline.
    TimedOut {
        reason: String,
    },
}

impl Status {
    /// Its name, as the outcome's `status` field writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed { .. } => "failed",
            Self::Blocked { .. } => "blocked",
            Self::TimedOut { .. } => "timed_out",
        }
    }
}

/// A sync hook's answer about the action it was asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny {
        reason: String,
    },
    /// JSON text of an object whose fields replace the input's (checked by the caller).
    Patch {
        patch: String,
    },
}

/// The result of an `execute` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "CallOutcome")]
pub struct Outcome {
    #[serde(flatten)]
    pub status: Status,
    pub summary: Option<String>,
    pub detail: String,
    pub harness_session: Option<String>,
    /// A sync hook's decision, when the plugin gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// What a plugin printed to its own stdout and stderr during a call (a Python `print`, a
/// panic message), bounded by the host; not what its processes printed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Said {
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub stdout: String,
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub stderr: String,
}

impl Said {
    /// Whether the plugin printed nothing.
    pub fn is_empty(&self) -> bool {
        self.stdout.is_empty() && self.stderr.is_empty()
    }
}

/// What one `execute` call produced: `POST /api/plugins/{name}/run`'s answer, and what every
/// node run, hook run and delivery is recorded from.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallReport {
    pub plugin: PluginRef,
    pub mode: String,
    /// The config the plugin received, template fields rendered (no reserved keys).
    pub rendered_config: serde_json::Value,
    /// The deadline the call was given, in milliseconds.
    pub deadline_ms: u64,
    pub outcome: Outcome,
    /// What the plugin itself printed during the call (a Python `print`), bounded.
    #[serde(default, skip_serializing_if = "Said::is_empty")]
    pub said: Said,
    pub duration_ms: u64,
    /// The call failed after a command it ran was stopped at its timeout (the host saw the
    /// timeout itself): the work hit its deadline.
    pub timed_out: bool,
    /// A stop signal killed (or kept from starting) a command of the call: a planned stop
    /// forced it, or its work was replaced. What the outcome says is what it did until then.
    pub interrupted: bool,
    /// The exit code of the last command the call ran that exited with one.
    pub exit_code: Option<i32>,
    /// The usage limit the agent platform reported, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<crate::limits::LimitHit>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod status_tests {
    use super::Status;

    #[test]
    fn a_status_name_is_the_one_its_outcome_writes() {
        let reason = || "why".to_string();
        for status in [
            Status::Completed,
            Status::Failed { reason: reason() },
            Status::Blocked { blocker: reason() },
            Status::TimedOut { reason: reason() },
        ] {
            let written = serde_json::to_value(&status).unwrap();
            assert_eq!(written["status"], status.as_str());
        }
    }
}
