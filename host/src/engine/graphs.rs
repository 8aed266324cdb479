//! Graphs: a name, a workdir, ordered nodes, bound specs and a status. Reads and writes of the
//! `graphs` table; validation of nodes against the executors lives in [`super::Engine`].

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{EngineError, invalid, specs};
use crate::hooks::HookMap;
use crate::store;
use crate::store::ids;

/// A graph's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GraphStatus {
    Idle,
    Running,
    Paused,
    Completed,
    Failed,
}

impl GraphStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    fn parse(text: &str) -> rusqlite::Result<Self> {
        match text {
            "idle" => Ok(Self::Idle),
            "running" => Ok(Self::Running),
            "paused" => Ok(Self::Paused),
            "completed" => Ok(Self::Completed),
            "failed" => Ok(Self::Failed),
            other => Err(rusqlite::Error::InvalidColumnType(
                0,
                format!("graph status {other}"),
                rusqlite::types::Type::Text,
            )),
        }
    }
}

/// A node: a name and an executor config, exactly like a hook's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    #[serde(flatten)]
    pub config: Map<String, Value>,
}

/// A spec bound to a graph.
#[derive(Debug, Clone, Serialize)]
pub struct BoundSpec {
    pub id: String,
    pub name: String,
}

/// A graph as stored.
#[derive(Debug, Clone, Serialize)]
pub struct Graph {
    pub id: String,
    pub name: String,
    pub workdir: String,
    pub nodes: Vec<Node>,
    pub specs: Vec<BoundSpec>,
    pub allow_dirty_start: bool,
    pub status: GraphStatus,
    pub blocker: Option<String>,
    /// Event → ordered hook configs.
    pub hooks: HookMap,
    pub current_run_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A graph to create, or a partial update (only the fields present change). Field names are
/// the API's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphInput {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub workdir: Option<String>,
    #[serde(default)]
    pub nodes: Option<Vec<Value>>,
    #[serde(default)]
    pub specs: Option<Vec<String>>,
    #[serde(default)]
    pub allow_dirty_start: Option<bool>,
    /// Event → ordered hook configs; events named here replace that event's hooks (`[]` or
    /// `null` removes them), events not named keep theirs.
    #[serde(default)]
    pub hooks: Option<Value>,
    /// The single completion hook of the shape before hooks were a map: sets the
    /// `on_completed` hooks to this one config (`null` removes them).
    #[serde(default, deserialize_with = "some_value")]
    pub on_completed: Option<Value>,
}

fn some_value<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(de).map(Some)
}

const COLUMNS: &str = "id, name, workdir, nodes, allow_dirty_start, status, blocker, hooks, current_run_id, created_at, updated_at";

fn from_row(row: &Row<'_>) -> rusqlite::Result<Graph> {
    let nodes: String = row.get(3)?;
    let hooks: String = row.get(7)?;
    Ok(Graph {
        id: row.get(0)?,
        name: row.get(1)?,
        workdir: row.get(2)?,
        nodes: serde_json::from_str(&nodes).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, e.into())
        })?,
        specs: Vec::new(),
        allow_dirty_start: row.get(4)?,
        status: GraphStatus::parse(&row.get::<_, String>(5)?)?,
        blocker: row.get(6)?,
        hooks: serde_json::from_str(&hooks).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(7, rusqlite::types::Type::Text, e.into())
        })?,
        current_run_id: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
    })
}

fn bound_specs(conn: &Connection, graph_id: &str) -> Result<Vec<BoundSpec>, EngineError> {
    let mut statement = conn.prepare_cached(
        "SELECT s.id, s.name FROM graph_specs gs JOIN specs s ON s.id = gs.spec_id WHERE gs.graph_id = ?1 ORDER BY gs.position",
    )?;
    let specs = statement
        .query_map([graph_id], |r| {
            Ok(BoundSpec {
                id: r.get(0)?,
                name: r.get(1)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(specs)
}

/// Resolves a graph by exact name (names are unique), else by id or id prefix.
pub fn resolve(conn: &Connection, name_or_id: &str) -> Result<String, EngineError> {
    Ok(ids::resolve_named(
        conn, "graphs", "graph", name_or_id, None,
    )?)
}

/// One graph by name, id or id prefix.
pub fn get(conn: &Connection, name_or_id: &str) -> Result<Graph, EngineError> {
    let id = resolve(conn, name_or_id)?;
    get_by_id(conn, &id)
}

/// One graph by its full id, without its bound specs (what the driver needs per step).
pub fn get_shallow(conn: &Connection, id: &str) -> Result<Graph, EngineError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM graphs WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?
        .ok_or_else(|| EngineError::NotFound {
            kind: "graph",
            id: id.to_string(),
        })
}

/// One graph by its full id.
pub fn get_by_id(conn: &Connection, id: &str) -> Result<Graph, EngineError> {
    let mut graph = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM graphs WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?
        .ok_or_else(|| EngineError::NotFound {
            kind: "graph",
            id: id.to_string(),
        })?;
    graph.specs = bound_specs(conn, id)?;
    Ok(graph)
}

/// Every graph, by name.
pub fn list(conn: &Connection) -> Result<Vec<Graph>, EngineError> {
    let ids: Vec<String> = conn
        .prepare_cached("SELECT id FROM graphs ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ids.iter().map(|id| get_by_id(conn, id)).collect()
}

/// Checks a graph name.
pub fn check_name(name: &str) -> Result<String, EngineError> {
    let name = name.trim();
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(name.to_string())
    } else {
        invalid(format!(
            "field `name` must be 1 to 100 characters of a-z, A-Z, 0-9, `-`, `_`, `.`; got `{name}`"
        ))
    }
}

/// Checks a graph workdir: an existing directory; returned canonical.
pub fn check_workdir(field: &str, workdir: &str) -> Result<String, EngineError> {
    let path = std::path::Path::new(workdir.trim());
    if !path.is_absolute() {
        return invalid(format!(
            "field `{field}` must be an absolute path, got `{workdir}`"
        ));
    }
    match path.canonicalize() {
        Ok(real) if real.is_dir() => Ok(real.to_string_lossy().into_owned()),
        _ => invalid(format!(
            "field `{field}`: `{workdir}` is not an existing directory"
        )),
    }
}

/// Parses and checks node shapes (names, uniqueness); executor configs are checked by the caller.
pub fn parse_nodes(nodes: &[Value]) -> Result<Vec<Node>, EngineError> {
    if nodes.is_empty() {
        return invalid("field `nodes` must hold at least one node");
    }
    let mut parsed: Vec<Node> = Vec::with_capacity(nodes.len());
    for (index, value) in nodes.iter().enumerate() {
        let Some(object) = value.as_object() else {
            return invalid(format!(
                "field `nodes[{index}]` must be an object with `name` and an executor config"
            ));
        };
        let mut config = object.clone();
        let name = match config.remove("name") {
            Some(Value::String(name)) => name,
            _ => {
                return invalid(format!(
                    "field `nodes[{index}].name` is required (a string)"
                ));
            }
        };
        let valid = !name.is_empty()
            && name.len() <= 100
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return invalid(format!(
                "field `nodes[{index}].name` must be 1 to 100 characters of a-z, A-Z, 0-9, `-`, `_`, `.`; got `{name}`"
            ));
        }
        if parsed.iter().any(|n| n.name == name) {
            return invalid(format!(
                "field `nodes[{index}].name`: node `{name}` appears twice"
            ));
        }
        parsed.push(Node { name, config });
    }
    Ok(parsed)
}

/// Resolves bound spec ids / prefixes.
pub fn resolve_specs(conn: &Connection, prefixes: &[String]) -> Result<Vec<String>, EngineError> {
    let mut resolved: Vec<String> = Vec::with_capacity(prefixes.len());
    for (index, prefix) in prefixes.iter().enumerate() {
        let id = specs::resolve(conn, prefix)
            .map_err(|err| EngineError::Invalid(format!("field `specs[{index}]`: {err}")))?;
        if resolved.contains(&id) {
            return invalid(format!(
                "field `specs[{index}]`: spec {} is listed twice",
                ids::short(&id)
            ));
        }
        resolved.push(id);
    }
    Ok(resolved)
}

/// The full, validated contents of a graph to write.
#[derive(Debug, Clone)]
pub struct GraphWrite {
    pub name: String,
    pub workdir: String,
    pub nodes: Vec<Node>,
    pub specs: Vec<String>,
    pub allow_dirty_start: bool,
    pub hooks: HookMap,
}

/// Inserts a new graph.
pub fn insert(conn: &Connection, write: &GraphWrite) -> Result<String, EngineError> {
    let taken: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM graphs WHERE name = ?1)",
        [&write.name],
        |r| r.get(0),
    )?;
    if taken {
        return Err(EngineError::Conflict(format!(
            "a graph named `{}` already exists",
            write.name
        )));
    }
    let id = store::new_id();
    let now = store::now();
    conn.execute(
        &format!("INSERT INTO graphs ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, 'idle', NULL, ?6, NULL, ?7, ?7)"),
        params![
            id,
            write.name,
            write.workdir,
            serde_json::to_string(&write.nodes)?,
            write.allow_dirty_start,
            Value::Object(write.hooks.clone()).to_string(),
            now
        ],
    )?;
    write_specs(conn, &id, &write.specs)?;
    Ok(id)
}

/// Replaces a graph's definition (not its status).
pub fn replace(conn: &Connection, id: &str, write: &GraphWrite) -> Result<(), EngineError> {
    let taken: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM graphs WHERE name = ?1 AND id != ?2)",
        params![write.name, id],
        |r| r.get(0),
    )?;
    if taken {
        return Err(EngineError::Conflict(format!(
            "a graph named `{}` already exists",
            write.name
        )));
    }
    conn.execute(
        "UPDATE graphs SET name = ?2, workdir = ?3, nodes = ?4, allow_dirty_start = ?5, hooks = ?6, updated_at = ?7 WHERE id = ?1",
        params![
            id,
            write.name,
            write.workdir,
            serde_json::to_string(&write.nodes)?,
            write.allow_dirty_start,
            Value::Object(write.hooks.clone()).to_string(),
            store::now()
        ],
    )?;
    write_specs(conn, id, &write.specs)
}

fn write_specs(conn: &Connection, graph_id: &str, specs: &[String]) -> Result<(), EngineError> {
    conn.execute("DELETE FROM graph_specs WHERE graph_id = ?1", [graph_id])?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO graph_specs (graph_id, spec_id, position) VALUES (?1, ?2, ?3)",
    )?;
    for (position, spec) in specs.iter().enumerate() {
        insert.execute(params![graph_id, spec, position as i64])?;
    }
    Ok(())
}

/// Sets a graph's status, blocker and current run.
pub fn set_status(
    conn: &Connection,
    id: &str,
    status: GraphStatus,
    blocker: Option<&str>,
    run_id: Option<&str>,
) -> Result<(), EngineError> {
    conn.execute(
        "UPDATE graphs SET status = ?2, blocker = ?3, current_run_id = COALESCE(?4, current_run_id), updated_at = ?5 WHERE id = ?1",
        params![id, status.as_str(), blocker, run_id, store::now()],
    )?;
    Ok(())
}

/// Deletes a graph (refused while it runs) and its run history.
pub fn delete(conn: &Connection, name_or_id: &str) -> Result<Graph, EngineError> {
    let graph = get(conn, name_or_id)?;
    if graph.status == GraphStatus::Running {
        return Err(EngineError::Conflict(format!(
            "graph `{}` is running; reset it before deleting it",
            graph.name
        )));
    }
    conn.execute("DELETE FROM graphs WHERE id = ?1", [&graph.id])?;
    Ok(graph)
}
