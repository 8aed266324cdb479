//! A hook or node config as the plugin receives it.

use serde::de::DeserializeOwned;

/// The config object of a piece of work, template fields already rendered.
#[derive(Debug, Clone)]
pub struct Config {
    value: serde_json::Value,
}

impl Config {
    /// Parses config JSON text; the error says the config is not a JSON object.
    pub fn from_json(json: &str) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|err| format!("config is not valid JSON: {err}"))?;
        if !value.is_object() {
            return Err("config must be a JSON object".to_string());
        }
        Ok(Self { value })
    }

    /// Deserialises the config into your type; the error names the field serde rejected.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        T::deserialize(&self.value).map_err(|err| format!("invalid config: {err}"))
    }

    /// One field, if present.
    pub fn get(&self, field: &str) -> Option<&serde_json::Value> {
        self.value.get(field)
    }

    /// One string field, if present and a string.
    pub fn str(&self, field: &str) -> Option<&str> {
        self.get(field).and_then(serde_json::Value::as_str)
    }

    /// The whole config as JSON.
    pub fn as_json(&self) -> &serde_json::Value {
        &self.value
    }
}
