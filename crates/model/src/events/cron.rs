//! Cron events: a cron firing, its firing ending, firings missed while the daemon was down.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};
use crate::records::crons::ReceiptStatus;
use crate::time::Timestamp;

/// What every cron event says about the firing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct CronFiring {
    /// The cron's name.
    pub cron: String,
    /// The firing's receipt id (`CANOPY_CRON_RUN_ID` in its processes).
    pub run_id: String,
    /// `schedule`, `manual` or `catch_up`.
    pub trigger: String,
    /// The scheduled second it fired for (RFC 3339), for a scheduled firing.
    pub scheduled_at: Option<Timestamp>,
}

/// `cron.fired`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct CronFired(pub CronFiring);

/// How a firing ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct CronEnded {
    #[serde(flatten)]
    pub firing: CronFiring,
    /// The receipt's terminal status (`completed`, `failed`, `timed_out`, `skipped`,
    /// `refused`, `interrupted_by_restart`, `interrupted_unknown`).
    pub status: ReceiptStatus,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
}

/// `cron.completed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct CronCompleted(pub CronEnded);

/// `cron.failed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct CronFailed(pub CronEnded);

/// `cron.interrupted`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct CronInterrupted(pub CronEnded);

/// `cron.missed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CronMissed {
    pub cron: String,
    /// The receipt recording the misses.
    pub run_id: String,
    /// How many scheduled firings passed while the daemon was down.
    pub missed_count: i64,
    /// The first and last of them (RFC 3339).
    pub first_missed_at: Timestamp,
    pub last_missed_at: Timestamp,
    /// Whether one late run follows (`catch_up = "once"`).
    pub catch_up: bool,
}

/// `cron.pre_fire`: a cron's firing is about to run its action. Sync hooks decide: allow,
/// deny (the firing is recorded `denied` and nothing runs) or patch the action's `command` or
/// `prompt` (as configured: markers are rendered after the decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CronPreFire {
    #[serde(flatten)]
    pub firing: CronFiring,
    /// The executor mode of its action.
    pub mode: String,
    /// The action's command (a `command` action).
    pub command: Option<String>,
    /// The action's prompt (an agent or interactive action).
    pub prompt: Option<String>,
}

/// What a sync hook on `cron.pre_fire` may change: only a field the action has.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronFirePatch {
    pub command: Option<String>,
    pub prompt: Option<String>,
}

declare_events! { Family::Cron;
    CronPreFire => "cron.pre_fire", true,
        "asked before a cron's firing runs its action: sync hooks allow it, deny it (the firing is recorded denied; nothing runs) or patch its command or prompt",
        ["cron", "run_id", "trigger", "scheduled_at", "mode", "command", "prompt"],
        target: |e| Some(e.firing.cron.clone()), project: |_e| None,
        patch: CronFirePatch;
    CronFired => "cron.fired", false,
        "a cron fired (on schedule, by hand or to catch up); its receipt is written before anything runs",
        ["cron", "run_id", "trigger", "scheduled_at"],
        target: |e| Some(e.0.cron.clone()), project: |_e| None;
    CronCompleted => "cron.completed", false,
        "a cron's firing completed",
        ["cron", "run_id", "trigger", "scheduled_at", "status", "exit_code", "duration_ms"],
        target: |e| Some(e.0.firing.cron.clone()), project: |_e| None;
    CronFailed => "cron.failed", false,
        "a cron's firing failed, timed out, or was skipped or refused; `status` and `error` say which",
        ["cron", "run_id", "trigger", "scheduled_at", "status", "exit_code", "error", "duration_ms"],
        target: |e| Some(e.0.firing.cron.clone()), project: |_e| None;
    CronInterrupted => "cron.interrupted", false,
        "a cron's firing was cut short by a daemon stop (interrupted_by_restart) or found unfinished after a crash (interrupted_unknown)",
        ["cron", "run_id", "trigger", "scheduled_at", "status", "error", "duration_ms"],
        target: |e| Some(e.0.firing.cron.clone()), project: |_e| None;
    CronMissed => "cron.missed", false,
        "scheduled firings of a cron passed while the daemon was down; they are not run",
        ["cron", "run_id", "missed_count", "first_missed_at", "last_missed_at", "catch_up"],
        target: |e| Some(e.cron.clone()), project: |_e| None;
}
