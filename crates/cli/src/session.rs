//! `canopy session ...`: interactive sessions, their inboxes, and recall of undelivered messages.

use canopy_model::requests::sessions::{ImportBody, NewSession, SendBody};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::{Value, json};

use super::output::{non_empty, table_or, utc};
use super::{Client, encode, print_json, short, typed};
use canopy_client::in_cli_terms;
use canopy_client::sse::SseEvents;
use canopy_model::records::messages::{Message, Notification, Queued};
use canopy_model::records::sessions::Session;
use canopy_model::records::views::Lagged;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Record a live session: a named inbox that interactive hooks deliver messages to (read it
    /// with `session inbox`), or a tmux pane they are typed into. It starts no process.
    #[command(
        after_help = "Examples:\n  canopy session new --name lead\n  canopy session new --name lead --tmux-target work:0.1    # type messages into that pane"
    )]
    New {
        /// The session's name, which hooks can target (`target_session_name`).
        #[arg(long)]
        name: String,
        /// The harness's own conversation id, when known.
        #[arg(long, value_name = "ID")]
        conversation: Option<String>,
        /// Deliver messages by typing them into this tmux pane (e.g. `work:0.1`).
        #[arg(long, value_name = "PANE")]
        tmux_target: Option<String>,
        /// The tmux server's socket, when it is not the default one.
        #[arg(long, requires = "tmux_target", value_name = "PATH")]
        tmux_socket: Option<String>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List live sessions (--all: finished ones too).
    #[command(after_help = "Examples:\n  canopy session list\n  canopy session list --all")]
    List {
        /// Finished sessions too.
        #[arg(long)]
        all: bool,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show one session.
    #[command(after_help = "Example:\n  canopy session show lead")]
    Show {
        /// The session: its id, a unique id prefix or its name.
        #[arg(value_name = "SESSION", value_parser = non_empty)]
        id: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Finish a live session.
    #[command(after_help = "Example:\n  canopy session finish lead")]
    Finish {
        /// The session: its id, a unique id prefix or its name.
        #[arg(value_name = "SESSION", value_parser = non_empty)]
        id: String,
    },
    /// Relaunch a finished session: same id, same name (a fresh name only if another live
    /// session holds it).
    #[command(after_help = "Example:\n  canopy session resume 5e0c")]
    Resume {
        /// The session: its id, a unique id prefix or its name.
        #[arg(value_name = "SESSION", value_parser = non_empty)]
        id: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Bring in a harness conversation: one Canopy has seen resumes its session, an unknown one
    /// becomes a new session with a fresh id and name.
    #[command(
        after_help = "Example:\n  canopy session import 0b7e6a52-8f1c-4d5e-9a77-2c1d3e4f5a6b"
    )]
    Import {
        /// The harness's conversation id.
        #[arg(value_name = "CONVERSATION", value_parser = non_empty)]
        conversation_id: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A session's messages; --follow streams new ones as they are delivered (a stream that
    /// falls behind says on stderr how many it skipped).
    #[command(
        after_help = "Examples:\n  canopy session inbox lead\n  canopy session inbox lead --follow"
    )]
    Inbox {
        /// The session: its id, a unique id prefix or its name.
        #[arg(value_name = "SESSION", value_parser = non_empty)]
        id: String,
        /// Keep printing messages as they are delivered (Ctrl-C ends).
        #[arg(long)]
        follow: bool,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Send a live session a message, as an interactive hook does: the daemon delivers it (into
    /// the session's inbox, or typed into its tmux pane) on its scheduler's next tick.
    #[command(
        after_help = "Examples:\n  canopy session send lead \"review the login form\"\n  echo 'long text' | canopy session send lead -"
    )]
    Send {
        /// The session: its id, a unique id prefix or its name.
        #[arg(value_name = "SESSION", value_parser = non_empty)]
        id: String,
        /// The message; `-` reads it from stdin.
        #[arg(value_name = "TEXT")]
        text: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Messages that could not be delivered (their session was gone, their tmux pane could not
    /// be reached, or the daemon stopped while typing them), kept for recall.
    #[command(after_help = "Example:\n  canopy session recall")]
    Recall {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// What the daemon had to tell you (undeliverable messages, say).
    #[command(after_help = "Example:\n  canopy session notifications")]
    Notifications {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn print_message(message: &Message) {
    let provenance = &message.provenance;
    let aimed = message
        .aimed_at
        .as_deref()
        .map(|n| format!(", aimed at `{n}`"))
        .unwrap_or_default();
    let from = match provenance.graph_name.as_str() {
        // Sent with `session send` or MCP's `session_send`.
        "" => format!("sent through the API{aimed}"),
        graph => format!(
            "from graph {graph} ({}[{}]{aimed})",
            provenance.event,
            provenance
                .hook_index
                .map_or_else(|| "-".to_string(), |i| i.to_string()),
        ),
    };
    println!("[{}] {} {from}:", utc(message.created_at), message.status,);
    for line in message.text.lines() {
        println!("  {line}");
    }
    // Why it was not delivered (undeliverable, or interrupted mid-delivery).
    if let Some(why) = &message.error {
        println!("  why: {why}");
    }
}

fn session_line(session: &Session) -> String {
    format!(
        "session {} {} ({})",
        short(&session.id),
        session.name,
        session.status
    )
}

/// The messages of a list answer (`{"messages": [...]}`).
fn messages_of(answer: &Value) -> Result<Vec<Message>> {
    typed(&answer["messages"], "messages")
}

pub async fn run(client: &Client, command: SessionCommand) -> Result<ExitCode> {
    let path = |id: &str| format!("/api/sessions/{}", encode(id));
    let single = |session: Value, json: bool| -> Result<ExitCode> {
        if json {
            print_json(&session)?;
        } else {
            println!("{}", session_line(&typed(&session, "a session")?));
        }
        Ok(ExitCode::SUCCESS)
    };
    match command {
        SessionCommand::New {
            name,
            conversation,
            tmux_target,
            tmux_socket,
            json,
        } => {
            let body = NewSession {
                name,
                conversation_id: conversation,
                tmux_target: tmux_target.clone(),
                tmux_socket: tmux_socket.clone(),
            };
            let session = client.post("/api/sessions", &body).await.map_err(|err| {
                in_cli_terms(
                    err,
                    &[
                        ("name", "--name"),
                        ("conversation_id", "--conversation"),
                        ("tmux_target", "--tmux-target"),
                        ("tmux_socket", "--tmux-socket"),
                    ],
                )
            })?;
            if let Some(target) = &tmux_target
                && let Some(why) = pane_unreachable(target, tmux_socket.as_deref()).await
            {
                eprintln!(
                    "warning: tmux pane `{target}` cannot be reached now ({why}); messages for this session become undeliverable (kept for `canopy session recall`) until it can"
                );
            }
            return single(session, json);
        }
        SessionCommand::List { all, json } => {
            let answer: Value = client.get(&format!("/api/sessions?all={all}")).await?;
            if json {
                print_json(&answer)?;
            } else {
                let sessions: Vec<Session> = typed(&answer["sessions"], "sessions")?;
                let rows: Vec<Vec<String>> = sessions
                    .iter()
                    .map(|s| {
                        vec![
                            short(&s.id).to_string(),
                            s.name.clone(),
                            s.status.to_string(),
                            s.conversation_id.clone().unwrap_or_else(|| "-".to_string()),
                            s.tmux_target.clone().unwrap_or_else(|| "inbox".to_string()),
                        ]
                    })
                    .collect();
                let empty = if all {
                    "no sessions; start one with `canopy session new --name NAME`"
                } else {
                    "no live sessions; start one with `canopy session new --name NAME`"
                };
                table_or(
                    &["ID", "NAME", "STATUS", "CONVERSATION", "DELIVERY"],
                    &rows,
                    empty,
                );
            }
        }
        SessionCommand::Show { id, json } => {
            let session: Value = client.get(&path(&id)).await?;
            if json {
                print_json(&session)?;
            } else {
                let session: Session = typed(&session, "a session")?;
                println!("id:            {}", session.id);
                println!("name:          {}", session.name);
                println!("status:        {}", session.status);
                println!(
                    "conversation:  {}",
                    session.conversation_id.as_deref().unwrap_or("-")
                );
                println!(
                    "delivery:      {}",
                    session
                        .tmux_target
                        .as_deref()
                        .map_or("inbox".to_string(), |t| format!("tmux pane {t}"))
                );
            }
        }
        SessionCommand::Send { id, text, json } => {
            let text = if text == "-" {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .context("cannot read the message from stdin")?;
                text
            } else {
                text
            };
            let answer: Value = client
                .post(&format!("{}/messages", path(&id)), &SendBody { text })
                .await
                .map_err(|err| in_cli_terms(err, &[("text", "TEXT")]))?;
            if json {
                print_json(&answer)?;
            } else {
                let queued: Queued = typed(&answer, "a queued message")?;
                println!(
                    "queued message {} for session {}; it is delivered on the scheduler's next tick",
                    short(&queued.message_id),
                    queued.session.name
                );
            }
        }
        SessionCommand::Finish { id } => {
            let session: Value = client
                .post(&format!("{}/finish", path(&id)), &json!({}))
                .await?;
            println!("{}", session_line(&typed(&session, "a session")?));
        }
        SessionCommand::Resume { id, json } => {
            return single(
                client
                    .post(&format!("{}/resume", path(&id)), &json!({}))
                    .await?,
                json,
            );
        }
        SessionCommand::Import {
            conversation_id,
            json,
        } => {
            return single(
                client
                    .post("/api/sessions/import", &ImportBody { conversation_id })
                    .await?,
                json,
            );
        }
        SessionCommand::Inbox { id, follow, json } => {
            if !follow {
                let answer: Value = client.get(&format!("{}/inbox", path(&id))).await?;
                if json {
                    print_json(&answer)?;
                } else {
                    let messages = messages_of(&answer)?;
                    if messages.is_empty() {
                        println!("no messages for session {id}");
                    }
                    for message in &messages {
                        print_message(message);
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let request = client.request(
                reqwest::Method::GET,
                &format!("{}/inbox?follow=true", path(&id)),
            );
            let mut events = SseEvents::open(request).await?;
            while let Some(frame) = events.next().await {
                let frame = frame?;
                match frame.event.as_str() {
                    Lagged::EVENT => {
                        let lagged: Lagged = typed(&frame.json(), "a lagged event")?;
                        // Not a message: stdout stays one message per line.
                        eprintln!(
                            "canopy: this stream fell behind and skipped {} message(s); `canopy session inbox {id}` lists them all",
                            lagged.missed
                        );
                    }
                    "message" if json => println!("{}", frame.json()),
                    "message" => print_message(&typed(&frame.json(), "a message")?),
                    // An event this client does not know.
                    _ => {}
                }
            }
        }
        SessionCommand::Recall { json } => {
            let answer: Value = client.get("/api/messages?status=undeliverable").await?;
            if json {
                print_json(&answer)?;
            } else {
                let messages = messages_of(&answer)?;
                if messages.is_empty() {
                    println!("no messages to recall");
                }
                for message in &messages {
                    print_message(message);
                }
            }
        }
        SessionCommand::Notifications { json } => {
            let answer: Value = client.get("/api/notifications").await?;
            if json {
                print_json(&answer)?;
            } else {
                let notes: Vec<Notification> = typed(&answer["notifications"], "notifications")?;
                if notes.is_empty() {
                    println!("no notifications");
                }
                for note in notes {
                    println!("{}  {}", utc(note.created_at), note.message);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Why tmux cannot reach `target` now (`None`: it can), asked as delivery will ask it; tmux is
/// given 5 s.
async fn pane_unreachable(target: &str, socket: Option<&str>) -> Option<String> {
    let mut command = tokio::process::Command::new("tmux");
    if let Some(socket) = socket {
        command.arg("-S").arg(socket);
    }
    command
        .args(["display-message", "-p", "-t", target, "#{pane_id}"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(std::time::Duration::from_secs(5), command.output()).await {
        Ok(Ok(output)) if output.status.success() => None,
        Ok(Ok(output)) => Some(String::from_utf8_lossy(&output.stderr).trim().to_string()),
        Ok(Err(err)) => Some(format!("cannot run tmux: {err}")),
        Err(_) => Some("tmux did not answer within 5s".to_string()),
    }
}
