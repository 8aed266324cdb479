//! Graphs (`graphs`, `graph_specs`): the definition, its version, its status and the lease of
//! the driver that works on its current run.

use crate::sql::{self, Conn, Queries, Row, params};
use serde_json::Value;

use super::states::{Sql, state};
use super::times::time;
use super::{Rd, StoreError, Tx};
use canopy_model::records::graphs::{BoundSpec, Graph, GraphStatus, HookMap, Node};

/// The full, validated contents of a graph to write.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphWrite {
    pub name: String,
    pub workdir: String,
    pub nodes: Vec<Node>,
    pub specs: Vec<String>,
    pub allow_dirty_start: bool,
    pub hooks: HookMap,
    /// The node its runs must use, if any.
    pub node: Option<String>,
}

/// The outcome of a conditional edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// Written; the graph is now at this version.
    At(i64),
    /// Not written: the graph is at this version, not the one the edit was based on.
    Stale(i64),
}

const COLUMNS: &str = "id, name, workdir, nodes, allow_dirty_start, status, blocker, hooks, current_run_id, version, driver_lease, created_at, updated_at, node";

fn json_column<T: serde::de::DeserializeOwned>(row: &Row<'_>, index: usize) -> sql::Result<T> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| sql::Error::column(index, e.into()))
}

fn from_row(row: &Row<'_>) -> sql::Result<Graph> {
    Ok(Graph {
        id: row.get(0)?,
        name: row.get(1)?,
        workdir: row.get(2)?,
        nodes: json_column(row, 3)?,
        specs: Vec::new(),
        allow_dirty_start: row.get(4)?,
        status: state(row, 5)?,
        blocker: row.get(6)?,
        hooks: json_column(row, 7)?,
        current_run_id: row.get(8)?,
        version: row.get(9)?,
        driver_lease: row.get(10)?,
        created_at: time(row, 11)?,
        updated_at: time(row, 12)?,
        node: row.get(13)?,
    })
}

impl Rd<'_> {
    /// Resolves a graph by exact name (names are unique), else by id or id prefix.
    pub fn resolve_graph(&self, name_or_id: &str) -> Result<String, StoreError> {
        self.resolve_named("graphs", "graph", name_or_id, None)
    }

    /// One graph by full id, without its bound specs (what the driver needs per step).
    pub fn graph_shallow(&self, id: &str) -> Result<Graph, StoreError> {
        self.query_opt(
            &format!("SELECT {COLUMNS} FROM graphs WHERE id = ?1"),
            params![id],
            from_row,
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "graph",
            id: id.to_string(),
        })
    }

    /// One graph by full id, with its bound specs.
    pub fn graph(&self, id: &str) -> Result<Graph, StoreError> {
        let mut graph = self.graph_shallow(id)?;
        graph.specs = self.query_map("SELECT s.id, s.name FROM graph_specs gs JOIN specs s ON s.id = gs.spec_id WHERE gs.graph_id = ?1 ORDER BY gs.position", params![id], |r| {
                Ok(BoundSpec {
                    id: r.get(0)?,
                    name: r.get(1)?,
                })
            })?;
        Ok(graph)
    }

    /// How many specs are bound to a graph. Positions are 0..n (`write_graph_specs` is
    /// the one writer of the table and writes them all), so the last position answers in one
    /// index lookup where counting read every row.
    pub fn graph_spec_count(&self, id: &str) -> Result<usize, StoreError> {
        let count: i64 = self.query_row(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM graph_specs WHERE graph_id = ?1",
            params![id],
            |r| r.get(0),
        )?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// A window of a graph's bound specs, in order.
    pub fn graph_specs_page(
        &self,
        id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<BoundSpec>, StoreError> {
        let specs = self.query_map("SELECT s.id, s.name FROM graph_specs gs JOIN specs s ON s.id = gs.spec_id WHERE gs.graph_id = ?1 ORDER BY gs.position LIMIT ?2 OFFSET ?3", params![
                    id,
                    i64::try_from(limit).unwrap_or(i64::MAX),
                    i64::try_from(offset).unwrap_or(i64::MAX)
                ], |r| {
                    Ok(BoundSpec {
                        id: r.get(0)?,
                        name: r.get(1)?,
                    })
                })?;
        Ok(specs)
    }

    /// The id of every graph, by name.
    pub fn graph_ids(&self) -> Result<Vec<String>, StoreError> {
        let ids = self.query_map("SELECT id FROM graphs ORDER BY name", params![], |r| {
            r.get(0)
        })?;
        Ok(ids)
    }

    /// Every graph's id with its name.
    pub fn graph_names(&self) -> Result<std::collections::HashMap<String, String>, StoreError> {
        let names = self.query_map("SELECT id, name FROM graphs", params![], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(names.into_iter().collect())
    }

    /// True when a graph other than `except` is called `name`.
    pub fn graph_name_taken(&self, name: &str, except: Option<&str>) -> Result<bool, StoreError> {
        Ok(self.query_row(
            "SELECT EXISTS (SELECT 1 FROM graphs WHERE name = ?1 AND id IS DISTINCT FROM ?2)",
            params![name, except],
            |r| r.get(0),
        )?)
    }
}

impl Tx<'_> {
    /// Inserts a new graph (idle, version 1); returns its id.
    pub fn insert_graph(&self, write: &GraphWrite) -> Result<String, StoreError> {
        let id = super::new_id();
        let now = super::now();
        self.execute(
            "INSERT INTO graphs (id, name, workdir, nodes, allow_dirty_start, status, blocker, hooks, current_run_id, version, driver_lease, created_at, updated_at, node)
             VALUES (?1, ?2, ?3, ?4, ?5, 'idle', NULL, ?6, NULL, 1, 0, ?7, ?7, ?8)", params![
                id,
                write.name,
                write.workdir,
                serde_json::to_string(&write.nodes)?,
                write.allow_dirty_start,
                Value::Object(write.hooks.clone()).to_string(),
                now,
                write.node
            ])?;
        self.write_graph_specs(&id, &write.workdir, &write.specs)?;
        Ok(id)
    }

    /// Replaces a graph's definition (not its status) and moves it to the next version. With
    /// `based_on`, only if the graph is still at that version.
    pub fn replace_graph(
        &self,
        id: &str,
        write: &GraphWrite,
        based_on: Option<i64>,
    ) -> Result<Replaced, StoreError> {
        let current: i64 = self
            .query_opt(
                "SELECT version FROM graphs WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )?
            .ok_or_else(|| StoreError::NotFound {
                kind: "graph",
                id: id.to_string(),
            })?;
        if based_on.is_some_and(|v| v != current) {
            return Ok(Replaced::Stale(current));
        }
        self.execute(
            "UPDATE graphs SET name = ?2, workdir = ?3, nodes = ?4, allow_dirty_start = ?5, hooks = ?6, updated_at = ?7, node = ?8, version = version + 1 WHERE id = ?1", params![
                id,
                write.name,
                write.workdir,
                serde_json::to_string(&write.nodes)?,
                write.allow_dirty_start,
                Value::Object(write.hooks.clone()).to_string(),
                super::now(),
                write.node
            ])?;
        self.write_graph_specs(id, &write.workdir, &write.specs)?;
        Ok(Replaced::At(current + 1))
    }

    /// Binds `specs` to the graph, in order. A bound spec with no workdir tag takes the
    /// graph's `workdir`, so that it is listed (and shown in the TUI) with the project it is
    /// worked on in.
    fn write_graph_specs(
        &self,
        graph_id: &str,
        workdir: &str,
        specs: &[String],
    ) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM graph_specs WHERE graph_id = ?1",
            params![graph_id],
        )?;
        let insert = "INSERT INTO graph_specs (graph_id, spec_id, position) VALUES (?1, ?2, ?3)";
        let tag = "UPDATE specs SET workdir = ?2 WHERE id = ?1 AND workdir IS NULL";
        for (position, spec) in specs.iter().enumerate() {
            self.execute(insert, params![graph_id, spec, position as i64])?;
            self.execute(tag, params![spec, workdir])?;
        }
        Ok(())
    }

    /// Sets a graph's status and blocker; with `run_id`, its current run too.
    pub fn set_graph_status(
        &self,
        id: &str,
        status: GraphStatus,
        blocker: Option<&str>,
        run_id: Option<&str>,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE graphs SET status = ?2, blocker = ?3, current_run_id = COALESCE(?4, current_run_id), updated_at = ?5 WHERE id = ?1", params![id, Sql(status), blocker, run_id, super::now()])?;
        Ok(())
    }

    /// Makes a graph idle with no current run.
    pub fn clear_graph_run(&self, id: &str) -> Result<(), StoreError> {
        self.execute(
            "UPDATE graphs SET status = 'idle', blocker = NULL, current_run_id = NULL, updated_at = ?2 WHERE id = ?1", params![id, super::now()])?;
        Ok(())
    }

    /// Voids the lease on the graph's run: every driver's lease is void from then on, and no
    /// node holds it (the run was reset, cancelled or interrupted). Returns the new generation.
    pub fn take_driver_lease(&self, id: &str) -> Result<i64, StoreError> {
        self.query_opt(
            "UPDATE graphs SET driver_lease = driver_lease + 1, lease_node = NULL, lease_until = NULL
                 WHERE id = ?1 RETURNING driver_lease",
            params![id],
            |r| r.get(0),
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "graph",
            id: id.to_string(),
        })
    }

    /// Hands the graph's current run to a new driver on this node: returns the generation that
    /// driver holds. Every earlier driver's lease is void from then on; this node's holds for
    /// `lease` from now, and its heartbeat renews it ([`Tx::renew_leases`]).
    pub fn hold_driver_lease(
        &self,
        id: &str,
        lease: std::time::Duration,
    ) -> Result<i64, StoreError> {
        self.query_opt(
            "UPDATE graphs SET driver_lease = driver_lease + 1, lease_node = ?2, lease_until = ?3
                 WHERE id = ?1 RETURNING driver_lease",
            params![id, self.node(), lease_until(lease)],
            |r| r.get(0),
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "graph",
            id: id.to_string(),
        })
    }

    /// Renews the lease on every running graph this node drives, to `lease` from now.
    pub fn renew_leases(&self, lease: std::time::Duration) -> Result<usize, StoreError> {
        Ok(self.execute(
            "UPDATE graphs SET lease_until = ?2 WHERE lease_node = ?1 AND status = 'running'",
            params![self.node(), lease_until(lease)],
        )?)
    }

    /// The running graphs whose lease another node held and let run out, each with that node:
    /// claimed for this transaction (on PostgreSQL their rows stay locked until it ends, and a
    /// node looking at the same time skips them rather than wait), so exactly one node takes
    /// each over.
    pub fn expired_leases(&self) -> Result<Vec<(String, String)>, StoreError> {
        let statement = format!(
            "SELECT id, lease_node FROM graphs
                 WHERE status = 'running' AND lease_node IS NOT NULL AND lease_node <> ?1 AND lease_until < ?2
                 ORDER BY lease_until{}",
            self.dialect().skip_locked()
        );
        Ok(
            self.query_map(&statement, params![self.node(), now_millis()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?,
        )
    }

    /// One graph by full id, without its bound specs, for a write that decides on it: on
    /// PostgreSQL its row stays locked until the transaction ends, so two daemons deciding
    /// about one graph (two starts, a start and a cancel) take turns and the second sees what
    /// the first did. SQLite has one writer: nothing to lock.
    pub fn graph_shallow(&self, id: &str) -> Result<Graph, StoreError> {
        self.lock_graph(id)?;
        std::ops::Deref::deref(self).graph_shallow(id)
    }

    /// One graph by full id, with its bound specs, locked as [`Tx::graph_shallow`] locks it.
    pub fn graph(&self, id: &str) -> Result<Graph, StoreError> {
        self.lock_graph(id)?;
        std::ops::Deref::deref(self).graph(id)
    }

    /// On PostgreSQL, locks the graph's row until the transaction ends.
    fn lock_graph(&self, id: &str) -> Result<(), StoreError> {
        let lock = self.dialect().for_update();
        if !lock.is_empty() {
            self.query_opt(
                &format!("SELECT 1 FROM graphs WHERE id = ?1{lock}"),
                params![id],
                |r| r.get::<i64>(0),
            )?;
        }
        Ok(())
    }

    /// Deletes a graph and (by cascade) its run history.
    pub fn delete_graph(&self, id: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM graphs WHERE id = ?1", params![id])?;
        Ok(())
    }
}

/// Unix milliseconds `lease` from now: when a lease taken or renewed now runs out.
fn lease_until(lease: std::time::Duration) -> i64 {
    now_millis().saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}

/// Unix milliseconds now.
pub(crate) fn now_millis() -> i64 {
    canopy_model::time::Timestamp::now()
        .as_jiff()
        .as_millisecond()
}
