//! Canopy's core: the engine that runs agent work as graphs over specs and queues, the bus
//! that records every event with the hook runs it fires, the one automation runner every piece
//! of work goes through, and the other automation sources (crons, webhooks, projects,
//! sessions), each with the configuration section it owns.
//!
//! Data flows one way: engine → bus → hooks → runner → executors (`canopy-executors`); the
//! store (`canopy-store`) is below them all. The HTTP API, `/mcp`, the webhook listener and the
//! loading of `canopy.toml` are the daemon's (`canopy-daemon`), above this crate.

pub mod bus;
pub mod config;
pub mod crons;
pub mod drain;
pub mod engine;
pub mod hooks;
pub mod node;
pub mod projects;
pub mod retention;
pub mod runner;
pub mod runtime_hooks;
pub mod sessions;
pub mod webhooks;

/// mimalloc, not glibc's malloc: the store's writer spent a sixth of its time in glibc's
/// allocator (consolidating and unlinking free chunks), and hook runs went 1.15-1.3x faster
/// without it. Every binary that links Canopy (the daemon, the tests, the benchmarks) gets it
/// this way. Built without transparent huge pages (`no_thp`): with them an idle daemon's
/// resident memory doubled (51 to 99 MB; 58 MB without).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
