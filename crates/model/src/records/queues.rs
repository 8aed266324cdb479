//! Queues: ordered specs, and where each member stands.

use serde::{Deserialize, Serialize};

use super::runs::SpecResult;
use crate::state_enum;
use crate::time::Timestamp;

state_enum! {
    /// Where a queue member stands: pending, or the outcome of the latest run on the queue that
    /// reached it. Only `completed` and `skipped` members are no longer pending.
    pub enum MemberStatus {
        Pending = "pending",
        Running = "running",
        Blocked = "blocked",
        LimitBlocked = "limit_blocked",
        Completed = "completed",
        Failed = "failed",
        Skipped = "skipped",
        Interrupted = "interrupted",
        Cancelled = "cancelled",
    }
}

impl From<SpecResult> for MemberStatus {
    fn from(result: SpecResult) -> Self {
        match result {
            SpecResult::Running => Self::Running,
            SpecResult::Blocked => Self::Blocked,
            SpecResult::LimitBlocked => Self::LimitBlocked,
            SpecResult::Completed => Self::Completed,
            SpecResult::Failed => Self::Failed,
            SpecResult::Skipped => Self::Skipped,
            SpecResult::Interrupted => Self::Interrupted,
            SpecResult::Cancelled => Self::Cancelled,
            SpecResult::Unknown => Self::Unknown,
        }
    }
}

/// A queue member.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Member {
    /// 1-based position in the queue.
    pub position: usize,
    pub spec_id: String,
    pub spec_name: String,
    pub group: Option<String>,
    pub status: MemberStatus,
    pub pending: bool,
    /// The run on this queue that completed or skipped it (the latest one), once it is not
    /// pending.
    pub done_in_run: Option<String>,
}

/// A queue with its members.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Queue {
    pub id: String,
    pub name: String,
    pub created_at: Timestamp,
    pub members: Vec<Member>,
}
