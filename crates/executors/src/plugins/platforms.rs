//! Agent platforms: how to launch one agent CLI (`[platforms.NAME]` in `canopy.toml`), and the
//! built-in `claude`, `codex` and `demo` (a stand-in for trying Canopy out).

use std::collections::BTreeMap;

use canopy_model::limits::LimitRule;
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
    /// The hook configuration the CLI reads, when it runs runtime hooks (see
    /// [`super::launch`]); a platform without it takes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_hooks: Option<RuntimeFormat>,
    /// Arguments that hand the CLI its hook configuration, with `{settings}` (the file's path),
    /// added to its command for a launch with runtime hooks (`claude`; Canopy writes `codex`'s
    /// itself). They go where the command has an element `{settings_args}`, else at its end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings_args: Vec<String>,
    /// How the CLI reports a usage limit: a spec whose agent hit one waits for the reset
    /// instead of failing (see [`canopy_model::limits`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitRule>,
}

/// A runtime's own hook configuration format.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeFormat {
    /// Claude Code's settings (`--settings FILE`): `http` hooks at the daemon.
    Claude,
    /// Codex's hook tables, as a config layer of the launch's own (`-c hooks.EVENT=[...]`),
    /// trusted for that launch (`--dangerously-bypass-hook-trust`): command hooks that run the
    /// relay `canopy runtime-hook`.
    Codex,
}

/// A built-in platform's limit rule.
fn limit(pattern: &str) -> Option<LimitRule> {
    let decl = serde_json::json!({ "pattern": pattern });
    serde_json::from_value(decl).ok()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

/// The `demo` platform's agent: it "implements" its prompt by writing it to `DEMO.md` in the
/// workdir, the same file for the same prompt, and says so on its last line (the node's
/// summary). It needs nothing but `sh`, so a first graph runs on any machine.
const DEMO_AGENT: &str = r#"printf '%s\n' "$1" > DEMO.md && echo "demo agent: wrote DEMO.md ($(wc -l < DEMO.md | tr -d ' ') lines) from the prompt""#;

/// The platforms every daemon knows unless `canopy.toml` overrides them.
pub fn builtin_platforms() -> BTreeMap<String, Platform> {
    BTreeMap::from([
        (
            "demo".to_string(),
            Platform {
                command: strings(&["sh", "-c", DEMO_AGENT, "demo-agent", "{prompt}"]),
                model_args: Vec::new(),
                effort_args: Vec::new(),
                resume_args: Vec::new(),
                runtime_hooks: None,
                settings_args: Vec::new(),
                limit: None,
            },
        ),
        (
            "claude".to_string(),
            Platform {
                command: strings(&["claude", "-p", "{prompt}", "--output-format", "json"]),
                model_args: strings(&["--model", "{model}"]),
                effort_args: Vec::new(),
                resume_args: strings(&["--resume", "{session}"]),
                runtime_hooks: Some(RuntimeFormat::Claude),
                settings_args: strings(&["--settings", "{settings}"]),
                // `Claude AI usage limit reached|<unix time>`, `You've hit your limit ·
                // resets 9pm (Europe/Berlin)`.
                limit: limit(r"(?i)usage limit reached|hit your (?:usage )?limit"),
            },
        ),
        (
            "codex".to_string(),
            Platform {
                command: strings(&[
                    "codex",
                    "exec",
                    "--json",
                    "{settings_args}",
                    "{resume_args}",
                    "{model_args}",
                    "{effort_args}",
                    "{prompt}",
                ]),
                model_args: strings(&["--model", "{model}"]),
                effort_args: strings(&["-c", "model_reasoning_effort={effort}"]),
                resume_args: strings(&["resume", "{session}"]),
                runtime_hooks: Some(RuntimeFormat::Codex),
                settings_args: Vec::new(),
                // `You've hit your usage limit. ... try again at 3:28 PM.`
                limit: limit(r"(?i)hit your usage limit|usage_limit_reached"),
            },
        ),
    ])
}
