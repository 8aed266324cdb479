//! The HTTP API: JSON resources on loopback. The CLI is a client of exactly these routes.
//!
//! Errors are `{"error": {"code": "...", "message": "..."}}` with a status that fits: 400 bad
//! input (the message names the field), 404 unknown resource, 409 conflict, 422 a plugin call
//! that failed, 500 something on our side (details in the daemon log, not in the response). An
//! unknown route is 404 and a method a route does not take 405, with the same body.
//!
//! Every request passes [`guard`] first: the right `Host`, no foreign `Origin`, the daemon's token
//! as `Authorization: Bearer`, and a JSON body (401, 403 or 415 otherwise).

mod config;
mod crons;
mod daemon;
mod docs;
mod engine;
mod error;
mod feed;
mod guard;
mod hooks;
mod plugins;
mod profiles;
mod runtime;
mod sessions;
mod webhooks;

use std::sync::Arc;

use aide::axum::ApiRouter;
use axum::Router;
use axum::http::{Method, Uri};

pub use daemon::DaemonInfo;
pub use error::{ApiError, ApiJson, ApiQuery};
pub use guard::{Access, ApiToken};

use canopy_core::bus::Bus;
use canopy_core::engine::Engine;
use canopy_core::sessions::Delivery;
use canopy_executors::plugins::PluginHost;
use canopy_store::Store;

/// The header a client made with the daemon's token sends to say it is an agent
/// (`X-Canopy-Actor: agent`, as `canopy mcp` does). Automations are known by their call token.
pub const ACTOR_HEADER: &str = "x-canopy-actor";

/// What every handler can reach. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub store: Store,
    pub plugins: PluginHost,
    pub engine: Engine,
    pub bus: Bus,
    /// Re-reads and checks `canopy.toml`.
    pub reloader: Arc<crate::reload::Reloader>,
    pub delivery: Delivery,
    /// A planned stop's drain: admit work through it (see [`canopy_core::drain`]).
    pub drain: canopy_core::drain::Drain,
    /// Webhook ingress: its hooks, queues and deliveries.
    pub webhooks: canopy_core::webhooks::Ingress,
    /// The daemon's crons.
    pub crons: canopy_core::crons::Crons,
    pub data_dir: std::path::PathBuf,
    /// Pid, address, start time, log file, and the shutdown switch.
    pub daemon: Arc<DaemonInfo>,
    /// The daemon's API token (`POST /api/rotate-token` replaces it).
    pub token: Arc<ApiToken>,
}

/// The whole API, behind its guard, with the MCP server at `/mcp` (streamable HTTP) whose tools
/// call these same routes in-process, and the API's own OpenAPI document at
/// `/api/openapi.json`.
pub fn router(state: AppState, access: Access) -> Router {
    // The routes MCP's tools call, without the guard: a request reaching a tool has passed it at
    // `/mcp` already.
    // The routes are built (and documented) once; MCP's copy is the same router.
    let (api, doc) = documented();
    let inner = finish(api.clone(), state.clone());
    let mcp = crate::mcp::http_service(inner, state.daemon.stopped());
    let doc = Arc::new(doc);
    let api = api
        .route(
            "/api/openapi.json",
            axum::routing::get(move || {
                let doc = doc.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        doc.to_string(),
                    )
                }
            }),
        )
        .route("/mcp", mcp);
    finish(api, state)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(access),
            guard::guard,
        ))
        .layer(axum::middleware::map_response(error::json_errors))
}

/// The API's routes and their OpenAPI document as JSON.
fn documented() -> (Router<AppState>, String) {
    let (router, doc) = docs::document(routes());
    let text = serde_json::to_string_pretty(&docs::to_json(&doc)).unwrap_or_else(|err| {
        tracing::error!(%err, "cannot write the OpenAPI document");
        "{}".to_string()
    });
    (router, text)
}

/// The API's OpenAPI document (`canopy api schema`): the same the daemon serves.
pub fn openapi_json() -> String {
    documented().1
}

/// Every route of the API.
fn routes() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/api/health", docs::get(health))
        .nest("/api/plugins", plugins::router())
        .nest("/api", engine::router())
        .nest("/api", hooks::router())
        .nest("/api", sessions::router())
        .nest("/api", feed::router())
        .nest("/api", daemon::router())
        .nest("/api", config::router())
        .nest("/api/webhooks", webhooks::router())
        .nest("/api", crons::router())
        .nest("/api", runtime::router())
        .nest("/api", profiles::router())
}

/// The routes with the 404 and 405 answers, and their state.
fn finish(routes: Router<AppState>, state: AppState) -> Router {
    routes
        // After every route: it applies to the routes registered before it.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no such route: {method} {}; the routes are listed in the manual's HTTP API chapter (docs/src/http-api.md)",
        uri.path()
    ))
}

/// 405; axum adds the `Allow` header listing the methods the route takes.
async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method}", uri.path()),
    )
}

async fn health(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> ApiJson<canopy_model::records::answers::Health> {
    ApiJson(canopy_model::records::answers::Health {
        status: "ok".to_string(),
        version: Some(env!("CARGO_PKG_VERSION").to_string()),
        data_dir: Some(state.data_dir.clone()),
    })
}
