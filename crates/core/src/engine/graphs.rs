//! Graphs: a name, a workdir, ordered nodes, bound specs and a status. Checks of a graph's
//! fields; validation of nodes against the executors lives in [`super::Engine`].

use serde_json::Value;

use super::{EngineError, invalid, specs};
use canopy_store::graphs::Replaced;
use canopy_store::ids;
use canopy_store::{Rd, Tx};

pub use canopy_model::records::graphs::{BoundSpec, Graph, GraphStatus, Node};
pub use canopy_model::requests::graphs::GraphInput;
pub use canopy_store::graphs::GraphWrite;

/// Resolves a graph by exact name (names are unique), else by id or id prefix.
pub fn resolve(rd: &Rd<'_>, name_or_id: &str) -> Result<String, EngineError> {
    Ok(rd.resolve_graph(name_or_id)?)
}

/// One graph by name, id or id prefix.
pub fn get(rd: &Rd<'_>, name_or_id: &str) -> Result<Graph, EngineError> {
    let id = resolve(rd, name_or_id)?;
    Ok(rd.graph(&id)?)
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

/// Checks the node a graph names (`node`): a node name, or `""` (or absent) for none.
pub fn check_node(node: Option<&str>) -> Result<Option<String>, EngineError> {
    match node.map(str::trim) {
        None | Some("") => Ok(None),
        Some(name) if crate::node::is_name(name) => Ok(Some(name.to_string())),
        Some(name) => invalid(format!(
            "field `node` must be a node name (ASCII letters, digits, `-`, `_`, `.`; at most 100), or \"\" for any node; got `{name}`"
        )),
    }
}

/// Checks the workdir of a graph whose runs another node makes (its `node`): an absolute path,
/// which this daemon cannot look for; returned as given.
pub fn check_remote_workdir(field: &str, workdir: &str) -> Result<String, EngineError> {
    let path = std::path::Path::new(workdir.trim());
    if !path.is_absolute() {
        return invalid(format!(
            "field `{field}` must be an absolute path, got `{workdir}`"
        ));
    }
    Ok(workdir.trim().to_string())
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
pub fn resolve_specs(rd: &Rd<'_>, prefixes: &[String]) -> Result<Vec<String>, EngineError> {
    let mut resolved: Vec<String> = Vec::with_capacity(prefixes.len());
    for (index, prefix) in prefixes.iter().enumerate() {
        let id = specs::resolve(rd, prefix)
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

fn name_taken(name: &str) -> EngineError {
    EngineError::Conflict(format!("a graph named `{name}` already exists"))
}

/// Inserts a new graph.
pub fn insert(tx: &Tx<'_>, write: &GraphWrite) -> Result<String, EngineError> {
    if tx.graph_name_taken(&write.name, None)? {
        return Err(name_taken(&write.name));
    }
    Ok(tx.insert_graph(write)?)
}

/// Replaces a graph's definition (not its status). With `based_on`, only when the graph is
/// still at that version; otherwise nothing is written and the answer names the version it is at.
pub fn replace(
    tx: &Tx<'_>,
    id: &str,
    write: &GraphWrite,
    based_on: Option<i64>,
) -> Result<i64, EngineError> {
    if tx.graph_name_taken(&write.name, Some(id))? {
        return Err(name_taken(&write.name));
    }
    match tx.replace_graph(id, write, based_on)? {
        Replaced::At(version) => Ok(version),
        Replaced::Stale(current) => Err(EngineError::Stale {
            kind: "graph",
            name: write.name.clone(),
            expected: based_on.unwrap_or_default(),
            current,
        }),
    }
}

/// Deletes a graph (refused while it runs) and its run history.
pub fn delete(tx: &Tx<'_>, name_or_id: &str) -> Result<Graph, EngineError> {
    let graph = get(tx, name_or_id)?;
    if graph.status == GraphStatus::Running {
        return Err(EngineError::Conflict(format!(
            "graph `{}` is running; reset it before deleting it",
            graph.name
        )));
    }
    tx.delete_graph(&graph.id)?;
    Ok(graph)
}
