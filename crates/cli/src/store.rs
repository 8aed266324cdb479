//! `canopy store`: the data dir's database itself, with no daemon running.

use std::process::ExitCode;

use anyhow::Result;
use canopy_datadir::DataDir;
use clap::Subcommand;

/// `canopy store`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy this data dir's canopy.db (or --from's), whole, into an empty PostgreSQL database, in one
    /// transaction, then count every table on both sides and compare the newest rows. The daemon
    /// must be stopped; canopy.db is left as it was. Then start the daemon on PostgreSQL
    /// (`[database]` in canopy.toml, or CANOPY_DATABASE_URL).
    #[command(
        after_help = "Examples:\n  canopy daemon stop\n  CANOPY_DATABASE_URL='postgres://canopy:PASSWORD@db.internal/canopy' canopy store migrate\n  canopy daemon start             # with the same variable set, or [database] in canopy.toml\n  canopy store migrate --from sqlite:/backups/canopy.db --to 'host=/run/postgresql dbname=canopy'"
    )]
    Migrate {
        /// The SQLite database to copy (`sqlite:PATH`, or `PATH`) [default: canopy.db in the
        /// data dir]. No daemon may run on it.
        #[arg(long, value_name = "sqlite:PATH")]
        from: Option<String>,
        /// The PostgreSQL database to copy into [default: $CANOPY_DATABASE_URL, or [database] in
        /// canopy.toml]. A string with a password is better given in the environment.
        #[arg(long, value_name = "URL")]
        to: Option<String>,
    },
}

pub async fn run(data: DataDir, command: StoreCommand) -> Result<ExitCode> {
    match command {
        StoreCommand::Migrate { from, to } => {
            let copied = tokio::task::spawn_blocking(move || {
                canopy_daemon::store_copy::to_postgres(
                    &data,
                    from.as_deref(),
                    to.as_deref(),
                    |table, rows| {
                        eprintln!("copied {table}: {rows} rows");
                    },
                )
            })
            .await??;
            println!(
                "copied {} rows in {} tables into {}; every table's count matches, and so do the newest feed row, hook run and run",
                copied.rows(),
                copied.tables.len(),
                copied.target
            );
            println!(
                "{} is left as it was. Start the daemon on PostgreSQL: set [database] in canopy.toml (or CANOPY_DATABASE_URL), then `canopy daemon start`",
                copied.source
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
