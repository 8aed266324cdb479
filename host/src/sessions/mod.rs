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

pub use delivery::{Delivery, FOLLOW_BUFFER, TICK, TMUX_TIMEOUT};

pub use crate::store::messages::{
    Message, MessageStatus, NewMessage, Notification, NotificationKind,
};
pub use crate::store::sessions::{NewSession, Session, SessionStatus};

use crate::engine::{EngineError, invalid};
use crate::plugins::{MessageTarget, Provenance};
use crate::store::{Store, StoreError, Tx, ids};

fn check_name(name: &str) -> Result<String, EngineError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.contains('\n') {
        return invalid("field `name` must be one line of 1 to 100 characters");
    }
    Ok(name.to_string())
}

/// Creates a live session.
pub async fn create(store: &Store, new: NewSession) -> Result<Session, EngineError> {
    let new = NewSession {
        name: check_name(&new.name)?,
        ..new
    };
    if new.tmux_socket.is_some() && new.tmux_target.is_none() {
        return invalid("field `tmux_socket` needs `tmux_target`");
    }
    Ok(store.write(move |tx| tx.insert_session(&new)).await?)
}

/// Sessions, newest first; live ones only unless `all`.
pub async fn list(store: &Store, all: bool) -> Result<Vec<Session>, EngineError> {
    Ok(store.read(move |rd| rd.sessions(all)).await?)
}

/// One session by name, else by id or id prefix. Names need not be unique: a name several
/// sessions share means its one live holder (as a name-targeted hook does); several live
/// holders, or several finished ones and no live one, are refused listing their ids.
pub async fn get(store: &Store, name_or_id: &str) -> Result<Session, EngineError> {
    let text = name_or_id.to_string();
    Ok(store
        .read(move |rd| rd.session(&rd.resolve_session(&text)?))
        .await?)
}

/// Finishes a live session.
pub async fn finish(store: &Store, name_or_id: &str) -> Result<Session, EngineError> {
    let text = name_or_id.to_string();
    store
        .write(move |tx| {
            let session = tx.session(&tx.resolve_session(&text)?)?;
            match session.status {
                SessionStatus::Finished => Err(EngineError::Conflict(format!(
                    "session {} is already finished",
                    ids::short(&session.id)
                ))),
                SessionStatus::Live => {
                    tx.set_session_status(&session.id, SessionStatus::Finished, &session.name)?;
                    Ok(tx.session(&session.id)?)
                }
            }
        })
        .await
}

/// A fresh name for a session: `base-xxxx`.
fn fresh_name(base: &str) -> String {
    format!("{base}-{}", &crate::store::new_id()[..4])
}

/// Relaunches a finished session (inside a write): same id, same name -- unless another live
/// session holds the name, in which case it takes a fresh one (keeping its id).
fn resume_in(tx: &Tx<'_>, id: &str) -> Result<Session, EngineError> {
    let session = tx.session(id)?;
    match session.status {
        SessionStatus::Live => Err(EngineError::Conflict(format!(
            "session {} is already live",
            ids::short(&session.id)
        ))),
        SessionStatus::Finished => {
            let name = if tx.name_held_by_another_live_session(&session.name, &session.id)? {
                fresh_name(&session.name)
            } else {
                session.name.clone()
            };
            tx.set_session_status(&session.id, SessionStatus::Live, &name)?;
            Ok(tx.session(&session.id)?)
        }
    }
}

/// Relaunches a finished session: same id, same name -- unless another live session holds the
/// name, in which case it takes a fresh one (keeping its id).
pub async fn resume(store: &Store, name_or_id: &str) -> Result<Session, EngineError> {
    let text = name_or_id.to_string();
    store
        .write(move |tx| {
            let id = tx.resolve_session(&text)?;
            resume_in(tx, &id)
        })
        .await
}

/// Brings a harness conversation in: one Canopy has seen resumes its session; one it has never
/// seen becomes a new session with a fresh id and a fresh generated name.
pub async fn import(store: &Store, conversation_id: &str) -> Result<Session, EngineError> {
    let conversation_id = conversation_id.trim().to_string();
    if conversation_id.is_empty() {
        return invalid("field `conversation_id` must not be empty");
    }
    store
        .write(
            move |tx| match tx.session_of_conversation(&conversation_id)? {
                Some(id) => {
                    let session = tx.session(&id)?;
                    match session.status {
                        SessionStatus::Live => Ok(session),
                        SessionStatus::Finished => resume_in(tx, &id),
                    }
                }
                None => Ok(tx.insert_session(&NewSession {
                    name: fresh_name("session"),
                    conversation_id: Some(conversation_id),
                    ..NewSession::default()
                })?),
            },
        )
        .await
}

/// Why a hook's message was not stored.
enum EnqueueError {
    /// The target did not resolve; the text goes back to the hook.
    Refused(String),
    Store(StoreError),
}

impl From<StoreError> for EnqueueError {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

/// Resolves a hook's target now and stores its message as pending, in one write (the session
/// the target names is the one the message is stored for). The error (sent back to the hook,
/// which fails loudly) names the id or name that did not resolve.
pub async fn enqueue(
    store: &Store,
    plugin: &str,
    target: MessageTarget,
    text: &str,
    provenance: &Provenance,
) -> Result<String, String> {
    let (plugin, text, provenance) = (plugin.to_string(), text.to_string(), provenance.clone());
    let stored = store
        .write(move |tx| {
            let session_id = match &target {
                MessageTarget::Id(id) => match tx.find_session(id)? {
                    Some(session) => session.id,
                    None => {
                        return Err(EnqueueError::Refused(format!(
                            "no session has id `{id}`: it no longer exists (an imported conversation gets a new id; target the session by name to follow it); nothing was sent"
                        )));
                    }
                },
                MessageTarget::Name(name) => {
                    let live = tx.live_sessions_named(name)?;
                    match live.as_slice() {
                        [one] => one.clone(),
                        [] => {
                            return Err(EnqueueError::Refused(format!(
                                "no live session is named `{name}`; nothing was sent"
                            )));
                        }
                        several => {
                            return Err(EnqueueError::Refused(format!(
                                "{} live sessions are named `{name}` ({}); the hook cannot tell which one is meant, so nothing was sent",
                                several.len(),
                                several.join(", ")
                            )));
                        }
                    }
                }
            };
            Ok(tx.insert_message(&NewMessage {
                session_id,
                target,
                text,
                provenance,
                plugin,
            })?)
        })
        .await;
    match stored {
        Ok(id) => Ok(id),
        Err(EnqueueError::Refused(why)) => Err(why),
        Err(EnqueueError::Store(err)) => {
            tracing::error!(err = %format!("{err:#}"), "cannot store a session message");
            Err("the daemon could not store the message".to_string())
        }
    }
}

/// A session's messages in every status, oldest first.
pub async fn inbox(store: &Store, session_id: &str) -> Result<Vec<Message>, EngineError> {
    let session_id = session_id.to_string();
    Ok(store.read(move |rd| rd.inbox(&session_id)).await?)
}

/// Messages in a status (every message when `None`), oldest first; `undeliverable` is the
/// recall list.
pub async fn messages(
    store: &Store,
    status: Option<MessageStatus>,
) -> Result<Vec<Message>, EngineError> {
    Ok(store.read(move |rd| rd.messages(status)).await?)
}

/// Notifications, newest first.
pub async fn notifications(store: &Store) -> Result<Vec<Notification>, EngineError> {
    Ok(store.read(|rd| rd.notifications()).await?)
}
