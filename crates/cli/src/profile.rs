//! `canopy profile ...`: the profiles of canopy.toml and the runtime hooks they give an agent.

use canopy_model::records::config::{ProfileStack, Profiles};
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;

use super::output::{non_empty, table_or};
use super::{Client, encode, print_json, typed};

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Every profile in canopy.toml ([profiles.NAME]), with its runtime hooks by phase.
    #[command(after_help = "Examples:\n  canopy profile list\n  canopy profile list --json")]
    List {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The runtime hooks an agent listing these profiles gets (in this order, before its own),
    /// phase by phase: each hook with the profile it comes from and its matcher.
    #[command(
        after_help = "Examples:\n  canopy profile show guarded\n  canopy profile show base worker --json"
    )]
    Show {
        /// The profiles, in the order an agent's `profiles` lists them.
        #[arg(value_name = "NAME", required = true, value_parser = non_empty)]
        names: Vec<String>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(client: &Client, command: ProfileCommand) -> Result<ExitCode> {
    match command {
        ProfileCommand::List { json } => {
            let answer: Value = client.get("/api/profiles").await?;
            if json {
                print_json(&answer)?;
                return Ok(ExitCode::SUCCESS);
            }
            let profiles: Profiles = typed(&answer, "profiles")?;
            let rows: Vec<Vec<String>> = profiles
                .profiles
                .iter()
                .map(|profile| {
                    let phases: Vec<String> = profile
                        .phases
                        .iter()
                        .map(|p| format!("{} ({})", p.phase, p.hooks))
                        .collect();
                    vec![
                        profile.name.clone(),
                        if phases.is_empty() {
                            "(no hooks)".to_string()
                        } else {
                            phases.join(", ")
                        },
                    ]
                })
                .collect();
            table_or(
                &["NAME", "RUNTIME HOOKS (PHASE, COUNT)"],
                &rows,
                "no profiles: add [profiles.NAME.runtime_hooks] to canopy.toml (see the manual's runtime hooks chapter, docs/src/runtime-hooks.md)",
            );
        }
        ProfileCommand::Show { names, json } => {
            let list: Vec<String> = names.iter().map(|n| encode(n)).collect();
            let answer: Value = client
                .get(&format!("/api/profiles/{}", list.join(",")))
                .await?;
            if json {
                print_json(&answer)?;
                return Ok(ExitCode::SUCCESS);
            }
            let stack: ProfileStack = typed(&answer, "a profile stack")?;
            if stack.phases.is_empty() {
                println!("{}: no runtime hooks", names.join(", "));
            }
            for phase in &stack.phases {
                let decides = if phase.decides { ", decides" } else { "" };
                println!("{} ({}{decides})", phase.phase, phase.event);
                for group in &phase.groups {
                    let matcher = group.matcher.as_deref().unwrap_or("every tool");
                    for hook in &group.hooks {
                        println!(
                            "  {:<18} {:<20} {}",
                            group.from,
                            matcher,
                            Value::Object(hook.clone())
                        );
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
