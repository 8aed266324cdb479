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
        [mode] => Ok(WorkConfig {
            mode: (*mode).to_string(),
            config,
        }),
        [] => Err(match misspelt_mode_field(&config) {
            // A misspelt mode field (`comand`) is the usual reason a config names no mode.
            Some((key, field)) => format!(
                "unknown field `{key}`; did you mean `{field}`? (a config names its mode with {MODE_CHOICES})"
            ),
            None => format!("sets no mode: give {MODE_CHOICES}"),
        }),
        several => Err(format!(
            "sets {} modes at once ({}); a config has exactly one mode",
            several.len(),
            several.join(" and ")
        )),
    }
}

/// How a config names its mode, for messages.
const MODE_CHOICES: &str = "`command`, `platform` + `prompt` (agent), `prompt` + `target_session_id` or `target_session_name` (interactive), or `mode` naming an installed mode";

/// The fields that name a config's mode.
const MODE_FIELDS: [&str; 6] = [
    "mode",
    "command",
    "platform",
    "prompt",
    "target_session_id",
    "target_session_name",
];

/// A key of `config` that is not a mode field but close to one, with that field.
fn misspelt_mode_field(config: &Map<String, Value>) -> Option<(&str, &'static str)> {
    config.keys().find_map(|key| {
        if MODE_FIELDS.contains(&key.as_str()) {
            return None;
        }
        crate::text::closest(key, MODE_FIELDS).map(|field| (key.as_str(), field))
    })
}

/// Checks a config's top-level fields against its executor's config schema (a JSON Schema
/// object, as the plugin's manifest declares it): a field the schema does not list when it
/// allows no others (with the closest known field), a field of the wrong JSON type, a required
/// field that is missing. Anything else is left to the executor's own `validate`.
pub fn check_schema(mode: &str, schema: &Value, config: &Map<String, Value>) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        for key in config.keys() {
            if !properties.contains_key(key) {
                let known: Vec<&str> = properties.keys().map(String::as_str).collect();
                let hint = crate::text::did_you_mean(key, known.iter().copied());
                return Err(format!(
                    "unknown field `{key}`{hint} (the {mode} mode's fields are {})",
                    known.join(", ")
                ));
            }
        }
    }
    for (key, value) in config {
        let Some(expected) = properties.get(key).and_then(|p| p.get("type")) else {
            continue;
        };
        let types: Vec<&str> = match expected {
            Value::String(one) => vec![one.as_str()],
            Value::Array(several) => several.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        if !types.is_empty() && !types.iter().any(|t| has_type(value, t)) {
            let wanted: Vec<String> = types.iter().map(|t| a_type(t)).collect();
            return Err(format!(
                "field `{key}` must be {}, got {}",
                wanted.join(" or "),
                a_type(kind(value))
            ));
        }
        // The elements of an array whose schema gives their type (`docs_paths: [1]`).
        let item_type = properties
            .get(key)
            .and_then(|p| p.pointer("/items/type"))
            .and_then(Value::as_str);
        if let (Some(item_type), Some(items)) = (item_type, value.as_array())
            && let Some((index, item)) = items
                .iter()
                .enumerate()
                .find(|(_, item)| !has_type(item, item_type))
        {
            return Err(format!(
                "field `{key}[{index}]` must be {}, got {}",
                a_type(item_type),
                a_type(kind(item))
            ));
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !config.contains_key(name) {
                return Err(format!("field `{name}` is required by the {mode} mode"));
            }
        }
    }
    Ok(())
}

/// Whether `value` is of JSON Schema type `kind` (an unknown type name matches anything).
fn has_type(value: &Value, kind: &str) -> bool {
    match kind {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// The JSON Schema type name of `value`.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `a string`, `an integer`, `null`.
fn a_type(kind: &str) -> String {
    match kind {
        "null" => "null".to_string(),
        "integer" | "array" | "object" => format!("an {kind}"),
        other => format!("a {other}"),
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

    #[test]
    fn a_misspelt_mode_field_is_named_with_the_closest_one() {
        let err = split(&map(json!({ "comand": "make" })))
            .err()
            .unwrap_or_default();
        assert!(
            err.starts_with("unknown field `comand`; did you mean `command`?"),
            "{err}"
        );
    }

    #[test]
    fn configs_are_checked_against_the_schema() {
        let schema = json!({
            "type": "object",
            "required": ["command"],
            "additionalProperties": false,
            "properties": {
                "command": { "type": "string" },
                "timeout_seconds": { "type": "integer" }
            }
        });
        let check = |v: Value| check_schema("command", &schema, &map(v));
        assert_eq!(check(json!({ "command": "true" })), Ok(()));
        assert_eq!(
            check(json!({ "command": "true", "timout_seconds": 3 })),
            Err("unknown field `timout_seconds`; did you mean `timeout_seconds`? (the command mode's fields are command, timeout_seconds)".to_string())
        );
        assert_eq!(
            check(json!({ "command": 5 })),
            Err("field `command` must be a string, got an integer".to_string())
        );
        let paths = json!({ "properties": { "docs_paths": { "type": "array", "items": { "type": "string" } } } });
        assert_eq!(
            check_schema(
                "docs-maintenance",
                &paths,
                &map(json!({ "docs_paths": ["docs", 1] }))
            ),
            Err("field `docs_paths[1]` must be a string, got an integer".to_string())
        );
        assert_eq!(
            check(json!({ "timeout_seconds": 5 })),
            Err("field `command` is required by the command mode".to_string())
        );
        // A schema that lists nothing checks nothing.
        assert_eq!(
            check_schema("x", &json!({ "type": "object" }), &map(json!({ "a": 1 }))),
            Ok(())
        );
    }
}
