//! Spec queues: ordered lists of existing specs, decoupled from graphs, with context groups.
//!
//! Group rules: adding a spec with a group lands it right after the group's last pending
//! member; `set_group` moves a member next to its group; `reorder` refuses an order that would
//! split a group's pending members, naming the positions, and changes nothing. A member is
//! *pending* until a run on this queue completes or skips it.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::{EngineError, invalid, specs};
use crate::store;
use crate::store::ids;

/// A queue member.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    /// 1-based position in the queue.
    pub position: usize,
    pub spec_id: String,
    pub spec_name: String,
    pub group: Option<String>,
    /// `pending`, or the outcome of the latest run on this queue that reached it
    /// (`completed`, `skipped`, `failed`, `blocked`, `interrupted`, `running`); only
    /// `completed` and `skipped` members are no longer pending.
    pub status: String,
    pub pending: bool,
    /// The run on this queue that completed or skipped it (the latest one), once it is not
    /// pending.
    pub done_in_run: Option<String>,
}

/// A queue with its members.
#[derive(Debug, Clone, Serialize)]
pub struct Queue {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub members: Vec<Member>,
}

/// A new queue.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewQueue {
    pub name: String,
    /// Initial members, in order (ids or prefixes).
    #[serde(default)]
    pub specs: Vec<String>,
}

/// Resolves a queue by name, else by id or id prefix; a name several queues share is refused
/// listing them.
pub fn resolve(conn: &Connection, name_or_id: &str) -> Result<String, EngineError> {
    Ok(ids::resolve_named(
        conn, "queues", "queue", name_or_id, None,
    )?)
}

/// The members of a queue in order, with their status.
pub fn members(conn: &Connection, queue_id: &str) -> Result<Vec<Member>, EngineError> {
    let mut statement = conn.prepare_cached(
        "SELECT m.spec_id, s.name, m.group_label,
                (SELECT rs.status FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                  WHERE r.queue_id = m.queue_id AND rs.spec_id = m.spec_id
                  ORDER BY rs.started_at DESC LIMIT 1),
                (SELECT rs.run_id || ' ' || rs.status FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                  WHERE r.queue_id = m.queue_id AND rs.spec_id = m.spec_id AND rs.status IN ('completed', 'skipped')
                  ORDER BY rs.finished_at DESC LIMIT 1)
         FROM queue_members m JOIN specs s ON s.id = m.spec_id
         WHERE m.queue_id = ?1 ORDER BY m.position",
    )?;
    let rows = statement.query_map([queue_id], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, Option<String>>(2)?,
            row.get::<_, Option<String>>(3)?,
            row.get::<_, Option<String>>(4)?,
        ))
    })?;
    let mut members = Vec::new();
    for (index, row) in rows.enumerate() {
        let (spec_id, spec_name, group, latest, done) = row?;
        // `<run id> <completed|skipped>`: ids are hex, so the first space splits them.
        let done = done.and_then(|d| {
            d.split_once(' ')
                .map(|(run, status)| (run.to_string(), status.to_string()))
        });
        let status = match &done {
            Some((_, status)) => status.clone(),
            None => latest.unwrap_or_else(|| "pending".to_string()),
        };
        members.push(Member {
            position: index + 1,
            spec_id,
            spec_name,
            group,
            status,
            pending: done.is_none(),
            done_in_run: done.map(|(run, _)| run),
        });
    }
    Ok(members)
}

/// One queue by name, id or id prefix.
pub fn get(conn: &Connection, prefix: &str) -> Result<Queue, EngineError> {
    let id = resolve(conn, prefix)?;
    let (name, created_at): (String, String) = conn
        .query_row(
            "SELECT name, created_at FROM queues WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .ok_or_else(|| EngineError::NotFound {
            kind: "queue",
            id: id.clone(),
        })?;
    let members = members(conn, &id)?;
    Ok(Queue {
        id,
        name,
        created_at,
        members,
    })
}

/// Every queue.
pub fn list(conn: &Connection) -> Result<Vec<Queue>, EngineError> {
    let ids: Vec<String> = conn
        .prepare_cached("SELECT id FROM queues ORDER BY created_at, id")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ids.iter().map(|id| get(conn, id)).collect()
}

fn check_group(group: Option<&str>) -> Result<Option<String>, EngineError> {
    match group.map(str::trim) {
        None | Some("") => Ok(None),
        Some(g) if g.chars().count() <= 100 && !g.contains('\n') => Ok(Some(g.to_string())),
        Some(_) => invalid("field `group` must be one line of at most 100 characters"),
    }
}

/// Writes the member order (spec ids with groups) as positions 0..n.
fn write_order(
    conn: &Connection,
    queue_id: &str,
    order: &[(String, Option<String>)],
) -> Result<(), EngineError> {
    conn.execute("DELETE FROM queue_members WHERE queue_id = ?1", [queue_id])?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO queue_members (queue_id, spec_id, position, group_label) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (position, (spec_id, group)) in order.iter().enumerate() {
        insert.execute(params![queue_id, spec_id, position as i64, group])?;
    }
    Ok(())
}

fn order_of(members: &[Member]) -> Vec<(String, Option<String>)> {
    members
        .iter()
        .map(|m| (m.spec_id.clone(), m.group.clone()))
        .collect()
}

/// Creates a queue, with optional initial members.
pub fn create(conn: &Connection, new: NewQueue) -> Result<Queue, EngineError> {
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return invalid("field `name` must be 1 to 200 characters");
    }
    // Queues are named wherever an id is taken, so a name must stay unique.
    let taken: Option<String> = conn
        .query_row("SELECT id FROM queues WHERE name = ?1", [name], |r| {
            r.get(0)
        })
        .optional()?;
    if let Some(existing) = taken {
        return Err(EngineError::Conflict(format!(
            "a queue named `{name}` already exists ({}); pick another name",
            ids::short(&existing)
        )));
    }
    let mut order = Vec::new();
    for (index, prefix) in new.specs.iter().enumerate() {
        let spec = specs::resolve(conn, prefix)
            .map_err(|err| EngineError::Invalid(format!("field `specs[{index}]`: {err}")))?;
        if order
            .iter()
            .any(|(s, _): &(String, Option<String>)| *s == spec)
        {
            return invalid(format!(
                "field `specs[{index}]`: spec {} is listed twice",
                ids::short(&spec)
            ));
        }
        order.push((spec, None));
    }
    let id = store::new_id();
    conn.execute(
        "INSERT INTO queues (id, name, created_at) VALUES (?1, ?2, ?3)",
        params![id, name, store::now()],
    )?;
    write_order(conn, &id, &order)?;
    get(conn, &id)
}

/// Index just after the last pending member of `group` (ignoring `except`), if it has one.
fn after_group(members: &[Member], group: &str, except: &str) -> Option<usize> {
    members
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| m.pending && m.group.as_deref() == Some(group) && m.spec_id != except)
        .map(|(i, _)| i + 1)
}

/// Adds a spec; with a group it lands right after the group's last pending member.
pub fn add_spec(
    conn: &Connection,
    queue: &str,
    spec: &str,
    group: Option<&str>,
) -> Result<Queue, EngineError> {
    let queue_id = resolve(conn, queue)?;
    let spec_id = specs::resolve(conn, spec)?;
    let group = check_group(group)?;
    let members = members(conn, &queue_id)?;
    if members.iter().any(|m| m.spec_id == spec_id) {
        return Err(EngineError::Conflict(format!(
            "spec {} is already in this queue",
            ids::short(&spec_id)
        )));
    }
    let mut order = order_of(&members);
    let at = group
        .as_deref()
        .and_then(|g| after_group(&members, g, &spec_id))
        .unwrap_or(order.len());
    order.insert(at, (spec_id, group));
    write_order(conn, &queue_id, &order)?;
    get(conn, &queue_id)
}

/// Removes a spec from the queue (the spec itself stays in the backlog).
pub fn remove_spec(conn: &Connection, queue: &str, spec: &str) -> Result<Queue, EngineError> {
    let queue_id = resolve(conn, queue)?;
    let spec_id = specs::resolve(conn, spec)?;
    let removed = conn.execute(
        "DELETE FROM queue_members WHERE queue_id = ?1 AND spec_id = ?2",
        params![queue_id, spec_id],
    )?;
    if removed == 0 {
        return Err(EngineError::NotFound {
            kind: "queue member",
            id: ids::short(&spec_id).to_string(),
        });
    }
    let members = members(conn, &queue_id)?;
    write_order(conn, &queue_id, &order_of(&members))?;
    get(conn, &queue_id)
}

/// Sets (or clears) a member's group; a grouped member moves right after its group's last other
/// pending member.
pub fn set_group(
    conn: &Connection,
    queue: &str,
    spec: &str,
    group: Option<&str>,
) -> Result<Queue, EngineError> {
    let queue_id = resolve(conn, queue)?;
    let spec_id = specs::resolve(conn, spec)?;
    let group = check_group(group)?;
    let members = members(conn, &queue_id)?;
    let Some(from) = members.iter().position(|m| m.spec_id == spec_id) else {
        return Err(EngineError::NotFound {
            kind: "queue member",
            id: ids::short(&spec_id).to_string(),
        });
    };
    let mut order = order_of(&members);
    let target = group
        .as_deref()
        .and_then(|g| after_group(&members, g, &spec_id));
    order[from].1 = group;
    if let Some(at) = target {
        let entry = order.remove(from);
        let at = if at > from { at - 1 } else { at };
        order.insert(at, entry);
    }
    write_order(conn, &queue_id, &order)?;
    get(conn, &queue_id)
}

/// Reorders the whole queue. Refuses, changing nothing, an order that would split a group's
/// pending members; the error names the positions.
pub fn reorder(conn: &Connection, queue: &str, order: &[String]) -> Result<Queue, EngineError> {
    let queue_id = resolve(conn, queue)?;
    let members = members(conn, &queue_id)?;
    let mut wanted = Vec::with_capacity(order.len());
    for (index, prefix) in order.iter().enumerate() {
        let spec = specs::resolve(conn, prefix)
            .map_err(|err| EngineError::Invalid(format!("field `order[{index}]`: {err}")))?;
        let Some(member) = members.iter().find(|m| m.spec_id == spec) else {
            return invalid(format!(
                "field `order[{index}]`: spec {} is not in this queue",
                ids::short(&spec)
            ));
        };
        if wanted.iter().any(|m: &&Member| m.spec_id == spec) {
            return invalid(format!(
                "field `order[{index}]`: spec {} is listed twice",
                ids::short(&spec)
            ));
        }
        wanted.push(member);
    }
    if wanted.len() != members.len() {
        let missing: Vec<&str> = members
            .iter()
            .filter(|m| !wanted.iter().any(|w| w.spec_id == m.spec_id))
            .map(|m| ids::short(&m.spec_id))
            .collect();
        return invalid(format!(
            "field `order` must list every member exactly once; missing: {}",
            missing.join(", ")
        ));
    }
    let mut splits = Vec::new();
    let groups: std::collections::BTreeSet<&str> = wanted
        .iter()
        .filter(|m| m.pending)
        .filter_map(|m| m.group.as_deref())
        .collect();
    for group in groups {
        let positions: Vec<usize> = wanted
            .iter()
            .enumerate()
            .filter(|(_, m)| m.pending && m.group.as_deref() == Some(group))
            .map(|(i, _)| i + 1)
            .collect();
        let (first, last) = (positions[0], positions[positions.len() - 1]);
        let intruders: Vec<String> = (first..=last)
            .filter(|p| !positions.contains(p) && wanted[p - 1].pending)
            .map(|p| p.to_string())
            .collect();
        if !intruders.is_empty() {
            splits.push(format!(
                "group `{group}` (pending members at positions {}) would be split at position {}",
                positions
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                intruders.join(", ")
            ));
        }
    }
    if !splits.is_empty() {
        return Err(EngineError::Conflict(format!(
            "reorder refused, nothing changed: {}",
            splits.join("; ")
        )));
    }
    let order: Vec<(String, Option<String>)> = wanted
        .iter()
        .map(|m| (m.spec_id.clone(), m.group.clone()))
        .collect();
    write_order(conn, &queue_id, &order)?;
    get(conn, &queue_id)
}

/// Deletes a queue no active run is draining.
pub fn delete(conn: &Connection, queue: &str) -> Result<Queue, EngineError> {
    let existing = get(conn, queue)?;
    let active: Option<String> = conn
        .query_row(
            "SELECT g.name FROM runs r JOIN graphs g ON g.id = r.graph_id
             WHERE r.queue_id = ?1 AND r.status IN ('running', 'paused') LIMIT 1",
            [&existing.id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(graph) = active {
        return Err(EngineError::Conflict(format!(
            "queue {} is being drained by graph `{graph}`; reset that graph first",
            ids::short(&existing.id)
        )));
    }
    conn.execute("DELETE FROM queues WHERE id = ?1", [&existing.id])?;
    Ok(existing)
}
