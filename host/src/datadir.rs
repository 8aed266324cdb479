//! The data dir: where the daemon keeps its database, plugins, compiled-plugin cache and address.
//!
//! Chosen by `--data-dir`, else `CANOPY_HOME`, else `$XDG_DATA_HOME/canopy`, else
//! `~/.local/share/canopy`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

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

    /// Creates the data dir and its subfolders if missing; canonicalises the root.
    pub fn create(&self) -> Result<Self> {
        for dir in [
            self.root.clone(),
            self.plugins_dir(),
            self.cache_dir(),
            self.tmp_dir(),
        ] {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create data dir folder {}", dir.display()))?;
        }
        let root = self
            .root
            .canonicalize()
            .with_context(|| format!("cannot resolve data dir {}", self.root.display()))?;
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
