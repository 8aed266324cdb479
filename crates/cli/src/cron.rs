//! `canopy cron ...`: the daemon's crons, their receipts, firing one by hand, pausing.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use super::output::{non_empty, table_or, utc, utc_cell};
use super::{Client, encode, print_json, short, typed};
use canopy_model::records::crons::{CronView, Receipt, ReceiptStatus};

/// How often `cron run --wait` looks at the receipt.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Every cron in canopy.toml: its schedule, state, next firing, and its last execution
    /// (rebuilt from its receipts, so it survives restarts).
    #[command(after_help = "Examples:\n  canopy cron list\n  canopy cron list --json")]
    List {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A cron's receipts, newest first: one per firing, with its run id, status, exit code,
    /// duration and (with --json, or --output) the tail of its output.
    #[command(
        after_help = "Examples:\n  canopy cron logs prune-preview\n  canopy cron logs prune-preview --last 5 --output\n  canopy cron logs --name prune-preview --json"
    )]
    Logs {
        /// The cron's name.
        #[arg(value_name = "NAME", value_parser = non_empty, required_unless_present = "named")]
        name: Option<String>,
        /// The cron's name, as an option (the same as giving it first).
        #[arg(long = "name", value_name = "NAME", value_parser = non_empty, conflicts_with = "name")]
        named: Option<String>,
        /// How many receipts (1 to 100000).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        last: u64,
        /// Print each receipt's output tail under its row.
        #[arg(long)]
        output: bool,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Fire a cron now, on this node (a manual firing gets its own receipt, as a scheduled one
    /// does). With --wait, wait for it to end and exit 1 unless it completed.
    #[command(
        after_help = "Examples:\n  canopy cron run prune-preview\n  canopy cron run prune-preview --wait"
    )]
    Run {
        /// The cron's name.
        #[arg(value_parser = non_empty)]
        name: String,
        /// Wait for the firing to end and print its output.
        #[arg(long)]
        wait: bool,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Stop a cron from firing on schedule, without editing canopy.toml (kept across
    /// restarts; `cron run` still fires it by hand).
    #[command(after_help = "Example:\n  canopy cron pause prune-preview")]
    Pause {
        /// The cron's name.
        #[arg(value_parser = non_empty)]
        name: String,
    },
    /// Let a paused cron fire on schedule again (firings that passed while it was paused are
    /// not counted as missed).
    #[command(after_help = "Example:\n  canopy cron resume prune-preview")]
    Resume {
        /// The cron's name.
        #[arg(value_parser = non_empty)]
        name: String,
    },
}

pub async fn run(client: &Client, command: CronCommand) -> Result<ExitCode> {
    match command {
        CronCommand::List { json } => {
            let answer: Value = client.get("/api/crons").await?;
            if json {
                print_json(&answer)?;
                return Ok(ExitCode::SUCCESS);
            }
            let crons: Vec<CronView> = typed(&answer["crons"], "crons")?;
            let rows: Vec<Vec<String>> = crons.iter().map(cron_row).collect();
            table_or(
                &[
                    "NAME",
                    "SCHEDULE",
                    "STATE",
                    "NEXT (UTC)",
                    "LAST RUN",
                    "LAST (UTC)",
                    "RUNS",
                ],
                &rows,
                "no crons: add [[crons]] to canopy.toml (see the manual's Crons chapter, docs/src/crons.md)",
            );
        }
        CronCommand::Logs {
            name,
            named,
            last,
            output,
            json,
        } => {
            // clap holds one of the two (required_unless_present, conflicts_with).
            let name = name.or(named).unwrap_or_default();
            let answer: Value = client
                .get(&format!("/api/crons/{}/runs?last={last}", encode(&name)))
                .await?;
            if json {
                print_json(&answer)?;
                return Ok(ExitCode::SUCCESS);
            }
            let receipts: Vec<Receipt> = typed(&answer["runs"], "cron receipts")?;
            if receipts.is_empty() {
                println!("cron {name} has not fired yet");
            }
            for receipt in &receipts {
                print_receipt_line(receipt);
                if output {
                    print_output(receipt);
                }
            }
        }
        CronCommand::Run { name, wait, json } => {
            let receipt: Value = client
                .post(&format!("/api/crons/{}/run", encode(&name)), &json!({}))
                .await?;
            let fired: Receipt = typed(&receipt, "a cron receipt")?;
            let run_id = fired.run_id.clone();
            if fired.status != ReceiptStatus::Running {
                if json {
                    print_json(&receipt)?;
                } else {
                    eprintln!(
                        "cron {name} did not run ({}): {}",
                        fired.status,
                        fired.error.as_deref().unwrap_or_default()
                    );
                }
                return Ok(ExitCode::FAILURE);
            }
            if !wait {
                if json {
                    print_json(&receipt)?;
                } else {
                    println!(
                        "fired cron {name}: run {run_id} (`canopy cron logs --name {name}` shows how it ends)"
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            if !json {
                eprintln!(
                    "fired cron {name}: run {}, waiting for it to end",
                    short(&run_id)
                );
            }
            let (raw, ended) = wait_for_end(client, &name, &run_id).await?;
            if json {
                print_json(&raw)?;
            } else {
                print_receipt_line(&ended);
                print_output(&ended);
            }
            return Ok(if ended.status == ReceiptStatus::Completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        CronCommand::Pause { name } => {
            let view: Value = client
                .post(&format!("/api/crons/{}/pause", encode(&name)), &json!({}))
                .await?;
            let view: CronView = typed(&view, "a cron")?;
            println!(
                "paused cron {} (resume with `canopy cron resume {}`)",
                view.name, name
            );
        }
        CronCommand::Resume { name } => {
            let view: Value = client
                .post(&format!("/api/crons/{}/resume", encode(&name)), &json!({}))
                .await?;
            let view: CronView = typed(&view, "a cron")?;
            println!(
                "resumed cron {}; next firing {}",
                view.name,
                utc(view.next_at)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Polls the cron's receipts until this run's has ended. A firing has a deadline of its own,
/// so this ends; a daemon that goes away ends it with an error.
async fn wait_for_end(client: &Client, name: &str, run_id: &str) -> Result<(Value, Receipt)> {
    let started = Instant::now();
    let mut told = false;
    loop {
        let answer: Value = client
            .get(&format!("/api/crons/{}/runs?last=1000", encode(name)))
            .await?;
        let receipts: Vec<Value> = typed(&answer["runs"], "cron receipts")?;
        let Some(raw) = receipts.into_iter().find(|r| r["run_id"] == run_id) else {
            bail!("the receipt of run {run_id} is gone (pruned by keep_receipts?)");
        };
        let receipt: Receipt = typed(&raw, "a cron receipt")?;
        if receipt.status != ReceiptStatus::Running {
            return Ok((raw, receipt));
        }
        if !told && started.elapsed() > Duration::from_secs(5) {
            eprintln!("still running; Ctrl-C stops waiting (the firing goes on)");
            told = true;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn cron_row(cron: &CronView) -> Vec<String> {
    let last = cron.last.as_ref();
    let last_run = match last {
        None => "-".to_string(),
        Some(last) => {
            let code = last
                .exit_code
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default();
            format!("{}{code}", last.status)
        }
    };
    let mut schedule = cron.schedule.clone();
    if cron.timezone != "UTC" {
        schedule = format!("{schedule} ({})", cron.timezone);
    }
    vec![
        cron.name.clone(),
        schedule,
        cron.state.to_string(),
        utc_cell(cron.next_at),
        last_run,
        utc_cell(last.map(|l| l.created_at)),
        cron.runs.clone(),
    ]
}

/// `2026-12-01 04:10:00  3f2a91c0  completed  exit 0  1.2s  schedule`
fn print_receipt_line(receipt: &Receipt) {
    let mut line = format!(
        "{}  {}  {:<22}",
        utc_cell(receipt.created_at),
        short(&receipt.run_id),
        receipt.status.as_str(),
    );
    if let Some(code) = receipt.exit_code {
        line.push_str(&format!("  exit {code}"));
    }
    if let Some(ms) = receipt.duration_ms.and_then(|ms| u64::try_from(ms).ok()) {
        line.push_str(&format!(
            "  {}",
            humantime::format_duration(Duration::from_millis(ms - ms % 100))
        ));
    }
    line.push_str(&format!("  {}", receipt.trigger));
    if let Some(count) = receipt.missed_count {
        line.push_str(&format!("  ({count} missed)"));
    }
    println!("{line}");
    if let Some(error) = &receipt.error {
        println!("    {error}");
    }
}

fn print_output(receipt: &Receipt) {
    if let Some(output) = receipt.output.as_deref().filter(|o| !o.trim().is_empty()) {
        for line in output.trim_end().lines() {
            println!("    | {line}");
        }
    }
}
