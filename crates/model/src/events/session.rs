//! Session events: interactive sessions, and the messages typed into them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};

/// `session.created` and `session.finished`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct SessionRef {
    pub session_id: String,
    pub session_name: Option<String>,
    pub workdir: Option<String>,
}

/// `session.created`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SessionCreated(pub SessionRef);

/// `session.finished`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SessionFinished(pub SessionRef);

/// The message events share their fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct MessageRef {
    pub session_id: String,
    pub session_name: Option<String>,
    pub message_id: String,
    pub workdir: Option<String>,
    /// Why it could not be delivered (`session.message.undeliverable`).
    pub reason: Option<String>,
}

/// `session.message.queued`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct MessageQueued(pub MessageRef);

/// `session.message.delivered`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct MessageDelivered(pub MessageRef);

/// `session.message.undeliverable`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct MessageUndeliverable(pub MessageRef);

/// `session.message.pre_deliver`: a message is about to be delivered to a live session. Sync
/// hooks decide: allow, deny (it is not delivered, and is kept for recall with the reason) or
/// patch its `text`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessagePreDeliver {
    pub session_id: String,
    pub session_name: String,
    pub message_id: String,
    /// Who queued it: `hook`, `api`, ...
    pub origin: String,
    pub text: String,
}

/// What a sync hook on `session.message.pre_deliver` may change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageDeliverPatch {
    pub text: Option<String>,
}

declare_events! { Family::Session;
    SessionCreated => "session.created", false,
        "an interactive session was created, resumed or imported",
        ["session_id", "session_name", "workdir"],
        target: |e| Some(e.0.session_name.clone().unwrap_or_else(|| e.0.session_id.clone())), project: |e| e.0.workdir.clone();
    SessionFinished => "session.finished", false,
        "an interactive session was finished",
        ["session_id", "session_name", "workdir"],
        target: |e| Some(e.0.session_name.clone().unwrap_or_else(|| e.0.session_id.clone())), project: |e| e.0.workdir.clone();
    MessageQueued => "session.message.queued", false,
        "a message was queued for a session",
        ["session_id", "session_name", "message_id", "workdir"],
        target: |e| Some(e.0.session_name.clone().unwrap_or_else(|| e.0.session_id.clone())), project: |e| e.0.workdir.clone();
    MessagePreDeliver => "session.message.pre_deliver", true,
        "asked before a message is delivered to a live session: sync hooks allow it, deny it (it is kept for recall with the reason) or patch its text",
        ["session_id", "session_name", "message_id", "origin", "text"],
        target: |e| Some(e.session_name.clone()), project: |_e| None,
        patch: MessageDeliverPatch;
    MessageDelivered => "session.message.delivered", false,
        "a queued message was typed into its session's pane",
        ["session_id", "session_name", "message_id", "workdir"],
        target: |e| Some(e.0.session_name.clone().unwrap_or_else(|| e.0.session_id.clone())), project: |e| e.0.workdir.clone();
    MessageUndeliverable => "session.message.undeliverable", false,
        "a message could not be delivered and is kept for recall; `reason` says why",
        ["session_id", "session_name", "message_id", "workdir", "reason"],
        target: |e| Some(e.0.session_name.clone().unwrap_or_else(|| e.0.session_id.clone())), project: |e| e.0.workdir.clone();
}
