//! The feed (`feed`): every event Canopy emitted, with its envelope, in the order it was
//! recorded. The row id is the feed's cursor: it only grows and is never reused, even after
//! old rows are pruned.

use rusqlite::{Row, params};
use serde_json::Value;

use super::{Rd, StoreError, Tx};
use crate::events::{Cause, Envelope, Event, Family};

const COLUMNS: &str =
    "id, node, project, target, event, family, timestamp, actor, dispatch_depth, payload";

fn from_row(row: &Row<'_>) -> rusqlite::Result<Envelope> {
    let family: String = row.get(5)?;
    let payload: String = row.get(9)?;
    Ok(Envelope {
        id: row.get(0)?,
        node: row.get(1)?,
        project: row.get(2)?,
        target: row.get(3)?,
        event: row.get(4)?,
        family: Family::parse(&family).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                5,
                rusqlite::types::Type::Text,
                format!("`{family}` is not an event family").into(),
            )
        })?,
        timestamp: row.get(6)?,
        actor: row.get(7)?,
        dispatch_depth: row.get(8)?,
        payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
    })
}

/// Where a feed read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// The rows after this cursor.
    Cursor(i64),
    /// The rows recorded at or after this instant (RFC 3339, UTC).
    Time(String),
}

/// A feed read: rows after `since` (or the newest `last`), filtered.
#[derive(Debug, Clone, Default)]
pub struct FeedQuery {
    pub since: Option<Since>,
    /// An event name or glob (SQLite `GLOB` syntax: `*`, `?`, `[...]`).
    pub event: Option<String>,
    pub family: Option<Family>,
    pub project: Option<String>,
    /// Without `since`: the newest this many, oldest first. With it: at most this many.
    pub limit: usize,
}

impl Rd<'_> {
    /// Feed rows matching the query, oldest first.
    pub fn feed(&self, query: &FeedQuery) -> Result<Vec<Envelope>, StoreError> {
        let (after, from_time) = match &query.since {
            Some(Since::Cursor(id)) => (Some(*id), None),
            Some(Since::Time(at)) => (None, Some(at.as_str())),
            None => (None, None),
        };
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let filter = "(?1 IS NULL OR id > ?1) AND (?2 IS NULL OR timestamp >= ?2)
             AND (?3 IS NULL OR event GLOB ?3) AND (?4 IS NULL OR family = ?4) AND (?5 IS NULL OR project = ?5)";
        let family = query.family.map(Family::as_str);
        let args = params![after, from_time, query.event, family, query.project, limit];
        let mut rows: Vec<Envelope> = if query.since.is_some() {
            self.conn()
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM feed WHERE {filter} ORDER BY id LIMIT ?6"
                ))?
                .query_map(args, from_row)?
                .collect::<rusqlite::Result<_>>()?
        } else {
            self.conn()
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM feed WHERE {filter} ORDER BY id DESC LIMIT ?6"
                ))?
                .query_map(args, from_row)?
                .collect::<rusqlite::Result<_>>()?
        };
        if query.since.is_none() {
            rows.reverse();
        }
        Ok(rows)
    }

    /// The newest cursor (0 for an empty feed).
    pub fn feed_head(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT COALESCE(MAX(id), 0) FROM feed")?
            .query_row([], |row| row.get(0))?)
    }
}

impl Tx<'_> {
    /// Appends an event to the feed; returns its envelope with its cursor.
    pub fn append_feed(
        &self,
        node: &str,
        event: &Event,
        cause: &Cause,
    ) -> Result<Envelope, StoreError> {
        let timestamp = super::now();
        let actor = cause.actor.to_string();
        let payload = event.payload.to_string();
        self.conn()
            .prepare_cached(
                "INSERT INTO feed (node, project, target, event, family, timestamp, actor, dispatch_depth, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                node,
                event.project,
                event.target,
                event.def.name,
                event.def.family.as_str(),
                timestamp,
                actor,
                cause.depth,
                payload
            ])?;
        Ok(Envelope {
            id: self.conn().last_insert_rowid(),
            node: node.to_string(),
            project: event.project.clone(),
            target: event.target.clone(),
            event: event.def.name.to_string(),
            family: event.def.family,
            timestamp,
            actor,
            dispatch_depth: cause.depth,
            payload: event.payload.clone(),
        })
    }

    /// Deletes feed rows recorded before `before` (RFC 3339, UTC), at most `limit` of them (a
    /// large backlog is pruned in several small writes); returns how many.
    pub fn prune_feed(&self, before: &str, limit: usize) -> Result<usize, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM feed WHERE id IN (SELECT id FROM feed WHERE timestamp < ?1 ORDER BY id LIMIT ?2)",
            )?
            .execute(params![before, i64::try_from(limit).unwrap_or(i64::MAX)])?)
    }
}
