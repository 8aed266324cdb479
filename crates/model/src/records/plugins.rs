//! Installed plugins: manifest, grants, enabled or not.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::capabilities::Capability;
use crate::markers::Escape;
use crate::state_enum;

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateField {
    pub field: String,
    pub escape: Escape,
}

/// One installed plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub manifest: Manifest,
    /// Capabilities the operator granted, valid for this sha256 only.
    pub granted: BTreeSet<String>,
    pub builtin: bool,
    pub enabled: bool,
    pub installed_at: String,
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
