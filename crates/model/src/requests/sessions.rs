//! Interactive sessions: open, import, list, message.

use serde::{Deserialize, Serialize};

/// A new session, as the API takes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "name": "review", "tmux_target": "work:1.0" }))]
pub struct NewSession {
    /// The session's name, unique among live sessions.
    pub name: String,
    /// The agent conversation the session continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Deliver messages by typing them into this tmux pane (`session:window.pane`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux_target: Option<String>,
    /// The tmux server's socket, when it is not the default one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux_socket: Option<String>,
}

/// `GET /api/sessions`: which sessions.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionListQuery {
    /// Finished sessions too.
    #[serde(default)]
    pub all: bool,
}

/// `POST /api/sessions/import`: the agent conversation to import as a session.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "conversation_id": "7d3c1f0e-5b2a-4c8e-9f61-2a0b7c4d9e13" }))]
pub struct ImportBody {
    /// The agent conversation's id.
    pub conversation_id: String,
}

/// A message to a live session, as `POST /api/sessions/{id}/messages` takes it.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "text": "The tests pass on main again; rebase and go on." }))]
pub struct SendBody {
    /// The message: delivered into the session's inbox (or typed into its tmux pane) by the
    /// daemon's scheduler on its next tick.
    pub text: String,
}

/// `GET /api/sessions/{id}/inbox`: one answer, or a stream.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InboxQuery {
    /// Stream the messages (server-sent events) as they are delivered, after the backlog.
    #[serde(default)]
    pub follow: bool,
}

/// `GET /api/messages`: which messages.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessagesQuery {
    /// A message status: `pending`, `delivering`, `delivered` or `undeliverable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}
