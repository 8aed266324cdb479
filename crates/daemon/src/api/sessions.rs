//! `/api/sessions`, `/api/messages`, `/api/notifications`: interactive sessions, their inboxes
//! (JSON, or a live server-sent-event stream with `?follow=true`: `message` events, and a
//! `lagged` event `{"missed": N}` when the reader fell behind), recall and notifications.

use canopy_model::records::messages::Queued;
use canopy_model::records::views::Lagged;
use canopy_model::requests::sessions::{
    ImportBody, InboxQuery, MessagesQuery, SendBody, SessionListQuery,
};
use std::collections::HashSet;
use std::convert::Infallible;

use super::docs::{Created, JsonOrEvents, OneOf, get, post};
use aide::axum::ApiRouter;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use canopy_model::records::answers::{Inbox, MessageList, NotificationList, SessionList};
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::broadcast;

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_core::sessions::{self, Message, MessageStatus, NewSession, Session};

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/sessions", get(list))
        .api_route("/sessions", post(create))
        .api_route("/sessions/import", post(import))
        .api_route("/sessions/{id}", get(show))
        .api_route("/sessions/{id}/finish", post(finish))
        .api_route("/sessions/{id}/resume", post(resume))
        .api_route("/sessions/{id}/inbox", get(inbox))
        .api_route("/sessions/{id}/messages", post(send))
        .api_route("/messages", get(messages))
        .api_route("/notifications", get(notifications))
}

async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SessionListQuery>,
) -> Result<ApiJson<SessionList>, ApiError> {
    let sessions = sessions::list(&state.store, query.all).await?;
    Ok(ApiJson(SessionList { sessions }))
}

async fn create(
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewSession>,
) -> Result<Created<Session>, ApiError> {
    Ok(Created(sessions::create(&state.bus, new).await?))
}

async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(sessions::get(&state.store, &id).await?))
}

async fn finish(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(sessions::finish(&state.bus, &id).await?))
}

async fn resume(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(sessions::resume(&state.bus, &id).await?))
}

async fn import(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ImportBody>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(
        sessions::import(&state.bus, &body.conversation_id).await?,
    ))
}

/// Queues a message for a live session, as an interactive hook does: stored pending, delivered
/// on the scheduler's next tick, recorded as `session.message.queued` by the request's actor.
async fn send(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SendBody>,
) -> Result<Created<Queued>, ApiError> {
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "field `text` is empty; give the message to send",
        ));
    }
    let session = sessions::get(&state.store, &id).await?;
    if session.status != sessions::SessionStatus::Live {
        return Err(ApiError::conflict(format!(
            "session `{}` ({}) is finished; resume it (`canopy session resume {}`) before sending to it",
            session.name, session.id, session.name
        )));
    }
    let message_id = sessions::enqueue(
        &state.bus,
        "api",
        canopy_model::work::MessageTarget::Id(session.id.clone()),
        &body.text,
        // Not a graph's hook: the provenance says it came through the API.
        &canopy_model::work::Provenance {
            event: "api".to_string(),
            ..Default::default()
        },
    )
    .await
    .map_err(ApiError::conflict)?;
    Ok(Created(Queued {
        message_id,
        session,
    }))
}

async fn inbox(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<InboxQuery>,
) -> Result<JsonOrEvents<Inbox, OneOf<Message, Lagged>>, ApiError> {
    let session = sessions::get(&state.store, &id).await?;
    if !query.follow {
        let messages = sessions::inbox(&state.store, &session.id).await?;
        return Ok(JsonOrEvents::new(ApiJson(Inbox { session, messages })));
    }
    // Subscribe before reading what is there, so nothing delivered in between is missed.
    let receiver = state.delivery.follow(&session.id);
    let existing: Vec<Message> = sessions::inbox(&state.store, &session.id)
        .await?
        .into_iter()
        .filter(|m| m.status == MessageStatus::Delivered)
        .collect();
    let seen: HashSet<String> = existing.iter().map(|m| m.id.clone()).collect();
    Ok(JsonOrEvents::new(
        Sse::new(follow_stream(existing, seen, receiver).take_until(state.daemon.stopped()))
            .keep_alive(KeepAlive::default()),
    ))
}

fn event_of(message: &Message) -> Result<Event, Infallible> {
    Ok(Event::default()
        .event("message")
        .data(serde_json::to_string(message).unwrap_or_default()))
}

/// The `lagged` event: the follower read too slowly and `missed` messages delivered meanwhile
/// are not in its stream (they are in the inbox).
fn lagged_event(missed: u64) -> Result<Event, Infallible> {
    Ok(Event::default()
        .event(Lagged::EVENT)
        .data(serde_json::to_string(&Lagged { missed }).unwrap_or_default()))
}

/// The inbox's delivered messages, then each message as it is delivered. A follower that falls
/// more than [`sessions::FOLLOW_BUFFER`] messages behind gets a `lagged` event saying how many
/// it missed, then the stream goes on with the oldest message still kept.
fn follow_stream(
    existing: Vec<Message>,
    seen: HashSet<String>,
    receiver: broadcast::Receiver<Message>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let backlog = stream::iter(existing.iter().map(event_of).collect::<Vec<_>>());
    let live = stream::unfold((receiver, seen), |(mut receiver, mut seen)| async move {
        loop {
            match receiver.recv().await {
                // Delivered while the backlog was read: it is in the backlog already.
                Ok(message) if seen.remove(&message.id) => continue,
                Ok(message) => return Some((event_of(&message), (receiver, seen))),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    return Some((lagged_event(missed), (receiver, seen)));
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    backlog.chain(live)
}

async fn messages(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<ApiJson<MessageList>, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(str::parse::<MessageStatus>)
        .transpose()
        .map_err(|err| ApiError::bad_request(format!("field `status`: {err}")))?;
    let found = sessions::messages(&state.store, status).await?;
    Ok(ApiJson(MessageList { messages: found }))
}

async fn notifications(
    State(state): State<AppState>,
) -> Result<ApiJson<NotificationList>, ApiError> {
    Ok(ApiJson(NotificationList {
        notifications: sessions::notifications(&state.store).await?,
    }))
}
