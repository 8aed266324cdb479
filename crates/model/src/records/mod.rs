//! What the daemon keeps and the API shows: graphs, runs, hook runs, queues, specs, sessions,
//! webhook deliveries, cron receipts, messages and plugins, with their states.
//!
//! The store reads and writes these; the daemon serialises them; the CLI, TUI and MCP server
//! deserialise the same types (a state a newer daemon adds reads as `Unknown`, see
//! [`crate::states`]).

pub mod crons;
pub mod graphs;
pub mod hook_runs;
pub mod messages;
pub mod plugins;
pub mod queues;
pub mod runs;
pub mod sessions;
pub mod specs;
pub mod views;
pub mod webhooks;
