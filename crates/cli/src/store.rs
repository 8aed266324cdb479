//! `canopy store`: the data dir's database itself, with no daemon running.

use std::process::ExitCode;

use anyhow::Result;
use canopy_datadir::DataDir;
use clap::Subcommand;

/// `canopy store`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy this data dir's canopy.db, whole, into an empty PostgreSQL database, in one
    /// transaction, then count every table on both sides and compare the newest rows. The daemon
    /// must be stopped; canopy.db is left as it was. Then start the daemon on PostgreSQL
    /// (`[database]` in canopy.toml, or CANOPY_DATABASE_URL).
    #[command(
        after_help = "Example:\n  canopy daemon stop\n  CANOPY_DATABASE_URL='postgres://canopy:PASSWORD@db.internal/canopy' canopy store migrate\n  canopy daemon start             # with the same variable set, or [database] in canopy.toml"
    )]
    Migrate {
        /// The PostgreSQL database to copy into [default: $CANOPY_DATABASE_URL, or [database] in
        /// canopy.toml]. A string with a password is better given in the environment.
        #[arg(long, value_name = "URL")]
        to: Option<String>,
    },
}

pub async fn run(data: DataDir, command: StoreCommand) -> Result<ExitCode> {
    match command {
        StoreCommand::Migrate { to } => {
            let copied = tokio::task::spawn_blocking(move || {
                canopy_daemon::store_copy::to_postgres(&data, to.as_deref(), |table, rows| {
                    eprintln!("copied {table}: {rows} rows");
                })
            })
            .await??;
            println!(
                "copied {} rows in {} tables into {}; every table's count matches, and so do the newest feed row, hook run and run",
                copied.rows(),
                copied.tables.len(),
                copied.target
            );
            println!(
                "canopy.db is left as it was. Start the daemon on PostgreSQL: set [database] in canopy.toml (or CANOPY_DATABASE_URL), then `canopy daemon start`"
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
