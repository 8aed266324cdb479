//! The manifest a plugin returns from `describe`.

use crate::{Escape, wit};

/// What a plugin is and what it needs. Build it with [`Manifest::new`] and the chained setters.
#[derive(Debug, Clone)]
pub struct Manifest {
    name: String,
    version: String,
    modes: Vec<String>,
    capabilities: Vec<String>,
    config_schema: serde_json::Value,
    templates: Vec<(String, Escape)>,
    decides: Vec<String>,
}

impl Manifest {
    /// A manifest for plugin `name` at `version` (use `env!("CARGO_PKG_VERSION")`), serving no
    /// mode and needing no capability yet.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            modes: Vec::new(),
            capabilities: Vec::new(),
            config_schema: serde_json::json!({ "type": "object" }),
            templates: Vec::new(),
            decides: Vec::new(),
        }
    }

    /// Serves one more mode that can answer as a sync hook: given
    /// [`crate::Invocation::decision_input`], it returns [`crate::Outcome::allow`],
    /// [`crate::Outcome::deny`] or [`crate::Outcome::patch`]. Only such a mode may be named by a
    /// sync hook.
    pub fn deciding_mode(mut self, mode: impl Into<String>) -> Self {
        let mode = mode.into();
        self.decides.push(mode.clone());
        self.modes.push(mode);
        self
    }

    /// Serves one more mode: hooks and nodes naming it run in this plugin.
    pub fn mode(mut self, mode: impl Into<String>) -> Self {
        self.modes.push(mode.into());
        self
    }

    /// Needs one more capability: `process`, `sessions`, `fs-read`, `fs-write:<subpath>`,
    /// `network`.
    pub fn capability(mut self, capability: impl Into<String>) -> Self {
        self.capabilities.push(capability.into());
        self
    }

    /// The JSON Schema of the config object.
    pub fn config_schema(mut self, schema: serde_json::Value) -> Self {
        self.config_schema = schema;
        self
    }

    /// The config's JSON Schema, generated from the type `execute` parses it into (derive
    /// `schemars::JsonSchema` beside `serde::Deserialize`): the fields, their types, their doc
    /// comments as descriptions, their defaults, and `deny_unknown_fields` as
    /// `additionalProperties: false`. The host checks a config against it when a hook or node
    /// is saved, so one type says what the plugin accepts.
    pub fn config_schema_of<T: schemars::JsonSchema>(mut self) -> Self {
        self.config_schema = serde_json::to_value(schemars::schema_for!(T))
            .unwrap_or_else(|_| serde_json::json!({ "type": "object" }));
        self
    }

    /// Declares a top-level string field of the config as a template: the host renders markers
    /// into it before the call, escaping each value as `escape` says.
    pub fn template(mut self, field: impl Into<String>, escape: Escape) -> Self {
        self.templates.push((field.into(), escape));
        self
    }

    pub(crate) fn into_wit(self) -> wit::Manifest {
        wit::Manifest {
            name: self.name,
            version: self.version,
            modes: self.modes,
            capabilities: self.capabilities,
            config_schema: self.config_schema.to_string(),
            templates: self
                .templates
                .into_iter()
                .map(|(field, escape)| wit::TemplateField {
                    field,
                    escape: escape.into(),
                })
                .collect(),
            decides: self.decides,
        }
    }
}
