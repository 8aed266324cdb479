//! Webhooks as configured (their redacted views) and their deliveries: each request a webhook
//! received and what its handler did.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::state_enum;
use crate::time::Timestamp;

state_enum! {
    /// Where a delivery is.
    pub enum DeliveryStatus {
        /// Recorded; its handler has not started (it waits in the hook's queue).
        Accepted = "accepted",
        /// Recorded, but the hook's rules refused it; nothing runs.
        Ignored = "ignored",
        /// Its handler runs.
        Running = "running",
        /// The handler completed.
        Completed = "completed",
        /// The handler failed or could not run.
        Failed = "failed",
        /// The handler was stopped at its deadline.
        TimedOut = "timed_out",
        /// A planned stop killed the handler's processes before it ended.
        Interrupted = "interrupted",
        /// The daemon died while the handler ran: what it did is unknown; never replayed.
        InterruptedUnknown = "interrupted_unknown",
        /// A sync hook on `webhook.pre_handle` denied it; its handler never ran.
        Denied = "denied",
    }
}

impl DeliveryStatus {
    /// Whether the delivery will not change again (only a redelivery runs it anew). A newer
    /// daemon's status is taken as final.
    pub fn is_finished(self) -> bool {
        match self {
            Self::Accepted | Self::Running => false,
            Self::Ignored
            | Self::Completed
            | Self::Failed
            | Self::TimedOut
            | Self::Interrupted
            | Self::InterruptedUnknown
            | Self::Denied
            | Self::Unknown => true,
        }
    }
}

/// A delivery as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Delivery {
    pub id: String,
    pub scope: String,
    pub hook: String,
    pub handler: String,
    pub node: String,
    pub status: DeliveryStatus,
    pub reason: Option<String>,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
    /// Body size in bytes.
    pub size: i64,
    pub redelivery_of: Option<String>,
    pub test: bool,
    pub received_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub result: Option<Value>,
}

/// What a waited-for delivery came to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[schemars(rename = "DeliveryOutcome")]
pub struct Outcome {
    pub delivery_id: String,
    pub status: DeliveryStatus,
    pub reason: Option<String>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub result: Option<Value>,
    pub duration_ms: Option<i64>,
    /// This is the outcome of an earlier delivery with the same sender id: the request was a
    /// copy of it, and did not run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

impl From<&Delivery> for Outcome {
    fn from(delivery: &Delivery) -> Self {
        Self {
            delivery_id: delivery.id.clone(),
            status: delivery.status,
            reason: delivery.reason.clone(),
            error: delivery.error.clone(),
            output: delivery.output.clone(),
            result: delivery.result.clone(),
            duration_ms: delivery.duration_ms,
            duplicate: false,
        }
    }
}

/// One delivery as `GET /api/webhooks/deliveries/{id}` shows it: the record and its body (as
/// text; bytes that are not UTF-8 shown as U+FFFD).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct DeliveryDetail {
    #[serde(flatten)]
    pub delivery: Delivery,
    pub body: String,
}

state_enum! {
    /// When a webhook answers (`respond.mode`).
    pub enum RespondMode {
        /// 202 with the delivery id once it is recorded; the handler runs after.
        Async = "async",
        /// Waits for the handler and answers with its outcome (as `?wait=true` does).
        Sync = "sync",
    }
}

state_enum! {
    /// What authenticates a request to a webhook (`auth`).
    pub enum AuthMode {
        /// A bearer token (and the signature too, when `hmac` is set).
        Token = "token",
        /// A valid signature over the body alone (senders that cannot send a token).
        Signature = "signature",
    }
}

/// How a webhook answers (`respond`), as the daemon resolved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Respond {
    pub mode: RespondMode,
    /// The status of a success: an accepted delivery (async), a completed one (sync).
    pub status: Option<u16>,
    /// Whether a waited-for answer carries the handler's output.
    pub output: bool,
}

impl Default for Respond {
    fn default() -> Self {
        Self {
            mode: RespondMode::Async,
            status: None,
            output: true,
        }
    }
}

/// How each of a webhook's secrets can be changed while the daemon runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rotation {
    pub token: Option<String>,
    pub hmac: Option<String>,
}

/// How a webhook tells a sender's retry from a new delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DedupView {
    /// The header carrying the sender's delivery id.
    pub header: String,
    pub window_secs: u64,
}

/// A webhook as `GET /api/webhooks` and `GET /api/webhooks/hooks/{scope}/{id}` show it: what
/// the daemon resolved from its entry, every secret redacted (a secret's source is named, never
/// its value), and the rest of its entry as written in canopy.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WebhookView {
    /// `global` or the project's name.
    pub scope: String,
    pub id: String,
    /// `scope/id`.
    pub key: String,
    /// The handler kind, as written (`command`, `bash`, `spec`, an executor mode…).
    #[serde(rename = "type")]
    pub kind: String,
    /// The URL path it is served at.
    pub path: String,
    /// Its full URL, when the listener is on and this node serves it.
    pub url: Option<String>,
    /// Whether this node serves it (its `nodes` filter).
    pub served: bool,
    /// Where its token comes from (`$NAME`, a file, inline), never the token.
    pub token: Option<String>,
    /// Where its HMAC secret comes from, never the secret.
    pub hmac: Option<String>,
    pub rotation: Rotation,
    pub auth: AuthMode,
    /// The signature scheme (`github`, `gitlab`, `slack`, `stripe`, or the generic one).
    pub provider: String,
    pub dedup: Option<DedupView>,
    pub respond: Respond,
    pub max_body_bytes: u64,
    pub concurrency: u64,
    pub timeout_secs: u64,
    /// The project's checkout, for a project's webhook.
    pub checkout: Option<String>,
    /// Where it is in canopy.toml (`webhooks.entries.ID`).
    pub toml_path: String,
    /// Why its handler does not validate (every delivery then fails), when it does not.
    #[serde(default)]
    pub problem: Option<String>,
    /// Its deliveries by status (`show` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<BTreeMap<String, u64>>,
    /// The rest of its entry as written (`command`, `action`, `config`, `match`, `queue`…),
    /// without the keys above and without its secrets' sources.
    #[serde(flatten)]
    pub entry: Map<String, Value>,
}

impl WebhookView {
    /// The keys of the view's own fields: an entry's keys of the same names are not kept.
    pub const FIELDS: [&'static str; 21] = [
        "scope",
        "id",
        "key",
        "type",
        "path",
        "url",
        "served",
        "token",
        "hmac",
        "rotation",
        "auth",
        "provider",
        "dedup",
        "respond",
        "max_body_bytes",
        "concurrency",
        "timeout_secs",
        "checkout",
        "toml_path",
        "problem",
        "deliveries",
    ];

    /// `entry` without the keys the view's own fields take and without secret sources: what
    /// [`WebhookView::entry`] holds.
    pub fn rest_of(mut entry: Map<String, Value>) -> Map<String, Value> {
        for key in Self::FIELDS.iter().chain(&[
            "token_env",
            "token_file",
            "hmac_secret_env",
            "hmac_secret_file",
        ]) {
            entry.remove(*key);
        }
        entry
    }
}

/// `GET /api/webhooks`: the listener and the configured webhooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WebhookList {
    /// Where the listener listens (`http://127.0.0.1:9000`); none when it is off.
    pub listen: Option<String>,
    /// This daemon's node name.
    pub node: String,
    pub max_connections: u64,
    pub header_timeout_secs: u64,
    /// Requests a second past which each webhook runs one handler at a time (0: never).
    pub flood_rate: u32,
    /// Whether a flood is on now.
    pub flood: bool,
    pub hooks: Vec<WebhookView>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod view_tests {
    use super::*;

    #[test]
    fn the_view_names_every_own_field_so_an_entry_key_is_never_written_twice() {
        let view = WebhookView {
            scope: "global".into(),
            id: "push".into(),
            key: "global/push".into(),
            kind: "command".into(),
            path: "/hooks/global/push".into(),
            url: None,
            served: true,
            token: Some("$TOKEN".into()),
            hmac: None,
            rotation: Rotation::default(),
            auth: AuthMode::Token,
            provider: "generic".into(),
            dedup: None,
            respond: Respond::default(),
            max_body_bytes: 1,
            concurrency: 1,
            timeout_secs: 1,
            checkout: None,
            toml_path: "webhooks.entries.push".into(),
            problem: None,
            deliveries: Some(BTreeMap::new()),
            entry: Map::new(),
        };
        let value = serde_json::to_value(&view).unwrap();
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut fields = WebhookView::FIELDS.to_vec();
        keys.sort_unstable();
        fields.sort_unstable();
        assert_eq!(keys, fields);
        let entry = serde_json::json!({
            "type": "command", "command": "make", "token_env": "TOKEN", "respond": {"mode": "sync"}
        });
        let rest = WebhookView::rest_of(entry.as_object().unwrap().clone());
        assert_eq!(rest.keys().collect::<Vec<_>>(), vec!["command"]);
        let back: WebhookView = serde_json::from_value(value).unwrap();
        assert_eq!(back, view);
    }
}
