//! Graphs: create or update, control a run, and the queries of a graph's view and its runs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A graph to create, or a partial update (only the fields present change).
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "name": "web",
    "workdir": "/home/me/web",
    "nodes": [
        { "name": "implement", "platform": "claude", "prompt": "Implement {{spec_body}}" },
        { "name": "test", "command": "cargo test" }
    ],
    "specs": ["3f2a"],
    "hooks": { "on_completed": [{ "command": "notify-send 'web done: {{completed_specs}}'" }] }
}))]
#[schemars(example = serde_json::json!({ "allow_dirty_start": true, "version": 4 }))]
pub struct GraphInput {
    /// The graph's name (unique; on an update, a new name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The directory runs work in: an absolute path, best a git repository (the dirty-tree
    /// guard reads `git status` there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The nodes each spec runs through, in order; each is an executor config with a `name`:
    /// `{"name": "test", "command": "cargo test"}`, `{"name": "implement", "platform":
    /// "claude", "prompt": "Implement {{spec_body}}"}`, or a plugin's `{"mode": ...}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<Value>>,
    /// The bound specs (ids or unique id prefixes) a run without a queue works through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specs: Option<Vec<String>>,
    /// Let runs start and go on from spec to spec on a dirty git tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_dirty_start: Option<bool>,
    /// The node (daemon, by its `node` name) the graph's runs must use, where its workdir
    /// lives, when several daemons share the database; a run asked of another daemon is
    /// refused naming this one. `""` on an update: any daemon may run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Event → ordered hook configs; events named here replace that event's hooks (`[]` or
    /// `null` removes them), events not named keep theirs. The events are `on_completed`,
    /// `on_failed`, `on_blocked`, `on_spec_completed`; a hook is `{"command": "..."}`,
    /// `{"platform": "claude", "prompt": "..."}` or `{"prompt": "...", "target_session_name":
    /// "..."}`, with markers `{{graph_name}}`, `{{workdir}}`, `{{completed_specs}}`,
    /// `{{spec_name}}`, `{{spec_id}}`, `{{blocker}}`, `{{node}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<std::collections::BTreeMap<String, Value>>")]
    pub hooks: Option<Value>,
    /// The single completion hook of the shape before hooks were a map: sets the
    /// `on_completed` hooks to this one config (`null` removes them).
    #[serde(
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub on_completed: Option<Value>,
    /// The version this edit was based on (what `graph get` showed): the edit is refused,
    /// changing nothing, when the graph has been edited since. Absent: applied regardless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

impl GraphInput {
    /// The fields the input sets.
    pub fn fields(&self) -> Vec<String> {
        [
            ("name", self.name.is_some()),
            ("workdir", self.workdir.is_some()),
            ("nodes", self.nodes.is_some()),
            ("specs", self.specs.is_some()),
            ("allow_dirty_start", self.allow_dirty_start.is_some()),
            ("node", self.node.is_some()),
            ("hooks", self.hooks.is_some() || self.on_completed.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name.to_string())
        .collect()
    }
}

fn some_value<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(de).map(Some)
}

/// A `graph_control` request.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "action": "run" }))]
#[schemars(example = serde_json::json!({ "action": "run", "queue_id": "sprint-12" }))]
#[schemars(example = serde_json::json!({ "action": "continue", "mode": "run_from_node", "node": "test" }))]
pub struct ControlRequest {
    /// `run` (start a run), `reset` (back to idle; history stays), `continue` (resume a
    /// paused run) or `cancel` (stop the run in flight, recorded `cancelled`).
    #[schemars(extend("enum" = ["run", "reset", "continue", "cancel"]))]
    pub action: String,
    /// run: drain this queue (its name, id or unique id prefix) instead of the bound specs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
    /// run: use this workdir (an absolute path) for this run instead of the graph's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// continue: absent resumes plainly (a blocked node runs again); `run_from_node` starts
    /// the spec the run stopped on (else the next spec) at `node`; `skip_next_spec` skips the
    /// blocked spec (else the next one) and goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["run_from_node", "skip_next_spec"]))]
    pub mode: Option<String>,
    /// continue with `run_from_node`: the node to start the next spec at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl ControlRequest {
    /// A request with this action and nothing else.
    pub fn new(action: &str) -> Self {
        ControlRequest {
            action: action.to_string(),
            ..Default::default()
        }
    }
}

/// `GET /api/graphs/{name}`: which page of the per-spec lists.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphQuery {
    /// Specs of the per-spec lists skipped from the start (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
    /// Specs of the per-spec lists shown at most (default 50, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `GET /api/graphs/{name}/node-runs`: how many.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeRunsQuery {
    /// How many node runs, newest first (default 50, at most 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<usize>,
}

/// `GET /api/runs`: which runs.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunListQuery {
    /// How many runs, newest first (default 50, at most 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<usize>,
    /// Only this graph's runs (a name, an id or a unique id prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
}

/// `GET /api/runs/{id}`: how much of the run.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    /// Leave out each node run's `detail` and each hook run's `output` (what progress polling
    /// does not need).
    #[serde(default)]
    pub brief: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_null_on_completed_is_kept_as_a_removal_both_ways() {
        let input: GraphInput = serde_json::from_str(r#"{"on_completed": null}"#).unwrap();
        assert_eq!(input.on_completed, Some(Value::Null));
        assert_eq!(input.fields(), ["hooks"]);
        assert_eq!(
            serde_json::to_string(&input).unwrap(),
            r#"{"on_completed":null}"#
        );
    }

    #[test]
    fn a_control_request_leaves_out_what_it_does_not_set() {
        let body = serde_json::to_string(&ControlRequest::new("reset")).unwrap();
        assert_eq!(body, r#"{"action":"reset"}"#);
    }
}
