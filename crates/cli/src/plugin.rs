//! `canopy plugin ...`: install, list, inspect, remove, enable, run and bench executor plugins.

use canopy_model::requests::plugins::{BenchBody, RunBody};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::output::{non_empty, print_warnings, utc};
use super::{Client, encode, print_json, short, table, typed};
use canopy_client::in_cli_terms;
use canopy_model::records::plugins::{
    BenchReport, LatencyStats, PluginInfo, PluginList, PluginRecord, RemovedPlugin,
};
use canopy_model::work::{Outcome, PluginRef, Status};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Install a plugin component (.wasm), granting the capabilities it requests.
    #[command(
        after_help = "Examples:\n  canopy plugin install append_file.wasm --grant fs-write:.\n  canopy plugin install my_plugin.wasm --grant process,fs-write:docs --replace"
    )]
    Install {
        /// The component, built for wasm32-wasip2.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Capability to grant: process, sessions, fs-read, fs-write:<subpath>, network
        /// (repeat, or separate with commas).
        #[arg(long = "grant", value_name = "CAP")]
        grants: Vec<String>,
        /// Replace an installed plugin of the same name, and take over modes other plugins serve.
        #[arg(long)]
        replace: bool,
    },
    /// List installed plugins.
    #[command(after_help = "Example:\n  canopy plugin list")]
    List {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show one plugin: manifest, grants, config schema, how it was loaded.
    #[command(after_help = "Example:\n  canopy plugin inspect command")]
    Inspect {
        /// The plugin's name (`canopy plugin list` shows them).
        #[arg(value_name = "PLUGIN", value_parser = non_empty)]
        name: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove a plugin (a built-in is disabled; built-ins cannot be deleted). Warns, listing
    /// them, when graphs still use its modes.
    #[command(after_help = "Example:\n  canopy plugin remove append-file")]
    Remove {
        /// The plugin's name.
        #[arg(value_name = "PLUGIN", value_parser = non_empty)]
        name: String,
    },
    /// Enable a plugin again (a disabled built-in, say).
    #[command(after_help = "Example:\n  canopy plugin enable docs-maintenance")]
    Enable {
        /// The plugin's name.
        #[arg(value_name = "PLUGIN", value_parser = non_empty)]
        name: String,
    },
    /// Make one `execute` call, printing the outcome: the plugin author's dev loop.
    #[command(
        after_help = "Example:\n  canopy plugin run command --config '{\"command\": \"echo {{spec_name}} > done.txt\"}' --marker spec_name='Add login' --workdir ."
    )]
    Run {
        /// The plugin's name.
        #[arg(value_name = "PLUGIN", value_parser = non_empty)]
        name: String,
        /// The config: JSON text, or @FILE.
        #[arg(long, value_name = "JSON")]
        config: String,
        /// Mode to call [default: the plugin's first mode]
        #[arg(long)]
        mode: Option<String>,
        /// A marker value, e.g. --marker spec_name='Add login' (repeat).
        #[arg(long = "marker", value_name = "KEY=VALUE")]
        markers: Vec<String>,
        /// Directory the call runs in [default: the current directory]
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure a plugin: compile, cached load, fresh instantiate + call; spawn for reference.
    #[command(
        after_help = "Example:\n  canopy plugin bench command --config '{\"command\": \"true\"}' --iterations 200"
    )]
    Bench {
        /// The plugin's name.
        #[arg(value_name = "PLUGIN", value_parser = non_empty)]
        name: String,
        /// The config of each call: JSON text, or @FILE [default: {}]
        #[arg(long, value_name = "JSON")]
        config: Option<String>,
        /// Mode to call [default: the plugin's first mode]
        #[arg(long)]
        mode: Option<String>,
        /// Calls to time.
        #[arg(long, default_value_t = 1000)]
        iterations: u32,
        /// Directory the calls run in [default: a scratch dir in the data dir]
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The API's call fields and the arguments that send them.
const CALL_ARGUMENTS: [(&str, &str); 5] = [
    ("config", "--config"),
    ("mode", "--mode"),
    ("markers", "--marker"),
    ("workdir", "--workdir"),
    ("iterations", "--iterations"),
];

/// Names joined with commas, or `-` when there are none.
fn listed<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() {
        "-".to_string()
    } else {
        names.join(",")
    }
}

pub async fn run(client: &Client, command: PluginCommand) -> Result<ExitCode> {
    match command {
        PluginCommand::Install {
            file,
            grants,
            replace,
        } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let grant = grants.join(",");
            let request = client
                .request(reqwest::Method::POST, "/api/plugins")
                .query(&[
                    ("grant", grant.as_str()),
                    ("replace", if replace { "true" } else { "false" }),
                ])
                .header("content-type", "application/wasm")
                .body(bytes);
            let info: Value = client.send(request).await?;
            let record: PluginRecord = typed(&info, "a plugin")?;
            println!(
                "installed plugin {} {} (sha256 {}) serving modes: {}; granted: {}",
                record.name,
                record.version,
                short(&record.sha256),
                listed(record.manifest.modes.iter()),
                listed(record.granted.iter()),
            );
        }
        PluginCommand::List { json } => {
            let answer: Value = client.get("/api/plugins").await?;
            if json {
                print_json(&answer)?;
            } else {
                let list: PluginList = typed(&answer, "plugins")?;
                let rows: Vec<Vec<String>> = list
                    .plugins
                    .iter()
                    .map(|info| &info.record)
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            p.version.clone(),
                            listed(p.manifest.modes.iter()),
                            listed(p.manifest.capabilities.iter()),
                            listed(p.granted.iter()),
                            if p.builtin { "built-in" } else { "installed" }.to_string(),
                            p.state().to_string(),
                            short(&p.sha256).to_string(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table::render(
                        &[
                            "NAME", "VERSION", "MODES", "REQUESTS", "GRANTED", "KIND", "STATE",
                            "SHA256"
                        ],
                        &rows
                    )
                );
                for skipped in &list.not_loaded {
                    eprintln!(
                        "warning: plugin {} is installed but was not loaded: {}",
                        skipped.name, skipped.why
                    );
                }
            }
        }
        PluginCommand::Inspect { name, json } => {
            let info: Value = client
                .get(&format!("/api/plugins/{}", encode(&name)))
                .await?;
            if json {
                print_json(&info)?;
            } else {
                let PluginInfo { record, load, .. } = typed(&info, "a plugin")?;
                println!("name:          {}", record.name);
                println!("version:       {}", record.version);
                println!("sha256:        {}", record.sha256);
                println!(
                    "kind:          {}",
                    if record.builtin {
                        "built-in"
                    } else {
                        "installed"
                    }
                );
                println!("state:         {}", record.state());
                println!("modes:         {}", listed(record.manifest.modes.iter()));
                println!(
                    "requests:      {}",
                    listed(record.manifest.capabilities.iter())
                );
                println!("granted:       {}", listed(record.granted.iter()));
                let templates: Vec<String> = record
                    .manifest
                    .templates
                    .iter()
                    .map(|t| format!("{} ({})", t.field, t.escape.as_str()))
                    .collect();
                println!(
                    "templates:     {}",
                    if templates.is_empty() {
                        "(none)".to_string()
                    } else {
                        templates.join(", ")
                    }
                );
                println!("installed at:  {}", utc(record.installed_at));
                println!(
                    "loaded from:   {} in {} µs",
                    load.source.as_str(),
                    load.micros
                );
                println!(
                    "config schema:\n{}",
                    serde_json::to_string_pretty(&record.manifest.config_schema)?
                );
                println!(
                    "Canopy's own keys (any mode; read by the daemon, never passed on): {}",
                    canopy_executors::plugins::RESERVED_KEYS.join(", ")
                );
            }
        }
        PluginCommand::Remove { name } => {
            let answer: Value = client
                .delete(&format!("/api/plugins/{}", encode(&name)))
                .await?;
            let removed: RemovedPlugin = typed(&answer, "a removed plugin")?;
            if removed.info.record.builtin {
                println!(
                    "disabled built-in plugin {name} (built-ins cannot be deleted; `canopy plugin enable {name}` brings it back)"
                );
            } else {
                println!("removed plugin {name}");
            }
            print_warnings(&answer);
            for user in &removed.used_by {
                eprintln!("  {}: {} ({} mode)", user.owner, user.place, user.mode);
            }
        }
        PluginCommand::Enable { name } => {
            let _: Value = client
                .post(
                    &format!("/api/plugins/{}/enable", encode(&name)),
                    &json!({}),
                )
                .await?;
            println!("enabled plugin {name}");
        }
        PluginCommand::Run {
            name,
            config,
            mode,
            markers,
            workdir,
            json,
        } => {
            let config = parse_json_arg("--config", &config)?;
            let mut values = BTreeMap::new();
            for marker in markers {
                let Some((key, value)) = marker.split_once('=') else {
                    bail!("--marker `{marker}` must look like KEY=VALUE");
                };
                values.insert(key.to_string(), value.to_string());
            }
            let workdir = match workdir {
                Some(dir) => dir,
                None => std::env::current_dir().context("cannot read the current directory")?,
            };
            let workdir = workdir
                .canonicalize()
                .with_context(|| format!("--workdir {}", workdir.display()))?;
            let body = RunBody {
                mode,
                config,
                markers: values,
                workdir,
            };
            let report: Value = client
                .post(&format!("/api/plugins/{}/run", encode(&name)), &body)
                .await
                .map_err(|err| in_cli_terms(err, &CALL_ARGUMENTS))?;
            let outcome: Outcome = typed(&report["outcome"], "a plugin's outcome")?;
            if json {
                print_json(&report)?;
            } else {
                let plugin: PluginRef = typed(&report["plugin"], "a plugin")?;
                let why = match &outcome.status {
                    Status::Failed { reason } => format!(": {reason}"),
                    Status::Blocked { blocker } => format!(": {blocker}"),
                    Status::Completed | Status::TimedOut { .. } => String::new(),
                };
                println!("{}{why}", outcome.status.as_str());
                if let Some(summary) = &outcome.summary {
                    println!("summary: {summary}");
                }
                if let Some(session) = &outcome.harness_session {
                    println!("harness session: {session}");
                }
                println!(
                    "plugin: {} {} in {} ms",
                    plugin.name, plugin.version, report["duration_ms"]
                );
                if !outcome.detail.is_empty() {
                    println!("--- detail ---\n{}", outcome.detail.trim_end());
                }
            }
            return Ok(if outcome.status == Status::Completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        PluginCommand::Bench {
            name,
            config,
            mode,
            iterations,
            workdir,
            json,
        } => {
            let config_given = config.is_some();
            let config = match config {
                Some(text) => parse_json_arg("--config", &text)?,
                None => Map::new(),
            };
            let workdir = workdir
                .map(|w| {
                    w.canonicalize()
                        .with_context(|| format!("--workdir {}", w.display()))
                })
                .transpose()?;
            let body = BenchBody {
                mode,
                config,
                iterations,
                workdir,
            };
            let report: Value = client
                .post(&format!("/api/plugins/{}/bench", encode(&name)), &body)
                .await
                .map_err(|err| in_cli_terms(err, &CALL_ARGUMENTS))
                .map_err(|err| {
                    // The calls' config is `{}` when left out: a mode with required fields
                    // refuses it, and the way to give them is not obvious from that.
                    if !config_given && format!("{err:#}").contains("invalid config") {
                        err.context(format!(
                            "the calls' config is {{}} without --config: give the fields the mode needs, e.g. `canopy plugin bench {name} --config '{{\"field\": \"value\"}}'` (or --config @FILE)"
                        ))
                    } else {
                        err
                    }
                })?;
            if json {
                print_json(&report)?;
            } else {
                let report: BenchReport = typed(&report, "a bench report")?;
                println!(
                    "plugin {} {} mode {} ({} calls, last: {})",
                    report.plugin.name,
                    report.plugin.version,
                    report.mode,
                    report.call.samples,
                    report.last_status,
                );
                let row = |label: &str, stats: &LatencyStats| {
                    vec![
                        label.to_string(),
                        format_us(stats.median_us),
                        format_us(stats.p99_us),
                        format_us(stats.min_us),
                        stats.samples.to_string(),
                    ]
                };
                let rows = vec![
                    row("compile (Component::new)", &report.compile),
                    row("cached load (deserialize_file)", &report.cache_load),
                    row("fresh instantiate + execute", &report.call),
                    row("  the same on bare wasmtime", &report.bare_call),
                    row("spawn /bin/true (reference)", &report.spawn_true),
                    row("spawn sh -c true (reference)", &report.spawn_sh_true),
                ];
                print!(
                    "{}",
                    table::render(&["STEP", "MEDIAN", "P99", "MIN", "SAMPLES"], &rows)
                );
                println!(
                    "a call through Canopy costs {:.2}x the bare wasmtime call",
                    report.call_over_bare
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn format_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

fn parse_json_arg(flag: &str, text: &str) -> Result<Map<String, Value>> {
    let text = match text.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("{flag}: cannot read {path}"))?
        }
        None => text.to_string(),
    };
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{flag} is not valid JSON"))?;
    match value {
        Value::Object(fields) => Ok(fields),
        _ => bail!("{flag} must be a JSON object"),
    }
}
