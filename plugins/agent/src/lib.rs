//! The built-in `agent` executor: launches an agent CLI with the rendered prompt.
//!
//! Platforms (`claude`, `codex`, or any name) come from the daemon's `canopy.toml` as argv
//! templates. The outcome follows the result protocol; when the agent prints a session or
//! conversation id (JSON output), the outcome carries it so a grouped queue member can resume it.

use canopy_plugin_sdk::agent::{AgentRequest, run_agent};
use canopy_plugin_sdk::{Config, Escape, Executor, Invocation, Manifest, Outcome, export_executor};
use serde::Deserialize;

/// Config of the `agent` mode.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentConfig {
    platform: String,
    prompt: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    effort: Option<String>,
}

struct AgentExecutor;

impl Executor for AgentExecutor {
    fn describe() -> Manifest {
        Manifest::new("agent", env!("CARGO_PKG_VERSION"))
            .mode("agent")
            .capability("process")
            .template("prompt", Escape::Plain)
            .config_schema(serde_json::json!({
                "type": "object",
                "required": ["platform", "prompt"],
                "additionalProperties": false,
                "properties": {
                    "platform": { "type": "string", "description": "agent platform configured in canopy.toml (claude, codex, ...)" },
                    "prompt": { "type": "string" },
                    "model": { "type": "string" },
                    "effort": { "type": "string" }
                }
            }))
    }

    fn validate(_mode: &str, config: &Config) -> Result<(), String> {
        let config: AgentConfig = config.parse()?;
        if config.prompt.trim().is_empty() {
            return Err("field `prompt` must not be empty".to_string());
        }
        canopy_plugin_sdk::agent_platform(&config.platform)
            .map_err(|err| format!("field `platform`: {err}"))?;
        Ok(())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: AgentConfig = invocation.config()?;
        // The config's `timeout_minutes` is the host's: it arrives as the call's deadline.
        let timeout_ms = invocation.deadline_ms().saturating_sub(50).max(1);
        let env = invocation
            .markers()
            .map(|(name, value)| {
                (
                    format!("CANOPY_HOOK_{}", name.to_ascii_uppercase()),
                    value.to_string(),
                )
            })
            .collect();
        let run = run_agent(&AgentRequest {
            platform: config.platform,
            prompt: config.prompt,
            model: config.model,
            effort: config.effort,
            resume: invocation.resume_session().map(str::to_string),
            cwd: invocation.workdir().to_string(),
            timeout_ms,
            env,
        })?;
        run.outcome()
    }
}

export_executor!(AgentExecutor);
