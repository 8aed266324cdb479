//! A graph as stored: its definition, version and status.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::state_enum;
use crate::time::Timestamp;

/// Event → ordered hook configs, as stored in a graph.
pub type HookMap = Map<String, Value>;

state_enum! {
    /// A graph's status.
    pub enum GraphStatus {
        Idle = "idle",
        Running = "running",
        Paused = "paused",
        Completed = "completed",
        Failed = "failed",
        /// Its last run was stopped by `graph cancel`.
        Cancelled = "cancelled",
    }
}

/// A node: a name and an executor config, exactly like a hook's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Node {
    pub name: String,
    #[serde(flatten)]
    pub config: Map<String, Value>,
}

/// A spec bound to a graph.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct BoundSpec {
    pub id: String,
    pub name: String,
}

/// A graph as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Graph {
    pub id: String,
    pub name: String,
    pub workdir: String,
    pub nodes: Vec<Node>,
    pub specs: Vec<BoundSpec>,
    pub allow_dirty_start: bool,
    pub status: GraphStatus,
    pub blocker: Option<String>,
    /// Event → ordered hook configs.
    pub hooks: HookMap,
    pub current_run_id: Option<String>,
    /// The definition's version: 1 at creation, one more at every edit. An edit may name the
    /// version it was based on and is refused when the graph has moved on.
    pub version: i64,
    /// The generation of the driver allowed to work on the current run.
    #[serde(skip)]
    pub driver_lease: i64,
    /// The node (daemon) its runs must use, when it names one: its workdir lives there. Absent:
    /// any daemon on the database may run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}
