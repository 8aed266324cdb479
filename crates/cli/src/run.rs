//! `canopy run ...`: run history. The runs of graphs, every node run of one run with its status,
//! duration and reason, and a node run's stored output.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;

use super::{Client, encode, items, print_json, short, str_at, table};

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Runs, newest first: graph, status, start, duration, and the summary or blocker.
    #[command(after_help = "Example:\n  canopy run list --graph web --last 5")]
    List {
        /// Only the runs of this graph (name or id prefix).
        #[arg(long, value_name = "GRAPH")]
        graph: Option<String>,
        /// How many runs to list.
        #[arg(long, default_value_t = 20, value_name = "N")]
        last: usize,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One run: its specs, every node run (status, duration, reason) and its hook runs.
    #[command(after_help = "Example:\n  canopy run show 3f2a")]
    Show {
        /// The run: its id or a unique prefix (`canopy run list` shows them).
        run: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Follow a run to its end, with the same progress lines as `graph run --wait`; the exit
    /// code says how it ended (0 completed). A run that has ended is shown as it ended.
    #[command(after_help = "Example:\n  canopy run watch 3f2a")]
    Watch {
        /// The run: its id or a unique prefix (`canopy run list` shows them).
        run: String,
        #[command(flatten)]
        watching: crate::graph::Watching,
    },
    /// A node run's stored output (the last 16 KiB of what its executor reported).
    #[command(after_help = "Example:\n  canopy run output 9c41 | less")]
    Output {
        /// The node run: its id or a unique prefix (`canopy run show RUN` lists them).
        node_run: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// An RFC 3339 time from the API as `2026-01-31 12:00:00` (UTC; tables say so in their header).
pub(crate) fn time(rfc3339: &str) -> String {
    rfc3339
        .chars()
        .take(19)
        .collect::<String>()
        .replace('T', " ")
}

/// `850ms`, `4.2s`, `3m 07s`, `2h 05m`.
pub(crate) fn human(duration: Duration) -> String {
    let ms = duration.as_millis();
    let secs = duration.as_secs();
    if ms < 1000 {
        format!("{ms}ms")
    } else if secs < 60 {
        format!("{:.1}s", duration.as_secs_f64())
    } else if secs < 3600 {
        format!("{}m {:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h {:02}m", secs / 3600, secs / 60 % 60)
    }
}

/// A node or hook run's `duration_ms` as [`human`], or `-`.
pub(crate) fn duration_ms(value: &Value) -> String {
    value["duration_ms"]
        .as_u64()
        .map_or_else(|| "-".to_string(), |ms| human(Duration::from_millis(ms)))
}

/// How long a run took (`finished_at - started_at`), or has been going (`… so far`).
pub(crate) fn run_duration(run: &Value) -> String {
    let parse = |pointer: &str| {
        run.pointer(pointer)
            .and_then(Value::as_str)
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    };
    let Some(started) = parse("/started_at") else {
        return "-".to_string();
    };
    match parse("/finished_at") {
        Some(finished) => finished
            .duration_since(started)
            .map_or_else(|_| "-".to_string(), human),
        None => SystemTime::now()
            .duration_since(started)
            .map_or_else(|_| "-".to_string(), |d| format!("{} so far", human(d))),
    }
}

/// The first line of the first of these fields that is set, or `-`.
fn first_line(value: &Value, fields: &[&str]) -> String {
    fields
        .iter()
        .find_map(|field| value[*field].as_str().filter(|s| !s.is_empty()))
        .and_then(|text| text.lines().next())
        .unwrap_or("-")
        .to_string()
}

pub async fn run(client: &Client, command: RunCommand) -> Result<ExitCode> {
    match command {
        RunCommand::List { graph, last, json } => {
            let mut path = format!("/api/runs?last={last}");
            if let Some(graph) = &graph {
                path.push_str(&format!("&graph={}", encode(graph)));
            }
            let answer: Value = client.get(&path).await?;
            if json {
                print_json(&answer)?;
                return Ok(ExitCode::SUCCESS);
            }
            let runs = items(&answer["runs"]);
            if runs.is_empty() {
                match &graph {
                    Some(graph) => println!("graph {graph} has no runs yet"),
                    None => println!("no runs yet"),
                }
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = runs
                .iter()
                .map(|r| {
                    vec![
                        short(str_at(r, "/id")).to_string(),
                        r["graph_name"].as_str().unwrap_or("(deleted)").to_string(),
                        str_at(r, "/status").to_string(),
                        time(str_at(r, "/started_at")),
                        run_duration(r),
                        r["queue_id"]
                            .as_str()
                            .map_or_else(|| "-".to_string(), |q| short(q).to_string()),
                        first_line(r, &["blocker", "summary"]),
                    ]
                })
                .collect();
            print!(
                "{}",
                table::render(
                    &[
                        "RUN",
                        "GRAPH",
                        "STATUS",
                        "STARTED (UTC)",
                        "DURATION",
                        "QUEUE",
                        "BLOCKER / SUMMARY"
                    ],
                    &rows
                )
            );
        }
        RunCommand::Show { run, json } => {
            let path = format!("/api/runs/{}", encode(&run));
            let view: Value = if json {
                client.get(&path).await?
            } else {
                client.get(&format!("{path}?brief=true")).await?
            };
            if json {
                print_json(&view)?;
            } else {
                print_run(&view);
            }
        }
        RunCommand::Watch { run, watching } => {
            let view: Value = client
                .get(&format!("/api/runs/{}?brief=true", encode(&run)))
                .await?;
            let run_id = str_at(&view, "/id");
            let graph_id = str_at(&view, "/graph_id");
            // A run in flight is its graph's current run: follow it through the graph.
            if view["in_flight"].as_bool() == Some(true) && !graph_id.is_empty() {
                let graph: Value = client
                    .get(&format!("/api/graphs/{}", encode(graph_id)))
                    .await?;
                if graph.pointer("/current_run/id").and_then(Value::as_str) == Some(run_id) {
                    return crate::graph::watch(client, graph_id, graph, watching).await;
                }
            }
            if watching.json() {
                print_json(&view)?;
            } else {
                eprintln!(
                    "run {} is not in flight; it is {}",
                    short(run_id),
                    str_at(&view, "/status")
                );
                print_run(&view);
            }
            return Ok(if view["status"] == "completed" {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        RunCommand::Output { node_run, json } => {
            let node_run: Value = client
                .get(&format!("/api/node-runs/{}", encode(&node_run)))
                .await?;
            if json {
                print_json(&node_run)?;
                return Ok(ExitCode::SUCCESS);
            }
            match node_run["detail"].as_str().filter(|d| !d.is_empty()) {
                Some(detail) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(detail.as_bytes())?;
                    if !detail.ends_with('\n') {
                        out.write_all(b"\n")?;
                    }
                    out.flush()?;
                }
                None => {
                    let reason = node_run["reason"]
                        .as_str()
                        .map(|r| format!("; its reason: {r}"))
                        .unwrap_or_default();
                    eprintln!(
                        "node run {} (node {}, {}) stored no output{reason}",
                        short(str_at(&node_run, "/id")),
                        str_at(&node_run, "/node"),
                        str_at(&node_run, "/status"),
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The name of spec `id` among a run's `specs`, else its short id.
pub(super) fn spec_name_in(specs: &[Value], id: &str) -> String {
    specs
        .iter()
        .find(|s| s["spec_id"] == id)
        .and_then(|s| s["spec_name"].as_str())
        .map_or_else(|| short(id).to_string(), str::to_string)
}

fn print_run(view: &Value) {
    println!("run:       {}", str_at(view, "/id"));
    println!(
        "graph:     {}",
        view["graph_name"].as_str().unwrap_or("(deleted)")
    );
    println!("status:    {}", str_at(view, "/status"));
    println!("workdir:   {}", str_at(view, "/workdir"));
    if let Some(queue) = view["queue_id"].as_str() {
        println!("queue:     {}", short(queue));
    }
    println!("started:   {} UTC", time(str_at(view, "/started_at")));
    match view["finished_at"].as_str() {
        Some(finished) => println!(
            "finished:  {} UTC (took {})",
            time(finished),
            run_duration(view)
        ),
        None => println!("finished:  not yet ({})", run_duration(view)),
    }
    if let Some(blocker) = view["blocker"].as_str() {
        println!("blocker:   {}", blocker.replace('\n', "\n           "));
    }
    if let Some(summary) = view["summary"]
        .as_str()
        .filter(|s| Some(*s) != view["blocker"].as_str())
    {
        println!("summary:   {summary}");
    }

    let specs = items(&view["specs"]);
    let spec_name = |id: &str| spec_name_in(specs, id);
    println!("\nspecs:");
    if specs.is_empty() {
        println!("  the run reached no spec");
    } else {
        let rows: Vec<Vec<String>> = specs
            .iter()
            .map(|s| {
                vec![
                    s["ordinal"]
                        .as_i64()
                        .map_or_else(|| "-".to_string(), |o| (o + 1).to_string()),
                    short(str_at(s, "/spec_id")).to_string(),
                    s["spec_name"]
                        .as_str()
                        .unwrap_or("(deleted spec)")
                        .to_string(),
                    s["group"].as_str().unwrap_or("-").to_string(),
                    str_at(s, "/status").to_string(),
                    first_line(s, &["reason", "summary"]),
                ]
            })
            .collect();
        print!(
            "{}",
            table::render(
                &["#", "SPEC", "NAME", "GROUP", "STATUS", "REASON / SUMMARY"],
                &rows
            )
        );
    }

    let node_runs = items(&view["node_runs"]);
    println!("\nnode runs (oldest first):");
    if node_runs.is_empty() {
        println!("  none");
    } else {
        let rows: Vec<Vec<String>> = node_runs
            .iter()
            .map(|n| {
                vec![
                    short(str_at(n, "/id")).to_string(),
                    time(str_at(n, "/started_at")),
                    spec_name(str_at(n, "/spec_id")),
                    str_at(n, "/node").to_string(),
                    n["plugin"].as_str().map_or_else(
                        || str_at(n, "/mode").to_string(),
                        |p| format!("{p} {}", str_at(n, "/plugin_version")),
                    ),
                    str_at(n, "/status").to_string(),
                    duration_ms(n),
                    first_line(n, &["reason", "summary"]),
                ]
            })
            .collect();
        print!(
            "{}",
            table::render(
                &[
                    "NODE RUN",
                    "STARTED (UTC)",
                    "SPEC",
                    "NODE",
                    "EXECUTOR",
                    "STATUS",
                    "DURATION",
                    "REASON / SUMMARY"
                ],
                &rows
            )
        );
        // A multi-line reason is shown whole once, below the table.
        for n in node_runs {
            if let Some(reason) = n["reason"].as_str().filter(|r| r.lines().count() > 1) {
                println!(
                    "\n{} {} ({}):\n  {}",
                    short(str_at(n, "/id")),
                    str_at(n, "/node"),
                    str_at(n, "/status"),
                    reason.replace('\n', "\n  ")
                );
            }
        }
        println!("\n`canopy run output NODE_RUN` prints a node run's stored output.");
    }

    let hook_runs = &view["hook_runs"];
    println!("\nhook runs (newest first):");
    if items(hook_runs).is_empty() {
        println!("  none");
    } else {
        let mut headers = super::hooks::HOOK_RUN_HEADERS;
        headers[0] = "FIRED (UTC)";
        print!(
            "{}",
            table::render(&headers, &super::hooks::hook_run_rows(hook_runs))
        );
    }
}
