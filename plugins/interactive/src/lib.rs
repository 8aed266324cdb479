//! The built-in `interactive` executor: queues the rendered prompt for an interactive session.
//!
//! Fire-and-forget: the message is handed to the daemon with its provenance and the call returns
//! at once; the daemon's scheduler delivers it (or keeps it for recall when the target is gone).

use canopy_plugin_sdk::{
    Config, Escape, Executor, Invocation, Manifest, Outcome, SessionTarget, export_executor,
};
use serde::Deserialize;

/// Config of the `interactive` mode.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InteractiveConfig {
    prompt: String,
    #[serde(default)]
    target_session_id: Option<String>,
    #[serde(default)]
    target_session_name: Option<String>,
}

impl InteractiveConfig {
    fn target(&self) -> Result<SessionTarget, String> {
        match (&self.target_session_id, &self.target_session_name) {
            (Some(id), None) if is_session_id(id) => Ok(SessionTarget::Id(id.clone())),
            (Some(id), None) if !id.trim().is_empty() => Err(format!(
                "field `target_session_id` must be a whole session id, 32 hex digits (`canopy session show NAME --json` prints it; lists show its first 12), got `{id}`; or aim at the session by its name with `target_session_name`"
            )),
            (None, Some(name)) if !name.trim().is_empty() => Ok(SessionTarget::Name(name.clone())),
            (Some(_), Some(_)) => Err(
                "set exactly one of `target_session_id` and `target_session_name`, not both"
                    .to_string(),
            ),
            (None, None) => {
                Err("set exactly one of `target_session_id` and `target_session_name`".to_string())
            }
            (Some(_), None) => Err("field `target_session_id` must not be empty".to_string()),
            (None, Some(_)) => Err("field `target_session_name` must not be empty".to_string()),
        }
    }
}

/// A session id as the daemon makes them: 32 lowercase hex digits.
fn is_session_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

struct InteractiveExecutor;

impl Executor for InteractiveExecutor {
    fn describe() -> Manifest {
        Manifest::new("interactive", env!("CARGO_PKG_VERSION"))
            .mode("interactive")
            .capability("sessions")
            .template("prompt", Escape::Plain)
            .config_schema(serde_json::json!({
                "type": "object",
                "required": ["prompt"],
                "additionalProperties": false,
                "properties": {
                    "prompt": { "type": "string" },
                    "target_session_id": { "type": "string" },
                    "target_session_name": { "type": "string" }
                },
                "oneOf": [
                    { "required": ["target_session_id"] },
                    { "required": ["target_session_name"] }
                ]
            }))
    }

    fn validate(_mode: &str, config: &Config) -> Result<(), String> {
        let config: InteractiveConfig = config.parse()?;
        config.target().map(|_| ())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: InteractiveConfig = invocation.config()?;
        let target = config.target()?;
        let message_id =
            canopy_plugin_sdk::enqueue_message(&target, &config.prompt, &invocation.provenance())?;
        let aimed_at = match &target {
            SessionTarget::Id(id) => format!("session {id}"),
            SessionTarget::Name(name) => format!("session named {name}"),
        };
        Ok(Outcome::completed()
            .with_summary(format!("queued message {message_id} for {aimed_at}"))
            .with_detail(config.prompt))
    }
}

export_executor!(InteractiveExecutor);
