//! The Canopy daemon: the HTTP API, `/mcp`, the webhook listener, loading and reloading
//! `canopy.toml`, and the wiring that starts the core (`canopy-core`: engine, bus, hooks,
//! crons, webhooks, projects, sessions) and stops it with a drain.
//!
//! Data flows one way: `api` → core → executors (`canopy-executors`); the store
//! (`canopy-store`) is below them all. The CLI and the TUI are in the `canopy` binary and talk
//! to this crate only over HTTP (`canopy-client`), but for `canopy daemon`, which starts it.

pub mod api;
pub mod daemon;
pub mod listener;
pub mod logfile;
pub mod mcp;
pub mod reload;
pub mod store_copy;
pub mod webhook_listener;
