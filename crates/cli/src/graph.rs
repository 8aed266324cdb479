//! `canopy graph ...`: create, inspect, edit and control graphs.

use canopy_model::requests::graphs::ControlRequest;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use super::output::{non_empty, print_warnings, table_or, utc, utc_cell};
use super::progress::{self, WaitOptions};
use super::{Client, encode, print_json, short, table, typed};
use canopy_client::in_cli_terms;
use canopy_model::records::graphs::GraphStatus;
use canopy_model::records::runs::NodeRun;
use canopy_model::records::views::{GraphView, PageInfo, Progress, RunDetail};

#[derive(Debug, Subcommand)]
pub enum GraphCommand {
    /// Create a graph from a JSON file with the API's field names
    /// (name, workdir, nodes, specs, allow_dirty_start, hooks, node).
    #[command(
        after_help = "Example:\n  canopy graph create web.json    # web.json: {\"name\": \"web\", \"workdir\": \"/home/me/src/web\", \"nodes\": [{\"name\": \"test\", \"command\": \"cargo test\"}]}"
    )]
    Create {
        /// The graph as a JSON file (see the README's quick start, or the manual's walkthrough).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List graphs with their status.
    #[command(after_help = "Example:\n  canopy graph list")]
    List {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show a graph: status, blocker, warnings, current run and its progress (`get` is the
    /// same command).
    #[command(
        visible_alias = "get",
        after_help = "Examples:\n  canopy graph show web\n  canopy graph show web --offset 50    # the next page of a long run's specs"
    )]
    Show {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        /// Skip this many specs of the run's per-spec list.
        #[arg(long, value_name = "N", default_value_t = 0)]
        offset: usize,
        /// Show at most this many specs (1 to 1000).
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Change a graph with a JSON file holding only the fields to change. Each event named under
    /// `hooks` gets exactly the list given (`[]` removes its hooks); other events keep theirs.
    #[command(
        after_help = "Examples:\n  canopy graph edit web changes.json    # changes.json: {\"allow_dirty_start\": true}\n  canopy graph edit web changes.json --if-version 4    # refused if someone edited web since version 4"
    )]
    Edit {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        /// A JSON file with the fields to change.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Apply the edit only if the graph is still at this version (`version` in `graph get`);
        /// otherwise change nothing and say which version it is at.
        #[arg(long, value_name = "N")]
        if_version: Option<i64>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Start a run over the bound specs, or over a queue's pending members.
    #[command(
        after_help = "Examples:\n  canopy graph run web --wait\n  canopy graph run web --queue sprint-1 --workdir ../web-2"
    )]
    Run {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        /// Drain this queue instead of the graph's bound specs.
        #[arg(long, value_name = "QUEUE")]
        queue: Option<String>,
        /// Run in this workdir instead of the graph's.
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Wait until the run stops running and its hooks end, showing progress on stderr;
        /// then print how it ended.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        waiting: WaitOptions,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Follow the graph's running run to its end, with the same progress lines as
    /// `graph run --wait`; the exit code says how it ended (0 completed). A graph with no run
    /// in flight shows how its last one ended.
    #[command(after_help = "Example:\n  canopy graph watch web")]
    Watch {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        #[command(flatten)]
        watching: Watching,
    },
    /// Back to idle; the run history stays. A run in flight is abandoned (recorded `reset`);
    /// `graph cancel` is the way to stop one.
    #[command(after_help = "Example:\n  canopy graph reset web")]
    Reset {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Stop the run in flight: its running node is stopped and its processes killed; the run,
    /// the spec it was on and the graph are recorded `cancelled` (graph hooks do not fire;
    /// daemon hooks can key on `graph.run.cancelled`). Works on a running, paused or
    /// interrupted run.
    #[command(after_help = "Example:\n  canopy graph cancel web")]
    Cancel {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Continue a paused run. Without --mode: a blocked node runs again, a dirty tree is checked
    /// again, an interrupted run goes on with its next spec.
    #[command(
        after_help = "Examples:\n  canopy graph continue web                                   # resume\n  canopy graph continue web --mode run_from_node --node test  # (re)start the spec at node `test`\n  canopy graph continue web --mode skip_next_spec             # skip the spec it stopped on or before"
    )]
    Continue {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        /// How to go on instead of resuming.
        #[arg(long, value_enum)]
        mode: Option<ContinueMode>,
        /// The node to start at (with --mode run_from_node).
        #[arg(long, value_name = "NODE", required_if_eq("mode", "run_from_node"))]
        node: Option<String>,
        /// Wait until the run stops running and its hooks end, showing progress on stderr.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        waiting: WaitOptions,
    },
    /// The nodes, the current run and the node-run history with durations.
    #[command(after_help = "Example:\n  canopy graph info web --last 10")]
    Info {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
        /// Node runs to list.
        #[arg(long, default_value_t = 30)]
        last: usize,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a graph and its run history.
    #[command(after_help = "Example:\n  canopy graph rm web")]
    Rm {
        /// The graph's name, id or unique id prefix.
        #[arg(value_name = "GRAPH", value_parser = non_empty)]
        name: String,
    },
}

/// How `graph continue` goes on.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ContinueMode {
    /// Start the spec the run stopped on (blocked or interrupted), or else the next spec, at
    /// --node; the dirty-tree guard does not refuse it.
    #[value(name = "run_from_node")]
    RunFromNode,
    /// Skip the blocked spec, or the next spec (the one a dirty tree stopped), and go on.
    #[value(name = "skip_next_spec")]
    SkipNextSpec,
}

impl ContinueMode {
    fn as_str(self) -> &'static str {
        match self {
            Self::RunFromNode => "run_from_node",
            Self::SkipNextSpec => "skip_next_spec",
        }
    }
}

fn read_json(path: &PathBuf) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    if !value.is_object() {
        bail!("{} must hold a JSON object", path.display());
    }
    Ok(value)
}

/// A refusal of the graph in `file` (400: a field of it is wrong) names the file.
fn about_file(err: anyhow::Error, file: &std::path::Path) -> anyhow::Error {
    match err.downcast_ref::<canopy_client::ApiFailure>() {
        Some(failure) if failure.status == 400 => {
            anyhow::anyhow!("{}: {}", file.display(), failure.message)
        }
        _ => err,
    }
}

fn print_graph(view: &GraphView) {
    let graph = &view.graph;
    println!("graph:    {} ({})", graph.name, short(&graph.id));
    println!("status:   {}", graph.status);
    println!("workdir:  {}", graph.workdir);
    if let Some(node) = &graph.node {
        println!("node:     {node} (its runs are made by that daemon)");
    }
    println!("version:  {}", graph.version);
    if let Some(blocker) = &graph.blocker {
        println!("blocker:  {}", blocker.replace('\n', "\n          "));
    }
    if let Some(warning) = &view.consistency_warning {
        println!("warning:  {warning}");
    }
    let Some(current) = &view.current_run else {
        return;
    };
    let run = &current.run;
    let queue = run
        .queue_id
        .as_deref()
        .map(|q| format!(", queue {}", short(q)))
        .unwrap_or_default();
    println!(
        "run:      {} {} (started {}{queue})",
        short(&run.id),
        run.status,
        utc(run.started_at)
    );
    let rows: Vec<Vec<String>> = view
        .progress
        .iter()
        .map(|p| {
            vec![
                p.position.to_string(),
                short(&p.spec_id).to_string(),
                p.spec_name.clone(),
                p.group.clone().unwrap_or_else(|| "-".to_string()),
                done_in_run(&p.result.to_string(), p.done_in_run.as_deref()),
                summary_or_reason(p),
            ]
        })
        .collect();
    if !view.progress_summary.is_empty() {
        let counts: Vec<String> = view
            .progress_summary
            .iter()
            .map(|(result, count)| format!("{count} {result}"))
            .collect();
        println!("specs:    {}", counts.join(", "));
    }
    if !rows.is_empty() {
        println!();
        print!(
            "{}",
            table::render(
                &["POS", "SPEC", "NAME", "GROUP", "RESULT", "SUMMARY / REASON"],
                &rows
            )
        );
        let PageInfo { offset, total, .. } = view.progress_page;
        let shown = rows.len();
        if offset > 0 || offset + shown < total {
            println!(
                "showing specs {}-{} of {total}; `canopy graph get {} --offset {}` shows the next ones",
                offset + 1,
                offset + shown,
                graph.name,
                offset + shown
            );
        }
    }
}

/// A queue member's status, with the run that completed or skipped it when that is another run
/// (`completed (run 3f2a9c1e0b7d)`).
pub(crate) fn done_in_run(status: &str, done_in_run: Option<&str>) -> String {
    match done_in_run {
        Some(run) => format!("{status} (run {})", short(run)),
        None => status.to_string(),
    }
}

/// The last cell of a progress line: why a failed, blocked or interrupted spec stopped (its
/// node and reason, first line), else its summary.
fn summary_or_reason(progress: &Progress) -> String {
    if !progress.result.stopped() {
        return progress.summary.clone().unwrap_or_else(|| "-".to_string());
    }
    let reason = progress
        .reason
        .as_deref()
        .filter(|r| !r.trim().is_empty())
        .map_or_else(
            || "no reason recorded".to_string(),
            |r| {
                let mut lines = r.trim().lines();
                let first = lines.next().unwrap_or_default().to_string();
                if lines.next().is_some() {
                    first + " …"
                } else {
                    first
                }
            },
        );
    match &progress.reason_node {
        Some(node) => format!("{node}: {reason}"),
        None => reason,
    }
}

/// Waits for the graph's current run (progress on stderr, then its hooks); returns `graph get`.
/// Ctrl-C leaves the run going and says how to follow it again.
async fn wait_for(
    client: &Client,
    name: &str,
    graph: &GraphView,
    before: Option<&RunDetail>,
    options: &WaitOptions,
) -> Result<Value> {
    let run_id = graph
        .current_run
        .as_ref()
        .map(|c| c.run.id.as_str())
        .unwrap_or_default();
    let graph_name = graph.graph.name.as_str();
    tokio::select! {
        waited = progress::wait(client, graph_name, run_id, before, options) => {
            waited?;
        }
        _ = tokio::signal::ctrl_c() => {
            eprintln!(
                "\ndetached; run {} goes on: `canopy graph watch {graph_name}` follows it again, `canopy graph cancel {graph_name}` stops it",
                short(run_id)
            );
            std::process::exit(130);
        }
    }
    client.get(&format!("/api/graphs/{}", encode(name))).await
}

/// How long `graph run` (without --wait) looks for its run's first step.
const FIRST_STEP: std::time::Duration = std::time::Duration::from_secs(2);

/// The graph once its run has taken its first step (a node started, or it stopped: paused on a
/// dirty tree, say), or as it is after [`FIRST_STEP`].
async fn first_step(client: &Client, name: &str, started: Value) -> Result<Value> {
    let deadline = std::time::Instant::now() + FIRST_STEP;
    let mut graph = started;
    loop {
        let view: GraphView = typed(&graph, "a graph")?;
        let stepped = view.graph.status != GraphStatus::Running
            || view
                .current_run
                .as_ref()
                .is_some_and(|run| !run.node_runs.is_empty());
        if stepped || std::time::Instant::now() >= deadline {
            return Ok(graph);
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        graph = client.get(&format!("/api/graphs/{}", encode(name))).await?;
    }
}

/// The graph's current run before a continue, so that the wait reports only what comes next.
async fn run_before_continue(client: &Client, name: &str) -> Result<Option<RunDetail>> {
    let graph: Value = client.get(&format!("/api/graphs/{}", encode(name))).await?;
    let graph: GraphView = typed(&graph, "a graph")?;
    match graph.current_run {
        Some(current) => {
            let run: Value = client
                .get(&format!("/api/runs/{}?brief=true", encode(&current.run.id)))
                .await?;
            Ok(Some(typed(&run, "a run")?))
        }
        None => Ok(None),
    }
}

/// How `graph watch` and `run watch` follow a run.
#[derive(Debug, clap::Args)]
pub struct Watching {
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Stop watching after this long (30s, 2h) even if the run goes on.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    timeout: Option<std::time::Duration>,
    /// Print the API's JSON answer, unchanged, instead of text.
    #[arg(long)]
    json: bool,
}

impl Watching {
    /// Whether the answer is printed as JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

/// Follows the graph's running run to its end (progress on stderr), then shows the graph; the
/// exit code says how the run ended. A graph with no run in flight is shown as it is.
pub(crate) async fn watch(
    client: &Client,
    name: &str,
    mut graph: Value,
    watching: Watching,
) -> Result<ExitCode> {
    let waiting = WaitOptions {
        quiet: watching.quiet,
        hooks_timeout: progress::HOOKS_TIMEOUT,
        timeout: watching.timeout,
    };
    let view: GraphView = typed(&graph, "a graph")?;
    let running = view.current_run.is_some() && view.graph.status == GraphStatus::Running;
    if running {
        graph = wait_for(client, name, &view, None, &waiting).await?;
    } else if !watching.json {
        eprintln!(
            "graph {} has no run in flight; it is {}",
            view.graph.name, view.graph.status
        );
    }
    let view: GraphView = typed(&graph, "a graph")?;
    if watching.json {
        print_json(&graph)?;
    } else {
        print_graph(&view);
    }
    Ok(outcome_code(&view))
}

fn outcome_code(view: &GraphView) -> ExitCode {
    if view.graph.status == GraphStatus::Completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub async fn run(client: &Client, command: GraphCommand) -> Result<ExitCode> {
    let path = |name: &str| format!("/api/graphs/{}", encode(name));
    match command {
        GraphCommand::Create { file, json } => {
            let graph: Value = client
                .post("/api/graphs", &read_json(&file)?)
                .await
                .map_err(|err| about_file(err, &file))?;
            if json {
                print_json(&graph)?;
            } else {
                print_warnings(&graph);
                let view: GraphView = typed(&graph, "a graph")?;
                println!(
                    "created graph {} ({})",
                    view.graph.name,
                    short(&view.graph.id)
                );
            }
        }
        GraphCommand::List { json } => {
            let answer: Value = client.get("/api/graphs").await?;
            if json {
                print_json(&answer)?;
            } else {
                let graphs: Vec<GraphView> = typed(&answer["graphs"], "graphs")?;
                let rows: Vec<Vec<String>> = graphs
                    .iter()
                    .map(|view| {
                        let g = &view.graph;
                        vec![
                            g.name.clone(),
                            g.status.to_string(),
                            g.nodes.len().to_string(),
                            view.specs_total.to_string(),
                            g.workdir.clone(),
                            g.blocker
                                .as_deref()
                                .map(|b| b.lines().next().unwrap_or_default().to_string())
                                .unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect();
                table_or(
                    &["NAME", "STATUS", "NODES", "SPECS", "WORKDIR", "BLOCKER"],
                    &rows,
                    "no graphs; create one with `canopy graph create FILE`",
                );
            }
        }
        GraphCommand::Show {
            name,
            offset,
            limit,
            json,
        } => {
            let graph: Value = client
                .get(&format!("{}?offset={offset}&limit={limit}", path(&name)))
                .await
                .map_err(|err| {
                    in_cli_terms(err, &[("offset", "--offset"), ("limit", "--limit")])
                })?;
            if json {
                print_json(&graph)?;
            } else {
                print_graph(&typed(&graph, "a graph")?);
            }
        }
        GraphCommand::Edit {
            name,
            file,
            if_version,
            json,
        } => {
            let mut request = client
                .request(reqwest::Method::PATCH, &path(&name))
                .json(&read_json(&file)?);
            if let Some(version) = if_version {
                request = request.header(reqwest::header::IF_MATCH, format!("\"{version}\""));
            }
            let graph: Value = client
                .send(request)
                .await
                .map_err(|err| about_file(err, &file))?;
            if json {
                print_json(&graph)?;
            } else {
                print_warnings(&graph);
                let view: GraphView = typed(&graph, "a graph")?;
                if view.unchanged {
                    println!(
                        "graph {} unchanged: the edit sets what it has (still version {})",
                        view.graph.name, view.graph.version
                    );
                } else {
                    println!(
                        "updated graph {} (now version {})",
                        view.graph.name, view.graph.version
                    );
                }
            }
        }
        GraphCommand::Run {
            name,
            queue,
            workdir,
            wait,
            waiting,
            json,
        } => {
            let workdir = workdir
                .map(|w| {
                    w.canonicalize()
                        .with_context(|| format!("--workdir {}", w.display()))
                })
                .transpose()?;
            let body = ControlRequest {
                queue_id: queue,
                workdir: workdir.map(|w| w.display().to_string()),
                ..ControlRequest::new("run")
            };
            let mut graph: Value = client
                .post(&format!("{}/control", path(&name)), &body)
                .await
                .map_err(|err| {
                    in_cli_terms(err, &[("queue_id", "--queue"), ("workdir", "--workdir")])
                })?;
            if wait {
                graph = wait_for(client, &name, &typed(&graph, "a graph")?, None, &waiting).await?;
            }
            if !wait {
                // The run's first step (the dirty-tree guard) is taken right after the answer:
                // say what the run really does, not only that it was started.
                graph = first_step(client, &name, graph).await?;
            }
            let view: GraphView = typed(&graph, "a graph")?;
            if json {
                print_json(&graph)?;
            } else if wait {
                print_graph(&view);
            } else {
                let current = view.current_run.as_ref();
                let run = short(current.map(|c| c.run.id.as_str()).unwrap_or_default());
                match view.graph.status {
                    GraphStatus::Running => {
                        let now = current
                            .and_then(|c| c.node_runs.last())
                            .map(|last| {
                                format!(": node {} on spec {}", last.node, short(&last.spec_id))
                            })
                            .unwrap_or_default();
                        println!("graph {name} is running (run {run}){now}");
                    }
                    // Started all the same: a script that starts runs goes on (`--wait` is
                    // the way to an exit code by outcome).
                    status => {
                        println!("graph {name} is {status} (run {run})");
                        if let Some(blocker) = &view.graph.blocker {
                            println!("blocker: {blocker}");
                        }
                    }
                }
            }
            if wait {
                return Ok(outcome_code(&view));
            }
        }
        GraphCommand::Watch { name, watching } => {
            let graph: Value = client.get(&path(&name)).await?;
            return watch(client, &name, graph, watching).await;
        }
        GraphCommand::Reset { name, json } => {
            let graph: Value = client
                .post(
                    &format!("{}/control", path(&name)),
                    &ControlRequest::new("reset"),
                )
                .await?;
            if json {
                print_json(&graph)?;
            } else {
                let view: GraphView = typed(&graph, "a graph")?;
                println!("graph {} is {}", view.graph.name, view.graph.status);
            }
        }
        GraphCommand::Cancel { name, json } => {
            let graph: Value = client
                .post(
                    &format!("{}/control", path(&name)),
                    &ControlRequest::new("cancel"),
                )
                .await?;
            if json {
                print_json(&graph)?;
            } else {
                let view: GraphView = typed(&graph, "a graph")?;
                println!(
                    "graph {} run {}: {}",
                    view.graph.name,
                    short(
                        view.current_run
                            .as_ref()
                            .map(|c| c.run.id.as_str())
                            .unwrap_or_default()
                    ),
                    view.graph.blocker.as_deref().unwrap_or_default()
                );
            }
        }
        GraphCommand::Continue {
            name,
            mode,
            node,
            wait,
            waiting,
        } => {
            let before = if wait {
                run_before_continue(client, &name).await?
            } else {
                None
            };
            let mode = mode.map(ContinueMode::as_str);
            let body = ControlRequest {
                mode: mode.map(str::to_string),
                node,
                ..ControlRequest::new("continue")
            };
            let mut graph: Value = client
                .post(&format!("{}/control", path(&name)), &body)
                .await
                .map_err(|err| in_cli_terms(err, &[("mode", "--mode"), ("node", "--node")]))?;
            let mut view: GraphView = typed(&graph, "a graph")?;
            if wait {
                graph = wait_for(client, &name, &view, before.as_ref(), &waiting).await?;
                view = typed(&graph, "a graph")?;
                print_graph(&view);
                return Ok(outcome_code(&view));
            }
            println!("graph {name} is {}", view.graph.status);
        }
        GraphCommand::Info { name, last, json } => {
            let graph: Value = client.get(&path(&name)).await?;
            let runs: Value = client
                .get(&format!("{}/node-runs?last={last}", path(&name)))
                .await?;
            if json {
                print_json(&json!({ "graph": graph, "node_runs": runs["node_runs"] }))?;
                return Ok(ExitCode::SUCCESS);
            }
            let view: GraphView = typed(&graph, "a graph")?;
            let node_runs: Vec<NodeRun> = typed(&runs["node_runs"], "node runs")?;
            print_graph(&view);
            println!("\nnodes:");
            for (index, node) in view.graph.nodes.iter().enumerate() {
                println!(
                    "  {}. {}  {}",
                    index + 1,
                    node.name,
                    Value::Object(node.config.clone())
                );
            }
            let rows: Vec<Vec<String>> = node_runs
                .iter()
                .map(|n| {
                    vec![
                        utc_cell(n.started_at),
                        short(&n.run_id).to_string(),
                        short(&n.spec_id).to_string(),
                        n.node.clone(),
                        // A call that never reached its plugin has none recorded: its mode.
                        n.plugin.as_deref().map_or_else(
                            || n.mode.clone(),
                            |p| format!("{p} {}", n.plugin_version.as_deref().unwrap_or_default()),
                        ),
                        n.status.to_string(),
                        n.duration_ms
                            .map_or_else(|| "-".to_string(), |ms| format!("{ms} ms")),
                        // Why it failed or blocked, when it says; else what it did.
                        n.reason
                            .as_deref()
                            .or(n.summary.as_deref())
                            .unwrap_or("-")
                            .lines()
                            .next()
                            .unwrap_or("-")
                            .to_string(),
                    ]
                })
                .collect();
            println!("\nhooks:");
            if view.graph.hooks.is_empty() {
                println!("  (none)");
            }
            for (event, list) in &view.graph.hooks {
                for (index, hook) in list
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                {
                    println!("  {event}[{index}]  {hook}");
                }
            }
            println!("\nnode runs (newest first):");
            table_or(
                &[
                    "STARTED (UTC)",
                    "RUN",
                    "SPEC",
                    "NODE",
                    "EXECUTOR",
                    "STATUS",
                    "DURATION",
                    "REASON / SUMMARY",
                ],
                &rows,
                "no node runs yet",
            );
            println!("\nhook runs of the current run (newest first):");
            table_or(
                &super::hooks::HOOK_RUN_HEADERS,
                &super::hooks::hook_run_rows(&view.completion_hook_runs),
                "no hook runs",
            );
        }
        GraphCommand::Rm { name } => {
            let _: Value = client.delete(&path(&name)).await?;
            println!("deleted graph {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::{GraphStatus, GraphView, summary_or_reason};
    use crate::typed;
    use canopy_model::records::runs::NodeRunStatus;
    use canopy_model::records::views::ProgressResult;

    /// `graph get` as a newer daemon might answer it: a graph status, a spec result and a node
    /// run status this CLI does not know.
    fn newer_answer() -> serde_json::Value {
        let node_run = json!({
            "id": "nr-1", "run_id": "run-1", "spec_id": "s-1", "node": "build",
            "node_index": 0, "mode": "command", "plugin": null, "plugin_version": null,
            "plugin_sha256": null, "status": "paused_for_review", "summary": null,
            "reason": null, "detail": null, "harness_session": null, "resume_session": null,
            "started_at": "2026-12-01T09:00:01.000000Z", "finished_at": null,
            "duration_ms": null, "reviewer": "ana"
        });
        let run = json!({
            "id": "run-1", "graph_id": "3f2a", "workdir": "/src/web", "queue_id": null,
            "status": "running", "blocker": null, "summary": null, "start_node": null,
            "started_at": "2026-12-01T09:00:00.000000Z", "finished_at": null,
            "actor": "user", "dispatch_depth": 0, "specs": [], "node_runs": [node_run]
        });
        let progress = json!({
            "position": 1, "spec_id": "s-1", "spec_name": "login", "group": null,
            "result": "deferred", "summary": "later", "reason": null, "reason_node": null,
            "done_in_run": null
        });
        json!({
            "id": "3f2a9c1e0b7d4e6f8a9b0c1d2e3f4a5b", "name": "web", "workdir": "/src/web",
            "nodes": [{ "name": "build", "command": "make" }], "specs": [],
            "allow_dirty_start": false, "status": "suspended",
            "blocker": "waiting for a person", "hooks": {}, "current_run_id": "run-1",
            "version": 4, "created_at": "2026-12-01T09:00:00.000000Z",
            "updated_at": "2026-12-01T09:00:00.000000Z", "specs_total": 1,
            "consistency_warning": null, "current_run": run,
            "progress_summary": { "deferred": 1 },
            "progress_page": { "offset": 0, "limit": 50, "total": 1 },
            "progress": [progress], "completion_hook_runs": []
        })
    }

    #[test]
    fn a_newer_daemons_states_read_as_unknown_and_the_rest_of_the_answer_still_shows() {
        let view: GraphView = typed(&newer_answer(), "a graph").expect("the answer reads");
        assert_eq!(view.graph.status, GraphStatus::Unknown);
        assert_eq!(view.graph.blocker.as_deref(), Some("waiting for a person"));
        let run = view.current_run.as_ref().expect("its current run");
        assert_eq!(run.node_runs[0].status, NodeRunStatus::Unknown);
        assert_eq!(view.progress[0].result, ProgressResult::Unknown);
        assert_eq!(
            view.progress_summary.get(&ProgressResult::Unknown),
            Some(&1)
        );
        // A spec whose result is not known is not taken for a stopped one: its summary shows.
        assert_eq!(summary_or_reason(&view.progress[0]), "later");
    }

    #[test]
    fn an_answer_that_is_not_a_graph_is_an_error_naming_what_was_expected() {
        let err = typed::<GraphView>(&json!({ "name": 7 }), "a graph")
            .expect_err("a number is not a name")
            .to_string();
        assert!(
            err.starts_with("cannot read the daemon's answer as a graph:"),
            "{err}"
        );
        assert!(err.contains("is the daemon another version?"), "{err}");
    }
}
