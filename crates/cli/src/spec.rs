//! `canopy spec ...`: the standalone spec backlog.

use canopy_model::requests::specs::NewSpec;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::{Map, Value};

use super::output::{non_empty, table_or};
use super::{Client, encode, print_json, short, typed};
use canopy_client::in_cli_terms;
use canopy_model::records::specs::Spec;

#[derive(Debug, Subcommand)]
pub enum SpecCommand {
    /// Add a spec to the backlog. The body is the tagged <spec> format.
    #[command(
        after_help = "Examples:\n  canopy spec add --name \"Login form\" --file login.md\n  canopy spec add --name Greeting --objective \"Print a greeting\"\n  cat login.md | canopy spec add --name \"Login form\" --file - --workdir ~/src/web"
    )]
    Add {
        /// The spec's name.
        #[arg(long)]
        name: String,
        /// The body as text (or use --file).
        #[arg(long, conflicts_with = "file")]
        body: Option<String>,
        /// Only the spec's objective: the body is made with it and the other six sections
        /// left empty, for a quick try.
        #[arg(long, value_name = "TEXT", conflicts_with_all = ["body", "file"])]
        objective: Option<String>,
        /// Read the body from a file (`-` for stdin).
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
        /// The body is in the older heading format (`## Objective`, `## Constraints` ...):
        /// rewrite it as a tagged <spec> first (the text under each heading goes into its tag).
        #[arg(long, conflicts_with = "objective")]
        convert: bool,
        /// Tag the spec with a workdir, for filtering [default: none until a graph binds it,
        /// then that graph's workdir].
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List specs, optionally only those tagged with a workdir.
    #[command(after_help = "Examples:\n  canopy spec list\n  canopy spec list --workdir ~/src/web")]
    List {
        /// Only the specs tagged with this workdir.
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show one spec (id or unambiguous prefix).
    #[command(after_help = "Example:\n  canopy spec show 3f2a")]
    Show {
        /// The spec's id or a unique id prefix (`canopy spec list` shows them).
        #[arg(value_name = "SPEC", value_parser = non_empty)]
        id: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Change a spec's name, body or workdir tag.
    #[command(
        after_help = "Examples:\n  canopy spec update 3f2a --file login.md\n  canopy spec update 3f2a --name \"Login form v2\" --clear-workdir"
    )]
    Update {
        /// The spec's id or a unique id prefix.
        #[arg(value_name = "SPEC", value_parser = non_empty)]
        id: String,
        /// A new name.
        #[arg(long)]
        name: Option<String>,
        /// A new body as text (or use --file).
        #[arg(long, conflicts_with = "file")]
        body: Option<String>,
        /// Read the new body from a file (`-` for stdin).
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
        /// The new body is in the older heading format: rewrite it as a tagged <spec> first.
        /// Without --body/--file, the spec's own stored body is converted.
        #[arg(long)]
        convert: bool,
        /// Tag the spec with this workdir.
        #[arg(long, conflicts_with = "clear_workdir", value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Remove the workdir tag.
        #[arg(long)]
        clear_workdir: bool,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a spec that no graph binds and no queue holds.
    #[command(after_help = "Example:\n  canopy spec rm 3f2a")]
    Rm {
        /// The spec's id or a unique id prefix.
        #[arg(value_name = "SPEC", value_parser = non_empty)]
        id: String,
    },
}

/// The API's spec fields and the arguments that send them.
const SPEC_ARGUMENTS: [(&str, &str); 3] = [
    ("name", "--name"),
    ("body", "--body/--file"),
    ("workdir", "--workdir"),
];

fn read_body(body: Option<String>, file: Option<PathBuf>) -> Result<Option<String>> {
    match (body, file) {
        (Some(body), _) => Ok(Some(body)),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read the body from stdin")?;
            Ok(Some(text))
        }
        (None, Some(path)) => {
            Ok(Some(std::fs::read_to_string(&path).with_context(|| {
                format!("cannot read {}", path.display())
            })?))
        }
        (None, None) => Ok(None),
    }
}

fn absolute(path: PathBuf) -> Result<String> {
    let path = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()?.join(path)
    };
    Ok(path.to_string_lossy().into_owned())
}

/// A spec as `3f2a9c1e0b7d greeting`.
fn spec_line(spec: &Value) -> Result<String> {
    let spec: Spec = typed(spec, "a spec")?;
    Ok(format!("{} {}", short(&spec.id), spec.name))
}

pub async fn run(client: &Client, command: SpecCommand) -> Result<ExitCode> {
    match command {
        SpecCommand::Add {
            name,
            body,
            objective,
            file,
            convert,
            workdir,
            json,
        } => {
            let body = match objective {
                Some(objective) => Some(objective_only(&objective)),
                None => read_body(body, file)?,
            };
            let body = if convert {
                body.map(|body| converted(&body)).transpose()?
            } else {
                body
            };
            let Some(body) = body else {
                bail!(
                    "give the spec's body with --body TEXT or --file PATH (or only its objective with --objective TEXT)"
                );
            };
            let workdir = workdir.map(absolute).transpose()?;
            let spec: Value = client
                .post(
                    "/api/specs",
                    &NewSpec {
                        name,
                        body,
                        workdir,
                    },
                )
                .await
                .map_err(|err| in_cli_terms(err, &SPEC_ARGUMENTS))?;
            if json {
                print_json(&spec)?;
            } else {
                println!("added spec {}", spec_line(&spec)?);
            }
        }
        SpecCommand::List { workdir, json } => {
            let workdir = workdir.map(absolute).transpose()?;
            let path = match &workdir {
                Some(dir) => format!("/api/specs?workdir={}", encode(dir)),
                None => "/api/specs".to_string(),
            };
            let answer: Value = client.get(&path).await?;
            if json {
                print_json(&answer)?;
            } else {
                let specs: Vec<Spec> = typed(&answer["specs"], "specs")?;
                let rows: Vec<Vec<String>> = specs
                    .iter()
                    .map(|s| {
                        let mut name = s.name.clone();
                        if s.needs_conversion {
                            name.push_str("  [needs conversion]");
                        }
                        vec![
                            short(&s.id).to_string(),
                            name,
                            s.workdir.clone().unwrap_or_else(|| "-".to_string()),
                            s.summary.clone().unwrap_or_else(|| "-".to_string()),
                        ]
                    })
                    .collect();
                let empty = match &workdir {
                    Some(dir) => format!("no specs tagged with workdir {dir}"),
                    None => "no specs; add one with `canopy spec add --name NAME --file FILE`"
                        .to_string(),
                };
                table_or(&["ID", "NAME", "WORKDIR", "SUMMARY"], &rows, &empty);
            }
        }
        SpecCommand::Show { id, json } => {
            let spec: Value = client.get(&format!("/api/specs/{}", encode(&id))).await?;
            if json {
                print_json(&spec)?;
            } else {
                let spec: Spec = typed(&spec, "a spec")?;
                println!("id:       {}", spec.id);
                println!("name:     {}", spec.name);
                println!("workdir:  {}", spec.workdir.as_deref().unwrap_or("-"));
                println!("summary:  {}", spec.summary.as_deref().unwrap_or("-"));
                if spec.needs_conversion {
                    println!(
                        "format:   heading format: needs conversion to the tagged <spec> format (`canopy spec update SPEC --convert`)"
                    );
                }
                println!("\n{}", spec.body.trim_end());
            }
        }
        SpecCommand::Update {
            id,
            name,
            body,
            file,
            convert,
            workdir,
            clear_workdir,
            json,
        } => {
            let mut patch = Map::new();
            if let Some(name) = name {
                patch.insert("name".into(), Value::String(name));
            }
            let mut body = read_body(body, file)?;
            if convert {
                let stored = match body.take() {
                    Some(body) => body,
                    None => {
                        let spec: Value =
                            client.get(&format!("/api/specs/{}", encode(&id))).await?;
                        typed::<Spec>(&spec, "a spec")?.body
                    }
                };
                body = Some(converted(&stored)?);
            }
            if let Some(body) = body {
                patch.insert("body".into(), Value::String(body));
            }
            if let Some(dir) = workdir {
                patch.insert("workdir".into(), Value::String(absolute(dir)?));
            }
            if clear_workdir {
                patch.insert("workdir".into(), Value::Null);
            }
            if patch.is_empty() {
                bail!(
                    "nothing to update: give --name, --body/--file, --workdir or --clear-workdir"
                );
            }
            let request = client
                .request(
                    reqwest::Method::PATCH,
                    &format!("/api/specs/{}", encode(&id)),
                )
                .json(&patch);
            let spec: Value = client
                .send(request)
                .await
                .map_err(|err| in_cli_terms(err, &SPEC_ARGUMENTS))?;
            if json {
                print_json(&spec)?;
            } else {
                println!("updated spec {}", spec_line(&spec)?);
            }
        }
        SpecCommand::Rm { id } => {
            let spec: Value = client
                .delete(&format!("/api/specs/{}", encode(&id)))
                .await?;
            println!("deleted spec {}", spec_line(&spec)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A spec body holding `objective` and the other sections empty.
/// `body`, in the heading format, rewritten as a tagged `<spec>` (`--convert`).
fn converted(body: &str) -> Result<String> {
    if canopy_model::spec_format::parse(body).is_ok() {
        bail!("--convert: the body is in the tagged <spec> format already; leave --convert out");
    }
    canopy_model::spec_format::from_headings(body).ok_or_else(|| {
        anyhow::anyhow!(
            "--convert: the body has no section heading to convert (`## Objective`, `## Functional requirements`, `## Constraints` ...), or a section's text holds a tag such as </objective>; write it in the tagged <spec> format"
        )
    })
}

fn objective_only(objective: &str) -> String {
    let mut body = format!("<spec>\n<objective>\n{}\n</objective>\n", objective.trim());
    for tag in &canopy_model::spec_format::SECTIONS[1..] {
        body.push_str(&format!("<{tag}></{tag}>\n"));
    }
    body + "</spec>\n"
}
