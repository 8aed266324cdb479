//! Ids and id prefixes: every command and route that takes an id takes an unambiguous prefix,
//! and where the thing has a name (graphs, queues, sessions), its name.

use super::{Rd, StoreError};
use crate::sql::{Conn, Queries, params};

/// 2020-01-01T00:00:00Z, where an ordered id's count of steps begins.
const ORDERED_EPOCH_SECS: u64 = 1_577_836_800;
/// An ordered id's step: 48 bits of them last until 2109.
const ORDERED_STEP_MICROS: u128 = 10;
/// The last step an ordered id of this process took.
static LAST_STEP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A time-ordered id made at `now`. A random id puts each new row at a random place in its
/// table's id index, so every commit rewrote one index page per row; rows with ordered ids are
/// appended to the index, and a batch of them shares its last page. Measured on a flood of
/// webhook deliveries: 36 -> 27 µs of the writer's CPU per delivery.
///
/// The first 12 digits are a count of 10 µs steps since 2020, raised to one past the last id's
/// when ids come faster than that, so within a daemon's life no two ids share their 12-digit
/// short form. The other 20 are random, so ids stay unique across restarts even if the clock
/// was set back (two ids then may share a short form: giving more digits tells them apart).
pub fn ordered(now: std::time::SystemTime) -> String {
    use std::sync::atomic::Ordering;
    let since = now
        .duration_since(std::time::UNIX_EPOCH + std::time::Duration::from_secs(ORDERED_EPOCH_SECS))
        .unwrap_or_default();
    let step = u64::try_from(since.as_micros() / ORDERED_STEP_MICROS)
        .unwrap_or(u64::MAX)
        .min(MAX_STEP);
    let mut last = LAST_STEP.load(Ordering::Relaxed);
    let step = loop {
        let next = step.max(last.saturating_add(1)).min(MAX_STEP);
        match LAST_STEP.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(seen) => last = seen,
        }
    };
    let random = uuid::Uuid::new_v4().as_u128() & ((1 << 80) - 1);
    format!("{step:012x}{random:020x}")
}

/// The largest step 12 hex digits hold.
const MAX_STEP: u64 = (1 << 48) - 1;

/// Candidates listed when a prefix is ambiguous.
const MAX_CANDIDATES: usize = 10;

/// Resolves `prefix` against the `id` column of `table`; `kind` names it in errors.
pub(super) fn resolve(
    conn: &dyn Conn,
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
    let ids: Vec<String> =
        conn.query_map(&sql, params![prefix.to_ascii_lowercase()], |row| row.get(0))?;
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
    conn: &dyn Conn,
    table: &'static str,
    kind: &'static str,
    text: &str,
    prefer: Option<&'static str>,
) -> Result<String, StoreError> {
    let name = text.trim();
    if name.chars().any(char::is_control) {
        // Names with control characters are refused when they are given; none is stored.
        return Err(StoreError::NotFound {
            kind,
            id: name.to_string(),
        });
    }
    let sql = format!(
        "SELECT id, {} FROM {table} WHERE name = ?1 ORDER BY id",
        prefer.unwrap_or("0")
    );
    let named: Vec<(String, bool)> =
        conn.query_map(&sql, params![name], |row| Ok((row.get(0)?, row.get(1)?)))?;
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

/// What to give instead of an ambiguous `by` (`id prefix` or `name`).
pub fn ambiguity_hint(by: &str) -> &'static str {
    if by == "name" {
        "give one of these ids (or a unique prefix of it) instead"
    } else {
        "give more digits of the id"
    }
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
        resolve(self, table, kind, prefix)
    }

    /// Resolves a name, else an id or id prefix (see [`resolve_named`]).
    pub(super) fn resolve_named(
        &self,
        table: &'static str,
        kind: &'static str,
        text: &str,
        prefer: Option<&'static str>,
    ) -> Result<String, StoreError> {
        resolve_named(self, table, kind, text, prefer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, SystemTime};

    use super::{ordered, short};

    #[test]
    fn ordered_ids_sort_by_time_and_never_share_a_short_form_even_made_at_one_instant() {
        let now = SystemTime::now();
        let ids: Vec<String> = (0..10_000).map(|_| ordered(now)).collect();
        // The count is of 10 µs steps since 2020 (within a second of it: nothing else in this
        // process makes ordered ids ahead of the clock).
        let since = now
            .duration_since(SystemTime::UNIX_EPOCH + Duration::from_secs(super::ORDERED_EPOCH_SECS))
            .unwrap();
        let step = u64::from_str_radix(&ids[0][..12], 16).unwrap();
        let expected = u64::try_from(since.as_micros() / 10).unwrap();
        assert!(
            (expected..expected + 100_000).contains(&step),
            "{step} vs {expected}"
        );
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids, "made in order, they sort in order");
        let shorts: std::collections::BTreeSet<&str> = ids.iter().map(|id| short(id)).collect();
        assert_eq!(shorts.len(), ids.len(), "every short form differs");
        // A later time moves the count on; an earlier one (the clock set back) never moves it
        // back.
        let later = ordered(now + Duration::from_secs(3600));
        assert!(later > *ids.last().unwrap());
        let earlier = ordered(now - Duration::from_secs(3600));
        assert!(earlier > later);
    }
}
