//! The daemon itself: stopping it, checking a config.

use serde::{Deserialize, Serialize};

/// `POST /api/shutdown`: how long admitted work may go on.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "timeout_secs": 10 }))]
pub struct ShutdownRequest {
    /// Seconds admitted work may run on before it is forced (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

/// `POST /api/config/validate`: a config to check without applying it.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "text": "[[hooks]]\nname = \"notify\"\nevent = \"graph.run.completed\"\naction = { command = \"notify-send {{graph_name}} done\" }\n" }))]
pub struct ValidateBody {
    /// The text of a `canopy.toml`.
    pub text: String,
}
