//! Which executor a hook or node config names.
//!
//! A config names exactly one mode: `command` (a `command` field), `agent` (`platform` +
//! `prompt`), `interactive` (`prompt` + `target_session_id` or `target_session_name`), or any
//! installed mode with an explicit `mode` field. Everything else in the config is the executor's.

use serde_json::{Map, Value};

/// A config split into its mode and the executor's own config.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkConfig {
    pub mode: String,
    pub config: Map<String, Value>,
}

/// Splits a config; the error says what is wrong and what is allowed.
pub fn split(config: &Map<String, Value>) -> Result<WorkConfig, String> {
    let mut config = config.clone();
    if let Some(mode) = config.remove("mode") {
        return match mode {
            Value::String(mode) if !mode.trim().is_empty() => Ok(WorkConfig { mode, config }),
            _ => Err("field `mode` must be the name of an installed mode".to_string()),
        };
    }
    let mut implied = Vec::new();
    if config.contains_key("command") {
        implied.push("command");
    }
    if config.contains_key("platform") {
        implied.push("agent");
    }
    if config.contains_key("target_session_id") || config.contains_key("target_session_name") {
        implied.push("interactive");
    }
    match implied.as_slice() {
        [mode] => Ok(WorkConfig { mode: (*mode).to_string(), config }),
        [] => Err(
            "sets no mode: give `command`, `platform` + `prompt` (agent), `prompt` + `target_session_id` or `target_session_name` (interactive), or `mode` naming an installed mode"
                .to_string(),
        ),
        several => Err(format!(
            "sets {} modes at once ({}); a config has exactly one mode",
            several.len(),
            several.join(" and ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn modes_are_read_from_their_fields() {
        let mode = |v: Value| split(&map(v)).map(|w| w.mode);
        assert_eq!(mode(json!({ "command": "true" })), Ok("command".into()));
        assert_eq!(
            mode(json!({ "platform": "claude", "prompt": "x" })),
            Ok("agent".into())
        );
        assert_eq!(
            mode(json!({ "prompt": "x", "target_session_name": "s" })),
            Ok("interactive".into())
        );
        assert_eq!(
            mode(json!({ "mode": "docs-maintenance", "platform": "claude" })),
            Ok("docs-maintenance".into())
        );
    }

    #[test]
    fn none_or_two_modes_are_refused() {
        let err = split(&map(
            json!({ "command": "true", "platform": "claude", "prompt": "x" }),
        ))
        .err()
        .unwrap_or_default();
        assert_eq!(
            err,
            "sets 2 modes at once (command and agent); a config has exactly one mode"
        );
        let err = split(&map(json!({ "prompt": "x" })))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("sets no mode"), "{err}");
    }
}
