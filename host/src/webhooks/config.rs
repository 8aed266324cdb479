//! `[webhooks]` and `[projects.NAME.webhooks]` in `canopy.toml`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The top-level `[webhooks]` section.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhooksConfig {
    pub bind_host: Option<String>,
    pub bind_port: Option<u16>,
    /// Global hooks, served at `/hooks/global/<id>`.
    #[serde(default)]
    pub entries: BTreeMap<String, Value>,
}

/// A project's `webhooks` section.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProjectWebhooks {
    #[serde(default)]
    pub entries: BTreeMap<String, Value>,
}

/// Checks the webhook sections; every problem with its TOML path.
pub fn check(_config: &crate::config::Config) -> Vec<String> {
    Vec::new()
}
