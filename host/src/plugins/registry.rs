//! Installed plugins as rows of the `plugins` table: what each is, what it was granted, and
//! whether it is enabled. The component itself lives in the data dir as `<sha256>.wasm`.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::capabilities::Capability;
use crate::markers::Escape;

/// A plugin's manifest as the host keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub modes: Vec<String>,
    pub capabilities: Vec<String>,
    pub config_schema: serde_json::Value,
    pub templates: Vec<TemplateField>,
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
}

fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(PluginRecord, String, String)> {
    Ok((
        PluginRecord {
            name: row.get("name")?,
            version: row.get("version")?,
            sha256: row.get("sha256")?,
            manifest: Manifest {
                name: String::new(),
                version: String::new(),
                modes: Vec::new(),
                capabilities: Vec::new(),
                config_schema: serde_json::Value::Null,
                templates: Vec::new(),
            },
            granted: BTreeSet::new(),
            builtin: row.get("builtin")?,
            enabled: row.get("enabled")?,
            installed_at: row.get("installed_at")?,
        },
        row.get("manifest")?,
        row.get("granted")?,
    ))
}

fn decode((mut record, manifest, granted): (PluginRecord, String, String)) -> Result<PluginRecord> {
    record.manifest = serde_json::from_str(&manifest)
        .with_context(|| format!("stored manifest of plugin {} is corrupt", record.name))?;
    record.granted = serde_json::from_str(&granted)
        .with_context(|| format!("stored grant of plugin {} is corrupt", record.name))?;
    Ok(record)
}

/// Every installed plugin, by name.
pub fn all(conn: &rusqlite::Connection) -> Result<Vec<PluginRecord>> {
    let mut statement = conn.prepare("SELECT * FROM plugins ORDER BY name")?;
    let rows = statement
        .query_map([], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter().map(decode).collect()
}

/// Inserts or replaces a plugin's row.
pub fn put(conn: &rusqlite::Connection, record: &PluginRecord) -> Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO plugins (name, version, sha256, manifest, granted, builtin, enabled, installed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            record.name,
            record.version,
            record.sha256,
            serde_json::to_string(&record.manifest)?,
            serde_json::to_string(&record.granted)?,
            record.builtin,
            record.enabled,
            record.installed_at,
        ],
    )?;
    Ok(())
}

/// Enables or disables a plugin.
pub fn set_enabled(conn: &rusqlite::Connection, name: &str, enabled: bool) -> Result<()> {
    conn.execute(
        "UPDATE plugins SET enabled = ?2 WHERE name = ?1",
        params![name, enabled],
    )?;
    Ok(())
}

/// Deletes a plugin's row.
pub fn delete(conn: &rusqlite::Connection, name: &str) -> Result<()> {
    conn.execute("DELETE FROM plugins WHERE name = ?1", [name])?;
    Ok(())
}
