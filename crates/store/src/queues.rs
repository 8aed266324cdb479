//! Spec queues (`queues`, `queue_members`) and how far runs on a queue took each member.

use crate::sql::{Conn, Queries, params};

use super::states::state_opt;
use super::times::time;
use super::{Rd, StoreError, Tx};
use canopy_model::records::queues::{Member, MemberStatus, Queue};
use canopy_model::records::runs::SpecResult;

impl Rd<'_> {
    /// Resolves a queue by name (names are unique), else by id or id prefix.
    pub fn resolve_queue(&self, name_or_id: &str) -> Result<String, StoreError> {
        self.resolve_named("queues", "queue", name_or_id, None)
    }

    /// The id of the queue called `name`, if there is one.
    pub fn queue_named(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt(
            "SELECT id FROM queues WHERE name = ?1",
            params![name],
            |r| r.get(0),
        )?)
    }

    /// The members of a queue in order, with their status.
    pub fn queue_members(&self, queue_id: &str) -> Result<Vec<Member>, StoreError> {
        self.queue_members_page(queue_id, 0, None)
    }

    /// How many members a queue has.
    pub fn queue_member_count(&self, queue_id: &str) -> Result<usize, StoreError> {
        let count: i64 = self.query_row(
            "SELECT COUNT(*) FROM queue_members WHERE queue_id = ?1",
            params![queue_id],
            |r| r.get(0),
        )?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// A window of a queue's members in order (`limit` of them from `offset`; all without a
    /// limit), with their status and 1-based positions in the whole queue.
    pub fn queue_members_page(
        &self,
        queue_id: &str,
        offset: usize,
        limit: Option<usize>,
    ) -> Result<Vec<Member>, StoreError> {
        let statement = "SELECT m.spec_id, s.name, m.group_label,
                    (SELECT rs.status FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                      WHERE r.queue_id = m.queue_id AND rs.spec_id = m.spec_id
                      ORDER BY rs.started_at DESC LIMIT 1),
                    (SELECT rs.run_id FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                      WHERE r.queue_id = m.queue_id AND rs.spec_id = m.spec_id AND rs.status IN ('completed', 'skipped')
                      ORDER BY rs.finished_at DESC LIMIT 1),
                    (SELECT rs.status FROM run_specs rs JOIN runs r ON r.id = rs.run_id
                      WHERE r.queue_id = m.queue_id AND rs.spec_id = m.spec_id AND rs.status IN ('completed', 'skipped')
                      ORDER BY rs.finished_at DESC LIMIT 1)
             FROM queue_members m JOIN specs s ON s.id = m.spec_id
             WHERE m.queue_id = ?1 ORDER BY m.position LIMIT ?2 OFFSET ?3";
        let limit = limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let rows = self.query_map(statement, params![queue_id, limit, offset], |row| {
            Ok((
                row.get::<String>(0)?,
                row.get::<String>(1)?,
                row.get::<Option<String>>(2)?,
                state_opt::<SpecResult>(row, 3)?,
                row.get::<Option<String>>(4)?,
                state_opt::<SpecResult>(row, 5)?,
            ))
        })?;
        let mut members = Vec::new();
        for (index, row) in rows.into_iter().enumerate() {
            let (spec_id, spec_name, group, latest, done_in_run, done) = row;
            let status = match (done, latest) {
                (Some(done), _) => done.into(),
                (None, Some(latest)) => latest.into(),
                (None, None) => MemberStatus::Pending,
            };
            members.push(Member {
                position: usize::try_from(offset).unwrap_or(0) + index + 1,
                spec_id,
                spec_name,
                group,
                status,
                pending: done_in_run.is_none(),
                done_in_run,
            });
        }
        Ok(members)
    }

    /// One queue by full id, with its members.
    pub fn queue(&self, id: &str) -> Result<Queue, StoreError> {
        let (name, created_at) = self
            .query_opt(
                "SELECT name, created_at FROM queues WHERE id = ?1",
                params![id],
                |r| Ok((r.get::<String>(0)?, time(r, 1)?)),
            )?
            .ok_or_else(|| StoreError::NotFound {
                kind: "queue",
                id: id.to_string(),
            })?;
        Ok(Queue {
            id: id.to_string(),
            name,
            created_at,
            members: self.queue_members(id)?,
        })
    }

    /// Every queue, oldest first.
    pub fn queues(&self) -> Result<Vec<Queue>, StoreError> {
        let ids: Vec<String> = self.query_map(
            "SELECT id FROM queues ORDER BY created_at, id",
            params![],
            |r| r.get(0),
        )?;
        ids.iter().map(|id| self.queue(id)).collect()
    }

    /// The name of a graph whose active run drains this queue, if any.
    pub fn queue_drained_by(&self, queue_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt(
            "SELECT g.name FROM runs r JOIN graphs g ON g.id = r.graph_id
                 WHERE r.queue_id = ?1 AND r.status IN ('running', 'paused') LIMIT 1",
            params![queue_id],
            |r| r.get(0),
        )?)
    }
}

impl Tx<'_> {
    /// Inserts an empty queue; returns its id.
    pub fn insert_queue(&self, name: &str) -> Result<String, StoreError> {
        let id = super::new_id();
        self.execute(
            "INSERT INTO queues (id, name, created_at) VALUES (?1, ?2, ?3)",
            params![id, name, super::now()],
        )?;
        Ok(id)
    }

    /// Writes a queue's whole member order (spec id, group) as positions 0..n.
    pub fn write_queue_order(
        &self,
        queue_id: &str,
        order: &[(String, Option<String>)],
    ) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM queue_members WHERE queue_id = ?1",
            params![queue_id],
        )?;
        let insert = "INSERT INTO queue_members (queue_id, spec_id, position, group_label) VALUES (?1, ?2, ?3, ?4)";
        for (position, (spec_id, group)) in order.iter().enumerate() {
            self.execute(insert, params![queue_id, spec_id, position as i64, group])?;
        }
        Ok(())
    }

    /// Deletes a queue and its member list.
    pub fn delete_queue(&self, id: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM queues WHERE id = ?1", params![id])?;
        Ok(())
    }
}
