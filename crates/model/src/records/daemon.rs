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
