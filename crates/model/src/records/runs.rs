//! A graph's runs, the specs each reached and the node runs on them.

use serde::{Deserialize, Serialize};

use super::views::ProgressResult;
use crate::state_enum;
use crate::time::Timestamp;

state_enum! {
    /// A run's status.
    pub enum RunStatus {
        Running = "running",
        Paused = "paused",
        Completed = "completed",
        Failed = "failed",
        /// The daemon stopped while it ran; it waits for a continue or a reset.
        Interrupted = "interrupted",
        /// Abandoned by a reset.
        Reset = "reset",
        /// Stopped by `graph cancel`: its running node was killed.
        Cancelled = "cancelled",
    }
}

impl RunStatus {
    /// True while the run can still go on (running, paused, or interrupted awaiting a continue).
    pub fn is_active(self) -> bool {
        match self {
            Self::Running | Self::Paused | Self::Interrupted => true,
            Self::Completed | Self::Failed | Self::Reset | Self::Cancelled | Self::Unknown => false,
        }
    }
}

state_enum! {
    /// How far a run took one spec.
    pub enum SpecResult {
        Running = "running",
        Blocked = "blocked",
        /// Its agent hit a usage limit; the run waits for the reset and runs it again.
        LimitBlocked = "limit_blocked",
        Completed = "completed",
        Failed = "failed",
        Skipped = "skipped",
        Interrupted = "interrupted",
        /// In flight (running or blocked) when its run was cancelled.
        Cancelled = "cancelled",
    }
}

impl SpecResult {
    /// A spec that did not complete and has a reason to show (one rule, the progress
    /// result's: [`ProgressResult::stopped`]).
    pub fn stopped(self) -> bool {
        ProgressResult::from(self).stopped()
    }
}

state_enum! {
    /// How one executor call for a node stands.
    pub enum NodeRunStatus {
        Running = "running",
        Completed = "completed",
        Failed = "failed",
        Blocked = "blocked",
        /// Its agent platform reported a usage limit.
        LimitBlocked = "limit_blocked",
        Interrupted = "interrupted",
        /// Killed by `graph cancel`.
        Cancelled = "cancelled",
    }
}

/// A run as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Run {
    pub id: String,
    pub graph_id: String,
    pub workdir: String,
    pub queue_id: Option<String>,
    pub status: RunStatus,
    pub blocker: Option<String>,
    pub summary: Option<String>,
    /// The node the next spec starts at (a directed start), if one was asked for.
    pub start_node: Option<String>,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// Who started (or last continued) the run: `user`, `hook:<name>`, ...
    pub actor: String,
    /// The dispatch depth of the request that started (or continued) it.
    pub dispatch_depth: u32,
    /// A run paused on a usage limit: when it goes on by itself (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumes_at: Option<Timestamp>,
}

impl Run {
    /// What the run's events are caused by.
    pub fn cause(&self) -> crate::events::Cause {
        crate::events::Cause {
            actor: crate::events::Actor::parse(&self.actor).unwrap_or_default(),
            depth: self.dispatch_depth,
        }
    }
}

/// A spec the run reached.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct RunSpec {
    pub spec_id: String,
    pub spec_name: Option<String>,
    pub ordinal: i64,
    pub group: Option<String>,
    pub status: SpecResult,
    pub next_node: i64,
    pub summary: Option<String>,
    pub harness_session: Option<String>,
    /// Why a failed, blocked or interrupted spec stopped: the reason of its last node run.
    pub reason: Option<String>,
    /// The node that run was of.
    pub reason_node: Option<String>,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
}

/// One executor call for a node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NodeRun {
    pub id: String,
    pub run_id: String,
    pub spec_id: String,
    pub node: String,
    pub node_index: i64,
    pub mode: String,
    /// The executor: plugin name, version and sha256.
    pub plugin: Option<String>,
    pub plugin_version: Option<String>,
    pub plugin_sha256: Option<String>,
    pub status: NodeRunStatus,
    pub summary: Option<String>,
    /// Failure reason or blocker.
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub harness_session: Option<String>,
    pub resume_session: Option<String>,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub duration_ms: Option<i64>,
}
