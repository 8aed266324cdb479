//! Cron receipts (`cron_receipts`): one row per firing, written before anything is spawned and
//! given its terminal state before a planned stop lets the daemon go; and each cron's state
//! across restarts (`cron_state`: paused, and the scheduled time accounted through).

use crate::sql::{self, Conn, Queries, Row, params};

use super::states::{Sql, state};
use super::times::{At, time, time_opt};
use super::{Rd, StoreError, Tx};
use canopy_model::records::crons::{CronState, Receipt, ReceiptStatus, Trigger};
use canopy_model::time::Timestamp;

/// A receipt as first written.
#[derive(Debug, Clone)]
pub struct NewReceipt {
    pub run_id: String,
    pub cron: String,
    pub node: String,
    pub trigger: Trigger,
    pub scheduled_at: Option<Timestamp>,
    pub status: ReceiptStatus,
    pub error: Option<String>,
    pub missed_count: Option<i64>,
    pub actor: String,
    /// A firing prepared ahead of its second: the instant its action is held until, which its
    /// receipt's `started_at` says (not the moment the receipt was written).
    pub starts_at: Option<std::time::SystemTime>,
}

/// A receipt's end.
#[derive(Debug, Clone)]
pub struct ReceiptEnd {
    pub status: ReceiptStatus,
    pub exit_code: Option<i32>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

const COLUMNS: &str = "run_id, cron, node, trigger, scheduled_at, status, exit_code, output, error, missed_count, original_effects_unknown, actor, created_at, started_at, finished_at, duration_ms";

fn from_row(row: &Row<'_>) -> sql::Result<Receipt> {
    Ok(Receipt {
        run_id: row.get(0)?,
        cron: row.get(1)?,
        node: row.get(2)?,
        trigger: state(row, 3)?,
        scheduled_at: time_opt(row, 4)?,
        status: state(row, 5)?,
        exit_code: row.get(6)?,
        output: row.get(7)?,
        error: row.get(8)?,
        missed_count: row.get(9)?,
        original_effects_unknown: row.get(10)?,
        actor: row.get(11)?,
        created_at: time(row, 12)?,
        started_at: time_opt(row, 13)?,
        finished_at: time_opt(row, 14)?,
        duration_ms: row.get(15)?,
    })
}

impl Rd<'_> {
    /// A cron's receipts, newest first, at most `last`.
    pub fn cron_receipts(&self, cron: &str, last: usize) -> Result<Vec<Receipt>, StoreError> {
        let order = self.dialect().insertion_order();
        let statement = format!(
            "SELECT {COLUMNS} FROM cron_receipts WHERE cron = ?1 ORDER BY created_at DESC, {order} DESC LIMIT ?2"
        );
        let receipts = self.query_map(
            &statement,
            params![cron, i64::try_from(last).unwrap_or(i64::MAX)],
            from_row,
        )?;
        Ok(receipts)
    }

    /// One receipt by its run id.
    pub fn cron_receipt(&self, run_id: &str) -> Result<Receipt, StoreError> {
        self.query_opt(
            &format!("SELECT {COLUMNS} FROM cron_receipts WHERE run_id = ?1"),
            params![run_id],
            from_row,
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "cron run",
            id: run_id.to_string(),
        })
    }

    /// The last receipt of a cron that ran (or tried to), missed and refused ones aside.
    pub fn last_cron_execution(&self, cron: &str) -> Result<Option<Receipt>, StoreError> {
        let order = self.dialect().insertion_order();
        Ok(self.query_opt(&format!(
                "SELECT {COLUMNS} FROM cron_receipts WHERE cron = ?1 AND status NOT IN ('missed', 'skipped', 'refused') ORDER BY created_at DESC, {order} DESC LIMIT 1"
            ), params![cron], from_row)?)
    }

    /// A cron's state on this node (paused is the cron's, on every node; on a shared database
    /// the time accounted for is this node's, each node firing its own, else the cron's from
    /// before it had marks); `None` for a cron never seen.
    pub fn cron_state(&self, cron: &str) -> Result<Option<CronState>, StoreError> {
        if self.exclusive() {
            // One daemon: the cron's own row, whatever its node is called now.
            return Ok(self.query_opt(
                "SELECT paused, accounted_through FROM cron_state WHERE name = ?1",
                params![cron],
                |row| {
                    Ok(CronState {
                        paused: row.get(0)?,
                        accounted_through: time_opt(row, 1)?,
                    })
                },
            )?);
        }
        let (paused, accounted_through) = self.query_row(
            "SELECT (SELECT paused FROM cron_state WHERE name = ?1),
                    COALESCE((SELECT accounted_through FROM cron_marks WHERE cron = ?1 AND node = ?2),
                             (SELECT accounted_through FROM cron_state WHERE name = ?1))",
            params![cron, self.node()],
            |row| Ok((row.get::<Option<bool>>(0)?, time_opt(row, 1)?)),
        )?;
        Ok(
            (paused.is_some() || accounted_through.is_some()).then_some(CronState {
                paused: paused.unwrap_or(false),
                accounted_through,
            }),
        )
    }

    /// This node's receipts left running (by a daemon that died, or that the last stop could
    /// not end). Another node's are its own.
    pub fn running_cron_receipts(&self) -> Result<Vec<Receipt>, StoreError> {
        let statement = format!(
            "SELECT {COLUMNS} FROM cron_receipts WHERE status = 'running' AND (node = ?1 OR ?2 <> 0) ORDER BY created_at"
        );
        let receipts =
            self.query_map(&statement, params![self.node(), self.exclusive()], from_row)?;
        Ok(receipts)
    }
}

impl Tx<'_> {
    /// Writes a firing's receipt.
    pub fn insert_cron_receipt(&self, new: &NewReceipt) -> Result<Receipt, StoreError> {
        let now = super::now();
        let starts = new
            .starts_at
            .map(|at| Timestamp::from_system(at.max(std::time::SystemTime::now())).to_string());
        let (started, finished) = if new.status == ReceiptStatus::Running {
            (Some(starts.as_deref().unwrap_or(now.as_str())), None)
        } else {
            (None, Some(now.as_str()))
        };
        self.execute("INSERT INTO cron_receipts (run_id, cron, node, trigger, scheduled_at, status, error, missed_count, actor, created_at, started_at, finished_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)", params![
                new.run_id,
                new.cron,
                new.node,
                Sql(new.trigger),
                new.scheduled_at.map(At),
                Sql(new.status),
                new.error,
                new.missed_count,
                new.actor,
                now,
                started,
                finished,
            ])?;
        self.cron_receipt(&new.run_id)
    }

    /// Gives a running receipt its terminal state; `None` when it was not running (already
    /// ended, by a stop that could not wait for it).
    pub fn finish_cron_receipt(
        &self,
        run_id: &str,
        end: &ReceiptEnd,
    ) -> Result<Option<Receipt>, StoreError> {
        let changed = self.execute("UPDATE cron_receipts SET status = ?2, exit_code = ?3, output = ?4, error = ?5, duration_ms = ?6, finished_at = ?7
                 WHERE run_id = ?1 AND status = 'running'", params![
                run_id,
                Sql(end.status),
                end.exit_code,
                end.output,
                end.error,
                end.duration_ms,
                super::now(),
            ])?;
        if changed == 0 {
            return Ok(None);
        }
        self.cron_receipt(run_id).map(Some)
    }

    /// At start: every receipt a dead daemon left running becomes `interrupted_unknown`, its
    /// effects unknown. Returns them.
    pub fn interrupt_unknown_cron_receipts(&self) -> Result<Vec<Receipt>, StoreError> {
        let running = self.running_cron_receipts()?;
        self.interrupt_unknown(
            running.into_iter().map(|r| r.run_id).collect(),
            "the daemon died while this firing ran (crash or kill); what it did is unknown, and it is not replayed",
        )
    }

    /// On a database shared by several daemons: the receipts a lost node (see
    /// `NodeRecord::lost`) left running become `interrupted_unknown`, named after it, without
    /// waiting for it to start again (it may never). Returns them.
    pub fn interrupt_cron_receipts_of_lost_nodes(&self) -> Result<Vec<Receipt>, StoreError> {
        let mut ended = Vec::new();
        for node in self.lost_nodes()? {
            let running: Vec<String> = self.query_map(
                "SELECT run_id FROM cron_receipts WHERE node = ?1 AND status = 'running' ORDER BY created_at",
                params![node.name],
                |row| row.get(0),
            )?;
            if running.is_empty() {
                continue;
            }
            let why = format!(
                "node `{}`, which ran this firing, stopped (no heartbeat since {}) before it ended; what it did is unknown, and it is not replayed",
                node.name, node.heartbeat_at
            );
            ended.extend(self.interrupt_unknown(running, &why)?);
        }
        Ok(ended)
    }

    /// Marks the receipts `run_ids` that are still running `interrupted_unknown` with `why`;
    /// returns them as they are now.
    fn interrupt_unknown(
        &self,
        run_ids: Vec<String>,
        why: &str,
    ) -> Result<Vec<Receipt>, StoreError> {
        let statement = "UPDATE cron_receipts SET status = 'interrupted_unknown', original_effects_unknown = 1, finished_at = ?2, error = ?3
             WHERE run_id = ?1 AND status = 'running'";
        let now = super::now();
        let mut ended = Vec::with_capacity(run_ids.len());
        for run_id in run_ids {
            if self.execute(statement, params![run_id, now, why])? > 0 {
                ended.push(self.cron_receipt(&run_id)?);
            }
        }
        Ok(ended)
    }

    /// Keeps a cron's newest `keep` receipts (and those created in the same instant as the
    /// oldest of them), and none older than `before` (RFC 3339). Both are one range of the
    /// `(cron, created_at)` index: it reads the receipts it deletes, not every one it keeps.
    pub fn prune_cron_receipts(
        &self,
        cron: &str,
        keep: u32,
        before: Timestamp,
    ) -> Result<usize, StoreError> {
        let kept_from: Option<Timestamp> = self.query_opt(
            "SELECT created_at FROM cron_receipts WHERE cron = ?1
                 ORDER BY created_at DESC LIMIT 1 OFFSET ?2",
            params![cron, keep.saturating_sub(1)],
            |row| time(row, 0),
        )?;
        let cutoff = match kept_from {
            Some(oldest_kept) if oldest_kept > before => oldest_kept,
            _ => before,
        };
        let removed = self.execute(
            "DELETE FROM cron_receipts WHERE cron = ?1 AND created_at < ?2 AND status != 'running'",
            params![cron, At(cutoff)],
        )?;
        Ok(removed)
    }

    /// Sets what a cron has accounted for through `at`: on a shared database, this node's mark
    /// (each node fires its own); on SQLite, the cron's own row.
    pub fn set_cron_accounted(&self, cron: &str, at: Timestamp) -> Result<(), StoreError> {
        if self.exclusive() {
            self.execute(
                "INSERT INTO cron_state (name, accounted_through) VALUES (?1, ?2)
                     ON CONFLICT (name) DO UPDATE SET accounted_through = excluded.accounted_through",
                params![cron, At(at)],
            )?;
            return Ok(());
        }
        self.execute(
            "INSERT INTO cron_marks (cron, node, accounted_through) VALUES (?1, ?2, ?3)
                 ON CONFLICT (cron, node) DO UPDATE SET accounted_through = excluded.accounted_through",
            params![cron, self.node(), At(at)],
        )?;
        Ok(())
    }

    /// Pauses or resumes a cron. Resuming accounts for everything until now: firings that
    /// passed while it was paused are not misses.
    pub fn set_cron_paused(
        &self,
        cron: &str,
        paused: bool,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.execute("INSERT INTO cron_state (name, paused, accounted_through) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
                    accounted_through = CASE WHEN excluded.paused <> 0 THEN cron_state.accounted_through ELSE excluded.accounted_through END", params![cron, paused, At(now)])?;
        if !paused {
            // On every node: what passed while it was paused is no node's miss.
            self.execute(
                "UPDATE cron_marks SET accounted_through = ?2 WHERE cron = ?1",
                params![cron, At(now)],
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::NewReceipt;
    use crate::Store;
    use canopy_model::records::crons::{ReceiptStatus, Trigger};
    use canopy_model::time::Timestamp;

    fn running(store: &Store, run_id: &str) {
        let new = NewReceipt {
            run_id: run_id.to_string(),
            cron: "nightly".into(),
            node: store.node().to_string(),
            trigger: Trigger::Schedule,
            scheduled_at: None,
            status: ReceiptStatus::Running,
            error: None,
            missed_count: None,
            actor: "cron:nightly".into(),
            starts_at: None,
        };
        store
            .write_blocking(move |tx| tx.insert_cron_receipt(&new))
            .unwrap();
    }

    fn left_running(store: &Store) -> Vec<String> {
        store
            .read_blocking(|rd| rd.running_cron_receipts())
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect()
    }

    /// On SQLite one daemon owns the database, whatever its node was called when it made a
    /// claim (a container's host name changes at every start): it recovers all of it. On a
    /// shared database each node recovers its own, and another node's are left to it.
    #[test]
    fn a_restart_recovers_its_own_claims_and_on_sqlite_all_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("canopy.db");
        let before = Store::open_as(&file, "host-1").unwrap();
        running(&before, "r1");
        before
            .write_blocking(|tx| tx.set_cron_accounted("nightly", Timestamp::now()))
            .unwrap();
        drop(before);
        let renamed = Store::open_as(&file, "host-2").unwrap();
        assert_eq!(left_running(&renamed), ["r1"]);
        let state = renamed
            .read_blocking(|rd| rd.cron_state("nightly"))
            .unwrap();
        assert!(state.and_then(|s| s.accounted_through).is_some());

        let url = crate::pg::cluster::scratch_database().unwrap();
        let a = Store::open_postgres(&url, "a").unwrap();
        let b = Store::open_postgres(&url, "b").unwrap();
        running(&a, "ra");
        running(&b, "rb");
        assert_eq!(left_running(&a), ["ra"]);
        assert_eq!(left_running(&b), ["rb"]);
    }
}
