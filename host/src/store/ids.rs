//! Ids and id prefixes: every command and route that takes an id takes an unambiguous prefix,
//! and where the thing has a name (graphs, queues, sessions), its name.

use super::{Rd, StoreError};

/// Candidates listed when a prefix is ambiguous.
const MAX_CANDIDATES: usize = 10;

/// Resolves `prefix` against the `id` column of `table`; `kind` names it in errors.
pub(super) fn resolve(
    conn: &rusqlite::Connection,
    table: &'static str,
    kind: &'static str,
    prefix: &str,
) -> Result<String, StoreError> {
    let prefix = prefix.trim();
    if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(StoreError::NotFound {
            kind,
            id: prefix.to_string(),
        });
    }
    let sql = format!(
        "SELECT id FROM {table} WHERE id >= ?1 AND id < ?1 || 'g' ORDER BY id LIMIT {}",
        MAX_CANDIDATES + 1
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let ids: Vec<String> = statement
        .query_map([prefix.to_ascii_lowercase()], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    match ids.as_slice() {
        [] => Err(StoreError::NotFound {
            kind,
            id: prefix.to_string(),
        }),
        [one] => Ok(one.clone()),
        _ => Err(StoreError::Ambiguous {
            kind,
            by: "id prefix",
            prefix: prefix.to_string(),
            candidates: ids.into_iter().take(MAX_CANDIDATES).collect(),
        }),
    }
}

/// Resolves `text` as the exact `name` of a row of `table`, else as an id or unambiguous id
/// prefix (see [`resolve`]). A name several rows share picks the one row among them that
/// satisfies `prefer` (an SQL condition on the row, e.g. `status = 'live'`), if exactly one does;
/// otherwise it is refused as ambiguous, listing the ids of the rows that hold it.
pub(super) fn resolve_named(
    conn: &rusqlite::Connection,
    table: &'static str,
    kind: &'static str,
    text: &str,
    prefer: Option<&'static str>,
) -> Result<String, StoreError> {
    let name = text.trim();
    let sql = format!(
        "SELECT id, {} FROM {table} WHERE name = ?1 ORDER BY id",
        prefer.unwrap_or("0")
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let named: Vec<(String, bool)> = statement
        .query_map([name], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let preferred: Vec<&String> = named.iter().filter(|(_, p)| *p).map(|(id, _)| id).collect();
    if named.is_empty() {
        return resolve(conn, table, kind, text);
    }
    if let [(one, _)] = named.as_slice() {
        return Ok(one.clone());
    }
    if let [one] = preferred.as_slice() {
        return Ok((*one).clone());
    }
    let candidates: Vec<String> = if preferred.is_empty() {
        named.into_iter().map(|(id, _)| id).collect()
    } else {
        preferred.into_iter().cloned().collect()
    };
    Err(StoreError::Ambiguous {
        kind,
        by: "name",
        prefix: name.to_string(),
        candidates: candidates.into_iter().take(MAX_CANDIDATES).collect(),
    })
}

/// The short form of an id shown in tables.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

impl Rd<'_> {
    /// Resolves an id or unambiguous id prefix of a row of `table`; `kind` names it in errors.
    pub(super) fn resolve_id(
        &self,
        table: &'static str,
        kind: &'static str,
        prefix: &str,
    ) -> Result<String, StoreError> {
        resolve(self.conn(), table, kind, prefix)
    }

    /// Resolves a name, else an id or id prefix (see [`resolve_named`]).
    pub(super) fn resolve_named(
        &self,
        table: &'static str,
        kind: &'static str,
        text: &str,
        prefer: Option<&'static str>,
    ) -> Result<String, StoreError> {
        resolve_named(self.conn(), table, kind, text, prefer)
    }
}
