//! Which executor a hook or node config names, and which of its keys are Canopy's own.
//!
//! A config names exactly one mode: `command` (a `command` field), `agent` (`platform` +
//! `prompt`), `interactive` (`prompt` + `target_session_id` or `target_session_name`), or any
//! installed mode with an explicit `mode` field. The keys in [`RESERVED_KEYS`] are the host's:
//! [`split`] takes them out before anything reads the config, and everything else is the
//! executor's. No executor ever sees a reserved key, in `validate` or in `execute`.

use std::time::Duration;

use serde_json::{Map, Value};

use super::MAX_TIMEOUT;

/// The config keys Canopy reads itself and never hands to an executor (the WIT's `validate` and
/// `invocation.config` document the same list):
/// - `mode`: the executor that runs the work;
/// - `spec_ids`: the specs a per-spec hook fires for (hooks only);
/// - `timeout_seconds`, `timeout_minutes`: the call's deadline, given to the executor as
///   `deadline-ms`;
/// - `timeout_ms`: the same in milliseconds (a sync hook's, default 1,000);
/// - `detach`: leave the processes the call started running when it ends (see `crate::procs`);
/// - `priority`, `required`: a sync hook's place among its event's hooks (higher first), and
///   whether its failure denies the action;
/// - `runtime_hooks`, `profiles`: an agent's hooks inside its run, and the named profiles whose
///   runtime hooks come first (see [`super::launch`]).
pub const RESERVED_KEYS: [&str; 10] = [
    "mode",
    "spec_ids",
    "timeout_seconds",
    "timeout_minutes",
    "timeout_ms",
    "detach",
    "priority",
    "required",
    "runtime_hooks",
    "profiles",
];

/// A config split into its mode, the executor's own config and the host's keys.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkConfig {
    pub mode: String,
    /// Every key but the reserved ones.
    pub(super) config: Map<String, Value>,
    pub(super) host: HostKeys,
}

impl WorkConfig {
    /// A config whose mode is named outside it (`plugin run`, `plugin bench`). The reserved keys
    /// are taken out all the same (a `mode` key included).
    pub fn with_mode(mode: String, config: &Map<String, Value>) -> Self {
        let mut config = config.clone();
        let host = HostKeys::take(&mut config);
        Self { mode, config, host }
    }

    /// The executor's config: what its `validate` and `execute` receive (before rendering).
    pub fn config(&self) -> &Map<String, Value> {
        &self.config
    }

    /// The host's keys, as written.
    pub fn host(&self) -> &HostKeys {
        &self.host
    }

    /// The same work with some of the executor's fields replaced (a sync hook's patch, whose
    /// fields are checked by its event's patch type: never a reserved key).
    pub fn patched(&self, fields: &Map<String, Value>) -> Self {
        let mut patched = self.clone();
        for (key, value) in fields {
            if !RESERVED_KEYS.contains(&key.as_str()) {
                patched.config.insert(key.clone(), value.clone());
            }
        }
        patched
    }
}

/// The reserved keys of a config, as written (see [`RESERVED_KEYS`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostKeys(Map<String, Value>);

impl HostKeys {
    /// Takes every reserved key out of `config`.
    fn take(config: &mut Map<String, Value>) -> Self {
        Self(
            RESERVED_KEYS
                .iter()
                .filter_map(|key| config.remove_entry(*key))
                .collect(),
        )
    }

    /// Checks `detach` and the deadline fields at edit time; the error names the field.
    /// (`mode` is checked by [`split`], `spec_ids` by the hooks that carry it.)
    pub fn check(&self) -> Result<(), String> {
        self.detach()?;
        self.profiles()?;
        self.priority()?;
        self.required()?;
        if self.0.contains_key("timeout_ms")
            && let Some(other) = ["timeout_seconds", "timeout_minutes"]
                .into_iter()
                .find(|field| self.0.contains_key(*field))
        {
            return Err(format!(
                "fields `timeout_ms` and `{other}` set the same deadline; give one"
            ));
        }
        check_timeouts(&self.0)
    }

    /// The deadline the config asks for: `timeout_ms`, else `timeout_seconds`, else
    /// `timeout_minutes`, else none. A value that is not a whole number counts as absent:
    /// [`check`](Self::check) refuses it when the config is saved, and a config stored before
    /// that check existed still runs.
    pub fn timeout(&self) -> Option<Duration> {
        let millis = self.0.get("timeout_ms").and_then(Value::as_u64);
        let seconds = self.0.get("timeout_seconds").and_then(Value::as_u64);
        let minutes = self.0.get("timeout_minutes").and_then(Value::as_u64);
        match (millis, seconds, minutes) {
            (Some(ms), _, _) => Some(Duration::from_millis(ms)),
            (None, Some(s), _) => Some(Duration::from_secs(s)),
            (None, None, Some(m)) => Some(Duration::from_secs(m.saturating_mul(60))),
            (None, None, None) => None,
        }
    }

    /// The agent's own `runtime_hooks`, as written.
    pub fn runtime_hooks(&self) -> Option<&Value> {
        self.0.get("runtime_hooks")
    }

    /// The profiles the agent names (`profiles`), in order.
    pub fn profiles(&self) -> Result<Vec<String>, String> {
        match self.0.get("profiles") {
            None => Ok(Vec::new()),
            Some(Value::Array(names)) => names
                .iter()
                .map(|name| match name {
                    Value::String(name) if !name.trim().is_empty() => Ok(name.clone()),
                    other => Err(format!(
                        "field `profiles` must list profile names ([profiles.NAME] in canopy.toml), not {other}"
                    )),
                })
                .collect(),
            Some(other) => Err(format!(
                "field `profiles` must be a list of profile names, such as [\"base\"], not {other}"
            )),
        }
    }

    /// Whether the config declares runtime hooks or names profiles.
    pub fn has_runtime_hooks(&self) -> bool {
        self.0.contains_key("runtime_hooks") || self.0.contains_key("profiles")
    }

    /// A sync hook's `priority` (default 0; higher runs first).
    pub fn priority(&self) -> Result<i64, String> {
        match self.0.get("priority") {
            None => Ok(0),
            Some(value) => value.as_i64().ok_or_else(|| {
                format!("field `priority` must be a whole number (higher runs first), not {value}")
            }),
        }
    }

    /// A sync hook's `required` (default false: its failure lets the action go on).
    pub fn required(&self) -> Result<bool, String> {
        match self.0.get("required") {
            None => Ok(false),
            Some(Value::Bool(required)) => Ok(*required),
            Some(other) => Err(format!(
                "field `required` must be true or false, not {other}"
            )),
        }
    }

    /// Refuses the keys only a sync hook takes, where the work is not one (a node, an async
    /// hook); the error names the field.
    pub fn check_not_sync(&self) -> Result<(), String> {
        for field in ["priority", "required", "timeout_ms"] {
            if self.0.contains_key(field) {
                return Err(format!(
                    "field `{field}` belongs to sync hooks (under an event asked before its action, such as node.pre_dispatch); here it has no effect"
                ));
            }
        }
        Ok(())
    }

    /// Whether the call's processes are left running when it ends (`detach`, default false).
    pub fn detach(&self) -> Result<bool, String> {
        match self.0.get("detach") {
            None => Ok(false),
            Some(Value::Bool(detach)) => Ok(*detach),
            Some(other) => Err(format!("field `detach` must be true or false, not {other}")),
        }
    }

    /// Refuses `spec_ids` where no hook carries it (a node, a direct `plugin run`).
    pub fn check_no_spec_ids(&self) -> Result<(), String> {
        if self.0.contains_key("spec_ids") {
            return Err(
                "field `spec_ids` belongs to hooks of on_spec_completed and on_failed only"
                    .to_string(),
            );
        }
        Ok(())
    }
}

/// Checks the deadline fields of a config (`timeout_seconds`, `timeout_minutes`): whole numbers
/// from 1 up to [`MAX_TIMEOUT`]. The error names the field and the allowed range.
fn check_timeouts(config: &Map<String, Value>) -> Result<(), String> {
    let max_seconds = MAX_TIMEOUT.as_secs();
    for (field, unit, max) in [
        ("timeout_ms", "milliseconds", max_seconds * 1000),
        ("timeout_seconds", "seconds", max_seconds),
        ("timeout_minutes", "minutes", max_seconds / 60),
    ] {
        let Some(value) = config.get(field) else {
            continue;
        };
        match value.as_u64() {
            Some(n) if (1..=max).contains(&n) => {}
            _ => {
                return Err(format!(
                    "field `{field}`: must be a whole number of {unit} from 1 to {max} (7 days); got {value}"
                ));
            }
        }
    }
    Ok(())
}

/// Splits a config; the error says what is wrong and what is allowed.
pub fn split(config: &Map<String, Value>) -> Result<WorkConfig, String> {
    let mut config = config.clone();
    let host = HostKeys::take(&mut config);
    if let Some(mode) = host.0.get("mode") {
        return match mode {
            Value::String(mode) if !mode.trim().is_empty() => Ok(WorkConfig {
                mode: mode.clone(),
                config,
                host,
            }),
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
            host,
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
        canopy_model::text::closest(key, MODE_FIELDS).map(|field| (key.as_str(), field))
    })
}

/// Refuses a config with a NUL byte in any string (or key): what an executor hands on becomes
/// a process's arguments or environment, and neither can carry one, so such a config could
/// only ever fail at run time. Names the field, dotted (`env.TOKEN`, `args.2`).
pub fn check_no_nul(config: &Map<String, Value>) -> Result<(), String> {
    /// True when a string under `fields` holds a NUL; `at` is then its path.
    fn in_fields(fields: &Map<String, Value>, at: &mut Vec<String>) -> bool {
        fields.iter().any(|(key, item)| {
            at.push(key.clone());
            let found = key.contains('\0') || in_value(item, at);
            if !found {
                at.pop();
            }
            found
        })
    }
    fn in_value(value: &Value, at: &mut Vec<String>) -> bool {
        match value {
            Value::String(text) => text.contains('\0'),
            Value::Array(items) => items.iter().enumerate().any(|(index, item)| {
                at.push(index.to_string());
                let found = in_value(item, at);
                if !found {
                    at.pop();
                }
                found
            }),
            Value::Object(fields) => in_fields(fields, at),
            _ => false,
        }
    }
    let mut at = Vec::new();
    if in_fields(config, &mut at) {
        return Err(format!(
            "`{}` holds a NUL byte, which no process's arguments or environment can carry",
            at.join(".").replace('\0', "\\0")
        ));
    }
    Ok(())
}

/// Checks the executor's part of a config (reserved keys already taken out) against its config
/// schema (a JSON Schema object, as the plugin's manifest declares it): a field the schema does
/// not list when it allows no others (with the closest known field, reserved keys included), a
/// field of the wrong JSON type, a required field that is missing. Anything else is left to the
/// executor's own `validate`.
pub fn check_schema(mode: &str, schema: &Value, config: &Map<String, Value>) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        for key in config.keys() {
            if !properties.contains_key(key) {
                // A schema written before a key was reserved may still list it.
                let known: Vec<&str> = properties
                    .keys()
                    .map(String::as_str)
                    .filter(|field| !RESERVED_KEYS.contains(field))
                    .collect();
                let hint = canopy_model::text::did_you_mean(
                    key,
                    known.iter().copied().chain(RESERVED_KEYS),
                );
                return Err(format!(
                    "unknown field `{key}`{hint} (the {mode} mode's fields are {}; Canopy's own are {})",
                    known.join(", "),
                    RESERVED_KEYS.join(", ")
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
        // A reserved key never reaches the executor, so a schema cannot require it.
        for name in required
            .iter()
            .filter_map(Value::as_str)
            .filter(|name| !RESERVED_KEYS.contains(name))
        {
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
    fn a_nul_anywhere_in_a_config_is_refused_naming_its_field() {
        let refused = |config: Value| check_no_nul(&map(config)).err().unwrap_or_default();
        assert_eq!(
            check_no_nul(&map(json!({ "command": "echo hi", "n": 3 }))),
            Ok(())
        );
        let err = refused(json!({ "command": "echo a\u{0}b" }));
        assert!(err.starts_with("`command` holds a NUL byte"), "{err}");
        let err = refused(json!({ "env": { "A": "x", "B": "\u{0}" } }));
        assert!(err.starts_with("`env.B` holds"), "{err}");
        let err = refused(json!({ "args": ["a", "b", "c\u{0}"] }));
        assert!(err.starts_with("`args.2` holds"), "{err}");
        let err = refused(json!({ "env": { "K\u{0}": "v" } }));
        assert!(err.starts_with("`env.K\\0` holds"), "{err}");
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
            Err("unknown field `timout_seconds`; did you mean `timeout_seconds`? (the command mode's fields are command; Canopy's own are mode, spec_ids, timeout_seconds, timeout_minutes, timeout_ms, detach, priority, required, runtime_hooks, profiles)".to_string())
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
        // A reserved key is suggested even when the schema does not list it, and a schema that
        // lists or requires one (written before the key was reserved) does not get in the way.
        let strict = json!({
            "required": ["line", "timeout_seconds"],
            "additionalProperties": false,
            "properties": { "line": { "type": "string" }, "timeout_seconds": { "type": "integer" } }
        });
        assert_eq!(
            check_schema("append-file", &strict, &map(json!({ "line": "x", "detch": true }))),
            Err("unknown field `detch`; did you mean `detach`? (the append-file mode's fields are line; Canopy's own are mode, spec_ids, timeout_seconds, timeout_minutes, timeout_ms, detach, priority, required, runtime_hooks, profiles)".to_string())
        );
        assert_eq!(
            check_schema("append-file", &strict, &map(json!({ "line": "x" }))),
            Ok(())
        );
        // A schema that lists nothing checks nothing.
        assert_eq!(
            check_schema("x", &json!({ "type": "object" }), &map(json!({ "a": 1 }))),
            Ok(())
        );
    }

    #[test]
    fn the_reserved_keys_are_taken_out_and_read_by_the_host() {
        let hook = map(json!({
            "mode": "append-file",
            "line": "x",
            "spec_ids": ["3f2a"],
            "timeout_seconds": 7,
            "timeout_minutes": 2,
            "detach": true
        }));
        let work = split(&hook).expect("the config splits");
        assert_eq!(work.mode, "append-file");
        assert_eq!(work.config(), &map(json!({ "line": "x" })));
        assert_eq!(work.host().timeout(), Some(Duration::from_secs(7)));
        assert_eq!(work.host().detach(), Ok(true));
        assert_eq!(work.host().check(), Ok(()));
        assert!(work.host().check_no_spec_ids().is_err());

        // Implied modes and a mode named outside the config lose them the same way.
        let implied = split(&map(
            json!({ "command": "true", "timeout_minutes": 2, "detach": false }),
        ))
        .expect("the config splits");
        assert_eq!(implied.config(), &map(json!({ "command": "true" })));
        assert_eq!(implied.host().timeout(), Some(Duration::from_secs(120)));
        assert_eq!(implied.host().detach(), Ok(false));
        let named = WorkConfig::with_mode("append-file".to_string(), &hook);
        assert_eq!(named.config(), work.config());
        for key in RESERVED_KEYS {
            assert!(!named.config().contains_key(key), "{key}");
        }

        // Nothing set: no deadline of its own, not detached.
        let plain = split(&map(json!({ "command": "true" }))).expect("the config splits");
        assert_eq!(plain.host().timeout(), None);
        assert_eq!(plain.host().detach(), Ok(false));
        assert_eq!(plain.host().check_no_spec_ids(), Ok(()));
    }

    #[test]
    fn the_host_keys_are_checked_naming_the_field() {
        let check = |v: Value| split(&map(v)).and_then(|w| w.host().check());
        assert_eq!(
            check(json!({ "command": "true", "detach": "yes" })),
            Err("field `detach` must be true or false, not \"yes\"".to_string())
        );
        let err = check(json!({ "command": "true", "timeout_seconds": 0 }))
            .err()
            .unwrap_or_default();
        assert!(
            err.starts_with(
                "field `timeout_seconds`: must be a whole number of seconds from 1 to 604800"
            ),
            "{err}"
        );
        let err = check(json!({ "command": "true", "timeout_minutes": "5" }))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("field `timeout_minutes`"), "{err}");
        // At run time a value stored before the check existed counts as absent.
        let stored = split(&map(json!({ "command": "true", "timeout_seconds": "5" })))
            .expect("the config splits");
        assert_eq!(stored.host().timeout(), None);
        assert_eq!(
            split(&map(json!({ "mode": 5, "command": "true" }))),
            Err("field `mode` must be the name of an installed mode".to_string())
        );
    }

    #[test]
    fn the_wit_documents_every_reserved_key() {
        let wit = include_str!("../../../../wit/since_v0.2.0/canopy-hooks.wit");
        let section = wit
            .split_once("Reserved keys:")
            .and_then(|(_, rest)| rest.split_once("validate: func"))
            .map(|(section, _)| section)
            .unwrap_or_default();
        for key in RESERVED_KEYS {
            assert!(
                section.contains(&format!("`{key}`")),
                "the WIT's reserved keys do not name `{key}`"
            );
        }
    }
}
