//! Plugins: install, call a mode once, benchmark a mode.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /api/plugins`: what to grant the uploaded component.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallQuery {
    /// Comma-separated capabilities (`fs-read`, `fs-write:.`, `process`, `process:git`,
    /// `sessions`, `network`, `network:api.example.com:443`); the install is refused when the
    /// manifest asks for one not granted.
    #[serde(default)]
    pub grant: String,
    /// Replace an installed plugin of the same name.
    #[serde(default)]
    pub replace: bool,
}

/// `POST /api/plugins/{name}/run`: one call of a plugin mode, as a node would make it.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "mode": "docs-maintenance",
    "config": { "paths": ["README.md", "docs/"] },
    "markers": { "spec_name": "Add a health check" },
    "workdir": "/home/me/web"
}))]
pub struct RunBody {
    /// The mode to call (default: the plugin's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The executor config the mode gets, markers rendered.
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Marker values (`spec_name`, `spec_body`, ...) to render the config with.
    #[serde(default)]
    pub markers: BTreeMap<String, String>,
    /// The directory the call works in (an absolute path).
    pub workdir: PathBuf,
}

/// `POST /api/plugins/{name}/bench`: repeated calls of a mode, timed.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "mode": "echo", "iterations": 200 }))]
pub struct BenchBody {
    /// The mode to call (default: the plugin's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The executor config every call gets.
    #[serde(default)]
    pub config: Map<String, Value>,
    /// How many calls: 1 to 100000 (default 1000).
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    /// The directory the calls work in (default: a fresh temporary one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
}

fn default_iterations() -> u32 {
    1_000
}
