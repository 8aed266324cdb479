//! Event-keyed hooks: what a graph runs when its runs complete, fail, block, or complete a spec.
//!
//! - [`config`]: the `hooks` map on a graph (event → ordered hook configs), validated whole at
//!   edit time: one mode per hook, the executor's own validation, markers, `spec_ids`.
//! - [`graph_source`]: graph hooks as one of the bus's hook sources: at each engine event the
//!   graph's stored hooks *then* (live edits apply to the events still to come, nothing is
//!   retroactive), each filtered by its `spec_ids`. The bus records a hook run per hook in the
//!   event's write and runs them in declaration order off the engine's path; a failing hook is
//!   recorded, never changes the graph and never stops the hooks after it.
//! - [`daemon`]: daemon hooks (`[[hooks]]` in `canopy.toml`), another source.
//! - [`decide`]: sync hooks, which allow, deny or patch an action before it happens.
//! - [`runs`]: the hook-run records (kept by the store, [`canopy_store::hook_runs`]).
//! - [`dry_run`]: `canopy hooks test`, rendering (and optionally running) an event's hooks against
//!   a past run.

pub mod breaker;
pub mod catalog;
pub mod config;
pub mod daemon;
pub mod decide;
pub mod dry_run;
pub mod graph_source;
pub mod runs;

pub use config::{HookMap, SpecScope, validate_hooks};
