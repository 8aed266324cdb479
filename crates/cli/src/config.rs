//! `canopy config validate [FILE]` and `canopy config reload`.

use canopy_model::records::config::{ConfigCheck, Reloaded};
use canopy_model::requests::daemon::ValidateBody;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};

use super::{Client, print_json};
use canopy_datadir::DataDir;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a canopy.toml (default: the data dir's) and list every problem with its TOML path.
    /// With a daemon running, each daemon hook's action is also checked by its executor.
    #[command(
        after_help = "Examples:\n  canopy config validate\n  canopy config validate ./canopy.toml"
    )]
    Validate {
        /// The file to check [default: canopy.toml in the data dir]
        file: Option<PathBuf>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Re-read the data dir's canopy.toml and put it in force (as SIGHUP does). A file that does
    /// not validate is refused whole: the configuration in force stays.
    #[command(after_help = "Example:\n  canopy config reload")]
    Reload {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(data: &DataDir, command: ConfigCommand) -> Result<ExitCode> {
    match command {
        ConfigCommand::Validate { file, json } => validate(data, file, json).await,
        ConfigCommand::Reload { json } => reload(&Client::connect(data)?, json).await,
    }
}

async fn validate(data: &DataDir, file: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    let path = file.unwrap_or_else(|| data.config_file());
    let text = canopy_core::config::read_file(&path)
        .map_err(|err| anyhow::anyhow!(err))?
        .ok_or_else(|| anyhow::anyhow!("cannot read {}: there is no such file", path.display()))?;
    // With a daemon, the executors check the hooks' actions too; without one, only the file.
    let (mut answer, full) = match Client::connect(data) {
        Ok(client) => match client
            .send::<Value>(
                client
                    .request(reqwest::Method::POST, "/api/config/validate")
                    .json(&ValidateBody { text: text.clone() }),
            )
            .await
        {
            Ok(answer) => (answer, true),
            Err(_) => (offline(&text), false),
        },
        Err(_) => (offline(&text), false),
    };
    let check: ConfigCheck = super::typed(&answer, "a configuration check")?;
    if json {
        answer["actions_checked"] = Value::Bool(full);
        print_json(&answer)?;
    } else if check.valid {
        println!("{}: valid", path.display());
        if !full {
            println!(
                "(no daemon is running: daemon hooks' actions were not checked by their executors)"
            );
        }
    } else {
        eprintln!("{}: does not validate", path.display());
        for problem in &check.problems {
            eprintln!("  {problem}");
        }
    }
    Ok(if check.valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What the file alone says, without executors to check the hooks' actions.
fn offline(text: &str) -> Value {
    let (valid, problems) = match canopy_core::config::Config::parse(text) {
        Ok(_) => (true, Vec::new()),
        Err(problems) => (false, problems),
    };
    json!(ConfigCheck {
        valid,
        problems,
        hooks: None,
        node: None,
    })
}

async fn reload(client: &Client, json: bool) -> Result<ExitCode> {
    let answer: Value = client
        .send(client.request(reqwest::Method::POST, "/api/config/reload"))
        .await?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = super::typed::<Reloaded>(&answer, "a reload")?.report;
    println!(
        "reloaded {}: {} daemon hook(s) in force on node {}",
        report.path, report.hooks, report.node
    );
    if !report.applied.is_empty() {
        println!("in force now: {}", report.applied.join(", "));
    }
    let restart = report.needs_restart.join(", ");
    if !restart.is_empty() {
        println!(
            "changed, in force after a restart (`canopy daemon stop`, then start it): {restart}"
        );
    }
    Ok(ExitCode::SUCCESS)
}
