//! `/api/status`, `/api/shutdown`, `/api/rotate-token` and `/api/nodes`: the daemon itself,
//! and the daemons sharing its database.

use canopy_model::records::daemon::{
    DaemonStatus, NodeInfo, NodeLease, NodeState, Nodes, PluginCounts, Rotated, Stopping,
};
use canopy_model::requests::daemon::ShutdownRequest;
use std::path::PathBuf;
use std::time::Instant;

use super::docs::{Accepted, get, post};
use super::error::OptionalJson;
use aide::axum::ApiRouter;
use axum::extract::State;
use axum::http::StatusCode;

use canopy_model::time::Timestamp;

use super::{ApiError, ApiJson, AppState};

/// Warnings and errors from the log `GET /api/status` returns.
const RECENT_PROBLEMS: usize = 5;

/// What the daemon knows about itself, for `canopy status` and `canopy daemon stop`.
#[derive(Debug)]
pub struct DaemonInfo {
    pub pid: u32,
    /// The base URL it serves on.
    pub url: String,
    /// RFC 3339.
    pub started_at: Timestamp,
    pub started: Instant,
    /// The daemon's log file (`daemon.log` in the data dir).
    pub log_file: PathBuf,
    /// Notified by `POST /api/shutdown`: the daemon stops as on SIGTERM.
    pub shutdown: tokio::sync::Notify,
    /// Turns true once the daemon is stopping, so long-lived streams (`inbox --follow`) end
    /// and the graceful stop does not wait on them forever.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// The drain budget `POST /api/shutdown` asked for (`timeout_secs`).
    budget: std::sync::Mutex<Option<std::time::Duration>>,
}

impl DaemonInfo {
    /// This process, serving on `url`, logging to `log_file`, started now.
    pub fn new(url: String, log_file: PathBuf) -> Self {
        Self {
            pid: std::process::id(),
            url,
            started_at: Timestamp::now(),
            started: Instant::now(),
            log_file,
            shutdown: tokio::sync::Notify::new(),
            stopping: tokio::sync::watch::channel(false).0,
            budget: std::sync::Mutex::new(None),
        }
    }

    /// How long a planned stop lets admitted work run on: what the stop asked for, else
    /// [`canopy_core::drain::DEFAULT_BUDGET`].
    pub fn drain_budget(&self) -> std::time::Duration {
        self.budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .unwrap_or(canopy_core::drain::DEFAULT_BUDGET)
    }

    /// Resolves once the daemon is stopping.
    pub fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut stopping = self.stopping.subscribe();
        async move {
            // An error means the daemon's info is gone: it is stopping all the same.
            let _ = stopping.wait_for(|stopping| *stopping).await;
        }
    }
}

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/status", get(status))
        .api_route("/shutdown", post(shutdown))
        .api_route("/rotate-token", post(rotate_token))
        .api_route("/nodes", get(nodes))
}

/// `GET /api/nodes`: the daemons sharing the database (one on SQLite), whether each is alive,
/// and the runs each drives.
async fn nodes(State(state): State<AppState>) -> Result<ApiJson<Nodes>, ApiError> {
    let (records, leases) = state
        .store
        .read(|rd| Ok::<_, canopy_store::StoreError>((rd.nodes()?, rd.held_leases()?)))
        .await?;
    let now = Timestamp::now();
    let nodes = records
        .into_iter()
        .map(|node| {
            let age = now.duration_since(node.heartbeat_at);
            let state = if node.stopped_at.is_some() {
                NodeState::Stopped
            } else if node.lost(now) {
                NodeState::Lost
            } else {
                NodeState::Alive
            };
            let held = leases
                .iter()
                .filter(|lease| lease.node == node.name)
                .map(|lease| NodeLease {
                    graph_id: lease.graph_id.clone(),
                    graph: lease.graph_name.clone(),
                    run_id: lease.run_id.clone(),
                    until: Timestamp::from_unix_millis(lease.until_ms).unwrap_or(now),
                })
                .collect();
            NodeInfo {
                name: node.name,
                roles: node.roles,
                state,
                pid: node.pid,
                version: node.version,
                api_url: node.api_url,
                lease_secs: node.lease.as_secs(),
                started_at: node.started_at,
                heartbeat_at: node.heartbeat_at,
                heartbeat_age_secs: age.as_secs(),
                stopped_at: node.stopped_at,
                leases: held,
            }
        })
        .collect();
    Ok(ApiJson(Nodes {
        this: state.store.node().to_string(),
        nodes,
    }))
}

/// `POST /api/rotate-token`: a new API token, in force at once (the old one is refused from
/// the next request) and written to `daemon.token`, where the CLI reads it. The answer names the
/// file, never the token. Only the user may: a call's process (a hook's, a cron's) may not lock
/// its user out.
async fn rotate_token(
    State(state): State<AppState>,
    by_call: Option<axum::Extension<super::guard::ByCall>>,
) -> Result<ApiJson<Rotated>, ApiError> {
    if by_call.is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a process the daemon runs (with its call token) may not rotate the daemon's token; only its user may, with `canopy daemon rotate-token`",
        ));
    }
    let token = state.token.clone();
    tokio::task::spawn_blocking(move || token.rotate())
        .await
        .map_err(|err| ApiError::internal(&anyhow::anyhow!("the rotation did not finish: {err}")))?
        .map_err(|err| ApiError::internal(&err))?;
    tracing::info!(file = %state.token.file().display(), "the API token was rotated");
    Ok(ApiJson(Rotated {
        rotated: true,
        token_file: state.token.file().display().to_string(),
    }))
}

async fn status(State(state): State<AppState>) -> Result<ApiJson<DaemonStatus>, ApiError> {
    let info = &state.daemon;
    let active_runs = state.store.read(|rd| rd.active_runs_summary()).await?;
    let mut storage = state.store.read(|rd| rd.sizes()).await?;
    storage.postgres = state.store.postgres();
    let plugins = state.plugins.list();
    let enabled = plugins.iter().filter(|p| p.record.enabled).count();
    let problems = crate::logfile::recent_problems(&info.log_file, RECENT_PROBLEMS);
    Ok(ApiJson(DaemonStatus {
        version: env!("CARGO_PKG_VERSION").to_string(),
        url: info.url.clone(),
        pid: info.pid,
        data_dir: state.data_dir.display().to_string(),
        log_file: info.log_file.display().to_string(),
        started_at: info.started_at,
        uptime_seconds: info.started.elapsed().as_secs(),
        active_runs,
        plugins: PluginCounts {
            installed: plugins.len(),
            enabled,
        },
        recent_problems: problems,
        storage,
    }))
}

/// Starts a planned stop, the same as SIGTERM: the answer goes out first; then admission
/// closes, admitted work drains within the budget (`timeout_secs`, default 30), the rest is
/// forced and recorded, and the daemon exits.
async fn shutdown(
    State(state): State<AppState>,
    OptionalJson(request): OptionalJson<ShutdownRequest>,
) -> Result<Accepted<Stopping>, ApiError> {
    let request = request.unwrap_or_default();
    let max = canopy_core::drain::MAX_BUDGET.as_secs();
    if let Some(secs) = request.timeout_secs {
        if secs > max {
            return Err(ApiError::bad_request(format!(
                "field `timeout_secs` must be from 0 to {max}, got {secs}"
            )));
        }
        *state
            .daemon
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(std::time::Duration::from_secs(secs));
    }
    let budget = state.daemon.drain_budget();
    tracing::info!(
        budget_secs = budget.as_secs(),
        "shutdown requested over the API"
    );
    state.daemon.shutdown.notify_one();
    Ok(Accepted(Stopping {
        stopping: true,
        pid: state.daemon.pid,
        drain_budget_secs: budget.as_secs(),
        running: state.drain.running(),
    }))
}
