//! `/api/status` and `/api/shutdown`: the daemon itself.

use std::path::PathBuf;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde_json::{Value, json};

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
    pub started_at: String,
    pub started: Instant,
    /// The daemon's log file (`daemon.log` in the data dir).
    pub log_file: PathBuf,
    /// Notified by `POST /api/shutdown`: the daemon stops as on SIGTERM.
    pub shutdown: tokio::sync::Notify,
    /// Turns true once the daemon is stopping, so long-lived streams (`inbox --follow`) end
    /// and the graceful stop does not wait on them forever.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

impl DaemonInfo {
    /// This process, serving on `url`, logging to `log_file`, started now.
    pub fn new(url: String, log_file: PathBuf) -> Self {
        Self {
            pid: std::process::id(),
            url,
            started_at: crate::store::now(),
            started: Instant::now(),
            log_file,
            shutdown: tokio::sync::Notify::new(),
            stopping: tokio::sync::watch::channel(false).0,
        }
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

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/status", get(status))
        .route("/shutdown", post(shutdown))
}

async fn status(State(state): State<AppState>) -> Result<ApiJson<Value>, ApiError> {
    let info = &state.daemon;
    let active_runs = state.store.read(|rd| rd.active_runs_summary()).await?;
    let plugins = state.plugins.list();
    let enabled = plugins.iter().filter(|p| p.record.enabled).count();
    let problems = crate::logfile::recent_problems(&info.log_file, RECENT_PROBLEMS);
    Ok(ApiJson(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "url": info.url,
        "pid": info.pid,
        "data_dir": state.data_dir,
        "log_file": info.log_file,
        "started_at": info.started_at,
        "uptime_seconds": info.started.elapsed().as_secs(),
        "active_runs": active_runs,
        "plugins": { "installed": plugins.len(), "enabled": enabled },
        "recent_problems": problems,
    })))
}

/// Starts a graceful shutdown, the same as SIGTERM: the answer goes out first, then the daemon
/// stops serving, records in-flight runs as interrupted and exits.
async fn shutdown(State(state): State<AppState>) -> (StatusCode, ApiJson<Value>) {
    tracing::info!("shutdown requested over the API");
    state.daemon.shutdown.notify_one();
    (
        StatusCode::ACCEPTED,
        ApiJson(json!({ "stopping": true, "pid": state.daemon.pid })),
    )
}
