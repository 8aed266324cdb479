//! Ids and id prefixes: every command and route that takes an id takes an unambiguous prefix.

use rusqlite::Connection;

/// An id or prefix that does not name exactly one row.
#[derive(Debug, thiserror::Error)]
pub enum IdError {
    /// Nothing matches.
    #[error("no {kind} matches `{id}`")]
    NotFound { kind: &'static str, id: String },
    /// Several match.
    #[error("{kind} id prefix `{prefix}` is ambiguous; it matches {}", .candidates.join(", "))]
    Ambiguous {
        kind: &'static str,
        prefix: String,
        candidates: Vec<String>,
    },
    /// The lookup itself failed.
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
}

/// Candidates listed when a prefix is ambiguous.
const MAX_CANDIDATES: usize = 10;

/// Resolves `prefix` against the `id` column of `table`; `kind` names it in errors.
pub fn resolve(
    conn: &Connection,
    table: &'static str,
    kind: &'static str,
    prefix: &str,
) -> Result<String, IdError> {
    let prefix = prefix.trim();
    if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(IdError::NotFound {
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
        [] => Err(IdError::NotFound {
            kind,
            id: prefix.to_string(),
        }),
        [one] => Ok(one.clone()),
        _ => Err(IdError::Ambiguous {
            kind,
            prefix: prefix.to_string(),
            candidates: ids.into_iter().take(MAX_CANDIDATES).collect(),
        }),
    }
}

/// The short form of an id shown in tables.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
