//! Projects: `[projects.NAME]` in `canopy.toml`, a named git checkout with its lifecycle hooks
//! (`checkout_updated`, `tag_pushed`) and its webhooks.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One `[projects.NAME]` section as written.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// The project's git checkout (its workdir).
    pub checkout: Option<PathBuf>,
    /// Lifecycle hooks by event: `checkout_updated`, `tag_pushed`; each entry an executor
    /// config with `timeout_secs`.
    #[serde(default)]
    pub hooks: BTreeMap<String, Vec<Map<String, Value>>>,
    /// The project's webhooks, served at `/hooks/<project>/<id>`.
    #[serde(default)]
    pub webhooks: crate::webhooks::config::ProjectWebhooks,
}

/// Checks the `[projects]` sections; every problem with its TOML path.
pub fn check(_projects: &BTreeMap<String, ProjectConfig>) -> Vec<String> {
    Vec::new()
}
