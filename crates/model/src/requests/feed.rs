//! The feed: which events, from where.

use serde::{Deserialize, Serialize};

/// `GET /api/feed`: which events, from which point, and whether to stream.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedParams {
    /// A cursor, an RFC 3339 time, or a duration back from now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// An event name or glob (`spec.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Only this family's events: `graph`, `spec`, `node`, `hook`, `session`, `plugin`, `cron`,
    /// `webhook` or `project`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Only this project's (workdir's) events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// How many events at most: 0 to 1000 (default 100). Parsed by the daemon, so a bad value
    /// is named with what is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<u32>")]
    pub last: Option<String>,
    /// Stream (server-sent events) instead of one answer.
    #[serde(default)]
    #[schemars(skip)]
    pub follow: bool,
}
