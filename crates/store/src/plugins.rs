//! Installed plugins (`plugins`): what each is, what it was granted, and whether it is enabled.
//! The component itself lives in the data dir as `<sha256>.wasm`.

use crate::sql::{self, Conn, Queries, Row, params};

use super::times::{At, time};
use super::{Rd, StoreError, Tx};
use canopy_model::records::plugins::PluginRecord;
use canopy_model::time::Timestamp;

const COLUMNS: &str = "name, version, sha256, manifest, granted, builtin, enabled, installed_at";

/// A row as stored: the record without its JSON fields, and those fields' text.
struct Stored {
    name: String,
    version: String,
    sha256: String,
    manifest: String,
    granted: String,
    builtin: bool,
    enabled: bool,
    installed_at: Timestamp,
}

fn from_row(row: &Row<'_>) -> sql::Result<Stored> {
    Ok(Stored {
        name: row.get(0)?,
        version: row.get(1)?,
        sha256: row.get(2)?,
        manifest: row.get(3)?,
        granted: row.get(4)?,
        builtin: row.get(5)?,
        enabled: row.get(6)?,
        installed_at: time(row, 7)?,
    })
}

fn decode(stored: Stored) -> Result<PluginRecord, StoreError> {
    let manifest = serde_json::from_str(&stored.manifest).map_err(|err| {
        StoreError::Internal(anyhow::anyhow!(
            "the stored manifest of plugin {} is corrupt: {err}",
            stored.name
        ))
    })?;
    let granted = serde_json::from_str(&stored.granted).map_err(|err| {
        StoreError::Internal(anyhow::anyhow!(
            "the stored grant of plugin {} is corrupt: {err}",
            stored.name
        ))
    })?;
    Ok(PluginRecord {
        name: stored.name,
        version: stored.version,
        sha256: stored.sha256,
        manifest,
        granted,
        builtin: stored.builtin,
        enabled: stored.enabled,
        installed_at: stored.installed_at,
    })
}

impl Rd<'_> {
    /// Every installed plugin, by name.
    pub fn plugins(&self) -> Result<Vec<PluginRecord>, StoreError> {
        let statement = format!("SELECT {COLUMNS} FROM plugins ORDER BY name");
        let rows = self.query_map(&statement, params![], from_row)?;
        rows.into_iter().map(decode).collect()
    }

    /// One installed plugin by name, if it is installed.
    pub fn plugin(&self, name: &str) -> Result<Option<PluginRecord>, StoreError> {
        self.query_opt(
            &format!("SELECT {COLUMNS} FROM plugins WHERE name = ?1"),
            params![name],
            from_row,
        )?
        .map(decode)
        .transpose()
    }
}

impl Tx<'_> {
    /// Inserts a plugin's row, or replaces the row of that name.
    pub fn put_plugin(&self, record: &PluginRecord) -> Result<(), StoreError> {
        self.execute(
            &format!(
                "INSERT INTO plugins ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (name) DO UPDATE SET version = excluded.version, sha256 = excluded.sha256,
                    manifest = excluded.manifest, granted = excluded.granted, builtin = excluded.builtin,
                    enabled = excluded.enabled, installed_at = excluded.installed_at"
            ),
            params![
                record.name,
                record.version,
                record.sha256,
                serde_json::to_string(&record.manifest)?,
                serde_json::to_string(&record.granted)?,
                record.builtin,
                record.enabled,
                At(record.installed_at),
            ],
        )?;
        Ok(())
    }

    /// Enables or disables a plugin.
    pub fn set_plugin_enabled(&self, name: &str, enabled: bool) -> Result<(), StoreError> {
        self.execute(
            "UPDATE plugins SET enabled = ?2 WHERE name = ?1",
            params![name, enabled],
        )?;
        Ok(())
    }

    /// Deletes a plugin's row (and its kept component, when no other row names it).
    pub fn delete_plugin(&self, name: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM plugins WHERE name = ?1", params![name])?;
        self.prune_plugin_components()
    }

    /// Keeps a plugin's component, named by its digest, for the other daemons on the database
    /// (see [`Rd::plugin_component`]). Components no plugin row names are dropped.
    pub fn put_plugin_component(&self, sha256: &str, component: &[u8]) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO plugin_components (sha256, component) VALUES (?1, ?2)
                 ON CONFLICT (sha256) DO NOTHING",
            params![sha256, component],
        )?;
        self.prune_plugin_components()
    }

    fn prune_plugin_components(&self) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM plugin_components WHERE sha256 NOT IN (SELECT sha256 FROM plugins)",
            params![],
        )?;
        Ok(())
    }
}

impl Rd<'_> {
    /// The component kept under `sha256`, if one is: what a daemon writes to its data dir when
    /// a plugin another daemon installed is missing there. The caller checks its digest.
    pub fn plugin_component(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.query_opt(
            "SELECT component FROM plugin_components WHERE sha256 = ?1",
            params![sha256],
            |row| row.get(0),
        )?)
    }
}
