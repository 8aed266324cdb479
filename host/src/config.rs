//! The daemon's configuration: `canopy.toml` in the data dir, every key optional.
//!
//! ```toml
//! listen = "127.0.0.1:7461"
//!
//! [limits]
//! plugin_memory_mib = 256        # memory cap of one plugin call
//! default_timeout_seconds = 600  # deadline of a call whose config names none
//!
//! # An agent platform: how to launch that agent CLI. `claude` and `codex` have defaults.
//! [platforms.my-agent]
//! command = ["my-agent", "--print", "{prompt}"]
//! model_args = ["--model", "{model}"]
//! effort_args = ["--effort", "{effort}"]
//! resume_args = ["--resume", "{session}"]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The default address of the HTTP API.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7461";

/// The whole configuration.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address of the HTTP API (loopback only).
    pub listen: Option<String>,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Agent platforms, on top of the built-in `claude` and `codex`.
    #[serde(default)]
    pub platforms: BTreeMap<String, Platform>,
}

/// Limits applied to plugin calls.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory cap of one plugin call, in MiB.
    pub plugin_memory_mib: u64,
    /// Deadline of a call whose config sets no `timeout_seconds` / `timeout_minutes`.
    pub default_timeout_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            plugin_memory_mib: 256,
            default_timeout_seconds: 600,
        }
    }
}

/// How to launch one agent CLI.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// argv template with `{prompt}`.
    pub command: Vec<String>,
    /// Fragment with `{model}`.
    #[serde(default)]
    pub model_args: Vec<String>,
    /// Fragment with `{effort}`.
    #[serde(default)]
    pub effort_args: Vec<String>,
    /// Fragment with `{session}`.
    #[serde(default)]
    pub resume_args: Vec<String>,
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

/// The platforms every daemon knows unless `canopy.toml` overrides them.
pub fn builtin_platforms() -> BTreeMap<String, Platform> {
    BTreeMap::from([
        (
            "claude".to_string(),
            Platform {
                command: strings(&["claude", "-p", "{prompt}", "--output-format", "json"]),
                model_args: strings(&["--model", "{model}"]),
                effort_args: Vec::new(),
                resume_args: strings(&["--resume", "{session}"]),
            },
        ),
        (
            "codex".to_string(),
            Platform {
                command: strings(&[
                    "codex",
                    "exec",
                    "--json",
                    "{resume_args}",
                    "{model_args}",
                    "{effort_args}",
                    "{prompt}",
                ]),
                model_args: strings(&["--model", "{model}"]),
                effort_args: strings(&["-c", "model_reasoning_effort={effort}"]),
                resume_args: strings(&["resume", "{session}"]),
            },
        ),
    ])
}

impl Config {
    /// Reads `canopy.toml` if it exists; a missing file is the default configuration.
    pub fn load(path: &Path) -> Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
        };
        let config: Config = toml::from_str(&text)
            .with_context(|| format!("invalid configuration in {}", path.display()))?;
        for (name, platform) in &config.platforms {
            if platform.command.is_empty() {
                anyhow::bail!(
                    "{}: platforms.{name}.command must name a program",
                    path.display()
                );
            }
        }
        if config.limits.plugin_memory_mib < 16 {
            anyhow::bail!(
                "{}: limits.plugin_memory_mib must be at least 16",
                path.display()
            );
        }
        Ok(config)
    }

    /// Built-in platforms overlaid with the configured ones.
    pub fn platforms(&self) -> BTreeMap<String, Platform> {
        let mut platforms = builtin_platforms();
        platforms.extend(self.platforms.clone());
        platforms
    }
}
