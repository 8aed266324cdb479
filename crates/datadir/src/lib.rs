//! The data dir: where the daemon keeps its database, plugins, compiled-plugin cache and address.
//!
//! Chosen by `--data-dir`, else `CANOPY_HOME`, else `$XDG_DATA_HOME/canopy`, else
//! `~/.local/share/canopy`.
//!
//! The data dir is private: its folders are 0700 and its files 0600 (the daemon runs with umask
//! 077, and [`DataDir::create`] tightens whatever an older install left more open).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub mod token;

/// The variable naming the data dir (as `--data-dir` does). The daemon sets it on every
/// process it runs, so a `canopy` command there talks to that daemon.
pub const HOME_VAR: &str = "CANOPY_HOME";

/// Paths inside one data dir.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// The data dir given on the command line / in `CANOPY_HOME`, or the XDG default.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<Self> {
        let root = match explicit {
            Some(dir) => dir,
            None => default_root()?,
        };
        Ok(Self { root })
    }

    /// Creates the data dir and its subfolders if missing, makes them private (0700, and 0600
    /// for any file in them readable by others); canonicalises the root.
    pub fn create(&self) -> Result<Self> {
        for dir in [
            self.root.clone(),
            self.plugins_dir(),
            self.cache_dir(),
            self.tmp_dir(),
        ] {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create data dir folder {}", dir.display()))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).with_context(
                || format!("cannot make data dir folder {} private", dir.display()),
            )?;
        }
        let root = self
            .root
            .canonicalize()
            .with_context(|| format!("cannot resolve data dir {}", self.root.display()))?;
        tighten(&root);
        Ok(Self { root })
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The SQLite database.
    pub fn database(&self) -> PathBuf {
        self.root.join("canopy.db")
    }

    /// The daemon's optional configuration file.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("canopy.toml")
    }

    /// Installed plugin components, named by sha256.
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// Precompiled plugin artifacts, keyed by sha256 and engine.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// Private scratch space (result files, bench workdirs).
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The lock a running daemon holds.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("daemon.lock")
    }

    /// Where the running daemon writes its address for the CLI.
    pub fn address_file(&self) -> PathBuf {
        self.root.join("daemon.addr")
    }

    /// The daemon's log file (rotated to `daemon.log.1`, `daemon.log.2`).
    pub fn log_file(&self) -> PathBuf {
        self.root.join("daemon.log")
    }

    /// The daemon's API token (0600, kept across restarts; see [`token`]); the CLI sends it as
    /// `Authorization: Bearer <token>`.
    pub fn token_file(&self) -> PathBuf {
        self.root.join("daemon.token")
    }
}

/// Removes group and other permissions from everything under `dir` (an older install's database,
/// say). Symlinks are left alone; what cannot be changed is logged, not fatal.
fn tighten(dir: &Path) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) => {
            tracing::warn!(dir = %dir.display(), %err, "cannot list data dir folder to make it private");
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0
            && let Err(err) =
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o700))
        {
            tracing::warn!(path = %path.display(), %err, "cannot make data dir entry private");
        }
        if meta.is_dir() {
            tighten(&path);
        }
    }
}

fn default_root() -> Result<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("canopy"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).context(
        "cannot pick a data dir: neither --data-dir, CANOPY_HOME, XDG_DATA_HOME nor HOME is set",
    )?;
    Ok(PathBuf::from(home).join(".local/share/canopy"))
}
