//! `canopy queue ...`: ordered lists of specs, with context groups.

use canopy_model::requests::queues::{AddSpec, NewQueue, Reorder, SetGroup};
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;

use super::output::{non_empty, table_or};
use super::{Client, encode, print_json, short, typed};
use canopy_client::in_cli_terms;
use canopy_model::records::queues::Queue;

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Create a queue, optionally with its first specs in order.
    #[command(after_help = "Example:\n  canopy queue create sprint-1 3f2a 9c41 77d0")]
    Create {
        /// The queue's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// Specs to put in it, in order: ids or unique id prefixes.
        #[arg(value_name = "SPEC")]
        specs: Vec<String>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List queues.
    #[command(after_help = "Example:\n  canopy queue list")]
    List {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show a queue's members in order, with groups and status.
    #[command(after_help = "Example:\n  canopy queue show sprint-1")]
    Show {
        /// The queue: its name, id or unique id prefix.
        #[arg(value_name = "QUEUE", value_parser = non_empty)]
        queue: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Add a spec; with --group it lands right after the group's last pending member.
    #[command(
        after_help = "Examples:\n  canopy queue add sprint-1 3f2a\n  canopy queue add sprint-1 9c41 --group auth"
    )]
    Add {
        /// The queue: its name, id or unique id prefix.
        #[arg(value_name = "QUEUE", value_parser = non_empty)]
        queue: String,
        /// The spec to add: its id or a unique id prefix.
        #[arg(value_name = "SPEC", value_parser = non_empty)]
        spec: String,
        /// The context group to put it in (grouped specs share a warm agent session).
        #[arg(long, value_name = "LABEL")]
        group: Option<String>,
    },
    /// Remove a spec from the queue (the spec stays in the backlog).
    #[command(after_help = "Example:\n  canopy queue rm-spec sprint-1 3f2a")]
    RmSpec {
        /// The queue: its name, id or unique id prefix.
        #[arg(value_name = "QUEUE", value_parser = non_empty)]
        queue: String,
        /// The member to remove: its spec id or a unique id prefix.
        #[arg(value_name = "SPEC", value_parser = non_empty)]
        spec: String,
    },
    /// Put the members in this order (every member, once). Refused if it splits a group.
    #[command(after_help = "Example:\n  canopy queue reorder sprint-1 9c41 3f2a 77d0")]
    Reorder {
        /// The queue: its name, id or unique id prefix.
        #[arg(value_name = "QUEUE", value_parser = non_empty)]
        queue: String,
        /// Every member's spec id (or unique prefix), in the new order.
        #[arg(value_name = "SPEC")]
        specs: Vec<String>,
    },
    /// Set a member's group (it moves next to its group), or clear it.
    #[command(
        after_help = "Examples:\n  canopy queue group sprint-1 9c41 auth\n  canopy queue group sprint-1 9c41 --clear"
    )]
    Group {
        /// The queue: its name, id or unique id prefix.
        #[arg(value_name = "QUEUE", value_parser = non_empty)]
        queue: String,
        /// The member: its spec id or a unique id prefix.
        #[arg(value_name = "SPEC", value_parser = non_empty)]
        spec: String,
        /// The group label; omit with --clear to ungroup.
        #[arg(value_name = "LABEL")]
        group: Option<String>,
        #[arg(long, conflicts_with = "group")]
        clear: bool,
    },
    /// Delete a queue (its specs stay in the backlog).
    #[command(after_help = "Example:\n  canopy queue rm sprint-1")]
    Rm {
        /// The queue: its name, id or unique id prefix.
        #[arg(value_name = "QUEUE", value_parser = non_empty)]
        queue: String,
    },
}

fn print_queue(queue: &Queue) {
    println!("queue {} {}", short(&queue.id), queue.name);
    let rows: Vec<Vec<String>> = queue
        .members
        .iter()
        .map(|m| {
            vec![
                m.position.to_string(),
                short(&m.spec_id).to_string(),
                m.spec_name.clone(),
                m.group.clone().unwrap_or_else(|| "-".to_string()),
                super::graph::done_in_run(m.status.as_str(), m.done_in_run.as_deref()),
            ]
        })
        .collect();
    table_or(
        &["POS", "SPEC", "NAME", "GROUP", "STATUS"],
        &rows,
        "no members; add specs with `canopy queue add QUEUE SPEC`",
    );
}

pub async fn run(client: &Client, command: QueueCommand) -> Result<ExitCode> {
    let path = |queue: &str| format!("/api/queues/{}", encode(queue));
    let queue: Value = match command {
        QueueCommand::Create { name, specs, json } => {
            let queue: Value = client
                .post("/api/queues", &NewQueue { name, specs })
                .await
                .map_err(|err| in_cli_terms(err, &[("name", "NAME"), ("specs", "SPEC")]))?;
            if json {
                print_json(&queue)?;
                return Ok(ExitCode::SUCCESS);
            }
            queue
        }
        QueueCommand::List { json } => {
            let answer: Value = client.get("/api/queues").await?;
            if json {
                print_json(&answer)?;
            } else {
                let queues: Vec<Queue> = typed(&answer["queues"], "queues")?;
                let rows: Vec<Vec<String>> = queues
                    .iter()
                    .map(|q| {
                        let pending = q.members.iter().filter(|m| m.pending).count();
                        vec![
                            short(&q.id).to_string(),
                            q.name.clone(),
                            q.members.len().to_string(),
                            pending.to_string(),
                        ]
                    })
                    .collect();
                table_or(
                    &["ID", "NAME", "MEMBERS", "PENDING"],
                    &rows,
                    "no queues; create one with `canopy queue create NAME [SPEC...]`",
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        QueueCommand::Show { queue, json } => {
            let queue: Value = client.get(&path(&queue)).await?;
            if json {
                print_json(&queue)?;
                return Ok(ExitCode::SUCCESS);
            }
            queue
        }
        QueueCommand::Add { queue, spec, group } => client
            .post(&format!("{}/specs", path(&queue)), &AddSpec { spec, group })
            .await
            .map_err(|err| in_cli_terms(err, &[("spec", "SPEC"), ("group", "--group")]))?,
        QueueCommand::RmSpec { queue, spec } => {
            client
                .delete(&format!("{}/specs/{}", path(&queue), encode(&spec)))
                .await?
        }
        QueueCommand::Reorder { queue, specs } => {
            let request = client
                .request(reqwest::Method::PUT, &format!("{}/order", path(&queue)))
                .json(&Reorder { order: specs });
            client
                .send(request)
                .await
                .map_err(|err| in_cli_terms(err, &[("order", "SPEC")]))?
        }
        QueueCommand::Group {
            queue,
            spec,
            group,
            clear,
        } => {
            let group = if clear { None } else { group };
            let request = client
                .request(
                    reqwest::Method::PUT,
                    &format!("{}/specs/{}/group", path(&queue), encode(&spec)),
                )
                .json(&SetGroup { group });
            client.send(request).await?
        }
        QueueCommand::Rm { queue } => {
            let queue: Value = client.delete(&path(&queue)).await?;
            let queue: Queue = typed(&queue, "a queue")?;
            println!("deleted queue {} {}", short(&queue.id), queue.name);
            return Ok(ExitCode::SUCCESS);
        }
    };
    print_queue(&typed(&queue, "a queue")?);
    Ok(ExitCode::SUCCESS)
}
