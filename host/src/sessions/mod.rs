//! Interactive sessions and the messages hooks queue for them.
//!
//! For now this holds the durable message queue behind the `enqueue-message` host call: a
//! message is stored as `pending` with its provenance, marked hook-originated. Sessions,
//! name resolution and delivery build on this table.

use anyhow::Result;
use rusqlite::params;
use serde::Serialize;

use crate::plugins::{MessageTarget, Provenance};
use crate::store::{self, Store};

/// A queued message.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub id: String,
    pub target: MessageTarget,
    pub text: String,
    pub provenance: Provenance,
    pub origin: String,
    pub plugin: String,
    pub status: String,
    pub created_at: String,
}

/// Stores a message as pending; returns its id.
pub fn enqueue(
    store: &Store,
    plugin: &str,
    target: &MessageTarget,
    text: &str,
    provenance: &Provenance,
) -> Result<String> {
    let id = store::new_id();
    let (kind, value) = match target {
        MessageTarget::Id(id) => ("id", id.as_str()),
        MessageTarget::Name(name) => ("name", name.as_str()),
    };
    store.conn().execute(
        "INSERT INTO messages (id, target_kind, target, text, provenance, origin, plugin, status, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'hook', ?6, 'pending', ?7)",
        params![id, kind, value, text, serde_json::to_string(provenance)?, plugin, store::now()],
    )?;
    Ok(id)
}

/// Every message, oldest first, optionally only those with `status`.
pub fn list(store: &Store, status: Option<&str>) -> Result<Vec<Message>> {
    let conn = store.conn();
    let mut statement = conn.prepare(
        "SELECT id, target_kind, target, text, provenance, origin, plugin, status, created_at
         FROM messages WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at, id",
    )?;
    let rows = statement.query_map([status], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, String>(3)?,
            row.get::<_, String>(4)?,
            row.get::<_, String>(5)?,
            row.get::<_, String>(6)?,
            row.get::<_, String>(7)?,
            row.get::<_, String>(8)?,
        ))
    })?;
    let mut messages = Vec::new();
    for row in rows {
        let (id, kind, target, text, provenance, origin, plugin, status, created_at) = row?;
        messages.push(Message {
            id,
            target: if kind == "id" {
                MessageTarget::Id(target)
            } else {
                MessageTarget::Name(target)
            },
            text,
            provenance: serde_json::from_str(&provenance)?,
            origin,
            plugin,
            status,
            created_at,
        });
    }
    Ok(messages)
}
