//! The API's answers that wrap records: lists under their name, a deletion, the error body.
//! Each is what one route sends, so the OpenAPI document describes it and a client reads it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::crons::{CronView, Receipt};
use super::hook_reports::{CatalogEntry, TrippedHook};
use super::hook_runs::{HookRun, SeedHookRun};
use super::messages::{Message, Notification};
use super::queues::Queue;
use super::runs::NodeRun;
use super::sessions::Session;
use super::specs::Spec;
use super::views::{GraphView, NamedRun};
use super::webhooks::Delivery;
use crate::events::Envelope;

/// Every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[schemars(example = serde_json::json!({
    "error": { "code": "not_found", "message": "no graph matches `wbe`" }
}))]
#[schemars(example = serde_json::json!({
    "error": {
        "code": "stale_version",
        "message": "graph `web` was edited since version 4 (it is at version 5); read it again and redo the edit on the current version",
        "current_version": 5
    }
}))]
pub struct ErrorBody {
    pub error: ErrorInfo,
}

/// What went wrong: a code to branch on and a message for a person (it names the field).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ErrorInfo {
    /// What kind of error, to branch on: `bad_request` (400; the message names the field and
    /// what it allows), `ambiguous_id` (400), `unknown_mode`, `invalid_config`, `refused`
    /// (400, plugins), `unauthorized` (401), `not_found` (404), `conflict` (409),
    /// `plugin_disabled` (409), `stale_version` (412), `payload_too_large` (413),
    /// `unsupported_media_type` (415), `call_failed` (422), `too_many_sessions` (429),
    /// `stopping` (503, the daemon is shutting down), `internal` (500).
    pub code: String,
    /// What went wrong, for a person: it names the field or the thing, and what is allowed.
    pub message: String,
    /// With `stale_version` (412): the graph's version now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<i64>,
}

/// `GET /api/health`: without a token, `status` alone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

/// `GET /api/specs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct SpecList {
    pub specs: Vec<Spec>,
}

/// `GET /api/graphs`: each graph as `graph get` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct GraphList {
    pub graphs: Vec<GraphView>,
}

/// A graph created or edited: its view, with `warnings` about its workdir when the request
/// set one (empty, or why the dirty-tree guard cannot check it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct GraphAnswer {
    #[serde(flatten)]
    pub view: GraphView,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

/// `DELETE /api/graphs/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct DeletedGraph {
    /// The graph's name.
    pub deleted: String,
    pub id: String,
}

/// `GET /api/graphs/{name}/node-runs`: newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NodeRunList {
    pub node_runs: Vec<NodeRun>,
}

/// `GET /api/runs`: newest first, each with its graph's name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct RunList {
    pub runs: Vec<NamedRun>,
}

/// `GET /api/queues`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct QueueList {
    pub queues: Vec<Queue>,
}

/// `GET /api/crons`: this node's name and every cron.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct CronList {
    pub node: String,
    pub crons: Vec<CronView>,
}

/// `GET /api/crons/{name}/runs`: a cron's receipts, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct CronRuns {
    pub cron: String,
    pub runs: Vec<Receipt>,
}

/// `GET /api/feed`: a page of the feed, and its head (the newest cursor).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct FeedPage {
    pub events: Vec<Envelope>,
    pub head: i64,
}

/// `GET /api/hook-runs`: newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct HookRunList {
    pub runs: Vec<HookRun>,
}

/// A workspace's hook runs in the run-history API's own terms, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct SeedHookRunList {
    pub runs: Vec<SeedHookRun>,
}

/// The hooks their firing breaker has tripped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct TrippedList {
    pub tripped: Vec<TrippedHook>,
}

/// The tripped hooks a reset put back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ResetHooks {
    pub reset: Vec<TrippedHook>,
}

/// `GET /api/hooks`: every configured hook, resolved across its sources.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct HookCatalog {
    pub hooks: Vec<CatalogEntry>,
}

/// `GET /api/sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct SessionList {
    pub sessions: Vec<Session>,
}

/// A session's inbox: the session and the messages waiting for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Inbox {
    pub session: Session,
    pub messages: Vec<Message>,
}

/// `GET /api/messages`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct MessageList {
    pub messages: Vec<Message>,
}

/// `GET /api/notifications`: sessions with messages waiting.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NotificationList {
    pub notifications: Vec<Notification>,
}

/// `GET /api/webhooks/deliveries`: newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
}

/// A runtime hook callback's answer: the agent runtime's own hook output JSON (Claude Code's
/// `hookSpecificOutput`, say); `{}` lets the action go on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(transparent)]
pub struct RuntimeAnswer(pub serde_json::Map<String, serde_json::Value>);
