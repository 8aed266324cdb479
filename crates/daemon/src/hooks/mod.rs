//! Event-keyed hooks: what a graph runs when its runs complete, fail, block, or complete a spec.
//!
//! - [`config`]: the `hooks` map on a graph (event → ordered hook configs), validated whole at
//!   edit time: one mode per hook, the executor's own validation, markers, `spec_ids`.
//! - [`HookDispatcher`]: the [`EventSink`](crate::engine::EventSink) the engine reports to. At
//!   each event it reads the graph's stored hooks *then* (live edits apply to the events still to
//!   come, nothing is retroactive), records a hook run per matching hook (durably, before the
//!   engine goes on), and runs them in declaration order off the engine's path. A failing hook
//!   is recorded; it never changes the graph and never stops the hooks after it.
//! - [`runs`]: the hook-run records (kept by the store, [`canopy_store::hook_runs`]).
//! - [`dry_run`]: `canopy hooks test`, rendering (and optionally running) an event's hooks against
//!   a past run.

pub mod breaker;
pub mod config;
pub mod daemon;
pub mod dry_run;
mod firing;
pub mod runs;

pub use config::{HookMap, SpecScope, validate_hooks};
pub use firing::{Firing, matches};

/// `{{completed_specs}}`: name and one-line summary of each spec, one per line.
pub fn completed_specs_text(specs: &[crate::engine::events::CompletedSpec]) -> String {
    specs
        .iter()
        .map(|s| match &s.summary {
            Some(summary) => format!("{} — {summary}", s.name),
            None => s.name.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
