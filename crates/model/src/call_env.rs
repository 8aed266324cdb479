//! The variables the daemon sets on every process an automation's call runs, after the plugin's
//! own (so no plugin can choose them): who the call acts as, how deep in a chain of hooks, and
//! the token that attributes what the process asks of the daemon. The CLI and the MCP server
//! read them back.

/// The call's own API token, live while the call runs.
pub const CALL_TOKEN: &str = "CANOPY_CALL_TOKEN";

/// Every call token starts with this, so an expired one can be told from a wrong one.
pub const CALL_TOKEN_PREFIX: &str = "canopy-call-";

/// The actor the call's work is attributed to (`hook`, `cron`, `webhook`, `agent`, ...).
pub const ACTOR: &str = "CANOPY_ACTOR";

/// The dispatch depth of the call's work.
pub const DISPATCH_DEPTH: &str = "CANOPY_DISPATCH_DEPTH";
