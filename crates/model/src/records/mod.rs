//! What the daemon keeps and the API shows: graphs, runs, hook runs and the hook API's
//! reports, queues, specs, sessions, webhook deliveries, cron views and receipts, messages,
//! plugins and the daemon's status, with their states.
//!
//! The store reads and writes these; the daemon serialises them; the CLI, TUI and MCP server
//! deserialise the same types (a state a newer daemon adds reads as `Unknown`, see
//! [`crate::states`]).

pub mod answers;
pub mod config;
pub mod crons;
pub mod daemon;
pub mod graphs;
pub mod hook_reports;
pub mod hook_runs;
pub mod messages;
pub mod plugins;
pub mod queues;
pub mod runs;
pub mod sessions;
pub mod specs;
pub mod views;
pub mod webhooks;
