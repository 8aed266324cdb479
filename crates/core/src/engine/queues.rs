//! Spec queues: ordered lists of existing specs, decoupled from graphs, with context groups.
//!
//! Group rules: adding a spec with a group lands it right after the group's last pending
//! member; `set_group` moves a member next to its group; `reorder` refuses an order that would
//! split a group's pending members, naming the positions, and changes nothing. A member is
//! *pending* until a run on this queue completes or skips it.

use super::{EngineError, invalid, specs};
use canopy_store::ids;
use canopy_store::{Rd, Tx};

pub use canopy_model::records::queues::{Member, MemberStatus, Queue};
pub use canopy_model::requests::queues::NewQueue;

/// Resolves a queue by name, else by id or id prefix.
pub fn resolve(rd: &Rd<'_>, name_or_id: &str) -> Result<String, EngineError> {
    Ok(rd.resolve_queue(name_or_id)?)
}

/// The members of a queue in order, with their status.
pub fn members(rd: &Rd<'_>, queue_id: &str) -> Result<Vec<Member>, EngineError> {
    Ok(rd.queue_members(queue_id)?)
}

/// One queue by name, id or id prefix.
pub fn get(rd: &Rd<'_>, prefix: &str) -> Result<Queue, EngineError> {
    let id = resolve(rd, prefix)?;
    Ok(rd.queue(&id)?)
}

/// Every queue.
pub fn list(rd: &Rd<'_>) -> Result<Vec<Queue>, EngineError> {
    Ok(rd.queues()?)
}

fn check_group(group: Option<&str>) -> Result<Option<String>, EngineError> {
    match group.map(str::trim) {
        None | Some("") => Ok(None),
        Some(g) => match canopy_model::text::one_line(g, 1, 100) {
            Some(g) => Ok(Some(g.to_string())),
            None => invalid(
                "field `group` must be one line of at most 100 characters, without control characters",
            ),
        },
    }
}

/// Writes the member order (spec ids with groups) as positions 0..n.
fn write_order(
    tx: &Tx<'_>,
    queue_id: &str,
    order: &[(String, Option<String>)],
) -> Result<(), EngineError> {
    Ok(tx.write_queue_order(queue_id, order)?)
}

fn order_of(members: &[Member]) -> Vec<(String, Option<String>)> {
    members
        .iter()
        .map(|m| (m.spec_id.clone(), m.group.clone()))
        .collect()
}

/// Creates a queue, with optional initial members.
pub fn create(tx: &Tx<'_>, new: NewQueue) -> Result<Queue, EngineError> {
    let Some(name) = canopy_model::text::one_line(&new.name, 1, 200) else {
        return invalid(
            "field `name` must be one line of 1 to 200 characters, without control characters",
        );
    };
    // Queues are named wherever an id is taken, so a name must stay unique.
    let taken = tx.queue_named(name)?;
    if let Some(existing) = taken {
        return Err(EngineError::Conflict(format!(
            "a queue named `{name}` already exists ({}); pick another name",
            ids::short(&existing)
        )));
    }
    let mut order = Vec::new();
    for (index, prefix) in new.specs.iter().enumerate() {
        let spec = specs::resolve(tx, prefix)
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
    let id = tx.insert_queue(name)?;
    write_order(tx, &id, &order)?;
    get(tx, &id)
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
    tx: &Tx<'_>,
    queue: &str,
    spec: &str,
    group: Option<&str>,
) -> Result<Queue, EngineError> {
    let queue_id = resolve(tx, queue)?;
    let spec_id = specs::resolve(tx, spec)?;
    let group = check_group(group)?;
    let members = members(tx, &queue_id)?;
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
    write_order(tx, &queue_id, &order)?;
    get(tx, &queue_id)
}

/// Removes a spec from the queue (the spec itself stays in the backlog).
pub fn remove_spec(tx: &Tx<'_>, queue: &str, spec: &str) -> Result<Queue, EngineError> {
    let queue_id = resolve(tx, queue)?;
    let spec_id = specs::resolve(tx, spec)?;
    let members = members(tx, &queue_id)?;
    if !members.iter().any(|m| m.spec_id == spec_id) {
        return Err(EngineError::NotFound {
            kind: "queue member",
            id: ids::short(&spec_id).to_string(),
        });
    }
    let order: Vec<(String, Option<String>)> = order_of(&members)
        .into_iter()
        .filter(|(spec, _)| *spec != spec_id)
        .collect();
    write_order(tx, &queue_id, &order)?;
    get(tx, &queue_id)
}

/// Sets (or clears) a member's group; a grouped member moves right after its group's last other
/// pending member.
pub fn set_group(
    tx: &Tx<'_>,
    queue: &str,
    spec: &str,
    group: Option<&str>,
) -> Result<Queue, EngineError> {
    let queue_id = resolve(tx, queue)?;
    let spec_id = specs::resolve(tx, spec)?;
    let group = check_group(group)?;
    let members = members(tx, &queue_id)?;
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
    write_order(tx, &queue_id, &order)?;
    get(tx, &queue_id)
}

/// Reorders the whole queue. Refuses, changing nothing, an order that would split a group's
/// pending members; the error names the positions.
pub fn reorder(tx: &Tx<'_>, queue: &str, order: &[String]) -> Result<Queue, EngineError> {
    let queue_id = resolve(tx, queue)?;
    let members = members(tx, &queue_id)?;
    let mut wanted = Vec::with_capacity(order.len());
    for (index, prefix) in order.iter().enumerate() {
        let spec = specs::resolve(tx, prefix)
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
    write_order(tx, &queue_id, &order)?;
    get(tx, &queue_id)
}

/// Deletes a queue no active run is draining.
pub fn delete(tx: &Tx<'_>, queue: &str) -> Result<Queue, EngineError> {
    let existing = get(tx, queue)?;
    let active = tx.queue_drained_by(&existing.id)?;
    if let Some(graph) = active {
        return Err(EngineError::Conflict(format!(
            "queue {} is being drained by graph `{graph}`; reset that graph first",
            ids::short(&existing.id)
        )));
    }
    tx.delete_queue(&existing.id)?;
    Ok(existing)
}
