//! `canopy runtime-hook`: the relay a runtime's *command* hook runs where it cannot call an
//! `http` hook (Claude Code's `SessionStart`). It reads the hook's JSON on stdin, posts it to
//! the daemon for the launch it runs in (`CANOPY_RUNTIME_URL`, `CANOPY_RUNTIME_TOKEN`, set on the
//! agent's processes for that launch only) and prints the daemon's answer, which is in the
//! runtime's protocol. A failure exits 1 (the runtime reports it and goes on) and says why on
//! stderr; with `--fail-closed` (the hooks of a phase that decides, for a runtime whose failed
//! command hook lets the action through, as Codex's does) it exits 2, which blocks the action
//! with that reason.

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use canopy_executors::plugins::launch::{CALLBACK_ROUTE, RUNTIME_TOKEN, RUNTIME_URL};
use serde_json::Value;

/// The most a hook's input may hold (a tool's input and response included).
const MAX_INPUT: u64 = 16 * 1024 * 1024;
/// How long the daemon's answer may take (the runtime's own hook timeout is the real bound).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// `canopy runtime-hook`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// When the daemon cannot answer, exit 2 with the reason on stderr: the runtime blocks the
    /// action instead of letting it through.
    #[arg(long)]
    pub fail_closed: bool,
}

pub async fn run(args: RelayArgs) -> Result<ExitCode> {
    match relay().await {
        Ok(code) => Ok(code),
        Err(err) if args.fail_closed => {
            eprintln!("blocked: Canopy's runtime hooks could not decide: {err:#}");
            Ok(ExitCode::from(2))
        }
        Err(err) => Err(err),
    }
}

async fn relay() -> Result<ExitCode> {
    let url = std::env::var(RUNTIME_URL).with_context(|| {
        format!("{RUNTIME_URL} is not set: `canopy runtime-hook` runs inside an agent Canopy launched with runtime hooks, as its hook configuration says")
    })?;
    let token = std::env::var(RUNTIME_TOKEN)
        .with_context(|| format!("{RUNTIME_TOKEN} is not set (the launch's secret)"))?;
    let mut body = String::new();
    std::io::stdin()
        .take(MAX_INPUT)
        .read_to_string(&mut body)
        .context("cannot read the hook's input on stdin")?;
    let input: Value = serde_json::from_str(&body).context("the hook's input is not JSON")?;
    let Some(event) = input.get("hook_event_name").and_then(Value::as_str) else {
        bail!("the hook's input has no `hook_event_name`");
    };
    if !event.chars().all(|c| c.is_ascii_alphanumeric()) {
        bail!("`hook_event_name` {event:?} is not a hook event name");
    }
    let client = reqwest::Client::builder()
        .timeout(ANSWER_TIMEOUT)
        .build()
        .context("cannot make an HTTP client")?;
    let response = client
        .post(format!("{url}{CALLBACK_ROUTE}/{event}"))
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .with_context(|| format!("the daemon at {url} does not answer"))?;
    let status = response.status();
    let answer = response
        .text()
        .await
        .context("cannot read the daemon's answer")?;
    if !status.is_success() {
        bail!("the daemon refused the {event} callback ({status}): {answer}");
    }
    println!("{answer}");
    Ok(ExitCode::SUCCESS)
}
