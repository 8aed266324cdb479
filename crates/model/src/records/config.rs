//! What the daemon answers about its configuration: a check of a `canopy.toml`, a reload, and
//! the runtime-hook profiles it holds.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /api/config/validate`: whether a configuration text would load, and why not.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ConfigCheck {
    pub valid: bool,
    /// Every problem, each naming its place in the file.
    pub problems: Vec<String>,
    /// With a valid text: the daemon hooks it declares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<usize>,
    /// With a valid text: the node it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `POST /api/config/reload`: the file was read and is in force.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Reloaded {
    pub reloaded: bool,
    pub report: ReloadReport,
}

/// What a reload applied.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ReloadReport {
    /// The file read.
    pub path: String,
    /// The daemon hooks now in force.
    pub hooks: usize,
    pub node: String,
    /// Sections that changed and are in force now.
    pub applied: Vec<String>,
    /// Sections that changed but are read only at start: in force after a restart.
    pub needs_restart: Vec<String>,
}

/// `GET /api/profiles`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Profiles {
    pub profiles: Vec<ProfileSummary>,
}

/// A runtime-hook profile: its name, how many hooks each phase has, and the table as written.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ProfileSummary {
    pub name: String,
    pub phases: Vec<PhaseCount>,
    pub runtime_hooks: Value,
}

/// How many hooks a profile has on one phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct PhaseCount {
    pub phase: String,
    pub hooks: usize,
}

/// `GET /api/profiles/{names}`: the hooks the named profiles stack up, phase by phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ProfileStack {
    pub profiles: Vec<String>,
    pub phases: Vec<PhaseHooks>,
}

/// One phase of a stack: its event, whether its hooks decide, and its groups in order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct PhaseHooks {
    pub phase: String,
    pub event: String,
    pub decides: bool,
    pub groups: Vec<GroupHooks>,
}

/// One matcher group of a phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct GroupHooks {
    /// Where it was declared (`profile NAME`).
    pub from: String,
    /// The matcher as written (`None`: every tool).
    pub matcher: Option<String>,
    /// Executor configs, as written.
    pub hooks: Vec<Map<String, Value>>,
}
