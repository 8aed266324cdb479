//! The `canopy` binary: the daemon and the CLI that talks to it.

fn main() -> std::process::ExitCode {
    canopy::cli::main()
}
