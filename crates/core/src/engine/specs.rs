//! The standalone spec backlog: create, list (optionally by workdir tag), show, update, delete.

use super::{EngineError, invalid};
use canopy_model::spec_format;
use canopy_store::ids;
use canopy_store::{Rd, Tx};

pub use canopy_model::records::specs::Spec;
pub use canopy_model::requests::specs::{NewSpec, SpecPatch};

fn check_name(name: &str) -> Result<String, EngineError> {
    match canopy_model::text::one_line(name, 1, 200) {
        Some(name) => Ok(name.to_string()),
        None => invalid(
            "field `name` must be one line of 1 to 200 characters, without control characters",
        ),
    }
}

fn check_body(body: &str) -> Result<(), EngineError> {
    // A marker holding it ({{spec_body}}) could not reach a process: no argument or
    // environment string can carry a NUL.
    if let Some(at) = body.find('\0') {
        let line = body[..at].matches('\n').count() + 1;
        return invalid(format!(
            "field `body` holds a NUL byte (line {line}); a spec is text"
        ));
    }
    spec_format::parse(body).map(|_| ()).map_err(|err| {
        let hint = if spec_format::is_heading_format(body) {
            " (this is the older heading format: `canopy spec add --convert` rewrites it with the tagged sections)"
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
pub fn create(tx: &Tx<'_>, new: NewSpec) -> Result<Spec, EngineError> {
    let name = check_name(&new.name)?;
    check_body(&new.body)?;
    let workdir = new
        .workdir
        .as_deref()
        .map(|w| normalise_workdir("workdir", w))
        .transpose()?;
    let id = tx.insert_spec(&name, &new.body, workdir.as_deref())?;
    Ok(tx.spec(&id)?)
}

/// Every spec, oldest first; with `workdir`, only the specs tagged with it.
pub fn list(rd: &Rd<'_>, workdir: Option<&str>) -> Result<Vec<Spec>, EngineError> {
    let workdir = workdir
        .map(|w| normalise_workdir("workdir", w))
        .transpose()?;
    Ok(rd.specs(workdir.as_deref())?)
}

/// Resolves an id or prefix.
pub fn resolve(rd: &Rd<'_>, prefix: &str) -> Result<String, EngineError> {
    Ok(rd.resolve_spec(prefix)?)
}

/// One spec by id or prefix.
pub fn get(rd: &Rd<'_>, prefix: &str) -> Result<Spec, EngineError> {
    let id = resolve(rd, prefix)?;
    Ok(rd.spec(&id)?)
}

/// Applies a partial update, validated whole before anything is written.
pub fn update(tx: &Tx<'_>, prefix: &str, patch: SpecPatch) -> Result<Spec, EngineError> {
    let current = get(tx, prefix)?;
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
    let body = patch.body.unwrap_or(current.body);
    tx.update_spec(&current.id, &name, &body, workdir.as_deref())?;
    Ok(tx.spec(&current.id)?)
}

/// Deletes a spec that no graph binds and no queue holds (its run history stays).
pub fn delete(tx: &Tx<'_>, prefix: &str) -> Result<Spec, EngineError> {
    let spec = get(tx, prefix)?;
    let users = tx.spec_users(&spec.id)?;
    if !users.is_empty() {
        return Err(EngineError::Conflict(format!(
            "spec {} is still used by {}; remove it there first",
            ids::short(&spec.id),
            users.join(", ")
        )));
    }
    tx.delete_spec(&spec.id)?;
    Ok(spec)
}
