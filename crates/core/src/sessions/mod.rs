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
//!
//! Each change records its `session.*` event in the write that makes it true (see
//! [`crate::bus`]): a session created, resumed or imported, finished; a message queued,
//! delivered, or kept as undeliverable.

mod delivery;

pub use delivery::{Delivery, FOLLOW_BUFFER, TICK, TMUX_TIMEOUT};

pub use canopy_model::records::messages::{Message, MessageStatus, Notification, NotificationKind};
pub use canopy_model::records::sessions::{Session, SessionStatus};
pub use canopy_model::requests::sessions::NewSession;
pub use canopy_store::messages::NewMessage;

use std::sync::{Arc, OnceLock};

use crate::bus::Bus;
use crate::engine::{EngineError, invalid};
use canopy_model::events::session::{
    MessageQueued, MessageRef, SessionCreated, SessionFinished, SessionRef,
};
use canopy_model::events::{Cause, Event};
use canopy_model::work::{MessageTarget, Provenance};
use canopy_store::{Rd, Store, StoreError, Tx, ids};

/// A write that also records the events it returns (as [`Cause::current`]), published once it
/// has committed.
pub(crate) async fn write_with_events<T, E>(
    bus: &Bus,
    work: impl FnOnce(&Tx<'_>) -> Result<(T, Vec<Event>), E> + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    let cause = Cause::current();
    let recorder = bus.clone();
    let (value, recorded) = bus
        .store()
        .write(move |tx| {
            let (value, events) = work(tx)?;
            let recorded = recorder.record(tx, events, &cause)?;
            Ok::<_, E>((value, recorded))
        })
        .await?;
    bus.publish(recorded).await;
    Ok(value)
}

/// What a `session.created` or `session.finished` event says about a session.
fn session_ref(session: &Session) -> SessionRef {
    SessionRef {
        session_id: session.id.clone(),
        session_name: Some(session.name.clone()),
        // A session belongs to no workdir.
        workdir: None,
    }
}

/// What a `session.message.*` event says about a message: its session (with the session's
/// name as it is now), and the workdir of the run that sent it, when a run did.
pub(crate) fn message_ref(
    rd: &Rd<'_>,
    message: &Message,
    reason: Option<&str>,
) -> Result<MessageRef, StoreError> {
    let session_name = match &message.session_id {
        Some(id) => rd.find_session(id)?.map(|s| s.name),
        None => None,
    };
    let run_id = &message.provenance.run_id;
    let workdir = if run_id.is_empty() {
        None
    } else {
        match rd.run(run_id) {
            Ok(run) => Some(run.workdir),
            Err(StoreError::NotFound { .. }) => None,
            Err(err) => return Err(err),
        }
    };
    Ok(MessageRef {
        session_id: message.session_id.clone().unwrap_or_default(),
        session_name,
        message_id: message.id.clone(),
        workdir,
        reason: reason.map(str::to_string),
    })
}

fn check_name(name: &str) -> Result<String, EngineError> {
    match canopy_model::text::one_line(name, 1, 100) {
        Some(name) => Ok(name.to_string()),
        None => invalid(
            "field `name` must be one line of 1 to 100 characters, without control characters",
        ),
    }
}

/// Creates a live session.
pub async fn create(bus: &Bus, new: NewSession) -> Result<Session, EngineError> {
    let new = NewSession {
        name: check_name(&new.name)?,
        ..new
    };
    if new.tmux_socket.is_some() && new.tmux_target.is_none() {
        return invalid("field `tmux_socket` needs `tmux_target`");
    }
    write_with_events(bus, move |tx| {
        let session = tx.insert_session(&new)?;
        let created = Event::new(&SessionCreated(session_ref(&session)));
        Ok((session, vec![created]))
    })
    .await
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
pub async fn finish(bus: &Bus, name_or_id: &str) -> Result<Session, EngineError> {
    let text = name_or_id.to_string();
    write_with_events(bus, move |tx| {
        let session = tx.session(&tx.resolve_session(&text)?)?;
        match session.status {
            SessionStatus::Finished | SessionStatus::Unknown => Err(EngineError::Conflict(
                format!("session {} is already finished", ids::short(&session.id)),
            )),
            SessionStatus::Live => {
                tx.set_session_status(&session.id, SessionStatus::Finished, &session.name)?;
                let session = tx.session(&session.id)?;
                let finished = Event::new(&SessionFinished(session_ref(&session)));
                Ok((session, vec![finished]))
            }
        }
    })
    .await
}

/// A fresh name for a session: `base-xxxx`.
fn fresh_name(base: &str) -> String {
    format!("{base}-{}", &canopy_store::new_id()[..4])
}

/// Relaunches a finished session (inside a write): same id, same name -- unless another live
/// session holds the name, in which case it takes a fresh one (keeping its id). Returns it with
/// its `session.created` event.
fn resume_in(tx: &Tx<'_>, id: &str) -> Result<(Session, Vec<Event>), EngineError> {
    let session = tx.session(id)?;
    match session.status {
        SessionStatus::Live | SessionStatus::Unknown => Err(EngineError::Conflict(format!(
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
            let session = tx.session(&session.id)?;
            let resumed = Event::new(&SessionCreated(session_ref(&session)));
            Ok((session, vec![resumed]))
        }
    }
}

/// Relaunches a finished session: same id, same name -- unless another live session holds the
/// name, in which case it takes a fresh one (keeping its id).
pub async fn resume(bus: &Bus, name_or_id: &str) -> Result<Session, EngineError> {
    let text = name_or_id.to_string();
    write_with_events(bus, move |tx| {
        let id = tx.resolve_session(&text)?;
        resume_in(tx, &id)
    })
    .await
}

/// Brings a harness conversation in: one Canopy has seen resumes its session; one it has never
/// seen becomes a new session with a fresh id and a fresh generated name.
pub async fn import(bus: &Bus, conversation_id: &str) -> Result<Session, EngineError> {
    let conversation_id = conversation_id.trim().to_string();
    if conversation_id.is_empty() {
        return invalid("field `conversation_id` must not be empty");
    }
    write_with_events(bus, move |tx| {
        match tx.session_of_conversation(&conversation_id)? {
            Some(id) => {
                let session = tx.session(&id)?;
                match session.status {
                    // Nothing changes: no event.
                    SessionStatus::Live | SessionStatus::Unknown => Ok((session, Vec::new())),
                    SessionStatus::Finished => resume_in(tx, &id),
                }
            }
            None => {
                let session = tx.insert_session(&NewSession {
                    name: fresh_name("session"),
                    conversation_id: Some(conversation_id),
                    ..NewSession::default()
                })?;
                let created = Event::new(&SessionCreated(session_ref(&session)));
                Ok((session, vec![created]))
            }
        }
    })
    .await
}

/// Where hooks' messages are queued, for the plugin host: the bus, bound once the daemon has
/// one (the plugin host starts before the bus, which needs it). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    bus: Arc<OnceLock<Bus>>,
}

impl Outbox {
    /// Queues messages on this bus from now on.
    pub fn bind(&self, bus: Bus) {
        if self.bus.set(bus).is_err() {
            tracing::warn!("the session outbox was bound twice; the first bus stays");
        }
    }

    /// [`enqueue`] on the bound bus.
    pub async fn enqueue(
        &self,
        plugin: &str,
        target: MessageTarget,
        text: &str,
        provenance: &Provenance,
    ) -> Result<String, String> {
        match self.bus.get() {
            Some(bus) => enqueue(bus, plugin, target, text, provenance).await,
            None => Err("the daemon is still starting; nothing was sent".to_string()),
        }
    }
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
/// the target names is the one the message is stored for) with its `session.message.queued`
/// event. The error (sent back to the hook, which fails loudly) names the id or name that did
/// not resolve.
pub async fn enqueue(
    bus: &Bus,
    plugin: &str,
    target: MessageTarget,
    text: &str,
    provenance: &Provenance,
) -> Result<String, String> {
    let (plugin, text, provenance) = (plugin.to_string(), text.to_string(), provenance.clone());
    let stored = write_with_events(bus, move |tx| {
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
            let id = tx.insert_message(&NewMessage {
                session_id,
                target,
                text,
                provenance,
                plugin,
            })?;
            let queued = MessageQueued(message_ref(tx, &tx.message(&id)?, None)?);
            Ok((id, vec![Event::new(&queued)]))
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
