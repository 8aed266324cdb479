//! Messages hooks send to sessions, and the notifications about ones that failed.

use serde::{Deserialize, Serialize};

use crate::state_enum;
use crate::time::Timestamp;
use crate::work::{MessageTarget, Provenance};

state_enum! {
    /// Where a message is in its delivery.
    pub enum MessageStatus {
        /// Queued; the scheduler delivers it on its next tick.
        Pending = "pending",
        /// Being typed into a tmux pane right now.
        Delivering = "delivering",
        Delivered = "delivered",
        /// Kept for recall; `error` says why.
        Undeliverable = "undeliverable",
    }
}

state_enum! {
    /// What a notification is about.
    pub enum NotificationKind {
        /// A message's session was gone or finished when it was delivered.
        SessionNotFound = "session_not_found",
        /// Typing a message into its tmux pane failed.
        DeliveryFailed = "delivery_failed",
        /// The daemon stopped while it typed a message; it may or may not have reached the pane.
        DeliveryInterrupted = "delivery_interrupted",
    }
}

/// A message for a session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Message {
    pub id: String,
    /// The session it is for (resolved when the hook fired).
    pub session_id: Option<String>,
    /// How the hook addressed it.
    pub target: MessageTarget,
    /// For a name-targeted hook, the name it was aimed at.
    pub aimed_at: Option<String>,
    pub text: String,
    /// Where it came from: graph, run, event, hook index, spec.
    pub provenance: Provenance,
    /// `hook` for messages hooks sent.
    pub origin: String,
    pub plugin: String,
    pub status: MessageStatus,
    /// Why it is undeliverable.
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub delivered_at: Option<Timestamp>,
}

/// A notification the daemon raised (an undeliverable message, say).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Notification {
    pub id: String,
    pub kind: NotificationKind,
    pub message: String,
    pub message_id: Option<String>,
    pub created_at: Timestamp,
}

/// The answer to sending a message (`POST /api/sessions/{id}/messages`): its id and the session
/// it is queued for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Queued {
    pub message_id: String,
    pub session: crate::records::sessions::Session,
}
