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
use clap::Args;
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use server::CanopyMcp;

use crate::datadir::DataDir;

/// `canopy mcp`: serve MCP on stdin/stdout.
#[derive(Debug, Args)]
pub struct McpArgs {}

/// Serves MCP over stdio against the daemon of `data`, until the client closes stdin. The
/// daemon need not run yet: each call finds it through the data dir (and a restarted daemon's
/// new address and token).
pub async fn serve_stdio(data: &DataDir, _args: McpArgs) -> anyhow::Result<ExitCode> {
    let server = CanopyMcp::new(Arc::new(api::DaemonApi::new(data)));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client did not complete the handshake")?;
    running.waiting().await.context("the MCP session failed")?;
    Ok(ExitCode::SUCCESS)
}

/// The `/mcp` endpoint: streamable HTTP whose tools call `routes` (the daemon's API without its
/// guard; `/mcp` itself sits behind it) in-process. Sessions end when `stopped` resolves (the
/// daemon is stopping), so their open streams do not hold up its shutdown.
pub fn http_service(
    routes: axum::Router,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> StreamableHttpService<CanopyMcp<api::RouterApi>, LocalSessionManager> {
    let api = Arc::new(api::RouterApi::new(routes));
    // The guard in front checks Host and Origin against this daemon's port.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let cancel = config.cancellation_token.clone();
    tokio::spawn(async move {
        stopped.await;
        cancel.cancel();
    });
    StreamableHttpService::new(
        move || Ok(CanopyMcp::new(api.clone())),
        Arc::default(),
        config,
    )
}
