//! `canopy hooks ...`: hook-run history, the event taxonomy, and dry runs.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};

use super::client::in_cli_terms;
use super::output::{non_empty, table_or, utc_cell};
use super::{Client, encode, items, print_json, short, str_at};

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Hook runs, newest first.
    #[command(
        after_help = "Examples:\n  canopy hooks runs --graph web --since 2h\n  canopy hooks runs --event on_completed --status failed --last 5"
    )]
    Runs {
        /// Only the runs of this graph (name, id or unique id prefix).
        #[arg(long, value_name = "GRAPH")]
        graph: Option<String>,
        /// on_completed, on_failed, on_blocked or on_spec_completed.
        #[arg(long)]
        event: Option<String>,
        /// queued, running, completed, failed, timed_out or interrupted.
        #[arg(long)]
        status: Option<String>,
        /// Only runs fired since this time (RFC 3339) or this long ago (10m, 2h).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// How many runs to list.
        #[arg(long, default_value_t = 20)]
        last: usize,
        #[arg(long)]
        json: bool,
    },
    /// Every configured hook (the catalog), with the executor that would run it.
    #[command(
        after_help = "Examples:\n  canopy hooks list\n  canopy hooks list --graph web --mode command"
    )]
    List {
        /// Only this graph's hooks (name, id or unique id prefix).
        #[arg(long, value_name = "GRAPH")]
        graph: Option<String>,
        /// Only the hooks of this event.
        #[arg(long)]
        event: Option<String>,
        /// Only the hooks of this mode (command, agent, interactive, docs-maintenance, ...).
        #[arg(long)]
        mode: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The events hooks can be keyed by and the markers each provides.
    #[command(after_help = "Example:\n  canopy hooks events")]
    Events {
        #[arg(long)]
        json: bool,
    },
    /// Render an event's hooks against the graph's latest run (or --run): which would fire,
    /// with what values, and what is wrong with them. --execute runs them, as test runs.
    #[command(
        after_help = "Examples:\n  canopy hooks test web on_spec_completed --spec 3f2a\n  canopy hooks test web on_completed --index 0 --execute"
    )]
    Test {
        /// The graph: its name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        graph: String,
        /// The event: on_completed, on_failed, on_blocked or on_spec_completed.
        #[arg(value_name = "EVENT", value_parser = non_empty)]
        event: String,
        /// Only the hook at this index of the event's list.
        #[arg(long)]
        index: Option<usize>,
        /// The spec the event is about (on_spec_completed, on_failed).
        #[arg(long, value_name = "SPEC")]
        spec: Option<String>,
        /// The run to test against (default: the latest).
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Run the hooks for real, recorded as test runs.
        #[arg(long)]
        execute: bool,
        #[arg(long)]
        json: bool,
    },
}

/// The query parameters `hooks runs` / `hooks list` send and their arguments.
const FILTER_ARGUMENTS: [(&str, &str); 6] = [
    ("graph", "--graph"),
    ("event", "--event"),
    ("status", "--status"),
    ("since", "--since"),
    ("last", "--last"),
    ("mode", "--mode"),
];

/// Hook-run rows for a table.
pub fn hook_run_rows(runs: &Value) -> Vec<Vec<String>> {
    runs.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|r| {
            vec![
                utc_cell(str_at(r, "/fired_at")),
                str_at(r, "/graph_name").to_string(),
                format!("{}[{}]", str_at(r, "/event"), r["hook_index"]),
                r["mode"].as_str().unwrap_or("-").to_string(),
                format!(
                    "{}{}",
                    str_at(r, "/status"),
                    if r["test"].as_bool() == Some(true) {
                        " (test)"
                    } else {
                        ""
                    }
                ),
                r["duration_ms"]
                    .as_i64()
                    .map_or_else(|| "-".to_string(), |ms| format!("{ms} ms")),
                r["error"]
                    .as_str()
                    .or(r["summary"].as_str())
                    .unwrap_or("-")
                    .lines()
                    .next()
                    .unwrap_or("-")
                    .to_string(),
            ]
        })
        .collect()
}

pub const HOOK_RUN_HEADERS: [&str; 7] = [
    "FIRED (UTC)",
    "GRAPH",
    "EVENT",
    "MODE",
    "STATUS",
    "DURATION",
    "SUMMARY / ERROR",
];

pub async fn run(client: &Client, command: HooksCommand) -> Result<ExitCode> {
    match command {
        HooksCommand::Runs {
            graph,
            event,
            status,
            since,
            last,
            json,
        } => {
            let filtered =
                graph.is_some() || event.is_some() || status.is_some() || since.is_some();
            let mut query: Vec<(&str, String)> = vec![("last", last.to_string())];
            for (key, value) in [
                ("graph", graph),
                ("event", event),
                ("status", status),
                ("since", since),
            ] {
                if let Some(value) = value {
                    query.push((key, value));
                }
            }
            let request = client
                .request(reqwest::Method::GET, "/api/hook-runs")
                .query(&query);
            let answer: Value = client
                .send(request)
                .await
                .map_err(|err| in_cli_terms(err, &FILTER_ARGUMENTS))?;
            if json {
                print_json(&answer)?;
            } else {
                table_or(
                    &HOOK_RUN_HEADERS,
                    &hook_run_rows(&answer["runs"]),
                    if filtered {
                        "no hook runs match"
                    } else {
                        "no hook runs yet"
                    },
                );
            }
        }
        HooksCommand::List {
            graph,
            event,
            mode,
            json,
        } => {
            let mut query: Vec<(&str, String)> = Vec::new();
            for (key, value) in [("graph", graph), ("event", event), ("mode", mode)] {
                if let Some(value) = value {
                    query.push((key, value));
                }
            }
            let filtered = !query.is_empty();
            let request = client
                .request(reqwest::Method::GET, "/api/hooks/catalog")
                .query(&query);
            let answer: Value = client
                .send(request)
                .await
                .map_err(|err| in_cli_terms(err, &FILTER_ARGUMENTS))?;
            if json {
                print_json(&answer)?;
            } else {
                let rows: Vec<Vec<String>> = items(&answer["hooks"])
                    .iter()
                    .map(|h| {
                        let executor = match &h["executor"] {
                            Value::Object(e) => format!(
                                "{} {}",
                                e["name"].as_str().unwrap_or_default(),
                                e["version"].as_str().unwrap_or_default()
                            ),
                            _ => "(no executor installed)".to_string(),
                        };
                        vec![
                            str_at(h, "/graph").to_string(),
                            format!("{}[{}]", str_at(h, "/event"), h["index"]),
                            h["mode"].as_str().unwrap_or("?").to_string(),
                            executor,
                            h["config"].to_string(),
                        ]
                    })
                    .collect();
                table_or(
                    &["GRAPH", "EVENT", "MODE", "EXECUTOR", "CONFIG"],
                    &rows,
                    if filtered {
                        "no hooks match"
                    } else {
                        "no hooks configured; a graph's `hooks` field adds them"
                    },
                );
            }
        }
        HooksCommand::Events { json } => {
            let answer: Value = client.get("/api/hooks/events").await?;
            if json {
                print_json(&answer)?;
            } else {
                for event in items(&answer["events"]) {
                    let markers: Vec<String> = items(&event["markers"])
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|m| format!("{{{{{m}}}}}"))
                        .collect();
                    println!(
                        "{}: {}",
                        str_at(event, "/event"),
                        str_at(event, "/description")
                    );
                    println!(
                        "    markers: {}{}",
                        markers.join(" "),
                        if event["spec_ids"] == true {
                            "; takes spec_ids"
                        } else {
                            ""
                        }
                    );
                }
            }
        }
        HooksCommand::Test {
            graph,
            event,
            index,
            spec,
            run,
            execute,
            json,
        } => {
            let body = json!({ "event": event, "index": index, "spec": spec, "run": run, "execute": execute });
            let answer: Value = client
                .post(&format!("/api/graphs/{}/hooks/test", encode(&graph)), &body)
                .await
                .map_err(|err| {
                    in_cli_terms(
                        err,
                        &[
                            ("event", "EVENT"),
                            ("index", "--index"),
                            ("spec", "--spec"),
                            ("run", "--run"),
                        ],
                    )
                })?;
            if json {
                print_json(&answer)?;
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{} {} against run {}",
                str_at(&answer, "/graph"),
                str_at(&answer, "/event"),
                short(str_at(&answer, "/run_id"))
            );
            if let Some(note) = answer["event_note"].as_str() {
                println!("note: {note}");
            }
            println!("markers:");
            for (key, value) in answer["markers"].as_object().into_iter().flatten() {
                println!(
                    "  {{{{{key}}}}} = {}",
                    value.as_str().unwrap_or_default().replace('\n', "\n    ")
                );
            }
            let hooks = items(&answer["hooks"]);
            if hooks.is_empty() {
                println!("no hooks on {}", str_at(&answer, "/event"));
            }
            let mut problems = false;
            for hook in hooks {
                // Its plugin is disabled: `reason` says so; it cannot run, which is a problem.
                problems |= hook["executor_disabled"] == true;
                let fires = if hook["would_fire"] == true {
                    "would fire".to_string()
                } else {
                    format!("would not fire: {}", str_at(hook, "/reason"))
                };
                println!(
                    "\n[{}] {} mode, {fires}",
                    hook["index"],
                    hook["mode"].as_str().unwrap_or("?")
                );
                println!("  config:   {}", hook["config"]);
                if !hook["rendered"].is_null() {
                    println!("  rendered: {}", hook["rendered"]);
                }
                for problem in items(&hook["problems"]) {
                    problems = true;
                    println!("  problem:  {}", problem.as_str().unwrap_or_default());
                }
            }
            if execute {
                println!("\ntest runs:");
                table_or(
                    &HOOK_RUN_HEADERS,
                    &hook_run_rows(&answer["runs"]),
                    "no test runs (no hook would fire)",
                );
            }
            if problems {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
