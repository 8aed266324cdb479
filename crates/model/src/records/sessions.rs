//! Interactive sessions (agents in tmux panes) and the runs active in one.

use serde::{Deserialize, Serialize};

use super::runs::RunStatus;
use crate::state_enum;
use crate::time::Timestamp;

state_enum! {
    /// Whether a session takes messages.
    pub enum SessionStatus {
        Live = "live",
        Finished = "finished",
    }
}

/// A session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Session {
    pub id: String,
    pub name: String,
    pub status: SessionStatus,
    /// The harness's own conversation id, when known.
    pub conversation_id: Option<String>,
    /// Messages are typed into this tmux pane (else they go to the inbox).
    pub tmux_target: Option<String>,
    pub tmux_socket: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A graph's current run while it is still going on, for `canopy status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ActiveRun {
    pub id: String,
    pub graph_name: String,
    pub status: RunStatus,
    pub started_at: Timestamp,
}

/// A new session, as the API takes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    pub name: String,
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Deliver messages by typing them into this tmux pane (`session:window.pane`).
    #[serde(default)]
    pub tmux_target: Option<String>,
    /// The tmux server's socket, when it is not the default one.
    #[serde(default)]
    pub tmux_socket: Option<String>,
}
