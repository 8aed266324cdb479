//! Installed plugins: manifest, grants, enabled or not.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::capabilities::Capability;
use crate::markers::Escape;
use crate::state_enum;
use crate::time::Timestamp;

state_enum! {
    /// Whether a plugin serves its modes (stored as the `enabled` flag).
    pub enum PluginState {
        Enabled = "enabled",
        Disabled = "disabled",
    }
}

impl From<bool> for PluginState {
    fn from(enabled: bool) -> Self {
        if enabled {
            Self::Enabled
        } else {
            Self::Disabled
        }
    }
}

/// A plugin's manifest as the host keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub modes: Vec<String>,
    pub capabilities: Vec<String>,
    pub config_schema: serde_json::Value,
    pub templates: Vec<TemplateField>,
    /// The modes that answer as sync hooks (contract 0.2.0; none for a 0.1.0 plugin).
    #[serde(default)]
    pub decides: Vec<String>,
}

/// A config field the host renders markers into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplateField {
    pub field: String,
    pub escape: Escape,
}

/// One installed plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub manifest: Manifest,
    /// Capabilities the operator granted, valid for this sha256 only.
    pub granted: BTreeSet<String>,
    pub builtin: bool,
    pub enabled: bool,
    pub installed_at: Timestamp,
}

impl PluginRecord {
    /// The granted capabilities, parsed.
    pub fn grants(&self) -> BTreeSet<Capability> {
        self.granted.iter().filter_map(|c| c.parse().ok()).collect()
    }

    /// Enabled or disabled.
    pub fn state(&self) -> PluginState {
        self.enabled.into()
    }
}

/// Where a component came from when this daemon loaded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LoadSource {
    /// Deserialised from the on-disk cache of precompiled components.
    Cache,
    /// Compiled from the `.wasm` (and then written to the cache).
    Compiled,
    /// A newer daemon's source, read by an older client.
    #[serde(other)]
    Unknown,
}

impl LoadSource {
    /// The word the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cache => "cache",
            Self::Compiled => "compiled",
            Self::Unknown => "unknown",
        }
    }
}

/// How a component was loaded, for `plugin inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoadInfo {
    pub source: LoadSource,
    /// How long loading took, in microseconds.
    pub micros: u64,
}

/// A plugin as `GET /api/plugins/{name}` (and an install, an enable) answers it: the record,
/// how this daemon loaded it, and the contract version it was built against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PluginInfo {
    #[serde(flatten)]
    pub record: PluginRecord,
    /// How the component was loaded by this daemon.
    pub load: LoadInfo,
    /// The version of the `canopy:hooks` contract it was built against (`0.2.0`).
    pub contract: String,
}

/// An installed plugin the daemon did not load, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotLoaded {
    pub name: String,
    pub why: String,
}

/// `GET /api/plugins`: every installed plugin, and those that were not loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PluginList {
    pub plugins: Vec<PluginInfo>,
    #[serde(default)]
    pub not_loaded: Vec<NotLoaded>,
}

/// Something configured that uses a mode a removed plugin served and no enabled plugin serves
/// any more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PluginUse {
    /// The graph, when a graph's node or hook uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
    /// Who uses it: `graph NAME`, `webhook SCOPE/ID`, `daemon hook NAME`, `cron NAME`…
    pub owner: String,
    /// Where: `canopy.toml`, or the place in the graph (`nodes[0] (\`build\`)`, `hooks.KEY[0]`).
    #[serde(rename = "where")]
    pub place: String,
    pub mode: String,
}

/// `DELETE /api/plugins/{name}`: the plugin as it was, what still uses its modes, and a
/// warning saying so when anything does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemovedPlugin {
    #[serde(flatten)]
    pub info: PluginInfo,
    pub used_by: Vec<PluginUse>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Latency figures of one step of `plugin bench`, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyStats {
    pub samples: usize,
    pub median_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    pub max_us: f64,
}

/// `POST /api/plugins/{name}/bench`: what each step of a call to a plugin costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchReport {
    pub plugin: crate::work::PluginRef,
    pub mode: String,
    /// `Component::new` from the `.wasm`.
    pub compile: LatencyStats,
    /// `Component::deserialize_file` of the cached artifact.
    pub cache_load: LatencyStats,
    /// Fresh store + instantiate + `execute`, through the same path a hook takes.
    pub call: LatencyStats,
    /// The same call on bare wasmtime, measured pair by pair with `call`: a store with the
    /// directories the plugin's grants open, instantiate, `execute` (no admission, deadline,
    /// rendering or token).
    pub bare_call: LatencyStats,
    /// `call`'s median over `bare_call`'s: what Canopy's own per-call work costs.
    pub call_over_bare: f64,
    /// Reference: spawn `/bin/true` and wait.
    pub spawn_true: LatencyStats,
    /// Reference: spawn `sh -c true` and wait, output piped.
    pub spawn_sh_true: LatencyStats,
    /// Status of the last call.
    pub last_status: String,
}
