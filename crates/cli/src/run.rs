//! `canopy run ...`: run history. The runs of graphs, every node run of one run with its status,
//! duration and reason, and a node run's stored output.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;

use super::output::{utc, utc_cell};
use super::{Client, encode, print_json, short, table, typed};
use canopy_model::records::runs::{NodeRun, Run, RunSpec, RunStatus};
use canopy_model::records::views::{GraphView, NamedRun, RunDetail};
use canopy_model::time::Timestamp;

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
pub(crate) fn duration_ms(ms: Option<i64>) -> String {
    ms.and_then(|ms| u64::try_from(ms).ok())
        .map_or_else(|| "-".to_string(), |ms| human(Duration::from_millis(ms)))
}

/// How long a run took (`finished_at - started_at`), or has been going (`… so far`).
pub(crate) fn run_duration(run: &Run) -> String {
    let started = run.started_at;
    match run.finished_at {
        Some(finished) if finished >= started => human(finished.duration_since(started)),
        Some(_) => "-".to_string(),
        None if started <= Timestamp::now() => format!("{} so far", human(started.elapsed())),
        None => "-".to_string(),
    }
}

/// The first line of the first of these texts that is set, or `-`.
fn first_line(texts: &[Option<&String>]) -> String {
    texts
        .iter()
        .find_map(|text| text.filter(|s| !s.is_empty()))
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
            let runs: Vec<NamedRun> = typed(&answer["runs"], "runs")?;
            if runs.is_empty() {
                match &graph {
                    Some(graph) => println!("graph {graph} has no runs yet"),
                    None => println!("no runs yet"),
                }
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = runs
                .iter()
                .map(|NamedRun { run, graph_name }| {
                    vec![
                        short(&run.id).to_string(),
                        graph_name.as_deref().unwrap_or("(deleted)").to_string(),
                        run.status.to_string(),
                        utc_cell(run.started_at),
                        run_duration(run),
                        run.queue_id
                            .as_deref()
                            .map_or_else(|| "-".to_string(), |q| short(q).to_string()),
                        first_line(&[run.blocker.as_ref(), run.summary.as_ref()]),
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
            if json {
                let view: Value = client.get(&path).await?;
                print_json(&view)?;
            } else {
                let view: Value = client.get(&format!("{path}?brief=true")).await?;
                print_run(&typed(&view, "a run")?);
            }
        }
        RunCommand::Watch { run, watching } => {
            let answer: Value = client
                .get(&format!("/api/runs/{}?brief=true", encode(&run)))
                .await?;
            let view: RunDetail = typed(&answer, "a run")?;
            let run = &view.view.run;
            // A run in flight is its graph's current run: follow it through the graph.
            if view.in_flight && !run.graph_id.is_empty() {
                let graph: Value = client
                    .get(&format!("/api/graphs/{}", encode(&run.graph_id)))
                    .await?;
                let current: GraphView = typed(&graph, "a graph")?;
                if current.current_run.as_ref().map(|c| &c.run.id) == Some(&run.id) {
                    return crate::graph::watch(client, &run.graph_id, graph, watching).await;
                }
            }
            if watching.json() {
                print_json(&answer)?;
            } else {
                eprintln!(
                    "run {} is not in flight; it is {}",
                    short(&run.id),
                    run.status
                );
                print_run(&view);
            }
            return Ok(if run.status == RunStatus::Completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        RunCommand::Output { node_run, json } => {
            let answer: Value = client
                .get(&format!("/api/node-runs/{}", encode(&node_run)))
                .await?;
            if json {
                print_json(&answer)?;
                return Ok(ExitCode::SUCCESS);
            }
            let node_run: NodeRun = typed(&answer, "a node run")?;
            match node_run.detail.as_deref().filter(|d| !d.is_empty()) {
                Some(detail) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(detail.as_bytes())?;
                    if !detail.ends_with('\n') {
                        out.write_all(b"\n")?;
                    }
                    out.flush()?;
                }
                None => {
                    let reason = node_run
                        .reason
                        .as_deref()
                        .map(|r| format!("; its reason: {r}"))
                        .unwrap_or_default();
                    eprintln!(
                        "node run {} (node {}, {}) stored no output{reason}",
                        short(&node_run.id),
                        node_run.node,
                        node_run.status,
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The name of spec `id` among a run's `specs`, else its short id.
pub(super) fn spec_name_in(specs: &[RunSpec], id: &str) -> String {
    specs
        .iter()
        .find(|s| s.spec_id == id)
        .and_then(|s| s.spec_name.clone())
        .unwrap_or_else(|| short(id).to_string())
}

fn print_run(detail: &RunDetail) {
    let view = &detail.view;
    let run = &view.run;
    println!("run:       {}", run.id);
    println!(
        "graph:     {}",
        detail.graph_name.as_deref().unwrap_or("(deleted)")
    );
    println!("status:    {}", run.status);
    println!("workdir:   {}", run.workdir);
    if let Some(queue) = &run.queue_id {
        println!("queue:     {}", short(queue));
    }
    println!("started:   {}", utc(run.started_at));
    match &run.finished_at {
        Some(finished) => println!("finished:  {} (took {})", utc(*finished), run_duration(run)),
        None => println!("finished:  not yet ({})", run_duration(run)),
    }
    if let Some(blocker) = &run.blocker {
        println!("blocker:   {}", blocker.replace('\n', "\n           "));
    }
    if let Some(summary) = run
        .summary
        .as_ref()
        .filter(|s| Some(*s) != run.blocker.as_ref())
    {
        println!("summary:   {summary}");
    }

    let specs = &view.specs;
    let spec_name = |id: &str| spec_name_in(specs, id);
    println!("\nspecs:");
    if specs.is_empty() {
        println!("  the run reached no spec");
    } else {
        let rows: Vec<Vec<String>> = specs
            .iter()
            .map(|s| {
                vec![
                    (s.ordinal + 1).to_string(),
                    short(&s.spec_id).to_string(),
                    s.spec_name
                        .clone()
                        .unwrap_or_else(|| "(deleted spec)".to_string()),
                    s.group.clone().unwrap_or_else(|| "-".to_string()),
                    s.status.to_string(),
                    first_line(&[s.reason.as_ref(), s.summary.as_ref()]),
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

    let node_runs = &view.node_runs;
    println!("\nnode runs (oldest first):");
    if node_runs.is_empty() {
        println!("  none");
    } else {
        let rows: Vec<Vec<String>> = node_runs
            .iter()
            .map(|n| {
                vec![
                    short(&n.id).to_string(),
                    utc_cell(n.started_at),
                    spec_name(&n.spec_id),
                    n.node.clone(),
                    n.plugin.as_deref().map_or_else(
                        || n.mode.clone(),
                        |p| format!("{p} {}", n.plugin_version.as_deref().unwrap_or_default()),
                    ),
                    n.status.to_string(),
                    duration_ms(n.duration_ms),
                    first_line(&[n.reason.as_ref(), n.summary.as_ref()]),
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
            if let Some(reason) = n.reason.as_deref().filter(|r| r.lines().count() > 1) {
                println!(
                    "\n{} {} ({}):\n  {}",
                    short(&n.id),
                    n.node,
                    n.status,
                    reason.replace('\n', "\n  ")
                );
            }
        }
        println!("\n`canopy run output NODE_RUN` prints a node run's stored output.");
    }

    println!("\nhook runs (newest first):");
    if detail.hook_runs.is_empty() {
        println!("  none");
    } else {
        let mut headers = super::hooks::HOOK_RUN_HEADERS;
        headers[0] = "FIRED (UTC)";
        print!(
            "{}",
            table::render(&headers, &super::hooks::hook_run_rows(&detail.hook_runs))
        );
    }
}
