//! Delivering pending messages: run by the daemon's scheduler on every tick.
//!
//! A message goes to its session's inbox (where `canopy session inbox --follow` sees it) or, for
//! a session created with a tmux target, is typed into that pane with `tmux send-keys`. A message
//! whose session is not live any more is kept (status `undeliverable`, listed by
//! `canopy session recall`) and a notification says the session was not found.
//!
//! **Typed at most once.** Before a message is typed into a pane it is marked `delivering`, and
//! the tick waits for that write to commit; only then does tmux run. It ends `delivered` or
//! `undeliverable` (with the error). A message still `delivering` when the daemon starts was cut
//! off mid-delivery: it may or may not have reached the pane, so it is never typed again; it is
//! marked `undeliverable` saying so, and a notification names it. Claiming a message is a
//! conditional write (`pending` to `delivering`), so two deliverers can never both type it.
//!
//! **Per session.** Each session with pending messages gets its own task, which delivers that
//! session's messages in order; at most [`MAX_SESSIONS_IN_FLIGHT`] run at once, and a session
//! whose task is still running is skipped by later ticks. Every tmux call is killed after
//! [`TMUX_TIMEOUT`], so a dead or hung pane holds up its own session only.
//!
//! **Events.** A message becoming `delivered` or `undeliverable` records its
//! `session.message.delivered` or `session.message.undeliverable` event in that same write.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Semaphore, broadcast};

use super::{Message, MessageStatus, NotificationKind, Session, SessionStatus, message_ref};
use crate::bus::Bus;
use crate::hooks::decide::{Question, Verdict};
use canopy_model::events::session::{MessageDelivered, MessagePreDeliver, MessageUndeliverable};
use canopy_model::events::{Cause, Event};
use canopy_store::{Store, StoreError};

/// How often the scheduler delivers.
pub const TICK: Duration = Duration::from_millis(200);

/// How long one `tmux send-keys` may take before it is killed.
pub const TMUX_TIMEOUT: Duration = Duration::from_secs(5);

/// Sessions being delivered to at once.
pub const MAX_SESSIONS_IN_FLIGHT: usize = 16;

/// Messages one session's task delivers before it gives its slot back (the next tick goes on).
const MESSAGES_PER_TURN: usize = 500;

/// Sessions with pending messages a tick looks at.
const SESSIONS_PER_TICK: usize = 1000;

/// Messages kept for a follower of one session's inbox that has not read them yet. A follower
/// further behind than this loses the oldest and is told how many (see [`Delivery::follow`]).
pub const FOLLOW_BUFFER: usize = 128;

/// Why a message interrupted mid-delivery is not typed again.
const INTERRUPTED: &str = "the daemon stopped while it was typing this message into the session's tmux pane; it may or may not have reached the pane, so it is not typed again";

/// The delivery side of sessions. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Delivery {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    /// Records the messages' events.
    bus: Bus,
    /// One channel per session someone follows; dropped once nobody does.
    followers: Mutex<HashMap<String, broadcast::Sender<Message>>>,
    /// Sessions whose delivery task is running (`None`: messages stored without a session).
    busy: Mutex<HashSet<Option<String>>>,
    /// Slots for delivery tasks.
    slots: Arc<Semaphore>,
    /// Whether the messages a previous daemon left `delivering` have been marked.
    recovered: AtomicBool,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Frees a session for the next tick when its task ends, however it ends.
struct Busy {
    delivery: Delivery,
    session_id: Option<String>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        locked(&self.delivery.inner.busy).remove(&self.session_id);
    }
}

impl Delivery {
    /// Delivery on the bus's store, recording its events on the bus.
    pub fn new(bus: Bus) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: bus.store().clone(),
                bus,
                followers: Mutex::new(HashMap::new()),
                busy: Mutex::new(HashSet::new()),
                slots: Arc::new(Semaphore::new(MAX_SESSIONS_IN_FLIGHT)),
                recovered: AtomicBool::new(false),
            }),
        }
    }

    /// Messages delivered to one session from now on, for a follower of its inbox. The channel
    /// keeps [`FOLLOW_BUFFER`] messages; a receiver further behind gets
    /// `RecvError::Lagged(missed)` and then the oldest message still kept.
    pub fn follow(&self, session_id: &str) -> broadcast::Receiver<Message> {
        let mut followers = locked(&self.inner.followers);
        followers.retain(|_, sender| sender.receiver_count() > 0);
        followers
            .entry(session_id.to_string())
            .or_insert_with(|| broadcast::channel(FOLLOW_BUFFER).0)
            .subscribe()
    }

    /// Tells the followers of a message's session about it.
    fn publish(&self, message: Message) {
        let Some(session_id) = message.session_id.clone() else {
            return;
        };
        let mut followers = locked(&self.inner.followers);
        if let Some(sender) = followers.get(&session_id)
            && sender.send(message).is_err()
        {
            // Nobody follows any more.
            followers.remove(&session_id);
        }
    }

    /// Starts delivery for every session with pending messages that is not being delivered to
    /// already, as far as slots allow; returns how many sessions it started. The first tick
    /// first marks the messages a previous daemon left `delivering`.
    pub async fn tick(&self) -> usize {
        if !self.inner.recovered.load(Ordering::Acquire) {
            match self.recover().await {
                Ok(()) => self.inner.recovered.store(true, Ordering::Release),
                Err(err) => {
                    tracing::error!(err = %format!("{err:#}"), "cannot mark messages interrupted mid-delivery; delivering nothing until that works");
                    return 0;
                }
            }
        }
        let sessions = match self
            .inner
            .store
            .read(|rd| rd.sessions_with_pending_messages(SESSIONS_PER_TICK))
            .await
        {
            Ok(sessions) => sessions,
            Err(err) => {
                tracing::error!(err = %format!("{err:#}"), "cannot read pending messages");
                return 0;
            }
        };
        let mut started = 0;
        for session_id in sessions {
            if !locked(&self.inner.busy).insert(session_id.clone()) {
                continue;
            }
            let busy = Busy {
                delivery: self.clone(),
                session_id: session_id.clone(),
            };
            let Ok(slot) = self.inner.slots.clone().try_acquire_owned() else {
                // Every slot is taken; the rest wait for the next tick.
                break;
            };
            started += 1;
            let delivery = self.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let _busy = busy;
                delivery.deliver_session(session_id).await;
            });
        }
        started
    }

    /// Marks every message a previous daemon left `delivering` as undeliverable, with a
    /// notification each.
    async fn recover(&self) -> Result<(), StoreError> {
        let interrupted = super::write_with_events(&self.inner.bus, |tx| {
                let interrupted = tx.interrupt_deliveries(INTERRUPTED)?;
                let mut events = Vec::with_capacity(interrupted.len());
                for message in &interrupted {
                    events.push(Event::new(&MessageUndeliverable(message_ref(
                        tx,
                        message,
                        Some(INTERRUPTED),
                    )?)));
                    tx.add_notification(
                        NotificationKind::DeliveryInterrupted,
                        &format!(
                            "message {} to session {} was interrupted mid-delivery: {INTERRUPTED}; check the pane, and find the prompt with `canopy session recall`",
                            message.id,
                            message.session_id.as_deref().unwrap_or("(none)")
                        ),
                        Some(&message.id),
                    )?;
                }
                Ok::<_, StoreError>((interrupted.len(), events))
            })
            .await?;
        if interrupted > 0 {
            tracing::warn!(
                messages = interrupted,
                "messages the daemon was typing into tmux panes when it last stopped are marked undeliverable, not typed again"
            );
        }
        Ok(())
    }

    /// Delivers one session's pending messages in order, up to [`MESSAGES_PER_TURN`].
    async fn deliver_session(&self, session_id: Option<String>) {
        for _ in 0..MESSAGES_PER_TURN {
            let wanted = session_id.clone();
            let next = self
                .inner
                .store
                .read(move |rd| rd.next_pending_message(wanted.as_deref()))
                .await;
            let message = match next {
                Ok(Some(message)) => message,
                Ok(None) => return,
                Err(err) => {
                    tracing::error!(err = %format!("{err:#}"), "cannot read pending messages");
                    return;
                }
            };
            let id = message.id.clone();
            if let Err(err) = self.deliver(message).await {
                // The message keeps its status; the next tick tries again.
                tracing::error!(message = %id, err = %format!("{err:#}"), "cannot record a message's delivery");
                return;
            }
        }
    }

    async fn deliver(&self, message: Message) -> Result<(), StoreError> {
        let session = match message.session_id.clone() {
            Some(id) => {
                self.inner
                    .store
                    .read(move |rd| rd.find_session(&id))
                    .await?
            }
            None => None,
        };
        let Some(session) = session else {
            let why = format!(
                "session {} was not found",
                message.session_id.as_deref().unwrap_or("(none)")
            );
            return self
                .give_up(
                    &message.id,
                    MessageStatus::Pending,
                    NotificationKind::SessionNotFound,
                    why,
                )
                .await;
        };
        match session.status {
            SessionStatus::Finished | SessionStatus::Unknown => {
                let why = format!(
                    "session {} ({}) was not found live: it is {}",
                    session.id, session.name, session.status
                );
                self.give_up(
                    &message.id,
                    MessageStatus::Pending,
                    NotificationKind::SessionNotFound,
                    why,
                )
                .await
            }
            SessionStatus::Live => {
                // The sync hooks on `session.message.pre_deliver` decide, and may patch it.
                let message = match self.ask_pre_deliver(message, &session).await? {
                    Ok(message) => message,
                    Err((id, why)) => {
                        return self
                            .give_up(
                                &id,
                                MessageStatus::Pending,
                                NotificationKind::DeliveryFailed,
                                why,
                            )
                            .await;
                    }
                };
                self.deliver_live(message, &session).await
            }
        }
    }

    /// Asks the sync hooks on `session.message.pre_deliver` whether a message is delivered
    /// ([`crate::hooks::decide`]): the message as they patched it, or its id and why not.
    async fn ask_pre_deliver(
        &self,
        message: Message,
        session: &Session,
    ) -> Result<Result<Message, (String, String)>, StoreError> {
        const PRE_DELIVER: &str = "session.message.pre_deliver";
        if !self.inner.bus.asks(PRE_DELIVER) {
            return Ok(Ok(message));
        }
        let question = MessagePreDeliver {
            session_id: session.id.clone(),
            session_name: session.name.clone(),
            message_id: message.id.clone(),
            origin: message.origin.clone(),
            text: message.text.clone(),
        };
        let decision = self
            .inner
            .bus
            .decide(Question::of(&question, Cause::current()))
            .await?;
        if let Verdict::Deny { hook, reason } = decision.verdict {
            let why = format!("sync hook `{hook}` denied the delivery: {reason}");
            return Ok(Err((message.id, why)));
        }
        let Some(text) = decision.patched_text("text").map(str::to_string) else {
            return Ok(Ok(message));
        };
        let id = message.id.clone();
        let patched = text.clone();
        let pending = self
            .inner
            .store
            .write(move |tx| tx.set_pending_message_text(&id, &patched))
            .await?;
        if !pending {
            return Ok(Err((
                message.id,
                "it was no longer pending once its sync hooks had answered".to_string(),
            )));
        }
        Ok(Ok(Message { text, ..message }))
    }

    /// Delivers a message to a live session: its inbox, or its tmux pane.
    async fn deliver_live(&self, message: Message, session: &Session) -> Result<(), StoreError> {
        match session.tmux_target.clone() {
            None => {
                let delivered = self
                    .transition(
                        &message.id,
                        MessageStatus::Pending,
                        MessageStatus::Delivered,
                    )
                    .await?;
                if let Some(delivered) = delivered {
                    self.publish(delivered);
                }
                Ok(())
            }
            Some(target) => self.type_into_pane(&message, session, &target).await,
        }
    }

    /// Claims the message (`delivering`, committed), types it, then records the outcome.
    async fn type_into_pane(
        &self,
        message: &Message,
        session: &Session,
        target: &str,
    ) -> Result<(), StoreError> {
        let claimed = self
            .transition(
                &message.id,
                MessageStatus::Pending,
                MessageStatus::Delivering,
            )
            .await?;
        if claimed.is_none() {
            // Someone else moved it first; it is theirs.
            return Ok(());
        }
        match send_keys(session, target, &message.text).await {
            Ok(()) => {
                let delivered = self
                    .transition(
                        &message.id,
                        MessageStatus::Delivering,
                        MessageStatus::Delivered,
                    )
                    .await?;
                if let Some(delivered) = delivered {
                    self.publish(delivered);
                }
                Ok(())
            }
            Err(why) => {
                self.give_up(
                    &message.id,
                    MessageStatus::Delivering,
                    NotificationKind::DeliveryFailed,
                    why,
                )
                .await
            }
        }
    }

    /// Moves a message from `from` to `to`; the message as it is now, if it was in `from`.
    /// A message that becomes `delivered` records its event in the same write.
    async fn transition(
        &self,
        id: &str,
        from: MessageStatus,
        to: MessageStatus,
    ) -> Result<Option<Message>, StoreError> {
        let id = id.to_string();
        super::write_with_events(&self.inner.bus, move |tx| {
            let moved = tx.move_message(&id, from, to, None)?;
            let events = match (&moved, to) {
                (Some(message), MessageStatus::Delivered) => vec![Event::new(&MessageDelivered(
                    message_ref(tx, message, None)?,
                ))],
                _ => Vec::new(),
            };
            Ok((moved, events))
        })
        .await
    }

    /// Keeps a message for recall (`undeliverable`, with `why`) and raises a notification.
    async fn give_up(
        &self,
        id: &str,
        from: MessageStatus,
        kind: NotificationKind,
        why: String,
    ) -> Result<(), StoreError> {
        tracing::warn!(message = %id, %why, "message kept for recall");
        let id = id.to_string();
        super::write_with_events(&self.inner.bus, move |tx| {
            let kept = tx.move_message(&id, from, MessageStatus::Undeliverable, Some(&why))?;
            let Some(kept) = kept else {
                return Ok(((), Vec::new()));
            };
            tx.add_notification(
                kind,
                &format!(
                    "message {id} was not delivered: {why}; its prompt is kept (`canopy session recall`)"
                ),
                Some(&id),
            )?;
            let event = MessageUndeliverable(message_ref(tx, &kept, Some(&why))?);
            Ok(((), vec![Event::new(&event)]))
        })
        .await
    }
}

/// Types `text` into the session's tmux pane, then Enter. Each tmux call is killed after
/// [`TMUX_TIMEOUT`].
async fn send_keys(session: &Session, target: &str, text: &str) -> Result<(), String> {
    let run = |keys: Vec<String>, what: &'static str| {
        let mut command = tokio::process::Command::new("tmux");
        if let Some(socket) = &session.tmux_socket {
            command.arg("-S").arg(socket);
        }
        command
            .arg("send-keys")
            .arg("-t")
            .arg(target)
            .args(keys)
            .stdin(std::process::Stdio::null())
            // Dropped on timeout: the process is killed.
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
                Err(_) => Err(format!(
                    "tmux send-keys to pane `{target}` did not finish within {}s and was killed while {what}",
                    TMUX_TIMEOUT.as_secs()
                )),
            }
        }
    };
    run(
        vec!["-l".to_string(), "--".to_string(), text.to_string()],
        "typing the text (it may or may not have reached the pane)",
    )
    .await?;
    run(
        vec!["Enter".to_string()],
        "pressing Enter (the text was typed but may not have been submitted)",
    )
    .await
}
