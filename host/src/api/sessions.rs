//! `/api/sessions`, `/api/messages`, `/api/notifications`: interactive sessions, their inboxes
//! (JSON, or a live server-sent-event stream with `?follow=true`), recall and notifications.

use std::convert::Infallible;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson, ApiQuery, AppState};
use crate::sessions::{self, Message, NewSession, Session};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sessions", get(list).post(create))
        .route("/sessions/import", post(import))
        .route("/sessions/{id}", get(show))
        .route("/sessions/{id}/finish", post(finish))
        .route("/sessions/{id}/resume", post(resume))
        .route("/sessions/{id}/inbox", get(inbox))
        .route("/messages", get(messages))
        .route("/notifications", get(notifications))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    all: bool,
}

async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let sessions = sessions::list(&state.store.conn(), query.all)?;
    Ok(ApiJson(json!({ "sessions": sessions })))
}

async fn create(
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewSession>,
) -> Result<(StatusCode, ApiJson<Session>), ApiError> {
    Ok((
        StatusCode::CREATED,
        ApiJson(sessions::create(&state.store.conn(), new)?),
    ))
}

async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(sessions::get(&state.store.conn(), &id)?))
}

async fn finish(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(
        state
            .store
            .transaction(|tx| Ok(sessions::finish(tx, &id)?))
            .map_err(engine_error)?,
    ))
}

async fn resume(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(
        state
            .store
            .transaction(|tx| Ok(sessions::resume(tx, &id)?))
            .map_err(engine_error)?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportBody {
    conversation_id: String,
}

async fn import(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ImportBody>,
) -> Result<ApiJson<Session>, ApiError> {
    Ok(ApiJson(
        state
            .store
            .transaction(|tx| Ok(sessions::import(tx, &body.conversation_id)?))
            .map_err(engine_error)?,
    ))
}

/// Unwraps an engine error carried through `Store::transaction`'s anyhow.
fn engine_error(err: anyhow::Error) -> ApiError {
    match err.downcast::<crate::engine::EngineError>() {
        Ok(engine) => engine.into(),
        Err(other) => ApiError::internal(&other),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InboxQuery {
    #[serde(default)]
    follow: bool,
}

async fn inbox(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<InboxQuery>,
) -> Result<Response, ApiError> {
    let session = sessions::get(&state.store.conn(), &id)?;
    if !query.follow {
        let messages = sessions::inbox(&state.store.conn(), &session.id)?;
        return Ok(ApiJson(json!({ "session": session, "messages": messages })).into_response());
    }
    // Subscribe before reading what is there, so nothing delivered in between is missed.
    let receiver = state.delivery.subscribe();
    let existing: Vec<Message> = sessions::inbox(&state.store.conn(), &session.id)?
        .into_iter()
        .filter(|m| m.status == "delivered")
        .collect();
    let seen: Vec<String> = existing.iter().map(|m| m.id.clone()).collect();
    Ok(Sse::new(
        follow_stream(session.id, existing, seen, receiver).take_until(state.daemon.stopped()),
    )
    .keep_alive(KeepAlive::default())
    .into_response())
}

fn event_of(message: &Message) -> Result<Event, Infallible> {
    Ok(Event::default()
        .event("message")
        .data(serde_json::to_string(message).unwrap_or_default()))
}

fn follow_stream(
    session_id: String,
    existing: Vec<Message>,
    seen: Vec<String>,
    receiver: tokio::sync::broadcast::Receiver<Message>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let backlog = stream::iter(existing.iter().map(event_of).collect::<Vec<_>>());
    let live = stream::unfold(
        (receiver, session_id, seen),
        |(mut receiver, session_id, seen)| async move {
            loop {
                match receiver.recv().await {
                    Ok(message)
                        if message.session_id.as_deref() == Some(session_id.as_str())
                            && !seen.contains(&message.id) =>
                    {
                        let event = event_of(&message);
                        return Some((event, (receiver, session_id, seen)));
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    backlog.chain(live)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessagesQuery {
    #[serde(default)]
    status: Option<String>,
}

async fn messages(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    if let Some(status) = &query.status
        && !matches!(status.as_str(), "pending" | "delivered" | "undeliverable")
    {
        return Err(ApiError::bad_request(format!(
            "field `status`: `{status}` is not one of pending, delivered, undeliverable"
        )));
    }
    let found = sessions::messages(&state.store.conn(), query.status.as_deref())?;
    Ok(ApiJson(json!({ "messages": found })))
}

async fn notifications(State(state): State<AppState>) -> Result<ApiJson<Value>, ApiError> {
    Ok(ApiJson(
        json!({ "notifications": sessions::notifications(&state.store.conn())? }),
    ))
}
