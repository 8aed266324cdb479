//! `POST /api/runtime/{event}`: the callbacks of the runtime hooks materialised for an agent
//! Canopy launched (see `canopy_executors::plugins::launch`). A callback is let in by its
//! launch's secret, `Authorization: Bearer canopy-launch-…`, not by the daemon's token: the
//! agent never holds that. The answer is in the runtime's protocol (Claude Code's hook output).

use super::docs::post;
use aide::axum::ApiRouter;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use canopy_model::records::answers::RuntimeAnswer;

use super::{ApiJson, AppState};
use crate::api::error::ApiError;
use canopy_core::runtime_hooks::{CallbackError, answer_claude};

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new().api_route("/runtime/{event}", post(callback))
}

/// The largest callback body: a tool's input and response can be large (a file it read), so
/// more than the API's JSON limit, as much as the relay forwards. It is read only once the
/// launch's secret let the callback in.
const MAX_CALLBACK: usize = 16 * 1024 * 1024;

async fn callback(
    State(state): State<AppState>,
    Path(event): Path<String>,
    request: axum::extract::Request,
) -> Result<ApiJson<RuntimeAnswer>, ApiError> {
    let headers: &HeaderMap = request.headers();
    let secret = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    let Some(launch) = state.plugins.launches().find(secret.trim()) else {
        tracing::warn!(%event, "a runtime hook callback without a live launch's secret is refused");
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a runtime hook callback carries its launch's secret (CANOPY_RUNTIME_TOKEN), live while the launch runs",
        ));
    };
    let body = axum::body::to_bytes(request.into_body(), MAX_CALLBACK)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!(
                    "the {event} callback's body is larger than {} MiB",
                    MAX_CALLBACK / (1024 * 1024)
                ),
            )
        })?;
    let body: Value = serde_json::from_slice(&body).map_err(|err| {
        ApiError::bad_request(format!("the {event} callback's body is not JSON: {err}"))
    })?;
    match answer_claude(&state.bus, launch, &event, &body).await {
        Ok(Value::Object(answer)) => Ok(ApiJson(RuntimeAnswer(answer))),
        Ok(other) => Err(ApiError::internal(&anyhow::anyhow!(
            "the {event} callback's answer is not a JSON object: {other}"
        ))),
        Err(err @ (CallbackError::UnknownEvent(_) | CallbackError::Missing { .. })) => {
            Err(ApiError::bad_request(err.to_string()))
        }
        Err(CallbackError::Store(err)) => Err(ApiError::internal(&anyhow::Error::from(err))),
    }
}
