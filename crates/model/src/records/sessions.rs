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
