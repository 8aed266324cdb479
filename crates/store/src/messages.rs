//! Messages hooks queue for interactive sessions (`messages`), and the notifications the daemon
//! raises about them (`notifications`).
//!
//! A message's life: `pending` when a hook queues it; for a tmux session `delivering` (written
//! before the text is typed into the pane), then `delivered` or `undeliverable` (with the
//! error). An inbox session's message goes from `pending` to `delivered` in one write. A message
//! found `delivering` when the daemon starts was cut off mid-delivery; it is never typed again
//! (see [`Tx::interrupt_deliveries`]).

use crate::sql::{self, Conn, Queries, Row, params};

use super::states::{Sql, state};
use super::times::{time, time_opt};
use super::{Rd, StoreError, Tx};
use canopy_model::records::messages::{Message, MessageStatus, Notification, NotificationKind};
use canopy_model::work::{MessageTarget, Provenance};

/// The `origin` of a message a hook queued.
const HOOK_ORIGIN: &str = "hook";

/// A message a hook queues, its target already resolved to `session_id`.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub session_id: String,
    pub target: MessageTarget,
    pub text: String,
    pub provenance: Provenance,
    /// The plugin that queued it.
    pub plugin: String,
}

const COLUMNS: &str = "id, session_id, target_kind, target, text, provenance, origin, plugin, status, error, created_at, delivered_at";

/// How a target is stored: its kind (`id` or `name`, as the schema's CHECK allows) and value.
fn target_columns(target: &MessageTarget) -> (&'static str, &str) {
    match target {
        MessageTarget::Id(id) => ("id", id),
        MessageTarget::Name(name) => ("name", name),
    }
}

fn from_row(row: &Row<'_>) -> sql::Result<Message> {
    let kind: String = row.get(2)?;
    let value: String = row.get(3)?;
    let provenance: String = row.get(5)?;
    let id: String = row.get(0)?;
    let (target, aimed_at) = match kind.as_str() {
        "name" => (MessageTarget::Name(value.clone()), Some(value)),
        _ => (MessageTarget::Id(value), None),
    };
    let provenance = serde_json::from_str(&provenance).unwrap_or_else(|err| {
        tracing::warn!(message = %id, %err, "a message's stored provenance is not valid; showing it empty");
        Provenance::default()
    });
    Ok(Message {
        id,
        session_id: row.get(1)?,
        target,
        aimed_at,
        text: row.get(4)?,
        provenance,
        origin: row.get(6)?,
        plugin: row.get(7)?,
        status: state(row, 8)?,
        error: row.get(9)?,
        created_at: time(row, 10)?,
        delivered_at: time_opt(row, 11)?,
    })
}

impl Rd<'_> {
    /// One message by full id.
    pub fn message(&self, id: &str) -> Result<Message, StoreError> {
        self.query_opt(
            &format!("SELECT {COLUMNS} FROM messages WHERE id = ?1"),
            params![id],
            from_row,
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "message",
            id: id.to_string(),
        })
    }

    /// A session's messages in every status, oldest first.
    pub fn inbox(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        let statement =
            format!("SELECT {COLUMNS} FROM messages WHERE session_id = ?1 ORDER BY created_at, id");
        let messages = self.query_map(&statement, params![session_id], from_row)?;
        Ok(messages)
    }

    /// Messages in `status` (every message when `None`), oldest first.
    pub fn messages(&self, status: Option<MessageStatus>) -> Result<Vec<Message>, StoreError> {
        let messages = match status {
            Some(status) => self.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM messages WHERE status = ?1 ORDER BY created_at, id"
                ),
                params![Sql(status)],
                from_row,
            )?,
            None => self.query_map(
                &format!("SELECT {COLUMNS} FROM messages ORDER BY created_at, id"),
                params![],
                from_row,
            )?,
        };
        Ok(messages)
    }

    /// The sessions that have pending messages (`None` for messages stored without one), the
    /// one whose oldest pending message is oldest first; at most `limit`.
    pub fn sessions_with_pending_messages(
        &self,
        limit: usize,
    ) -> Result<Vec<Option<String>>, StoreError> {
        let statement = "SELECT session_id FROM messages WHERE status = ?1
              GROUP BY session_id ORDER BY MIN(created_at) LIMIT ?2";
        let sessions = self.query_map(
            statement,
            params![
                Sql(MessageStatus::Pending),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |r| r.get(0),
        )?;
        Ok(sessions)
    }

    /// The oldest pending message for a session (`None`: messages stored without one).
    pub fn next_pending_message(
        &self,
        session_id: Option<&str>,
    ) -> Result<Option<Message>, StoreError> {
        Ok(self.query_opt(
            &format!(
                "SELECT {COLUMNS} FROM messages WHERE status = ?2 AND session_id IS NOT DISTINCT FROM ?1
                  ORDER BY created_at, id LIMIT 1"
            ),
            params![session_id, Sql(MessageStatus::Pending)],
            from_row,
        )?)
    }

    /// Notifications, newest first.
    pub fn notifications(&self) -> Result<Vec<Notification>, StoreError> {
        let statement = "SELECT id, kind, message, message_id, created_at FROM notifications
              ORDER BY created_at DESC, id";
        let found = self.query_map(statement, params![], |r| {
            Ok(Notification {
                id: r.get(0)?,
                kind: state(r, 1)?,
                message: r.get(2)?,
                message_id: r.get(3)?,
                created_at: time(r, 4)?,
            })
        })?;
        Ok(found)
    }
}

impl Tx<'_> {
    /// Stores a message as pending; returns its id.
    pub fn insert_message(&self, new: &NewMessage) -> Result<String, StoreError> {
        let id = super::new_id();
        let (kind, value) = target_columns(&new.target);
        self.execute("INSERT INTO messages (id, target_kind, target, text, provenance, origin, plugin, status, created_at, session_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)", params![
                id,
                kind,
                value,
                new.text,
                serde_json::to_string(&new.provenance)?,
                HOOK_ORIGIN,
                new.plugin,
                Sql(MessageStatus::Pending),
                super::now(),
                new.session_id,
            ])?;
        Ok(id)
    }

    /// Moves a message from `from` to `to` (recording `error`, and the time when it becomes
    /// `delivered`); returns the message as it is now, or `None` when it was not in `from`
    /// (someone else moved it first), so two deliverers can never both claim it.
    /// Replaces a pending message's text (a sync hook's patch, before it is delivered);
    /// returns whether it was still pending.
    pub fn set_pending_message_text(&self, id: &str, text: &str) -> Result<bool, StoreError> {
        let changed = self.execute(
            "UPDATE messages SET text = ?2 WHERE id = ?1 AND status = ?3",
            params![id, text, Sql(MessageStatus::Pending)],
        )?;
        Ok(changed == 1)
    }

    pub fn move_message(
        &self,
        id: &str,
        from: MessageStatus,
        to: MessageStatus,
        error: Option<&str>,
    ) -> Result<Option<Message>, StoreError> {
        let delivered_at = match to {
            MessageStatus::Delivered => Some(super::now()),
            // `Unknown` is never written (its `ToSql` refuses it).
            MessageStatus::Pending
            | MessageStatus::Delivering
            | MessageStatus::Undeliverable
            | MessageStatus::Unknown => None,
        };
        let changed = self.execute(
            "UPDATE messages SET status = ?3, error = ?4, delivered_at = COALESCE(?5, delivered_at)
                  WHERE id = ?1 AND status = ?2",
            params![id, Sql(from), Sql(to), error, delivered_at],
        )?;
        if changed == 0 {
            return Ok(None);
        }
        self.message(id).map(Some)
    }

    /// Marks every message still `delivering` (the daemon stopped while typing it) as
    /// `undeliverable` with `error`, so it is never typed again; returns them.
    pub fn interrupt_deliveries(&self, error: &str) -> Result<Vec<Message>, StoreError> {
        let stuck = self.messages(Some(MessageStatus::Delivering))?;
        let mut interrupted = Vec::with_capacity(stuck.len());
        for message in stuck {
            if let Some(moved) = self.move_message(
                &message.id,
                MessageStatus::Delivering,
                MessageStatus::Undeliverable,
                Some(error),
            )? {
                interrupted.push(moved);
            }
        }
        Ok(interrupted)
    }

    /// Raises a notification, about a message or not.
    pub fn add_notification(
        &self,
        kind: NotificationKind,
        message: &str,
        message_id: Option<&str>,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO notifications (id, kind, message, message_id, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                super::new_id(),
                Sql(kind),
                message,
                message_id,
                super::now()
            ],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::Store;
    use canopy_model::requests::sessions::NewSession;

    fn add_message(store: &Store) -> String {
        store
            .write_blocking(|tx| {
                let session = tx.insert_session(&NewSession {
                    name: "lead".to_string(),
                    ..NewSession::default()
                })?;
                tx.insert_message(&NewMessage {
                    session_id: session.id,
                    target: MessageTarget::Name("lead".to_string()),
                    text: "hello".to_string(),
                    provenance: Provenance::default(),
                    plugin: "interactive".to_string(),
                })
            })
            .unwrap()
    }

    #[test]
    fn a_message_is_claimed_once() {
        crate::each_backend::check(a_message_is_claimed_once_on);
    }

    fn a_message_is_claimed_once_on(store: &Store) {
        let id = add_message(store);
        let claim = |store: &Store| {
            let id = id.clone();
            store
                .write_blocking(move |tx| {
                    tx.move_message(&id, MessageStatus::Pending, MessageStatus::Delivering, None)
                })
                .unwrap()
        };
        let first = claim(store).unwrap();
        assert_eq!(first.status, MessageStatus::Delivering);
        assert!(first.delivered_at.is_none());
        assert!(claim(store).is_none(), "a second claim must fail");
        let delivered = {
            let id = id.clone();
            store
                .write_blocking(move |tx| {
                    tx.move_message(
                        &id,
                        MessageStatus::Delivering,
                        MessageStatus::Delivered,
                        None,
                    )
                })
                .unwrap()
                .unwrap()
        };
        assert_eq!(delivered.status, MessageStatus::Delivered);
        assert!(delivered.delivered_at.is_some());
    }

    #[test]
    fn an_interrupted_delivery_becomes_undeliverable_with_its_reason() {
        crate::each_backend::check(
            an_interrupted_delivery_becomes_undeliverable_with_its_reason_on,
        );
    }

    fn an_interrupted_delivery_becomes_undeliverable_with_its_reason_on(store: &Store) {
        let id = add_message(store);
        let claimed = id.clone();
        store
            .write_blocking(move |tx| {
                tx.move_message(
                    &claimed,
                    MessageStatus::Pending,
                    MessageStatus::Delivering,
                    None,
                )
            })
            .unwrap();
        let interrupted = store
            .write_blocking(|tx| tx.interrupt_deliveries("cut off"))
            .unwrap();
        assert_eq!(interrupted.len(), 1);
        assert_eq!(interrupted[0].id, id);
        assert_eq!(interrupted[0].status, MessageStatus::Undeliverable);
        assert_eq!(interrupted[0].error.as_deref(), Some("cut off"));
        // Nothing is left to deliver or to interrupt.
        let left = store
            .read_blocking(|rd| {
                Ok::<_, StoreError>((
                    rd.sessions_with_pending_messages(10)?,
                    rd.messages(Some(MessageStatus::Delivering))?,
                ))
            })
            .unwrap();
        assert!(left.0.is_empty() && left.1.is_empty(), "{left:?}");
    }
}
