//! Cron receipts (one per firing) and each cron's state.

use serde::{Deserialize, Serialize};

use crate::state_enum;
use crate::time::Timestamp;

state_enum! {
    /// Where a firing is, or how it ended.
    pub enum ReceiptStatus {
        /// Admitted; its action runs.
        Running = "running",
        /// The action completed.
        Completed = "completed",
        /// The action failed (or could not start, or was replaced by the next firing).
        Failed = "failed",
        /// The action was stopped at its timeout.
        TimedOut = "timed_out",
        /// Not run: the previous firing still ran (`overlap = "forbid"`).
        Skipped = "skipped",
        /// Not run: a sync hook on `cron.pre_fire` denied it.
        Denied = "denied",
        /// Not run: a planned stop had closed admission.
        Refused = "refused",
        /// Scheduled firings that passed while the daemon was down (`missed_count` of them).
        Missed = "missed",
        /// A planned stop forced it after its drain budget; the output is what it printed
        /// until then.
        InterruptedByRestart = "interrupted_by_restart",
        /// Found unfinished after the daemon died (crash, kill -9): what it did is unknown,
        /// and it is never replayed.
        InterruptedUnknown = "interrupted_unknown",
    }
}

impl ReceiptStatus {
    /// Cut short by a stop or a crash (told by `cron.interrupted`).
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InterruptedByRestart | Self::InterruptedUnknown)
    }
}

state_enum! {
    /// What made a cron fire.
    pub enum Trigger {
        /// Its schedule.
        Schedule = "schedule",
        /// `canopy cron run` / `POST /api/crons/{name}/run`.
        Manual = "manual",
        /// The one late run `catch_up = "once"` asks for after misses.
        CatchUp = "catch_up",
    }
}

/// One receipt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Receipt {
    pub run_id: String,
    pub cron: String,
    pub node: String,
    pub trigger: Trigger,
    pub scheduled_at: Option<Timestamp>,
    pub status: ReceiptStatus,
    pub exit_code: Option<i32>,
    /// The last bytes of what the action printed (bounded).
    pub output: Option<String>,
    pub error: Option<String>,
    pub missed_count: Option<i64>,
    /// Set on `interrupted_unknown`: whatever the action had done is not known.
    pub original_effects_unknown: bool,
    pub actor: String,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub duration_ms: Option<i64>,
}

/// A cron's state kept across restarts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct CronState {
    pub paused: bool,
    /// Scheduled firings up to this time (RFC 3339) are accounted for: fired, skipped,
    /// refused, or recorded missed.
    pub accounted_through: Option<Timestamp>,
}

/// What a firing does while the cron's previous firing still runs.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// The new firing is recorded `skipped` and does not run.
    #[default]
    Forbid,
    /// Both run.
    Allow,
    /// The running one is stopped (its processes killed; its receipt says it was replaced)
    /// and the new one runs.
    Replace,
}

/// Whether firings missed while the daemon was down get one late run.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Misses are recorded, nothing runs late.
    #[default]
    None,
    /// Misses are recorded, and one late run follows at start.
    Once,
}

state_enum! {
    /// What a cron is doing now, on this node.
    pub enum CronActivity {
        /// A firing of it runs now.
        Running = "running",
        Idle = "idle",
        /// `canopy cron pause` stopped its schedule.
        Paused = "paused",
        /// Its `nodes` / `roles_permitted` leave this node out.
        NotServedHere = "not served here",
    }
}

/// A cron as `canopy cron list` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct CronView {
    pub name: String,
    pub schedule: String,
    pub timezone: String,
    /// What it runs, in one line (`command: ./prune.sh`, `agent claude`, `mode docs-maintenance`).
    pub runs: String,
    /// Whether this node runs it (its `nodes` / `roles_permitted`).
    pub served: bool,
    pub paused: bool,
    /// What it is doing now.
    pub state: CronActivity,
    /// The next scheduled firing (RFC 3339), when it runs here and is not paused.
    pub next_at: Option<Timestamp>,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub timeout_secs: Option<u64>,
    /// The run ids of its firings running now.
    pub running: Vec<String>,
    /// Its last firing that ran, rebuilt from the receipts (so it survives restarts).
    pub last: Option<Receipt>,
}
