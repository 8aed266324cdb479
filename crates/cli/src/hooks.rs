//! `canopy hooks ...`: hook-run history, the hook catalog, the event taxonomy, and dry runs.

use canopy_model::requests::hooks::{DecideBody, HookTestBody, ResetBody};
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;

use super::output::{non_empty, table_or, utc_cell};
use super::{Client, encode, print_json, short, typed};
use canopy_client::in_cli_terms;
use canopy_model::records::hook_reports::{
    CatalogEntry, DecideReport, DecisionKind, DryRun, Taxonomy, TrippedHook,
};
use canopy_model::records::hook_runs::{Dispatch, HookRun, HookRunStatus};

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Hook runs of every source (graph hooks, daemon hooks, project hooks), newest first.
    #[command(
        after_help = "Examples:\n  canopy hooks runs --graph web --since 2h\n  canopy hooks runs --event on_completed --status failed --last 5\n  canopy hooks runs --source config --hook announce-blocked --outcome failed"
    )]
    Runs {
        /// Only the runs of this graph (name, id or unique id prefix).
        #[arg(long, value_name = "GRAPH")]
        graph: Option<String>,
        /// A graph hook key (on_completed, on_failed, on_blocked, on_spec_completed,
        /// on_spec_failed), or a taxonomy event or glob (graph.run.blocked, spec.*).
        #[arg(long)]
        event: Option<String>,
        /// queued, running, completed, failed, timed_out, interrupted or dropped.
        #[arg(long)]
        status: Option<String>,
        /// applied, failed or dropped (denied, skipped, rejected: sync hooks, which come later).
        #[arg(long)]
        outcome: Option<String>,
        /// graph (a graph's hooks), config (daemon hooks in canopy.toml) or project (a
        /// project's hooks).
        #[arg(long)]
        source: Option<String>,
        /// Only the runs of this hook (its name: `web.on_completed[0]`, `announce-blocked`).
        #[arg(long, value_name = "NAME")]
        hook: Option<String>,
        /// Only runs fired since this time (RFC 3339) or this long ago (10m, 2h).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// How many runs to list.
        #[arg(long, default_value_t = 20)]
        last: usize,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Every configured hook (the catalog): graphs' hooks, the daemon hooks and the projects'
    /// hooks in force, with the executor that would run each.
    #[command(
        after_help = "Examples:\n  canopy hooks list\n  canopy hooks list --graph web --mode command\n  canopy hooks list --source config --event graph.run.blocked\n  canopy hooks list --workspace ~/src/web"
    )]
    List {
        /// Only this graph's hooks (name, id or unique id prefix), and the daemon hooks that may
        /// fire for it.
        #[arg(long, value_name = "GRAPH")]
        graph: Option<String>,
        /// Only the hooks of this project (an absolute path) or graph's workdir (a name).
        #[arg(long, value_name = "PATH|GRAPH")]
        workspace: Option<String>,
        /// A graph hook key, or a taxonomy event or glob.
        #[arg(long)]
        event: Option<String>,
        /// graph, config (daemon hooks) or project.
        #[arg(long)]
        source: Option<String>,
        /// sync or async; or an executor mode (command, agent, docs-maintenance, ...).
        #[arg(long)]
        mode: Option<String>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The event taxonomy: every event, its family, whether it is sync-eligible, and the
    /// markers it offers; then the graph-hook keys and the events they fire on.
    #[command(
        after_help = "Examples:\n  canopy hooks events\n  canopy hooks events --family graph\n  canopy hooks events --sync-only --json"
    )]
    Events {
        /// Only this family's events (graph, spec, node, hook, session, plugin, cron, webhook, project).
        #[arg(long)]
        family: Option<String>,
        /// Only the events a sync hook may take.
        #[arg(long)]
        sync_only: bool,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The hooks their firing breaker tripped: each fired more than `[limits] breaker_firings`
    /// times within `breaker_window_secs` (a loop?), and its firings are dropped since.
    #[command(after_help = "Examples:\n  canopy hooks tripped\n  canopy hooks reset announce")]
    Tripped {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Put a tripped hook back: its next firing runs (a config reload puts back every one).
    #[command(
        after_help = "Examples:\n  canopy hooks reset announce\n  canopy hooks reset 'web.on_spec_completed[0]'"
    )]
    Reset {
        /// The hook's name, as `canopy hooks tripped` shows it.
        #[arg(value_name = "NAME", value_parser = non_empty)]
        name: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Render an event's hooks against the graph's latest run (or --run): which would fire,
    /// with what values, and what is wrong with them. --execute runs them, as test runs. For a
    /// sync event (node.pre_dispatch, ...) it asks the graph's and the daemon's sync hooks about
    /// --input, and shows the decision and the patched input, recording nothing (without a
    /// graph, only the daemon's hooks are asked: a cron's, a webhook's, a plugin install's).
    #[command(
        after_help = "Examples:\n  canopy hooks test web on_spec_completed --spec 3f2a\n  canopy hooks test web on_completed --index 0 --execute\n  canopy hooks test web node.pre_dispatch --input '{\"node\": \"push\", \"command\": \"git push --force\"}'\n  canopy hooks test cron.pre_fire --input '{\"cron\": \"nightly-report\", \"command\": \"./report.sh\"}'"
    )]
    Test {
        /// `GRAPH EVENT`, or a sync `EVENT` alone. The graph: its name, id or unique id prefix.
        /// The event: on_completed, on_failed, on_blocked or on_spec_completed; or a sync
        /// event: node.pre_dispatch, graph.run.pre_start, cron.pre_fire, ...
        #[arg(value_names = ["GRAPH", "EVENT"], num_args = 1..=2, required = true, value_parser = non_empty)]
        target: Vec<String>,
        /// A sync event's input, as a JSON object of its fields (the graph's own are filled in).
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
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
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The query parameters `hooks runs` / `hooks list` / `hooks events` send and their arguments.
const FILTER_ARGUMENTS: [(&str, &str); 11] = [
    ("graph", "--graph"),
    ("workspace", "--workspace"),
    ("event", "--event"),
    ("status", "--status"),
    ("outcome", "--outcome"),
    ("source", "--source"),
    ("hook", "--hook"),
    ("since", "--since"),
    ("last", "--last"),
    ("mode", "--mode"),
    ("family", "--family"),
];

/// Hook-run rows for a table.
pub fn hook_run_rows(runs: &[HookRun]) -> Vec<Vec<String>> {
    runs.iter()
        .map(|r| {
            vec![
                utc_cell(r.fired_at),
                r.source.to_string(),
                r.hook_name.clone(),
                r.event.clone(),
                r.mode.clone().unwrap_or_else(|| "-".to_string()),
                format!("{}{}", status_cell(r), if r.test { " (test)" } else { "" }),
                r.duration_ms
                    .map_or_else(|| "-".to_string(), |ms| format!("{ms} ms")),
                patched(r.patch_applied.as_ref())
                    .or_else(|| r.error.clone().or_else(|| r.summary.clone()))
                    .unwrap_or_else(|| "-".to_string())
                    .lines()
                    .next()
                    .unwrap_or("-")
                    .to_string(),
            ]
        })
        .collect()
}

/// The hook runs of a list answer (`{"runs": [...]}`).
fn runs_of(answer: &Value) -> Result<Vec<HookRun>> {
    typed(&answer["runs"], "hook runs")
}

/// `hooks test [GRAPH] SYNC_EVENT`: what the sync hooks answer about `input`.
async fn decide(
    client: &Client,
    graph: Option<&str>,
    event: &str,
    input: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let input = match input {
        Some(text) => match serde_json::from_str(text)
            .map_err(|err| anyhow::anyhow!("--input must be a JSON object: {err}"))?
        {
            Value::Object(fields) => fields,
            other => {
                anyhow::bail!("--input must be a JSON object of the event's fields, not {other}")
            }
        },
        None => serde_json::Map::new(),
    };
    let body = DecideBody {
        event: event.to_string(),
        input,
        graph: graph.map(str::to_string),
    };
    let answer: Value = client
        .post("/api/hooks/decide", &body)
        .await
        .map_err(|err| {
            in_cli_terms(
                err,
                &[("event", "EVENT"), ("input", "--input"), ("graph", "GRAPH")],
            )
        })?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let report: DecideReport = typed(&answer, "a sync-hook decision")?;
    let hooks = &report.hooks;
    if hooks.is_empty() {
        match graph {
            Some(graph) => {
                println!("no sync hook on {event} for {graph}: the action goes ahead as asked");
            }
            None => println!("no sync hook on {event}: the action goes ahead as asked"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    match report.decision {
        DecisionKind::Deny => println!(
            "{event}: denied by `{}`: {}",
            report.hook.as_deref().unwrap_or_default(),
            report.reason.as_deref().unwrap_or_default()
        ),
        _ if report.patched => println!("{event}: allowed, patched"),
        _ => println!("{event}: allowed"),
    }
    let rows: Vec<Vec<String>> = hooks
        .iter()
        .map(|hook| {
            vec![
                hook.hook_name.clone(),
                hook.source.to_string(),
                hook.mode.clone().unwrap_or_else(|| "-".to_string()),
                format!(
                    "{}{}",
                    hook.outcome,
                    if hook.required { " (required)" } else { "" }
                ),
                format!("{} ms", hook.duration_ms),
                patched(hook.patch_applied.as_ref())
                    .or_else(|| hook.error.clone())
                    .unwrap_or_else(|| "-".to_string()),
            ]
        })
        .collect();
    table_or(
        &[
            "HOOK",
            "SOURCE",
            "MODE",
            "OUTCOME",
            "DURATION",
            "PATCH / ERROR",
        ],
        &rows,
        "",
    );
    if report.patched {
        println!("\ninput as patched: {}", report.input);
    }
    Ok(ExitCode::SUCCESS)
}

/// A hook run's status as the table shows it: a sync hook's is what it meant for its action
/// (`denied (sync)`, `rejected (sync)`), unless it timed out.
fn status_cell(run: &HookRun) -> String {
    match (run.dispatch, run.outcome) {
        (Dispatch::Sync, Some(outcome)) if run.status != HookRunStatus::TimedOut => {
            format!("{outcome} (sync)")
        }
        (Dispatch::Sync, _) => format!("{} (sync)", run.status),
        _ => run.status.to_string(),
    }
}

/// What a sync hook's applied patch changed: `patched command, model`.
fn patched(patch: Option<&Value>) -> Option<String> {
    let fields = patch?.as_object()?;
    Some(format!(
        "patched {}",
        fields.keys().cloned().collect::<Vec<_>>().join(", ")
    ))
}

pub const HOOK_RUN_HEADERS: [&str; 8] = [
    "FIRED (UTC)",
    "SOURCE",
    "HOOK",
    "EVENT",
    "MODE",
    "STATUS",
    "DURATION",
    "SUMMARY / ERROR",
];

/// A catalog entry's matcher in a line: `graph=web spec_ids=3f2a91c2b7e0`.
fn matcher_summary(matcher: &Value) -> String {
    let parts: Vec<String> = matcher
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(field, value)| {
            let text = match value {
                Value::Null => return None,
                Value::String(s) => s.clone(),
                Value::Array(list) => list
                    .iter()
                    .map(|v| match v.as_str() {
                        Some(id) if field == "spec_ids" => short(id).to_string(),
                        Some(text) => text.to_string(),
                        None => v.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            Some(format!("{field}={text}"))
        })
        .collect();
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(" ")
    }
}

/// Sends the filters that were given, naming them in the user's terms when refused.
async fn get_filtered(client: &Client, path: &str, query: &[(&str, String)]) -> Result<Value> {
    let request = client.request(reqwest::Method::GET, path).query(query);
    client
        .send(request)
        .await
        .map_err(|err| in_cli_terms(err, &FILTER_ARGUMENTS))
}

/// The filters that were given, as query parameters.
fn given<'a>(
    filters: impl IntoIterator<Item = (&'a str, Option<String>)>,
) -> Vec<(&'a str, String)> {
    filters
        .into_iter()
        .filter_map(|(key, value)| value.map(|v| (key, v)))
        .collect()
}

pub async fn run(client: &Client, command: HooksCommand) -> Result<ExitCode> {
    match command {
        HooksCommand::Runs {
            graph,
            event,
            status,
            outcome,
            source,
            hook,
            since,
            last,
            json,
        } => {
            let mut query = given([
                ("graph", graph),
                ("event", event),
                ("status", status),
                ("outcome", outcome),
                ("source", source),
                ("hook", hook),
                ("since", since),
            ]);
            let filtered = !query.is_empty();
            query.push(("last", last.to_string()));
            let answer = get_filtered(client, "/api/hook-runs", &query).await?;
            if json {
                print_json(&answer)?;
            } else {
                table_or(
                    &HOOK_RUN_HEADERS,
                    &hook_run_rows(&runs_of(&answer)?),
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
            workspace,
            event,
            source,
            mode,
            json,
        } => {
            let query = given([
                ("graph", graph),
                ("workspace", workspace),
                ("event", event),
                ("source", source),
                ("mode", mode),
            ]);
            let filtered = !query.is_empty();
            let answer = get_filtered(client, "/api/hooks/catalog", &query).await?;
            if json {
                print_json(&answer)?;
            } else {
                let hooks: Vec<CatalogEntry> = typed(&answer["hooks"], "the hook catalog")?;
                let rows: Vec<Vec<String>> = hooks
                    .iter()
                    .map(|h| {
                        let executor = match &h.executor {
                            Some(e) => format!("{} {}", e.name, e.version),
                            None => format!(
                                "{} (no executor installed)",
                                h.executor_kind.as_deref().unwrap_or("?")
                            ),
                        };
                        // A sync hook's rule: `sync p=10 required`.
                        let mode = match h.mode {
                            Dispatch::Sync => format!(
                                "sync{}{}",
                                match h.priority {
                                    0 => String::new(),
                                    p => format!(" p={p}"),
                                },
                                if h.required { " required" } else { "" }
                            ),
                            other => other.to_string(),
                        };
                        vec![
                            h.name.clone(),
                            h.source.to_string(),
                            h.event.clone(),
                            mode,
                            executor,
                            h.order.to_string(),
                            matcher_summary(&h.matcher),
                        ]
                    })
                    .collect();
                table_or(
                    &[
                        "NAME", "SOURCE", "EVENT", "MODE", "EXECUTOR", "ORDER", "MATCHER",
                    ],
                    &rows,
                    if filtered {
                        "no hooks match"
                    } else {
                        "no hooks configured; a graph's `hooks` field or `[[hooks]]` in canopy.toml adds them"
                    },
                );
            }
        }
        HooksCommand::Tripped { json } => {
            let answer: Value = client.get("/api/hooks/tripped").await?;
            if json {
                print_json(&answer)?;
            } else {
                let tripped: Vec<TrippedHook> = typed(&answer["tripped"], "tripped hooks")?;
                let rows: Vec<Vec<String>> = tripped
                    .iter()
                    .map(|t| {
                        vec![
                            t.hook_name.clone(),
                            t.source.clone(),
                            utc_cell(t.tripped_at),
                            t.dropped.to_string(),
                        ]
                    })
                    .collect();
                table_or(
                    &["HOOK", "SOURCE", "TRIPPED", "DROPPED"],
                    &rows,
                    "no hook is tripped",
                );
            }
        }
        HooksCommand::Reset { name, json } => {
            let answer: Value = client.post("/api/hooks/reset", &ResetBody { name }).await?;
            if json {
                print_json(&answer)?;
            } else {
                let reset: Vec<TrippedHook> = typed(&answer["reset"], "reset hooks")?;
                for hook in reset {
                    println!(
                        "{} ({}) is back: its next firing runs ({} dropped while tripped)",
                        hook.hook_name, hook.source, hook.dropped
                    );
                }
            }
        }
        HooksCommand::Events {
            family,
            sync_only,
            json,
        } => {
            let mut query = given([("family", family)]);
            if sync_only {
                query.push(("sync_only", "true".to_string()));
            }
            let answer = get_filtered(client, "/api/hooks/events", &query).await?;
            if json {
                print_json(&answer)?;
            } else {
                let taxonomy: Taxonomy = typed(&answer, "the event taxonomy")?;
                let marker_list = |markers: &[String]| {
                    if markers.is_empty() {
                        "-".to_string()
                    } else {
                        markers.join(" ")
                    }
                };
                let rows: Vec<Vec<String>> = taxonomy
                    .events
                    .iter()
                    .map(|e| {
                        vec![
                            e.event.clone(),
                            e.family.as_str().to_string(),
                            if e.sync_eligible { "yes" } else { "no" }.to_string(),
                            marker_list(&e.markers),
                        ]
                    })
                    .collect();
                table_or(
                    &["EVENT", "FAMILY", "SYNC", "MARKERS"],
                    &rows,
                    "no events match",
                );
                let envelope = &taxonomy.envelope_markers;
                if !rows.is_empty() && !envelope.is_empty() {
                    println!("every event also offers: {}", envelope.join(" "));
                }
                let keys: Vec<Vec<String>> = taxonomy
                    .graph_hooks
                    .iter()
                    .map(|k| {
                        vec![
                            k.event.clone(),
                            k.taxonomy_event.clone(),
                            format!(
                                "{}{}",
                                marker_list(&k.markers),
                                if k.spec_ids == Some(true) {
                                    "; takes spec_ids"
                                } else {
                                    ""
                                }
                            ),
                        ]
                    })
                    .collect();
                if !keys.is_empty() {
                    println!("\ngraph hooks (a graph's `hooks` keys):");
                    table_or(&["KEY", "FIRES ON", "MARKERS"], &keys, "");
                }
            }
        }
        HooksCommand::Test {
            target,
            input,
            index,
            spec,
            run,
            execute,
            json,
        } => {
            let (graph, event) = match target.as_slice() {
                [graph, event] => (Some(graph.clone()), event.clone()),
                [event] => (None, event.clone()),
                _ => anyhow::bail!("give GRAPH EVENT, or a sync EVENT alone"),
            };
            // A dotted event is a sync one: its hooks decide about an input.
            if event.contains('.') {
                return decide(client, graph.as_deref(), &event, input.as_deref(), json).await;
            }
            let Some(graph) = graph else {
                anyhow::bail!(
                    "{event} is a graph's hook event: name the graph (`canopy hooks test GRAPH {event}`); only a sync event (node.pre_dispatch, cron.pre_fire, ...) is tested without one"
                );
            };
            if input.is_some() {
                anyhow::bail!(
                    "--input belongs to sync events (node.pre_dispatch, graph.run.pre_start, ...); {event} is tested against a past run (--run, --spec)"
                );
            }
            let body = HookTestBody {
                event,
                index,
                spec,
                run,
                execute,
            };
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
            let dry: DryRun = typed(&answer, "a hook dry run")?;
            println!(
                "{} {} against run {}",
                dry.graph,
                dry.event.as_str(),
                short(&dry.run_id)
            );
            if let Some(note) = &dry.event_note {
                println!("note: {note}");
            }
            println!("markers:");
            for (key, value) in &dry.markers {
                println!("  {{{{{key}}}}} = {}", value.replace('\n', "\n    "));
            }
            if dry.hooks.is_empty() {
                println!("no hooks on {}", dry.event.as_str());
            }
            let mut problems = false;
            for hook in &dry.hooks {
                // Its plugin is disabled: `reason` says so; it cannot run, which is a problem.
                problems |= hook.executor_disabled;
                let fires = if hook.would_fire {
                    "would fire".to_string()
                } else {
                    format!(
                        "would not fire: {}",
                        hook.reason.as_deref().unwrap_or_default()
                    )
                };
                println!(
                    "\n[{}] {} mode, {fires}",
                    hook.index,
                    hook.mode.as_deref().unwrap_or("?")
                );
                println!("  config:   {}", hook.config);
                match &hook.rendered {
                    // A config of Canopy's own keys alone (`mode`, ...): the executor gets `{}`.
                    Some(Value::Object(fields)) if fields.is_empty() => {
                        println!("  rendered: {{}} (no fields of the executor's own to render)");
                    }
                    Some(rendered) if !rendered.is_null() => println!("  rendered: {rendered}"),
                    _ => {}
                }
                for problem in &hook.problems {
                    problems = true;
                    println!("  problem:  {problem}");
                }
            }
            if execute {
                println!("\ntest runs:");
                table_or(
                    &HOOK_RUN_HEADERS,
                    &hook_run_rows(&dry.runs),
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
