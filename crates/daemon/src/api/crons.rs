//! `/api/crons`: the daemon's crons, their receipts, firing one by hand, pausing and resuming.

use super::docs::{Accepted, get, post};
use aide::axum::ApiRouter;
use axum::extract::{Path, State};
use canopy_model::requests::crons::CronRunsQuery;

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_core::crons::CronError;
use canopy_model::records::answers::{CronList, CronRuns};
use canopy_model::records::crons::{CronView, Receipt};

/// Receipts `GET /api/crons/{name}/runs` returns unless `last` says otherwise.
const DEFAULT_LAST: usize = 20;

/// The most receipts one request returns.
const MAX_LAST: usize = 100_000;

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/crons", get(list))
        .api_route("/crons/{name}", get(show))
        .api_route("/crons/{name}/runs", get(runs))
        .api_route("/crons/{name}/run", post(run))
        .api_route("/crons/{name}/pause", post(pause))
        .api_route("/crons/{name}/resume", post(resume))
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

async fn list(State(state): State<AppState>) -> Result<ApiJson<CronList>, ApiError> {
    let crons = state.crons.list().await?;
    Ok(ApiJson(CronList {
        node: state.bus.node(),
        crons,
    }))
}

async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<CronView>, ApiError> {
    Ok(ApiJson(state.crons.get(&name).await?))
}

async fn runs(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<CronRunsQuery>,
) -> Result<ApiJson<CronRuns>, ApiError> {
    let last = query.last.unwrap_or(DEFAULT_LAST);
    if !(1..=MAX_LAST).contains(&last) {
        return Err(ApiError::bad_request(format!(
            "query parameter `last` must be from 1 to {MAX_LAST}, got {last}"
        )));
    }
    let receipts = state.crons.receipts(&name, last).await?;
    Ok(ApiJson(CronRuns {
        cron: name,
        runs: receipts,
    }))
}

/// Fires the cron now. 202 with its receipt: `running` when admitted (the action runs on;
/// poll `GET /api/crons/{name}/runs`), `skipped` or `refused` when not.
async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Accepted<Receipt>, ApiError> {
    Ok(Accepted(state.crons.run_now(&name).await?))
}

async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<CronView>, ApiError> {
    Ok(ApiJson(state.crons.set_paused(&name, true).await?))
}

async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<CronView>, ApiError> {
    Ok(ApiJson(state.crons.set_paused(&name, false).await?))
}
