//! Installed plugins (`plugins`): what each is, what it was granted, and whether it is enabled.
//! The component itself lives in the data dir as `<sha256>.wasm`.

use std::collections::BTreeSet;

use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use super::states::state_enum;
use super::{Rd, StoreError, Tx};
use canopy_model::capabilities::Capability;
use canopy_model::markers::Escape;

state_enum! {
    /// Whether a plugin serves its modes (stored as the `enabled` flag).
    pub enum PluginState {
        Enabled = "enabled",
        Disabled = "disabled",
    }
}

impl From<bool> for PluginState {
    fn from(enabled: bool) -> Self {
        if enabled {
            Self::Enabled
        } else {
            Self::Disabled
        }
    }
}

/// A plugin's manifest as the host keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub modes: Vec<String>,
    pub capabilities: Vec<String>,
    pub config_schema: serde_json::Value,
    pub templates: Vec<TemplateField>,
    /// The modes that answer as sync hooks (contract 0.2.0; none for a 0.1.0 plugin).
    #[serde(default)]
    pub decides: Vec<String>,
}

/// A config field the host renders markers into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateField {
    pub field: String,
    pub escape: Escape,
}

/// One installed plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub manifest: Manifest,
    /// Capabilities the operator granted, valid for this sha256 only.
    pub granted: BTreeSet<String>,
    pub builtin: bool,
    pub enabled: bool,
    pub installed_at: String,
}

impl PluginRecord {
    /// The granted capabilities, parsed.
    pub fn grants(&self) -> BTreeSet<Capability> {
        self.granted.iter().filter_map(|c| c.parse().ok()).collect()
    }

    /// Enabled or disabled.
    pub fn state(&self) -> PluginState {
        self.enabled.into()
    }
}

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
    installed_at: String,
}

fn from_row(row: &Row<'_>) -> rusqlite::Result<Stored> {
    Ok(Stored {
        name: row.get(0)?,
        version: row.get(1)?,
        sha256: row.get(2)?,
        manifest: row.get(3)?,
        granted: row.get(4)?,
        builtin: row.get(5)?,
        enabled: row.get(6)?,
        installed_at: row.get(7)?,
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
        let mut statement = self
            .conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM plugins ORDER BY name"))?;
        let rows = statement
            .query_map([], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter().map(decode).collect()
    }

    /// One installed plugin by name, if it is installed.
    pub fn plugin(&self, name: &str) -> Result<Option<PluginRecord>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM plugins WHERE name = ?1"))?
            .query_row([name], from_row)
            .optional()?
            .map(decode)
            .transpose()
    }
}

impl Tx<'_> {
    /// Inserts a plugin's row, or replaces the row of that name.
    pub fn put_plugin(&self, record: &PluginRecord) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO plugins ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
            ))?
            .execute(params![
                record.name,
                record.version,
                record.sha256,
                serde_json::to_string(&record.manifest)?,
                serde_json::to_string(&record.granted)?,
                record.builtin,
                record.enabled,
                record.installed_at,
            ])?;
        Ok(())
    }

    /// Enables or disables a plugin.
    pub fn set_plugin_enabled(&self, name: &str, enabled: bool) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE plugins SET enabled = ?2 WHERE name = ?1")?
            .execute(params![name, enabled])?;
        Ok(())
    }

    /// Deletes a plugin's row.
    pub fn delete_plugin(&self, name: &str) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("DELETE FROM plugins WHERE name = ?1")?
            .execute([name])?;
        Ok(())
    }
}
