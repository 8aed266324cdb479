//! The `canopy` binary: the CLI, the terminal UI and MCP over stdio, all clients of the daemon's
//! HTTP API (`canopy-client`); `canopy daemon` starts the daemon (`canopy-daemon`).

mod cli;
mod tui;

fn main() -> std::process::ExitCode {
    cli::main()
}
