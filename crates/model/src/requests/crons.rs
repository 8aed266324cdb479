//! Crons: their receipts.

use serde::{Deserialize, Serialize};

/// `GET /api/crons/{name}/runs`: how many receipts.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronRunsQuery {
    /// How many receipts, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<usize>,
}
