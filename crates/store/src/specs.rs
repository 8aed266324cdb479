//! The spec backlog (`specs`).

use crate::sql::{self, Conn, Queries, Row, params};

use super::times::time;
use super::{Rd, StoreError, Tx};
use canopy_model::records::specs::Spec;
use canopy_model::spec_format::{self, SpecFormat};

const COLUMNS: &str = "id, name, body, workdir, summary, created_at, updated_at";

fn from_row(row: &Row<'_>) -> sql::Result<Spec> {
    let body: String = row.get(2)?;
    Ok(Spec {
        id: row.get(0)?,
        name: row.get(1)?,
        needs_conversion: matches!(spec_format::read(&body), Ok(SpecFormat::Heading)),
        body,
        workdir: row.get(3)?,
        summary: row.get(4)?,
        created_at: time(row, 5)?,
        updated_at: time(row, 6)?,
    })
}

impl Rd<'_> {
    /// Resolves a spec's name (when one spec has it), id or unambiguous id prefix.
    pub fn resolve_spec(&self, name_or_id: &str) -> Result<String, StoreError> {
        self.resolve_named("specs", "spec", name_or_id, None)
    }

    /// One spec by full id.
    pub fn spec(&self, id: &str) -> Result<Spec, StoreError> {
        self.query_opt(
            &format!("SELECT {COLUMNS} FROM specs WHERE id = ?1"),
            params![id],
            from_row,
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "spec",
            id: id.to_string(),
        })
    }

    /// A spec's name and body, if it still exists.
    pub fn spec_text(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(self.query_opt(
            "SELECT name, body FROM specs WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// Every spec, oldest first; with `workdir`, only those tagged with it.
    pub fn specs(&self, workdir: Option<&str>) -> Result<Vec<Spec>, StoreError> {
        let statement = format!(
            "SELECT {COLUMNS} FROM specs WHERE CAST(?1 AS TEXT) IS NULL OR workdir = ?1 ORDER BY created_at, id"
        );
        let specs = self.query_map(&statement, params![workdir], from_row)?;
        Ok(specs)
    }

    /// The id of every spec in the backlog.
    pub fn spec_ids(&self) -> Result<Vec<String>, StoreError> {
        let ids = self.query_map("SELECT id FROM specs", params![], |r| r.get(0))?;
        Ok(ids)
    }

    /// What still holds a spec: `graph NAME` and `queue NAME` entries.
    pub fn spec_users(&self, id: &str) -> Result<Vec<String>, StoreError> {
        let users = self.query_map("SELECT 'graph ' || g.name FROM graph_specs gs JOIN graphs g ON g.id = gs.graph_id WHERE gs.spec_id = ?1
                 UNION ALL
                 SELECT 'queue ' || q.name FROM queue_members m JOIN queues q ON q.id = m.queue_id WHERE m.spec_id = ?1", params![id], |row| row.get(0))?;
        Ok(users)
    }
}

impl Tx<'_> {
    /// Inserts a spec (already validated); returns its id.
    pub fn insert_spec(
        &self,
        name: &str,
        body: &str,
        workdir: Option<&str>,
    ) -> Result<String, StoreError> {
        let id = super::new_id();
        self.execute(
            "INSERT INTO specs (id, name, body, workdir, summary, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?5)", params![id, name, body, workdir, super::now()])?;
        Ok(id)
    }

    /// Rewrites a spec's name, body and workdir tag.
    pub fn update_spec(
        &self,
        id: &str,
        name: &str,
        body: &str,
        workdir: Option<&str>,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE specs SET name = ?2, body = ?3, workdir = ?4, updated_at = ?5 WHERE id = ?1",
            params![id, name, body, workdir, super::now()],
        )?;
        Ok(())
    }

    /// Deletes a spec row.
    pub fn delete_spec(&self, id: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM specs WHERE id = ?1", params![id])?;
        Ok(())
    }

    /// Records the one-line summary of a completed spec (a `None` keeps the old one).
    pub fn set_spec_summary(&self, id: &str, summary: Option<&str>) -> Result<(), StoreError> {
        self.execute(
            "UPDATE specs SET summary = COALESCE(?2, summary), updated_at = ?3 WHERE id = ?1",
            params![id, summary, super::now()],
        )?;
        Ok(())
    }
}
