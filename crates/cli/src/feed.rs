//! `canopy feed`: the events Canopy recorded, oldest first; `--follow` streams new ones as they
//! are recorded, resuming after a dropped connection (a daemon restart, say) where it left off.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use serde_json::Value;

use super::{Client, encode, print_json, typed};
use canopy_client::sse::SseEvents;
use canopy_client::{ApiFailure, in_cli_terms};
use canopy_datadir::DataDir;
use canopy_model::events::Envelope;
use canopy_model::records::views::Lagged;

/// Events one read returns at most (the API's limit).
const PAGE: usize = 1000;

/// Events `--follow` shows first when neither `--since` nor `--last` says.
const FOLLOW_LAST: usize = 10;

/// The longest wait between two attempts to reconnect.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
pub struct FeedArgs {
    /// Keep printing events as they are recorded (Ctrl-C ends). A dropped connection (a daemon
    /// restart) is resumed after the last event printed: nothing is skipped or printed twice.
    #[arg(long, short)]
    follow: bool,
    /// Only this event, or the events a glob matches (graph.run.completed, spec.*, *.failed).
    #[arg(long, value_name = "GLOB")]
    event: Option<String>,
    /// Only this family's events: graph, spec, node, hook, session, plugin, cron, webhook or project.
    #[arg(long, value_name = "FAMILY")]
    family: Option<String>,
    /// Only the events of this project: its name (`[projects.NAME]`), or a workdir (a
    /// project's checkout, a graph's workdir).
    #[arg(long, value_name = "NAME|DIR")]
    project: Option<String>,
    /// The events after this cursor (the number before an event), since this time (RFC 3339)
    /// or this long ago (10m, 2h). Without --last, every one of them.
    #[arg(long, value_name = "CURSOR|TIME")]
    since: Option<String>,
    /// The newest N events (with --since: the first N after it; at most 1000; not with both
    /// --since and --follow) [default: 100, or 10 with --follow]
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// JSON: the answer as the API gives it; with --follow one event per line.
    #[arg(long)]
    json: bool,
}

/// The API's words for the arguments, in the command line's.
const ARGUMENTS: &[(&str, &str)] = &[
    ("since", "--since"),
    ("event", "--event"),
    ("family", "--family"),
    ("project", "--project"),
    ("last", "--last"),
];

pub async fn run(data: &DataDir, args: FeedArgs) -> Result<ExitCode> {
    let client = Client::connect(data)?;
    if !args.json {
        // Several daemons on one database: each line says which one recorded it.
        let nodes: Result<canopy_model::records::daemon::Nodes> = client.get("/api/nodes").await;
        let shared = nodes.is_ok_and(|nodes| nodes.nodes.len() > 1);
        SHOW_NODE.store(shared, std::sync::atomic::Ordering::Relaxed);
    }
    if !args.follow {
        return list(&client, &args)
            .await
            .map_err(|err| in_cli_terms(err, ARGUMENTS));
    }
    tokio::select! {
        followed = follow(data, client, &args) => followed.map_err(|err| in_cli_terms(err, ARGUMENTS)),
        // Ctrl-C is how a follow ends.
        _ = tokio::signal::ctrl_c() => Ok(ExitCode::SUCCESS),
    }
}

/// The query string of the arguments' filters, `&`-prefixed parameters.
fn filters(args: &FeedArgs) -> String {
    let mut query = String::new();
    let project = args.project.as_deref().map(|dir| {
        // A bare word is a project's name (the daemon knows them). A directory given as on
        // the command line (`.`, relative) is the canonical workdir the events name; a
        // project that is gone is taken as written.
        if !dir.contains('/') && dir != "." && dir != ".." {
            return dir.to_string();
        }
        std::fs::canonicalize(dir)
            .map(|path| path.to_string_lossy().into_owned())
            .unwrap_or_else(|_| dir.to_string())
    });
    for (name, value) in [
        ("event", args.event.as_deref()),
        ("family", args.family.as_deref()),
        ("project", project.as_deref()),
    ] {
        if let Some(value) = value {
            query.push_str(&format!("&{name}={}", encode(value)));
        }
    }
    query
}

/// Prints the newest events (or those after `--since`, page by page) and returns.
async fn list(client: &Client, args: &FeedArgs) -> Result<ExitCode> {
    let filters = filters(args);
    let Some(since) = args.since.as_deref() else {
        let last = args.last.unwrap_or(100);
        let answer: Value = client
            .get(&format!("/api/feed?last={last}{filters}"))
            .await?;
        print_answer(&answer, args.json)?;
        return Ok(ExitCode::SUCCESS);
    };
    if let Some(last) = args.last {
        let answer: Value = client
            .get(&format!(
                "/api/feed?since={}&last={last}{filters}",
                encode(since)
            ))
            .await?;
        print_answer(&answer, args.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Every event since then: page after the last one read until a page comes back short.
    let mut since = since.to_string();
    let mut all: Vec<Value> = Vec::new();
    let head = loop {
        let answer: Value = client
            .get(&format!(
                "/api/feed?since={}&last={PAGE}{filters}",
                encode(&since)
            ))
            .await?;
        let events: Vec<Value> = typed(&answer["events"], "feed events")?;
        if !args.json {
            for event in &events {
                print_line(&typed(event, "a feed event")?);
            }
        }
        let full = events.len() == PAGE;
        if let Some(last) = events.last() {
            since = typed::<Envelope>(last, "a feed event")?.id.to_string();
        }
        all.extend(events);
        if !full {
            break answer["head"].clone();
        }
    };
    if args.json {
        print_json(&serde_json::json!({ "events": all, "head": head }))?;
    } else if all.is_empty() {
        println!(
            "no events since {}",
            args.since.as_deref().unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn print_answer(answer: &Value, json: bool) -> Result<()> {
    if json {
        return print_json(answer);
    }
    let events: Vec<Envelope> = typed(&answer["events"], "feed events")?;
    if events.is_empty() {
        println!("no events");
    }
    for event in &events {
        print_line(event);
    }
    Ok(())
}

/// Streams the feed until Ctrl-C, reconnecting after a dropped connection with the cursor of
/// the last event printed (`Last-Event-ID`), so the stream resumes without a gap.
async fn follow(data: &DataDir, first: Client, args: &FeedArgs) -> Result<ExitCode> {
    let start = match (args.since.as_deref(), args.last) {
        // Both: the daemon refuses it, saying why.
        (Some(since), Some(last)) => format!("since={}&last={last}", encode(since)),
        (Some(since), None) => format!("since={}", encode(since)),
        (None, last) => format!("last={}", last.unwrap_or(FOLLOW_LAST)),
    };
    let path = format!("/api/feed?follow=true&{start}{}", filters(args));
    let mut client = Some(first);
    let mut last_id: Option<String> = None;
    let mut connected_once = false;
    // Reconnecting after a stream that ended: said once, and once more when it is back.
    let mut reconnecting = false;
    let mut wait = Duration::from_millis(200);
    loop {
        // After a drop the daemon may have restarted elsewhere: read its address and token anew.
        let current = match client.take() {
            Some(client) => Ok(client),
            None => Client::connect(data),
        };
        let outcome = match current {
            Ok(client) => {
                stream_once(
                    &client,
                    &path,
                    last_id.as_deref(),
                    args.json,
                    &mut reconnecting,
                )
                .await
            }
            Err(err) => Err(Dropped::Unreachable(err)),
        };
        match outcome {
            Ok(Streamed { last, .. }) | Err(Dropped::Broken { last, .. }) if last.is_some() => {
                last_id = last;
                connected_once = true;
                wait = Duration::from_millis(200);
            }
            Ok(_) => connected_once = true,
            Err(Dropped::Refused(err)) => return Err(err),
            Err(Dropped::Unreachable(err)) if !connected_once => return Err(err),
            Err(_) => {}
        }
        if !reconnecting {
            eprintln!(
                "canopy: the feed stream from the daemon ended; reconnecting{}",
                last_id
                    .as_deref()
                    .map(|id| format!(" after event {id}"))
                    .unwrap_or_default()
            );
            reconnecting = true;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RECONNECT_MAX);
    }
}

/// A stream that ended: the cursor of the last event printed, if any.
struct Streamed {
    last: Option<String>,
}

/// Why a stream could not go on.
enum Dropped {
    /// The daemon answered with an error: reconnecting would not help.
    Refused(anyhow::Error),
    /// No daemon answered.
    Unreachable(anyhow::Error),
    /// The stream broke after it started.
    Broken { last: Option<String> },
}

/// One connection: prints each event as it comes until the stream ends or breaks.
async fn stream_once(
    client: &Client,
    path: &str,
    last_id: Option<&str>,
    json: bool,
    reconnecting: &mut bool,
) -> Result<Streamed, Dropped> {
    let mut request = client.stream(path);
    if let Some(id) = last_id {
        request = request.header("Last-Event-ID", id);
    }
    let mut events = match SseEvents::open(request).await {
        Ok(events) => events,
        Err(err) if err.is::<ApiFailure>() => return Err(Dropped::Refused(err)),
        Err(err) => return Err(Dropped::Unreachable(err)),
    };
    if std::mem::take(reconnecting) {
        eprintln!("canopy: reconnected to the feed stream");
    }
    let mut last = last_id.map(str::to_string);
    loop {
        let frame = match events.next().await {
            Some(Ok(frame)) => frame,
            None => return Ok(Streamed { last }),
            Some(Err(_)) => return Err(Dropped::Broken { last }),
        };
        match frame.event.as_str() {
            "feed" => {
                let envelope = frame.json();
                if json {
                    println!("{envelope}");
                } else {
                    match typed::<Envelope>(&envelope, "a feed event") {
                        Ok(envelope) => print_line(&envelope),
                        Err(err) => tracing::warn!("{err:#}"),
                    }
                }
                if frame.id.is_some() {
                    last = frame.id;
                }
            }
            Lagged::EVENT => {
                // Nothing is lost: the daemon read the missed events back from the feed.
                if let Ok(lagged) = serde_json::from_str::<Lagged>(&frame.data) {
                    tracing::debug!(
                        missed = lagged.missed,
                        "the stream fell behind and was read back from the feed"
                    );
                }
            }
            // An event this client does not know.
            _ => {}
        }
    }
}

/// One event on one line: time, cursor, actor, event, target, and a short payload summary.
/// Widths of the actor and event columns: a longer one is cut short (`--json` has it whole), so
/// the columns after it stay in line.
const ACTOR_WIDTH: usize = 24;
const EVENT_WIDTH: usize = 28;
/// Width of the node column, shown when several daemons share the database.
const NODE_WIDTH: usize = 12;

/// The column titles, printed once above the first event.
fn header(node: bool) -> String {
    format!(
        "{:<20}  {:>6}  {}{:<ACTOR_WIDTH$}  {:<EVENT_WIDTH$}  TARGET  SUMMARY",
        "TIME (UTC)",
        "ID",
        if node {
            format!("{:<NODE_WIDTH$}  ", "NODE")
        } else {
            String::new()
        },
        "ACTOR",
        "EVENT"
    )
}

static HEADER_PRINTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Whether lines show the node that recorded them (the daemon has others on its database).
static SHOW_NODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints an event's line, the header first if it has not been printed yet.
fn print_line(envelope: &Envelope) {
    let node = SHOW_NODE.load(std::sync::atomic::Ordering::Relaxed);
    if !HEADER_PRINTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        println!("{}", header(node));
    }
    println!("{}", line(envelope, node));
}

/// `text` in at most `width` characters: cut short with `…`.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width - 1).collect();
        cut.push('…');
        cut
    }
}

fn line(envelope: &Envelope, node: bool) -> String {
    let time = envelope
        .timestamp
        .as_jiff()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let actor = match envelope.dispatch_depth {
        0 => envelope.actor.clone(),
        depth => format!("{} (depth {depth})", envelope.actor),
    };
    // A 32-hex id (a spec's, a node run's) shows as its short form, as everywhere in the CLI.
    let target = match envelope.target.as_deref() {
        Some(id) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => &id[..12],
        Some(target) => target,
        None => "-",
    };
    let summary = summary(envelope);
    let text = format!(
        "{time:<20}  {:>6}  {}{:<ACTOR_WIDTH$}  {:<EVENT_WIDTH$}  {target}{}{summary}",
        envelope.id,
        if node {
            format!("{:<NODE_WIDTH$}  ", fit(&envelope.node, NODE_WIDTH))
        } else {
            String::new()
        },
        fit(&actor, ACTOR_WIDTH),
        fit(&envelope.event, EVENT_WIDTH),
        if summary.is_empty() { "" } else { "  " }
    );
    text.replace(['\n', '\r'], " ")
}

/// The payload's fields worth a glance: scalars, leaving out ids, hashes and what the line
/// says already (the target, the project); each value and the whole cut short.
fn summary(envelope: &Envelope) -> String {
    const VALUE: usize = 60;
    const TOTAL: usize = 160;
    let Some(fields) = envelope.payload.as_object() else {
        return String::new();
    };
    let said: Vec<&str> = [&envelope.target, &envelope.project]
        .into_iter()
        .filter_map(Option::as_deref)
        .collect();
    let mut parts = Vec::new();
    for (key, value) in fields {
        if key.ends_with("_id") || key == "sha256" {
            continue;
        }
        let text = match value {
            Value::String(s) if said.contains(&s.as_str()) || s.is_empty() => continue,
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(","),
            _ => continue,
        };
        parts.push(format!("{key}={}", cut(&text, VALUE)));
    }
    cut(&parts.join(" "), TOTAL)
}

/// `text` cut to about `limit` characters, with `…` when cut.
fn cut(text: &str, limit: usize) -> String {
    let one_line = text.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= limit {
        return one_line;
    }
    let kept: String = one_line.chars().take(limit.saturating_sub(1)).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::line;

    #[test]
    fn an_event_is_one_line_with_its_time_cursor_actor_event_target_and_payload() {
        let envelope = json!({
            "id": 42, "node": "host", "project": "/src/web", "target": "web",
            "event": "graph.run.completed", "family": "graph",
            "timestamp": "2026-05-01T09:30:00.123456Z", "actor": "hook:announce",
            "dispatch_depth": 1,
            "payload": { "graph_name": "web", "run_id": "3f2a", "workdir": "/src/web",
                         "status": "completed", "specs": ["a", "b"], "note": "two\nlines" }
        });
        let column = |text: &str, word: &str| text.split(word).next().map(|s| s.chars().count());
        let read = |value: &serde_json::Value| {
            serde_json::from_value(value.clone()).expect("an envelope as the feed writes it")
        };
        assert_eq!(
            line(&read(&envelope), false),
            "2026-05-01T09:30:00Z      42  hook:announce (depth 1)   graph.run.completed           web  note=two lines specs=a,b status=completed"
        );
        // Several daemons on the database: the node that recorded it, under its title.
        let with_node = line(&read(&envelope), true);
        assert_eq!(
            with_node,
            "2026-05-01T09:30:00Z      42  host          hook:announce (depth 1)   graph.run.completed           web  note=two lines specs=a,b status=completed"
        );
        assert_eq!(
            column(&with_node, "hook:announce"),
            column(&super::header(true), "ACTOR")
        );
        // A long actor is cut short, and the columns after it stay where the header says.
        let mut long = envelope.clone();
        long["actor"] = json!("webhook:project/web/github-push-to-main");
        let shown = line(&read(&long), false);
        assert!(
            shown.contains("webhook:project/web/git…  graph.run.completed"),
            "{shown}"
        );
        assert_eq!(
            column(&shown, "graph.run"),
            column(&super::header(false), "EVENT")
        );
    }
}
