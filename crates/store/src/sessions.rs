//! Interactive sessions (`sessions`), and the one read the daemon's own status needs (its
//! active runs).

use crate::sql::{self, Conn, Queries, Row, params};

use super::states::{Sql, state};
use super::times::time;
use super::{Rd, StoreError, Tx};
use canopy_model::records::sessions::{ActiveRun, Session, SessionStatus};
use canopy_model::requests::sessions::NewSession;

/// The SQL condition that picks the live row among several sessions sharing a name.
const IS_LIVE: &str = "status = 'live'";

const COLUMNS: &str =
    "id, name, status, conversation_id, tmux_target, tmux_socket, created_at, updated_at";

fn from_row(row: &Row<'_>) -> sql::Result<Session> {
    Ok(Session {
        id: row.get(0)?,
        name: row.get(1)?,
        status: state(row, 2)?,
        conversation_id: row.get(3)?,
        tmux_target: row.get(4)?,
        tmux_socket: row.get(5)?,
        created_at: time(row, 6)?,
        updated_at: time(row, 7)?,
    })
}

impl Rd<'_> {
    /// Resolves a session by name, else by id or id prefix. A name several sessions share
    /// means its one live holder; several live holders, or several finished ones and no live
    /// one, are refused as ambiguous.
    pub fn resolve_session(&self, name_or_id: &str) -> Result<String, StoreError> {
        self.resolve_named("sessions", "session", name_or_id, Some(IS_LIVE))
    }

    /// One session by full id.
    pub fn session(&self, id: &str) -> Result<Session, StoreError> {
        self.find_session(id)?.ok_or_else(|| StoreError::NotFound {
            kind: "session",
            id: id.to_string(),
        })
    }

    /// One session by full id, if it exists.
    pub fn find_session(&self, id: &str) -> Result<Option<Session>, StoreError> {
        Ok(self.query_opt(
            &format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"),
            params![id],
            from_row,
        )?)
    }

    /// Sessions, newest first; live ones only unless `all`.
    pub fn sessions(&self, all: bool) -> Result<Vec<Session>, StoreError> {
        let statement = format!(
            "SELECT {COLUMNS} FROM sessions WHERE ?1 OR status = ?2 ORDER BY created_at DESC, id"
        );
        let sessions =
            self.query_map(&statement, params![all, Sql(SessionStatus::Live)], from_row)?;
        Ok(sessions)
    }

    /// The ids of the live sessions called `name`, oldest first.
    pub fn live_sessions_named(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let statement =
            "SELECT id FROM sessions WHERE name = ?1 AND status = ?2 ORDER BY created_at, id";
        let ids = self.query_map(statement, params![name, Sql(SessionStatus::Live)], |r| {
            r.get(0)
        })?;
        Ok(ids)
    }

    /// Whether a live session other than `except` is called `name`.
    pub fn name_held_by_another_live_session(
        &self,
        name: &str,
        except: &str,
    ) -> Result<bool, StoreError> {
        Ok(self.query_row(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE name = ?1 AND status = ?2 AND id != ?3)",
            params![name, Sql(SessionStatus::Live), except],
            |r| r.get(0),
        )?)
    }

    /// The newest session that holds this harness conversation, if any.
    pub fn session_of_conversation(
        &self,
        conversation_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt(
            "SELECT id FROM sessions WHERE conversation_id = ?1 ORDER BY created_at DESC LIMIT 1",
            params![conversation_id],
            |r| r.get(0),
        )?)
    }

    /// Every graph's current run that is still going on (running, paused, or interrupted and
    /// waiting for a continue), oldest first.
    pub fn active_runs_summary(&self) -> Result<Vec<ActiveRun>, StoreError> {
        let statement = "SELECT r.id, g.name, r.status, r.started_at
               FROM graphs g JOIN runs r ON r.id = g.current_run_id
              ORDER BY r.started_at, r.id";
        let runs: Vec<ActiveRun> = self.query_map(statement, params![], |r| {
            Ok(ActiveRun {
                id: r.get(0)?,
                graph_name: r.get(1)?,
                status: state(r, 2)?,
                started_at: time(r, 3)?,
            })
        })?;
        Ok(runs.into_iter().filter(|r| r.status.is_active()).collect())
    }
}

impl Tx<'_> {
    /// Inserts a live session (the caller checked the fields); returns it.
    pub fn insert_session(&self, new: &NewSession) -> Result<Session, StoreError> {
        let id = super::new_id();
        self.execute(
            "INSERT INTO sessions (id, name, status, conversation_id, tmux_target, tmux_socket, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)", params![
                id,
                new.name,
                Sql(SessionStatus::Live),
                new.conversation_id,
                new.tmux_target,
                new.tmux_socket,
                super::now()
            ])?;
        self.session(&id)
    }

    /// Sets a session's status and name.
    pub fn set_session_status(
        &self,
        id: &str,
        status: SessionStatus,
        name: &str,
    ) -> Result<(), StoreError> {
        let changed = self.execute(
            "UPDATE sessions SET status = ?2, name = ?3, updated_at = ?4 WHERE id = ?1",
            params![id, Sql(status), name, super::now()],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                kind: "session",
                id: id.to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_condition_spells_the_live_status() {
        assert_eq!(IS_LIVE, format!("status = '{}'", SessionStatus::Live));
    }
}
