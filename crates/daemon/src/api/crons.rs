//! `/api/crons`: the daemon's crons, their receipts, firing one by hand, pausing and resuming.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_core::crons::CronError;

/// Receipts `GET /api/crons/{name}/runs` returns unless `last` says otherwise.
const DEFAULT_LAST: usize = 20;

/// The most receipts one request returns.
const MAX_LAST: usize = 100_000;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/crons", get(list))
        .route("/crons/{name}", get(show))
        .route("/crons/{name}/runs", get(runs))
        .route("/crons/{name}/run", post(run))
        .route("/crons/{name}/pause", post(pause))
        .route("/crons/{name}/resume", post(resume))
}

impl From<CronError> for ApiError {
    fn from(err: CronError) -> Self {
        match err {
            CronError::Unknown { .. } => ApiError::not_found(err.to_string()),
            CronError::NotServed { .. } => ApiError::conflict(err.to_string()),
            CronError::Store(err) => err.into(),
        }
    }
}

async fn list(State(state): State<AppState>) -> Result<ApiJson<Value>, ApiError> {
    let crons = state.crons.list().await?;
    Ok(ApiJson(json!({ "node": state.bus.node(), "crons": crons })))
}

async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<Value>, ApiError> {
    Ok(ApiJson(json!(state.crons.get(&name).await?)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    /// How many receipts, newest first.
    last: Option<usize>,
}

async fn runs(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let last = query.last.unwrap_or(DEFAULT_LAST);
    if !(1..=MAX_LAST).contains(&last) {
        return Err(ApiError::bad_request(format!(
            "query parameter `last` must be from 1 to {MAX_LAST}, got {last}"
        )));
    }
    let receipts = state.crons.receipts(&name, last).await?;
    Ok(ApiJson(json!({ "cron": name, "runs": receipts })))
}

/// Fires the cron now. 202 with its receipt: `running` when admitted (the action runs on;
/// poll `GET /api/crons/{name}/runs`), `skipped` or `refused` when not.
async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<(StatusCode, ApiJson<Value>), ApiError> {
    let receipt = state.crons.run_now(&name).await?;
    Ok((StatusCode::ACCEPTED, ApiJson(json!(receipt))))
}

async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<Value>, ApiError> {
    Ok(ApiJson(json!(state.crons.set_paused(&name, true).await?)))
}

async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<Value>, ApiError> {
    Ok(ApiJson(json!(state.crons.set_paused(&name, false).await?)))
}
