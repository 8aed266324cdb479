//! The Canopy daemon: the engine that runs agent work as graphs over specs and queues, the bus
//! that records every event with the hooks it fires, the other automation sources (crons,
//! webhooks, projects, sessions), and the HTTP API, `/mcp` and configuration around them.
//!
//! Data flows one way: `api` → engine → bus → hooks → executors (`canopy-executors`); the
//! store (`canopy-store`) is below them all. The CLI and the TUI are in the `canopy` binary and
//! talk to this crate only over HTTP (`canopy-client`), but for `canopy daemon`, which starts it.

pub mod api;
pub mod bus;
pub mod config;
pub mod crons;
pub mod daemon;
pub mod drain;
pub mod engine;
pub mod hooks;
pub mod listener;
pub mod logfile;
pub mod mcp;
pub mod projects;
pub mod reload;
pub mod retention;
pub mod runner;
pub mod sessions;
pub mod webhooks;

/// mimalloc, not glibc's malloc: the store's writer spent a sixth of its time in glibc's
/// allocator (consolidating and unlinking free chunks), and hook runs went 1.15-1.3x faster
/// without it. Every binary that links Canopy (the daemon, the tests, the benchmarks) gets it
/// this way. Built without transparent huge pages (`no_thp`): with them an idle daemon's
/// resident memory doubled (51 to 99 MB; 58 MB without).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
