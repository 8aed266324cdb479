//! Agent events: what an agent CLI Canopy launched reports from inside its run, through the
//! runtime hooks materialised for that launch (see `runtime_hooks` in the executors crate).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};

/// The launch an agent event comes from: one agent call, with its runtime hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LaunchRef {
    /// The launch's id (one per agent call that has runtime hooks).
    pub launch_id: String,
    /// The agent platform launched (`claude`, `codex`, a `[platforms.X]`).
    pub platform: String,
    /// The directory the agent works in.
    pub workdir: String,
    /// The graph, run and spec of the launch, when a graph node launched it.
    pub graph_id: Option<String>,
    pub graph_name: Option<String>,
    pub run_id: Option<String>,
    pub spec_id: Option<String>,
    /// The agent's own session id, as the runtime reports it.
    pub session_id: Option<String>,
}

/// `agent.started`: the agent's session started (or resumed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentStarted {
    #[serde(flatten)]
    pub launch: LaunchRef,
    /// How it started, as the runtime says (`startup`, `resume`, ...).
    pub source: Option<String>,
}

/// `agent.pre_complete`: the agent is about to finish its turn. Sync hooks decide: allow, or
/// deny with a reason, which the runtime is told as the reason to keep working.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentPreComplete {
    #[serde(flatten)]
    pub launch: LaunchRef,
    /// The agent's last message, when the runtime gives it.
    pub message: Option<String>,
}

/// `agent.stopped`: the agent finished its turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentStopped {
    #[serde(flatten)]
    pub launch: LaunchRef,
    /// The agent's last message, when the runtime gives it.
    pub message: Option<String>,
}

/// `agent.notification`: the runtime notified its user (waiting for input, a permission).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentNotification {
    #[serde(flatten)]
    pub launch: LaunchRef,
    pub message: Option<String>,
    /// Its kind, as the runtime names it.
    pub notification_type: Option<String>,
}

/// `agent.session_ended`: the agent's session ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentSessionEnded {
    #[serde(flatten)]
    pub launch: LaunchRef,
    /// Why, as the runtime says.
    pub reason: Option<String>,
}

/// `agent.completed`: a launch ended and its work completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCompleted {
    #[serde(flatten)]
    pub launch: LaunchRef,
    /// The work's summary, as its outcome says.
    pub summary: Option<String>,
}

/// `agent.failed`: a launch ended and its work did not complete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentFailed {
    #[serde(flatten)]
    pub launch: LaunchRef,
    /// How it ended: `failed`, `timed_out`, `blocked`, `limit_blocked` or `interrupted`.
    pub failure: String,
    /// Why, as the work (or the host) says.
    pub reason: String,
}

declare_events! { Family::Agent;
    AgentStarted => "agent.started", false,
        "an agent Canopy launched started its session (runtime hook phase on_start)",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "source"],
        target: |e| Some(e.launch.launch_id.clone()), project: |e| Some(e.launch.workdir.clone());
    AgentPreComplete => "agent.pre_complete", true,
        "asked before an agent Canopy launched ends its turn (phase before_complete): sync hooks allow it, or deny it and the agent is told to keep working, with the reason",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "message"],
        target: |e| Some(e.launch.launch_id.clone()), project: |e| Some(e.launch.workdir.clone());
    AgentStopped => "agent.stopped", false,
        "an agent Canopy launched ended its turn (phase on_stop)",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "message"],
        target: |e| Some(e.launch.launch_id.clone()), project: |e| Some(e.launch.workdir.clone());
    AgentNotification => "agent.notification", false,
        "an agent Canopy launched notified its user (phase on_notification)",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "message", "notification_type"],
        target: |e| Some(e.launch.launch_id.clone()), project: |e| Some(e.launch.workdir.clone());
    AgentSessionEnded => "agent.session_ended", false,
        "the session of an agent Canopy launched ended (phase on_session_end)",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "reason"],
        target: |e| Some(e.launch.launch_id.clone()), project: |e| Some(e.launch.workdir.clone());
    AgentCompleted => "agent.completed", false,
        "a launch of an agent with runtime hooks ended and its work completed (phase on_complete; Canopy fires it on every platform)",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "summary"],
        target: |e| Some(e.launch.launch_id.clone()), project: |e| Some(e.launch.workdir.clone());
    AgentFailed => "agent.failed", false,
        "a launch of an agent with runtime hooks ended and its work did not complete (phase on_failure; Canopy fires it on every platform)",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "failure", "reason"],
        target: |e| Some(e.launch.launch_id.clone()), project: |e| Some(e.launch.workdir.clone());
}
