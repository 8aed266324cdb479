//! Plugin events: executors installed, removed, enabled or disabled.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};

/// The plugin events share their fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct PluginRef {
    pub plugin: String,
    pub version: String,
    pub sha256: String,
    /// The executor modes it serves.
    pub modes: Vec<String>,
}

/// `plugin.installed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct PluginInstalled(pub PluginRef);

/// `plugin.removed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct PluginRemoved(pub PluginRef);

/// `plugin.enabled`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct PluginEnabled(pub PluginRef);

/// `plugin.disabled`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct PluginDisabled(pub PluginRef);

/// `plugin.pre_install`: a plugin is about to be installed (or upgraded), its manifest read.
/// Sync hooks decide: allow it or deny it (the install is refused with the reason: a policy
/// such as "no `network` grant"). Nothing to patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PluginPreInstall {
    #[serde(flatten)]
    pub plugin: PluginRef,
    /// The capabilities its manifest asks for.
    pub capabilities: Vec<String>,
    /// The capabilities the install grants.
    pub granted: Vec<String>,
}

declare_events! { Family::Plugin;
    PluginPreInstall => "plugin.pre_install", true,
        "asked before a plugin is installed: sync hooks allow it or deny it (the install is refused with the reason)",
        ["plugin", "version", "sha256", "modes", "capabilities", "granted"],
        target: |e| Some(e.plugin.plugin.clone()), project: |_e| None;
    PluginInstalled => "plugin.installed", false,
        "an executor plugin was installed (or upgraded)",
        ["plugin", "version", "sha256", "modes"],
        target: |e| Some(e.0.plugin.clone()), project: |_e| None;
    PluginRemoved => "plugin.removed", false,
        "an executor plugin was removed",
        ["plugin", "version", "sha256", "modes"],
        target: |e| Some(e.0.plugin.clone()), project: |_e| None;
    PluginEnabled => "plugin.enabled", false,
        "a disabled executor plugin was enabled",
        ["plugin", "version", "sha256", "modes"],
        target: |e| Some(e.0.plugin.clone()), project: |_e| None;
    PluginDisabled => "plugin.disabled", false,
        "an executor plugin was disabled: its modes stop being served",
        ["plugin", "version", "sha256", "modes"],
        target: |e| Some(e.0.plugin.clone()), project: |_e| None;
}
