//! Interactive sessions and the messages hooks send them.
//!
//! A session has an id and a name (names need not be unique), a status (live / finished) and,
//! when known, the harness's own conversation id. Resuming a finished session keeps its id and
//! name (a fresh name only when another live session holds it); importing a conversation Canopy
//! has never seen makes a new session with a fresh id and name.
//!
//! An interactive hook's message is resolved when the hook fires: an id must name an existing
//! session, a name exactly one live session (never cached). The message is stored pending with
//! its provenance; the daemon's scheduler delivers it on its next tick -- into the session's inbox,
//! or typed into its tmux pane -- whether or not a client is attached. A message whose session is
//! gone by then is kept for recall and a notification says so.

mod delivery;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

pub use delivery::{Delivery, TICK};

use crate::engine::{EngineError, invalid};
use crate::plugins::{MessageTarget, Provenance};
use crate::store::{self, Store, ids};

/// A session.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    pub id: String,
    pub name: String,
    /// live or finished.
    pub status: String,
    pub conversation_id: Option<String>,
    pub tmux_target: Option<String>,
    pub tmux_socket: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A new session.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    pub name: String,
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Deliver messages by typing them into this tmux pane (`session:window.pane`).
    #[serde(default)]
    pub tmux_target: Option<String>,
    /// The tmux server's socket, when it is not the default one.
    #[serde(default)]
    pub tmux_socket: Option<String>,
}

/// A message for a session.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub id: String,
    /// The session it is for (resolved when the hook fired).
    pub session_id: Option<String>,
    /// How the hook addressed it.
    pub target: MessageTarget,
    /// For a name-targeted hook, the name it was aimed at.
    pub aimed_at: Option<String>,
    pub text: String,
    /// Where it came from: graph, run, event, hook index, spec.
    pub provenance: Provenance,
    /// `hook` for messages hooks sent.
    pub origin: String,
    pub plugin: String,
    /// pending, delivered or undeliverable.
    pub status: String,
    pub error: Option<String>,
    pub created_at: String,
    pub delivered_at: Option<String>,
}

/// A notification the daemon raised (an undeliverable message, say).
#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    pub id: String,
    pub kind: String,
    pub message: String,
    pub message_id: Option<String>,
    pub created_at: String,
}

const SESSION_COLUMNS: &str =
    "id, name, status, conversation_id, tmux_target, tmux_socket, created_at, updated_at";

fn session_from_row(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: row.get(0)?,
        name: row.get(1)?,
        status: row.get(2)?,
        conversation_id: row.get(3)?,
        tmux_target: row.get(4)?,
        tmux_socket: row.get(5)?,
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
    })
}

const MESSAGE_COLUMNS: &str = "id, session_id, target_kind, target, text, provenance, origin, plugin, status, error, created_at, delivered_at";

fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    let kind: String = row.get(2)?;
    let target: String = row.get(3)?;
    let provenance: String = row.get(5)?;
    Ok(Message {
        id: row.get(0)?,
        session_id: row.get(1)?,
        aimed_at: (kind == "name").then(|| target.clone()),
        target: if kind == "id" {
            MessageTarget::Id(target)
        } else {
            MessageTarget::Name(target)
        },
        text: row.get(4)?,
        provenance: serde_json::from_str(&provenance).unwrap_or_default(),
        origin: row.get(6)?,
        plugin: row.get(7)?,
        status: row.get(8)?,
        error: row.get(9)?,
        created_at: row.get(10)?,
        delivered_at: row.get(11)?,
    })
}

fn check_name(name: &str) -> Result<String, EngineError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.contains('\n') {
        return invalid("field `name` must be one line of 1 to 100 characters");
    }
    Ok(name.to_string())
}

/// Creates a live session.
pub fn create(conn: &Connection, new: NewSession) -> Result<Session, EngineError> {
    let name = check_name(&new.name)?;
    if new.tmux_socket.is_some() && new.tmux_target.is_none() {
        return invalid("field `tmux_socket` needs `tmux_target`");
    }
    let id = store::new_id();
    let now = store::now();
    conn.execute(
        "INSERT INTO sessions (id, name, status, conversation_id, tmux_target, tmux_socket, created_at, updated_at)
         VALUES (?1, ?2, 'live', ?3, ?4, ?5, ?6, ?6)",
        params![id, name, new.conversation_id, new.tmux_target, new.tmux_socket, now],
    )?;
    get(conn, &id)
}

/// Sessions, newest first; live ones only unless `all`.
pub fn list(conn: &Connection, all: bool) -> Result<Vec<Session>, EngineError> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE ?1 OR status = 'live' ORDER BY created_at DESC, id"
    ))?;
    let sessions = statement
        .query_map([all], session_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(sessions)
}

/// One session by name, else by id or id prefix. Names need not be unique: a name several
/// sessions share means its one live holder (as a name-targeted hook does); several live
/// holders, or several finished ones and no live one, are refused listing their ids.
pub fn get(conn: &Connection, name_or_id: &str) -> Result<Session, EngineError> {
    let id = ids::resolve_named(
        conn,
        "sessions",
        "session",
        name_or_id,
        Some("status = 'live'"),
    )?;
    conn.query_row(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
        [&id],
        session_from_row,
    )
    .optional()?
    .ok_or(EngineError::NotFound {
        kind: "session",
        id,
    })
}

fn set_status(conn: &Connection, id: &str, status: &str, name: &str) -> Result<(), EngineError> {
    conn.execute(
        "UPDATE sessions SET status = ?2, name = ?3, updated_at = ?4 WHERE id = ?1",
        params![id, status, name, store::now()],
    )?;
    Ok(())
}

/// Finishes a live session.
pub fn finish(conn: &Connection, prefix: &str) -> Result<Session, EngineError> {
    let session = get(conn, prefix)?;
    if session.status == "finished" {
        return Err(EngineError::Conflict(format!(
            "session {} is already finished",
            ids::short(&session.id)
        )));
    }
    set_status(conn, &session.id, "finished", &session.name)?;
    get(conn, &session.id)
}

/// A fresh name for a session: `base-xxxx`.
fn fresh_name(base: &str) -> String {
    format!("{base}-{}", &store::new_id()[..4])
}

fn live_holder(conn: &Connection, name: &str, except: &str) -> Result<bool, EngineError> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sessions WHERE name = ?1 AND status = 'live' AND id != ?2)",
        params![name, except],
        |r| r.get(0),
    )?)
}

/// Relaunches a finished session: same id, same name -- unless another live session holds the
/// name, in which case it takes a fresh one (keeping its id).
pub fn resume(conn: &Connection, prefix: &str) -> Result<Session, EngineError> {
    let session = get(conn, prefix)?;
    if session.status == "live" {
        return Err(EngineError::Conflict(format!(
            "session {} is already live",
            ids::short(&session.id)
        )));
    }
    let name = if live_holder(conn, &session.name, &session.id)? {
        fresh_name(&session.name)
    } else {
        session.name.clone()
    };
    set_status(conn, &session.id, "live", &name)?;
    get(conn, &session.id)
}

/// Brings a harness conversation in: one Canopy has seen resumes its session; one it has never
/// seen becomes a new session with a fresh id and a fresh generated name.
pub fn import(conn: &Connection, conversation_id: &str) -> Result<Session, EngineError> {
    let conversation_id = conversation_id.trim();
    if conversation_id.is_empty() {
        return invalid("field `conversation_id` must not be empty");
    }
    let known: Option<String> = conn
        .query_row(
            "SELECT id FROM sessions WHERE conversation_id = ?1 ORDER BY created_at DESC LIMIT 1",
            [conversation_id],
            |r| r.get(0),
        )
        .optional()?;
    match known {
        Some(id) => {
            let session = get(conn, &id)?;
            if session.status == "live" {
                Ok(session)
            } else {
                resume(conn, &id)
            }
        }
        None => create(
            conn,
            NewSession {
                name: fresh_name("session"),
                conversation_id: Some(conversation_id.to_string()),
                ..NewSession::default()
            },
        ),
    }
}

/// Resolves a hook's target now and stores its message as pending; the error (sent back to the
/// hook, which fails loudly) names the id or name that did not resolve.
pub fn enqueue(
    store: &Store,
    plugin: &str,
    target: &MessageTarget,
    text: &str,
    provenance: &Provenance,
) -> Result<String, String> {
    let conn = store.conn();
    let internal = |err: rusqlite::Error| {
        tracing::error!(%err, "cannot store a session message");
        "the daemon could not store the message".to_string()
    };
    let (kind, value, session_id) = match target {
        MessageTarget::Id(id) => {
            let exists: bool = conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
                    [id],
                    |r| r.get(0),
                )
                .map_err(internal)?;
            if !exists {
                return Err(format!(
                    "no session has id `{id}`: it no longer exists (an imported conversation gets a new id; target the session by name to follow it); nothing was sent"
                ));
            }
            ("id", id.as_str(), id.clone())
        }
        MessageTarget::Name(name) => {
            let ids: Vec<String> = conn
                .prepare_cached("SELECT id FROM sessions WHERE name = ?1 AND status = 'live' ORDER BY created_at, id")
                .and_then(|mut s| s.query_map([name], |r| r.get(0))?.collect())
                .map_err(internal)?;
            match ids.as_slice() {
                [one] => ("name", name.as_str(), one.clone()),
                [] => {
                    return Err(format!(
                        "no live session is named `{name}`; nothing was sent"
                    ));
                }
                several => {
                    return Err(format!(
                        "{} live sessions are named `{name}` ({}); the hook cannot tell which one is meant, so nothing was sent",
                        several.len(),
                        several.join(", ")
                    ));
                }
            }
        }
    };
    let id = store::new_id();
    let provenance = serde_json::to_string(provenance).map_err(|e| e.to_string())?;
    conn.execute(
        "INSERT INTO messages (id, target_kind, target, text, provenance, origin, plugin, status, created_at, session_id)
         VALUES (?1, ?2, ?3, ?4, ?5, 'hook', ?6, 'pending', ?7, ?8)",
        params![id, kind, value, text, provenance, plugin, store::now(), session_id],
    )
    .map_err(internal)?;
    Ok(id)
}

/// A session's messages, oldest first (delivered and pending).
pub fn inbox(conn: &Connection, session_id: &str) -> Result<Vec<Message>, EngineError> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 ORDER BY created_at, id"
    ))?;
    let messages = statement
        .query_map([session_id], message_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(messages)
}

/// Messages with a status, oldest first (`undeliverable` is the recall list).
pub fn messages(conn: &Connection, status: Option<&str>) -> Result<Vec<Message>, EngineError> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at, id"
    ))?;
    let messages = statement
        .query_map([status], message_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(messages)
}

/// One message by full id.
pub fn message(conn: &Connection, id: &str) -> Result<Message, EngineError> {
    conn.query_row(
        &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"),
        [id],
        message_from_row,
    )
    .optional()?
    .ok_or_else(|| EngineError::NotFound {
        kind: "message",
        id: id.to_string(),
    })
}

/// Notifications, newest first.
pub fn notifications(conn: &Connection) -> Result<Vec<Notification>, EngineError> {
    let mut statement = conn.prepare_cached("SELECT id, kind, message, message_id, created_at FROM notifications ORDER BY created_at DESC, id")?;
    let found = statement
        .query_map([], |r| {
            Ok(Notification {
                id: r.get(0)?,
                kind: r.get(1)?,
                message: r.get(2)?,
                message_id: r.get(3)?,
                created_at: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(found)
}
