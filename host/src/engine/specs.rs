//! The standalone spec backlog: create, list (optionally by workdir tag), show, update, delete.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use super::spec_format::{self, SpecFormat};
use super::{EngineError, invalid};
use crate::store;
use crate::store::ids;

/// A spec as the API returns it.
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    pub id: String,
    pub name: String,
    pub body: String,
    pub workdir: Option<String>,
    /// One line, set when a run completes the spec.
    pub summary: Option<String>,
    /// True for a body in the older heading format: readable, to be rewritten by hand.
    pub needs_conversion: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// A new spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSpec {
    pub name: String,
    pub body: String,
    #[serde(default)]
    pub workdir: Option<String>,
}

/// A partial update: only the fields present change.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecPatch {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
    /// `null` clears the tag.
    #[serde(default, with = "double_option")]
    pub workdir: Option<Option<String>>,
}

mod double_option {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(de).map(Some)
    }
}

const COLUMNS: &str = "id, name, body, workdir, summary, created_at, updated_at";

fn from_row(row: &Row<'_>) -> rusqlite::Result<Spec> {
    let body: String = row.get(2)?;
    Ok(Spec {
        id: row.get(0)?,
        name: row.get(1)?,
        needs_conversion: matches!(spec_format::read(&body), Ok(SpecFormat::Heading)),
        body,
        workdir: row.get(3)?,
        summary: row.get(4)?,
        created_at: row.get(5)?,
        updated_at: row.get(6)?,
    })
}

fn check_name(name: &str) -> Result<String, EngineError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.contains('\n') {
        return invalid("field `name` must be one line of 1 to 200 characters");
    }
    Ok(name.to_string())
}

fn check_body(body: &str) -> Result<(), EngineError> {
    spec_format::parse(body).map(|_| ()).map_err(|err| {
        let hint = if spec_format::is_heading_format(body) {
            " (this is the older heading format; rewrite it with the tagged sections)"
        } else {
            ""
        };
        EngineError::Invalid(format!("field `body`: {err}{hint}"))
    })
}

/// A workdir tag: absolute; canonical when the directory exists.
pub fn normalise_workdir(field: &str, workdir: &str) -> Result<String, EngineError> {
    let path = std::path::Path::new(workdir.trim());
    if !path.is_absolute() {
        return invalid(format!(
            "field `{field}` must be an absolute path, got `{workdir}`"
        ));
    }
    Ok(path
        .canonicalize()
        .unwrap_or_else(|_| path.to_path_buf())
        .to_string_lossy()
        .into_owned())
}

/// Creates a spec; the body must parse.
pub fn create(conn: &Connection, new: NewSpec) -> Result<Spec, EngineError> {
    let name = check_name(&new.name)?;
    check_body(&new.body)?;
    let workdir = new
        .workdir
        .as_deref()
        .map(|w| normalise_workdir("workdir", w))
        .transpose()?;
    let id = store::new_id();
    let now = store::now();
    conn.execute(
        "INSERT INTO specs (id, name, body, workdir, summary, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?5)",
        params![id, name, new.body, workdir, now],
    )?;
    get(conn, &id)
}

/// Every spec, oldest first; with `workdir`, only the specs tagged with it.
pub fn list(conn: &Connection, workdir: Option<&str>) -> Result<Vec<Spec>, EngineError> {
    let workdir = workdir
        .map(|w| normalise_workdir("workdir", w))
        .transpose()?;
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM specs WHERE ?1 IS NULL OR workdir = ?1 ORDER BY created_at, id"
    ))?;
    let specs = statement
        .query_map([workdir], from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(specs)
}

/// Resolves an id or prefix.
pub fn resolve(conn: &Connection, prefix: &str) -> Result<String, EngineError> {
    Ok(ids::resolve(conn, "specs", "spec", prefix)?)
}

/// One spec by id or prefix.
pub fn get(conn: &Connection, prefix: &str) -> Result<Spec, EngineError> {
    let id = resolve(conn, prefix)?;
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM specs WHERE id = ?1"),
        [&id],
        from_row,
    )
    .optional()?
    .ok_or(EngineError::NotFound { kind: "spec", id })
}

/// Applies a partial update, validated whole before anything is written.
pub fn update(conn: &Connection, prefix: &str, patch: SpecPatch) -> Result<Spec, EngineError> {
    let current = get(conn, prefix)?;
    let name = match &patch.name {
        Some(name) => check_name(name)?,
        None => current.name.clone(),
    };
    if let Some(body) = &patch.body {
        check_body(body)?;
    }
    let workdir = match patch.workdir {
        Some(Some(w)) => Some(normalise_workdir("workdir", &w)?),
        Some(None) => None,
        None => current.workdir.clone(),
    };
    conn.execute(
        "UPDATE specs SET name = ?2, body = ?3, workdir = ?4, updated_at = ?5 WHERE id = ?1",
        params![
            current.id,
            name,
            patch.body.unwrap_or(current.body),
            workdir,
            store::now()
        ],
    )?;
    get(conn, &current.id)
}

/// Deletes a spec that no graph binds and no queue holds (its run history stays).
pub fn delete(conn: &Connection, prefix: &str) -> Result<Spec, EngineError> {
    let spec = get(conn, prefix)?;
    let users: Vec<String> = conn
        .prepare_cached(
            "SELECT 'graph ' || g.name FROM graph_specs gs JOIN graphs g ON g.id = gs.graph_id WHERE gs.spec_id = ?1
             UNION ALL
             SELECT 'queue ' || q.name FROM queue_members m JOIN queues q ON q.id = m.queue_id WHERE m.spec_id = ?1",
        )?
        .query_map([&spec.id], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if !users.is_empty() {
        return Err(EngineError::Conflict(format!(
            "spec {} is still used by {}; remove it there first",
            ids::short(&spec.id),
            users.join(", ")
        )));
    }
    conn.execute("DELETE FROM specs WHERE id = ?1", [&spec.id])?;
    Ok(spec)
}

/// Records the one-line summary of a completed spec.
pub fn set_summary(conn: &Connection, id: &str, summary: Option<&str>) -> Result<(), EngineError> {
    conn.execute(
        "UPDATE specs SET summary = COALESCE(?2, summary), updated_at = ?3 WHERE id = ?1",
        params![id, summary, store::now()],
    )?;
    Ok(())
}
