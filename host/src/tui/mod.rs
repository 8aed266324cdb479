//! `canopy tui`: the operator's terminal UI, a client of the daemon's API and live feed.

use std::process::ExitCode;

use clap::Args;

use crate::datadir::DataDir;

/// `canopy tui`.
#[derive(Debug, Args)]
pub struct TuiArgs {}

/// Runs the terminal UI against the daemon of `data` until the user quits.
pub async fn run(_data: &DataDir, _args: TuiArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("canopy tui is being built")
}
