//! The MCP server: Canopy's tools and resources for agents, over stdio (`canopy mcp`) and
//! streamable HTTP (`/mcp` on the daemon's loopback listener), both built on the HTTP API.
//!
//! The tools ([`tools`]) and resources ([`server`]) are written once over [`api::Api`]: a JSON
//! call on an API route. `canopy mcp` calls the daemon of its data dir over HTTP, as every CLI
//! command does ([`api::DaemonApi`]); `/mcp` calls the daemon's routes in-process
//! ([`api::RouterApi`]). Either way the API validates the arguments, and its error message,
//! which names the field, is the tool's error (`isError: true`). Requests are recorded with
//! actor `agent` in the feed, unless the process carries a `CANOPY_ACTOR` (a hook's agent).

pub mod api;
mod server;
pub mod tools;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use server::CanopyMcp;

use canopy_datadir::DataDir;

/// Serves MCP over stdio against the daemon of `data`, until the client closes stdin. The
/// daemon need not run yet: each call finds it through the data dir (and a restarted daemon's
/// new address and token).
pub async fn serve_stdio(data: &DataDir) -> anyhow::Result<ExitCode> {
    let server = CanopyMcp::new(Arc::new(api::DaemonApi::new(data)));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client did not complete the handshake")?;
    running.waiting().await.context("the MCP session failed")?;
    Ok(ExitCode::SUCCESS)
}

/// MCP sessions over HTTP one token may hold at once (each keeps ~60 KiB for up to five idle
/// minutes); past that a new session is refused until one closes or expires.
pub const MAX_SESSIONS_PER_TOKEN: usize = 64;

/// The `/mcp` endpoint: streamable HTTP whose tools call `routes` (the daemon's API without its
/// guard; `/mcp` itself sits behind it) in-process. Sessions end when `stopped` resolves (the
/// daemon is stopping), so their open streams do not hold up its shutdown. A token holds at
/// most [`MAX_SESSIONS_PER_TOKEN`] sessions.
pub fn http_service<S: Clone + Send + Sync + 'static>(
    routes: axum::Router,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> axum::routing::MethodRouter<S> {
    let api = Arc::new(api::RouterApi::new(routes));
    // The guard in front checks Host and Origin against this daemon's port.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let cancel = config.cancellation_token.clone();
    tokio::spawn(async move {
        stopped.await;
        cancel.cancel();
    });
    let sessions: Arc<LocalSessionManager> = Arc::default();
    let service = StreamableHttpService::new(
        move || Ok(CanopyMcp::new(api.clone())),
        sessions.clone(),
        config,
    );
    let owners = Arc::new(SessionOwners {
        sessions,
        owners: tokio::sync::Mutex::default(),
    });
    axum::routing::any(move |request: axum::extract::Request| {
        let (service, owners) = (service.clone(), owners.clone());
        async move { owners.serve(service, request).await }
    })
}

/// Which token opened each live MCP session.
struct SessionOwners {
    sessions: Arc<LocalSessionManager>,
    /// Session id → a digest of the token that opened it.
    owners: tokio::sync::Mutex<std::collections::HashMap<String, [u8; 32]>>,
}

impl SessionOwners {
    async fn serve(
        &self,
        service: StreamableHttpService<CanopyMcp<api::RouterApi>, LocalSessionManager>,
        request: axum::extract::Request,
    ) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        use sha2::Digest as _;
        use tower::ServiceExt as _;
        const SESSION_HEADER: &str = "mcp-session-id";
        let opens = request.method() == axum::http::Method::POST
            && !request.headers().contains_key(SESSION_HEADER);
        let token: [u8; 32] = sha2::Sha256::digest(
            request
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .map(axum::http::HeaderValue::as_bytes)
                .unwrap_or_default(),
        )
        .into();
        if opens {
            let live: std::collections::HashSet<String> = self
                .sessions
                .sessions
                .read()
                .await
                .keys()
                .map(ToString::to_string)
                .collect();
            let mut owners = self.owners.lock().await;
            owners.retain(|id, _| live.contains(id));
            let held = owners.values().filter(|owner| **owner == token).count();
            if held >= MAX_SESSIONS_PER_TOKEN {
                return crate::api::ApiError::new(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "too_many_sessions",
                    format!(
                        "this token holds {held} MCP sessions, the most it may; close one (DELETE /mcp with its Mcp-Session-Id) or let an idle one expire (5 minutes)"
                    ),
                )
                .into_response();
            }
        }
        let response = match service.oneshot(request).await {
            Ok(response) => response.map(axum::body::Body::new),
            Err(never) => match never {},
        };
        if opens
            && let Some(id) = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
        {
            self.owners.lock().await.insert(id.to_string(), token);
        }
        response
    }
}
