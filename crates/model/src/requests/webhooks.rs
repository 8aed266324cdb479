//! Webhook ingress: list hooks, test one, list and redeliver deliveries.

use serde::{Deserialize, Serialize};

/// `GET /api/webhooks`: which hooks.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookListQuery {
    /// Only this project's hooks (its scope, as the list shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

/// `POST /api/webhooks/hooks/{scope}/{id}/test`: a request to run through the hook's rules
/// and handler as if it had arrived.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "body": "{\"ref\": \"refs/heads/main\"}",
    "headers": [["X-GitHub-Event", "push"], ["Content-Type", "application/json"]]
}))]
pub struct WebhookTestBody {
    /// The request body (text).
    #[serde(default)]
    pub body: String,
    /// Request headers, `[name, value]` (auth headers are not taken).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The query string, without `?`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// `GET /api/webhooks/deliveries`: which deliveries, newest first.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    /// `scope/id`, or `id` alone for a global hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// Only this scope's deliveries: `global` or a project's scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// A delivery status: `accepted`, `ignored`, `running`, `completed`, `failed`,
    /// `timed_out`, `interrupted`, `interrupted_unknown` or `denied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The newest this many (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<usize>,
}

/// `POST /api/webhooks/deliveries/{id}/redeliver`: whether to wait for the handler.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "wait": true }))]
pub struct RedeliverBody {
    /// Answer with the handler's outcome once it ends, instead of `202` at once.
    #[serde(default)]
    pub wait: bool,
}
