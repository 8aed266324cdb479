//! Webhook events: an inbound delivery accepted, and its handler ending.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};
use crate::records::webhooks::DeliveryStatus;

/// What every webhook event says about the delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct Delivery {
    pub delivery_id: String,
    /// `global` or the project's name.
    pub scope: String,
    /// The hook's id within its scope.
    pub hook: String,
    /// The handler kind (`spec`, `command`, `action`, `agent`, or an executor mode).
    pub handler: String,
    /// The project's workdir, for a project's hook.
    pub project: Option<String>,
}

/// `webhook.received`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookReceived {
    #[serde(flatten)]
    pub delivery: Delivery,
    /// Body size in bytes.
    pub size: u64,
    /// `accepted` or `ignored` (it failed the hook's trigger rules).
    pub status: DeliveryStatus,
    /// Why it was ignored.
    pub reason: Option<String>,
}

/// How a handler ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct HandlerEnded {
    #[serde(flatten)]
    pub delivery: Delivery,
    pub status: DeliveryStatus,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
}

/// `webhook.handled`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct WebhookHandled(pub HandlerEnded);

/// `webhook.failed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct WebhookFailed(pub HandlerEnded);

/// `webhook.pre_handle`: an accepted delivery's handler is about to run. Sync hooks decide:
/// allow, deny (a waited delivery is answered 403; the delivery is recorded `denied` and its
/// handler never runs) or patch the `body` its handler gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookPreHandle {
    #[serde(flatten)]
    pub delivery: Delivery,
    pub method: String,
    pub path: String,
    pub content_type: Option<String>,
    pub query: Option<String>,
    /// The body as text (at most 16 KiB; what is not UTF-8 reads as U+FFFD).
    pub body: String,
}

/// What a sync hook on `webhook.pre_handle` may change: the body its handler gets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookHandlePatch {
    pub body: Option<String>,
}

declare_events! { Family::Webhook;
    WebhookReceived => "webhook.received", false,
        "an authenticated webhook request was recorded (accepted, or ignored by the hook's rules)",
        ["delivery_id", "scope", "hook", "handler", "size", "status", "reason"],
        target: |e| Some(format!("{}/{}", e.delivery.scope, e.delivery.hook)), project: |e| e.delivery.project.clone();
    WebhookPreHandle => "webhook.pre_handle", true,
        "asked before an accepted delivery's handler runs: sync hooks allow it, deny it (recorded denied; a waited delivery is answered 403) or patch the body its handler gets",
        ["delivery_id", "scope", "hook", "handler", "method", "path", "content_type", "query", "body"],
        target: |e| Some(format!("{}/{}", e.delivery.scope, e.delivery.hook)), project: |e| e.delivery.project.clone(),
        patch: WebhookHandlePatch;
    WebhookHandled => "webhook.handled", false,
        "a webhook delivery's handler completed",
        ["delivery_id", "scope", "hook", "handler", "status", "duration_ms"],
        target: |e| Some(format!("{}/{}", e.0.delivery.scope, e.0.delivery.hook)), project: |e| e.0.delivery.project.clone();
    WebhookFailed => "webhook.failed", false,
        "a webhook delivery's handler failed, timed out or was interrupted",
        ["delivery_id", "scope", "hook", "handler", "status", "error", "duration_ms"],
        target: |e| Some(format!("{}/{}", e.0.delivery.scope, e.0.delivery.hook)), project: |e| e.0.delivery.project.clone();
}
