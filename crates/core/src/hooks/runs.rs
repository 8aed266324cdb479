//! Hook-run records: one row per hook that fired, with the exact config that fired, the executor
//! that ran it, the rendered values, and how it ended. The records and their queries live in
//! the store ([`canopy_store::hook_runs`]); this module names them for the hooks code.

pub use canopy_model::records::hook_runs::{HookRun, HookRunStatus};
pub use canopy_store::hook_runs::{Finished, Fired, HookRunFilter};

/// Bytes of a hook's output kept in its record.
pub const OUTPUT_LIMIT: usize = 16 * 1024;
