//! The MCP server: Canopy's tools and resources for agents, over stdio (`canopy mcp`) and
//! streamable HTTP (`/mcp` on the daemon's loopback listener), both built on the HTTP API.

use std::process::ExitCode;

use clap::Args;

use crate::datadir::DataDir;

/// `canopy mcp`: serve MCP on stdin/stdout.
#[derive(Debug, Args)]
pub struct McpArgs {}

/// Serves MCP over stdio against the daemon of `data`.
pub async fn serve_stdio(_data: &DataDir, _args: McpArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("canopy mcp is being built")
}
