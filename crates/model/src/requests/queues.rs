//! Spec queues: create one, add a spec, move a member between groups, reorder.

use serde::{Deserialize, Serialize};

/// A new queue.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "name": "sprint-12", "specs": ["3f2a", "9c01"] }))]
pub struct NewQueue {
    /// The queue's name, unique among queues.
    pub name: String,
    /// Initial members, in order (ids or prefixes).
    #[serde(default)]
    pub specs: Vec<String>,
}

/// `POST /api/queues/{id}/specs`: the spec to add, and its group.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "spec": "3f2a" }))]
#[schemars(example = serde_json::json!({ "spec": "9c01", "group": "auth" }))]
pub struct AddSpec {
    /// The spec to add: its id or a unique id prefix.
    pub spec: String,
    /// A context group: the spec lands right after the group's last pending member, and
    /// grouped specs share a warm agent session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// `PUT /api/queues/{id}/specs/{spec}/group`: the member's new group.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "group": "auth" }))]
#[schemars(example = serde_json::json!({ "group": null }))]
pub struct SetGroup {
    /// The member's new group (it moves next to its group); `null` takes it out of any group.
    pub group: Option<String>,
}

/// `PUT /api/queues/{id}/order`: the new order.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "order": ["9c01", "3f2a", "77be"] }))]
pub struct Reorder {
    /// Every member's spec (id or unique prefix) in the new order; an order that would split a
    /// group's pending members is refused, naming the positions.
    pub order: Vec<String>,
}
