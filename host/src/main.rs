//! The `canopy` binary: the CLI (`canopy-cli`), the terminal UI (`canopy-tui`) and MCP over
//! stdio, all clients of the daemon's HTTP API; `canopy daemon` starts the daemon
//! (`canopy-daemon`). This file only wires the CLI to the TUI, so a change in either rebuilds
//! that crate and this one, never the other.

fn main() -> std::process::ExitCode {
    canopy_cli::main(|data| Box::pin(async move { canopy_tui::run(&data).await }))
}
