//! Tool events: a tool call of an agent Canopy launched (its Bash, Edit, Write, ...), before
//! and after it runs, through the runtime hooks materialised for that launch.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::agent::LaunchRef;
use super::{Family, declare_events};

/// `tool.pre_call`: the agent is about to call a tool. Sync hooks decide: allow, deny (the
/// runtime is told not to run it, with the reason) or patch its input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolPreCall {
    #[serde(flatten)]
    pub launch: LaunchRef,
    /// The tool's name, as the runtime names it (`Bash`, `Edit`, `mcp__server__tool`).
    pub tool_name: String,
    /// The tool's input (for `Bash`, `{"command": ...}`).
    pub tool_input: Value,
}

/// What a sync hook on `tool.pre_call` may change: the tool's input, whole.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallPatch {
    pub tool_input: Option<serde_json::Map<String, Value>>,
}

/// `tool.post_call`: a tool call of the agent ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolPostCall {
    #[serde(flatten)]
    pub launch: LaunchRef,
    pub tool_name: String,
    pub tool_input: Value,
    /// What the tool answered, as the runtime reports it.
    pub tool_response: Value,
}

declare_events! { Family::Tool;
    ToolPreCall => "tool.pre_call", true,
        "asked before an agent Canopy launched calls a tool (runtime hook phase before_tool): sync hooks allow it, deny it (the agent is told why) or patch its input",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "tool_name", "tool_input"],
        target: |e| Some(e.tool_name.clone()), project: |e| Some(e.launch.workdir.clone()),
        patch: ToolCallPatch;
    ToolPostCall => "tool.post_call", false,
        "a tool call of an agent Canopy launched ended (phase post_tool_use)",
        ["launch_id", "platform", "workdir", "graph_id", "graph_name", "run_id", "spec_id", "session_id", "tool_name", "tool_input", "tool_response"],
        target: |e| Some(e.tool_name.clone()), project: |e| Some(e.launch.workdir.clone());
}
