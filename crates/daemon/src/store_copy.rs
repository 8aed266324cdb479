//! `canopy store migrate`: a single-machine install moved to PostgreSQL. The data dir's
//! `canopy.db` is copied whole into an empty PostgreSQL database while no daemon runs on it;
//! `canopy.db` itself is left as it was.

use anyhow::{Result, bail};
use canopy_core::config::Config;
use canopy_core::config::database::{DATABASE_ENV, Database};
use canopy_datadir::DataDir;

pub use canopy_store::pg::copy::Copied;

/// Copies `data`'s database (or `from`: `sqlite:PATH` or `PATH`) into the PostgreSQL database
/// `to`, else the one the daemon would run on (`CANOPY_DATABASE_URL`, `[database]`).
/// `progress` hears each table as it lands.
pub fn to_postgres(
    data: &DataDir,
    from: Option<&str>,
    to: Option<&str>,
    progress: impl FnMut(&str, u64),
) -> Result<Copied> {
    let source = match from {
        None => data.database(),
        Some(from) => {
            let path = std::path::PathBuf::from(from.strip_prefix("sqlite:").unwrap_or(from));
            if from.contains("://") || !path.is_file() {
                bail!(
                    "--from: `{from}` is not a SQLite database file (sqlite:PATH, or PATH, of a canopy.db)"
                );
            }
            path
        }
    };
    // No daemon may write the database while it is copied: the data dir it is in is checked.
    let home = source
        .parent()
        .map(|dir| DataDir::resolve(Some(dir.to_path_buf())))
        .transpose()?
        .unwrap_or_else(|| data.clone());
    if let Some(running) = crate::daemon::holder(&home) {
        let pid = running
            .pid
            .map(|p| format!(" (pid {p})"))
            .unwrap_or_default();
        bail!(
            "a daemon runs on this data dir{pid}: stop it first (`canopy daemon stop`), so that nothing is written while its database is copied"
        );
    }
    let config = Config::load(&data.config_file())?;
    let Database::Postgres { url, .. } = config
        .database
        .resolve(to, |name| std::env::var(name).ok())?
    else {
        bail!(
            "name the PostgreSQL database to copy into: --to URL, {DATABASE_ENV}, or [database] in {}",
            data.config_file().display()
        );
    };
    canopy_store::pg::copy::sqlite_to_postgres(&source, &url, progress)
}
