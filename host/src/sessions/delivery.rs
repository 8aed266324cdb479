//! Delivering pending messages: run by the daemon's scheduler on every tick.
//!
//! A message goes to its session's inbox (where `canopy session inbox --follow` sees it) or, for
//! a session created with a tmux target, is typed into that pane with `tmux send-keys`. A message
//! whose session is not live any more is kept (status `undeliverable`, listed by
//! `canopy session recall`) and a notification says the session was not found.

use std::time::Duration;

use rusqlite::params;
use tokio::sync::broadcast;

use super::{Message, Session, get, message};
use crate::store::{self, Store};

/// How often the scheduler delivers.
pub const TICK: Duration = Duration::from_millis(200);

/// How long one `tmux send-keys` may take.
const TMUX_TIMEOUT: Duration = Duration::from_secs(10);

/// The delivery side of sessions. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Delivery {
    store: Store,
    delivered: broadcast::Sender<Message>,
}

impl Delivery {
    pub fn new(store: Store) -> Self {
        let (delivered, _) = broadcast::channel(1024);
        Self { store, delivered }
    }

    /// Messages as they are delivered, for followers of an inbox.
    pub fn subscribe(&self) -> broadcast::Receiver<Message> {
        self.delivered.subscribe()
    }

    /// Delivers every pending message; returns how many it handled.
    pub async fn tick(&self) -> usize {
        let pending: Vec<(String, Option<String>)> = {
            let conn = self.store.conn();
            let found = conn
                .prepare_cached("SELECT id, session_id FROM messages WHERE status = 'pending' ORDER BY created_at, id LIMIT 500")
                .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect());
            match found {
                Ok(found) => found,
                Err(err) => {
                    tracing::error!(%err, "cannot read pending messages");
                    return 0;
                }
            }
        };
        for (id, session_id) in &pending {
            if let Err(err) = self.deliver(id, session_id.as_deref()).await {
                tracing::error!(message = %id, err = %format!("{err:#}"), "cannot deliver a message");
            }
        }
        pending.len()
    }

    async fn deliver(&self, id: &str, session_id: Option<&str>) -> anyhow::Result<()> {
        let session = match session_id {
            Some(session_id) => get(&self.store.conn(), session_id).ok(),
            None => None,
        };
        let result = match &session {
            Some(session) if session.status == "live" => match &session.tmux_target {
                Some(target) => {
                    let text = message(&self.store.conn(), id)?.text;
                    send_keys(session, target, &text).await
                }
                None => Ok(()),
            },
            Some(session) => Err(format!(
                "session {} ({}) was not found live: it is {}",
                session.id, session.name, session.status
            )),
            None => Err(format!(
                "session {} was not found",
                session_id.unwrap_or("(none)")
            )),
        };
        let now = store::now();
        match result {
            Ok(()) => {
                self.store.conn().execute(
                    "UPDATE messages SET status = 'delivered', delivered_at = ?2 WHERE id = ?1 AND status = 'pending'",
                    params![id, now],
                )?;
                let delivered = message(&self.store.conn(), id)?;
                // Nobody following is fine.
                let _ = self.delivered.send(delivered);
            }
            Err(why) => {
                tracing::warn!(message = %id, %why, "message kept for recall");
                let text = format!(
                    "message {id} was not delivered: {why}; its prompt is kept (`canopy session recall`)"
                );
                self.store.transaction(|tx| {
                    tx.execute(
                        "UPDATE messages SET status = 'undeliverable', error = ?2 WHERE id = ?1 AND status = 'pending'",
                        params![id, why],
                    )?;
                    tx.execute(
                        "INSERT INTO notifications (id, kind, message, message_id, created_at) VALUES (?1, 'session_not_found', ?2, ?3, ?4)",
                        params![store::new_id(), text, id, now],
                    )?;
                    Ok(())
                })?;
            }
        }
        Ok(())
    }
}

/// Types `text` into the session's tmux pane, then Enter.
async fn send_keys(session: &Session, target: &str, text: &str) -> Result<(), String> {
    let run = |keys: Vec<String>| {
        let mut command = tokio::process::Command::new("tmux");
        if let Some(socket) = &session.tmux_socket {
            command.arg("-S").arg(socket);
        }
        command
            .arg("send-keys")
            .arg("-t")
            .arg(target)
            .args(keys)
            .kill_on_drop(true);
        async move {
            match tokio::time::timeout(TMUX_TIMEOUT, command.output()).await {
                Ok(Ok(output)) if output.status.success() => Ok(()),
                Ok(Ok(output)) => Err(format!(
                    "tmux pane `{target}` of session {} cannot be reached: {}",
                    session.id,
                    String::from_utf8_lossy(&output.stderr).trim()
                )),
                Ok(Err(err)) => Err(format!("cannot run tmux: {err}")),
                Err(_) => Err(format!("tmux send-keys to `{target}` timed out")),
            }
        }
    };
    run(vec!["-l".to_string(), "--".to_string(), text.to_string()]).await?;
    run(vec!["Enter".to_string()]).await
}
