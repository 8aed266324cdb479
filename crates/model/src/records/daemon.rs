//! What the daemon says about itself: `canopy status` and the answer to a planned stop.

use serde::{Deserialize, Serialize};

use super::sessions::ActiveRun;
use crate::time::Timestamp;

/// `GET /api/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct DaemonStatus {
    pub version: String,
    /// The base URL it serves on.
    pub url: String,
    pub pid: u32,
    pub data_dir: String,
    /// Its log file (`daemon.log` in the data dir).
    pub log_file: String,
    pub started_at: Timestamp,
    pub uptime_seconds: u64,
    /// The runs that can still go on, with their graphs' names.
    pub active_runs: Vec<ActiveRun>,
    pub plugins: PluginCounts,
    /// The last warnings and errors of its log.
    pub recent_problems: Vec<String>,
    pub storage: StoreSizes,
}

/// How many plugins are installed, and how many of them serve their modes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct PluginCounts {
    pub installed: usize,
    pub enabled: usize,
}

/// How many rows each growing table holds, and the database's size.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct StoreSizes {
    /// The database file, in bytes (on PostgreSQL: the database's size on the server).
    pub file_bytes: u64,
    /// Bytes of pages free inside the file (returned to the file system as they are vacuumed;
    /// 0 on PostgreSQL, whose autovacuum reuses them).
    pub free_bytes: u64,
    /// The PostgreSQL database the records are kept in (`user@host:port/dbname`, never a
    /// password); absent when they are in `canopy.db` in the data dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<String>,
    pub feed_rows: u64,
    pub hook_runs: u64,
    pub runs: u64,
    pub node_runs: u64,
    pub deliveries: u64,
    pub cron_receipts: u64,
}

/// The answer to `POST /api/shutdown`: the stop has begun.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Stopping {
    pub stopping: bool,
    pub pid: u32,
    /// How long admitted work may run on before it is forced.
    pub drain_budget_secs: u64,
    /// Pieces of work in flight when the stop began.
    pub running: usize,
}

/// `POST /api/rotate-token`: a new token is in force, in `token_file`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Rotated {
    pub rotated: bool,
    pub token_file: String,
}

/// `GET /api/nodes`: the daemons sharing this daemon's database.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Nodes {
    /// The node name of the daemon that answered.
    pub this: String,
    pub nodes: Vec<NodeInfo>,
}

/// One daemon on the database, as it registered itself, and what it holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NodeInfo {
    pub name: String,
    pub roles: Vec<String>,
    /// `alive` (its heartbeat is within its lease), `stopped` (it stopped cleanly) or `lost`
    /// (no heartbeat for longer than its lease: it died, hung or lost the database; the runs it
    /// drove are taken over).
    pub state: NodeState,
    pub pid: u32,
    pub version: String,
    /// Where its API listens.
    pub api_url: Option<String>,
    /// How long its lease on a run lasts without a heartbeat, in seconds.
    pub lease_secs: u64,
    pub started_at: Timestamp,
    pub heartbeat_at: Timestamp,
    /// Seconds since its last heartbeat.
    pub heartbeat_age_secs: u64,
    pub stopped_at: Option<Timestamp>,
    /// The runs it drives.
    pub leases: Vec<NodeLease>,
}

/// Whether a node is alive.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    Alive,
    Stopped,
    Lost,
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Alive => "alive",
            Self::Stopped => "stopped",
            Self::Lost => "lost",
        })
    }
}

/// A run a node drives, and until when its lease holds unless renewed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NodeLease {
    pub graph_id: String,
    pub graph: String,
    pub run_id: Option<String>,
    pub until: Timestamp,
}
