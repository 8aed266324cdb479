//! Canopy: a daemon and CLI that runs agent work as graphs over specs and queues, reacting to
//! what happens with hooks. Every piece of work runs in an executor plugin: a WASI preview-2
//! component, sandboxed under wasmtime.
//!
//! Data flows one way: `api` / `cli` → engine → hooks → `plugins`; `store` is below them all.

pub mod api;
pub mod bus;
pub mod cli;
pub mod config;
pub mod crons;
pub mod daemon;
pub mod datadir;
pub mod drain;
pub mod engine;
pub mod hooks;
pub mod listener;
pub mod logfile;
pub mod mcp;
pub mod plugins;
pub mod procs;
pub mod projects;
pub mod reload;
pub mod retention;
pub mod secrets;
pub mod sessions;
pub mod tui;
pub mod webhooks;

/// mimalloc, not glibc's malloc: the store's writer spent a sixth of its time in glibc's
/// allocator (consolidating and unlinking free chunks), and hook runs went 1.15-1.3x faster
/// without it. Every binary that links Canopy (the daemon, the tests, the benchmarks) gets it
/// this way. Built without transparent huge pages (`no_thp`): with them an idle daemon's
/// resident memory doubled (51 to 99 MB; 58 MB without).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
