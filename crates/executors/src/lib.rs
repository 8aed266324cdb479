//! Canopy's executors: the host that runs every piece of work as an `execute` call into a
//! WebAssembly component (WASI preview 2) under wasmtime, and the processes those calls start.
//!
//! - [`plugins`]: install, the compiled-component cache, capabilities and grants, the call
//!   itself with its deadline and memory cap, per-call credentials, agent platforms.
//! - [`procs`]: the processes a call runs: a clean environment, their own process groups, a
//!   ledger of what is running, reaping, the user's umask.
//! - [`secrets`]: values never shown (tokens, HMAC secrets, passed variables), masked in what a
//!   call reports.
//!
//! `wasmtime` is linked here and nowhere else (see `ARCHITECTURE.md`).

pub mod plugins;
pub mod procs;
pub mod secrets;
