//! `canopy queue ...`: ordered lists of specs, with context groups.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};

use super::{Client, encode, items, print_json, short, str_at, table};

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Create a queue, optionally with its first specs in order.
    Create {
        name: String,
        specs: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// List queues.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show a queue's members in order, with groups and status.
    Show {
        queue: String,
        #[arg(long)]
        json: bool,
    },
    /// Add a spec; with --group it lands right after the group's last pending member.
    Add {
        queue: String,
        spec: String,
        #[arg(long)]
        group: Option<String>,
    },
    /// Remove a spec from the queue (the spec stays in the backlog).
    RmSpec { queue: String, spec: String },
    /// Put the members in this order (every member, once). Refused if it splits a group.
    Reorder { queue: String, specs: Vec<String> },
    /// Set a member's group (it moves next to its group), or clear it.
    Group {
        queue: String,
        spec: String,
        /// The group label; omit with --clear to ungroup.
        group: Option<String>,
        #[arg(long, conflicts_with = "group")]
        clear: bool,
    },
    /// Delete a queue (its specs stay in the backlog).
    Rm { queue: String },
}

fn print_queue(queue: &Value) {
    println!(
        "queue {} {}",
        short(str_at(queue, "/id")),
        str_at(queue, "/name")
    );
    let rows: Vec<Vec<String>> = items(&queue["members"])
        .iter()
        .map(|m| {
            vec![
                m["position"].to_string(),
                short(str_at(m, "/spec_id")).to_string(),
                str_at(m, "/spec_name").to_string(),
                m["group"].as_str().unwrap_or("-").to_string(),
                str_at(m, "/status").to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(&["POS", "SPEC", "NAME", "GROUP", "STATUS"], &rows)
    );
}

pub async fn run(client: &Client, command: QueueCommand) -> Result<ExitCode> {
    let path = |queue: &str| format!("/api/queues/{}", encode(queue));
    let queue: Value = match command {
        QueueCommand::Create { name, specs, json } => {
            let queue: Value = client
                .post("/api/queues", &json!({ "name": name, "specs": specs }))
                .await?;
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
                let rows: Vec<Vec<String>> = items(&answer["queues"])
                    .iter()
                    .map(|q| {
                        let members = items(&q["members"]);
                        let pending = members
                            .iter()
                            .filter(|m| m["pending"].as_bool() == Some(true))
                            .count();
                        vec![
                            short(str_at(q, "/id")).to_string(),
                            str_at(q, "/name").to_string(),
                            members.len().to_string(),
                            pending.to_string(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table::render(&["ID", "NAME", "MEMBERS", "PENDING"], &rows)
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
        QueueCommand::Add { queue, spec, group } => {
            client
                .post(
                    &format!("{}/specs", path(&queue)),
                    &json!({ "spec": spec, "group": group }),
                )
                .await?
        }
        QueueCommand::RmSpec { queue, spec } => {
            client
                .delete(&format!("{}/specs/{}", path(&queue), encode(&spec)))
                .await?
        }
        QueueCommand::Reorder { queue, specs } => {
            let request = client
                .request(reqwest::Method::PUT, &format!("{}/order", path(&queue)))
                .json(&json!({ "order": specs }));
            client.send(request).await?
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
                .json(&json!({ "group": group }));
            client.send(request).await?
        }
        QueueCommand::Rm { queue } => {
            let queue: Value = client.delete(&path(&queue)).await?;
            println!(
                "deleted queue {} {}",
                short(str_at(&queue, "/id")),
                str_at(&queue, "/name")
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    print_queue(&queue);
    Ok(ExitCode::SUCCESS)
}
