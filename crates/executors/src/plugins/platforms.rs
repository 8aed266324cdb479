//! Agent platforms: how to launch one agent CLI (`[platforms.NAME]` in `canopy.toml`), and the
//! built-in `claude` and `codex`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
