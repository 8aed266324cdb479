//! `canopy webhooks ...`: the configured webhooks (secrets redacted: a token's source is named,
//! never its value), their deliveries, a redelivery, and a local test without HTTP.

use canopy_model::requests::webhooks::{RedeliverBody, WebhookTestBody};
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::Value;

use super::output::{non_empty, table_or, utc_cell};
use super::{Client, encode, print_json, short, typed};
use canopy_model::records::webhooks::{
    AuthMode, Delivery, DeliveryDetail, DeliveryStatus, Outcome, WebhookList, WebhookView,
};

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Every configured webhook: its URL path, handler, whether this node serves it, and where
    /// its token comes from (never the token).
    #[command(
        after_help = "Examples:\n  canopy webhooks list\n  canopy webhooks list --project web --json"
    )]
    List {
        /// Only this project's webhooks (`global` for the top-level ones).
        #[arg(long, value_name = "PROJECT")]
        project: Option<String>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One webhook's whole configuration, secrets redacted, with its delivery counts.
    #[command(after_help = "Example:\n  canopy webhooks show global/deploy")]
    Show {
        /// `<scope>/<id>`: `global/<id>` (or `<id>` alone) or `<project>/<id>`.
        #[arg(value_parser = non_empty)]
        hook: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Deliveries, newest first.
    #[command(
        after_help = "Examples:\n  canopy webhooks deliveries\n  canopy webhooks deliveries --hook global/deploy --status failed --last 5"
    )]
    Deliveries {
        /// Only this webhook's (`<scope>/<id>`).
        #[arg(long, value_name = "SCOPE/ID")]
        hook: Option<String>,
        /// accepted, ignored, running, completed, failed, timed_out, interrupted or
        /// interrupted_unknown.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 20)]
        last: usize,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One delivery: its request (selected headers, body) and how its handler ended.
    #[command(
        after_help = "Example:\n  canopy webhooks delivery 0195c3e2a41f    # the short id `webhooks deliveries` shows"
    )]
    Delivery {
        /// The delivery's id or a unique prefix.
        #[arg(value_parser = non_empty)]
        id: String,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a delivery's request again, as a new delivery (the hook's rules are not applied
    /// again).
    #[command(
        after_help = "Examples:\n  canopy webhooks redeliver 0195c3e2a41f\n  canopy webhooks redeliver 0195c3e2a41f --wait"
    )]
    Redeliver {
        /// The delivery's id or a unique prefix.
        #[arg(value_parser = non_empty)]
        id: String,
        /// Wait for the handler and print its outcome.
        #[arg(long)]
        wait: bool,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Invoke a webhook locally, without HTTP to its listener: its rules, then its handler,
    /// recorded as a test delivery; prints the outcome.
    #[command(
        after_help = "Examples:\n  canopy webhooks test global/deploy --body push.json --header 'X-GitHub-Event: push'\n  echo '{\"ref\": \"refs/heads/main\"}' | canopy webhooks test global/deploy --body -"
    )]
    Test {
        /// `<scope>/<id>` (or `<id>` alone for a top-level webhook).
        #[arg(value_parser = non_empty)]
        hook: String,
        /// The body: a file, or `-` for stdin (default: empty).
        #[arg(long, value_name = "FILE|-")]
        body: Option<PathBuf>,
        /// A request header, `Name: value` (repeatable).
        #[arg(long = "header", value_name = "NAME: VALUE")]
        headers: Vec<String>,
        /// A query string, without `?` (`env=prod`).
        #[arg(long)]
        query: Option<String>,
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(client: &Client, command: WebhooksCommand) -> Result<ExitCode> {
    match command {
        WebhooksCommand::List { project, json } => list(client, project, json).await,
        WebhooksCommand::Show { hook, json } => show(client, &hook, json).await,
        WebhooksCommand::Deliveries {
            hook,
            status,
            last,
            json,
        } => deliveries(client, hook, status, last, json).await,
        WebhooksCommand::Delivery { id, json } => delivery(client, &id, json).await,
        WebhooksCommand::Redeliver { id, wait, json } => redeliver(client, &id, wait, json).await,
        WebhooksCommand::Test {
            hook,
            body,
            headers,
            query,
            json,
        } => test(client, &hook, body, headers, query, json).await,
    }
}

/// `scope/id` as a URL path under `/api/webhooks/hooks/`.
fn hook_path(hook: &str) -> Result<String> {
    // An id alone is a top-level webhook's, as the deliveries filter reads it.
    let (scope, id) = hook.split_once('/').unwrap_or(("global", hook));
    if scope.is_empty() || id.is_empty() {
        bail!(
            "`{hook}` is not <scope>/<id> or <id> (`global/<id>` or `<id>` for a top-level webhook, `<project>/<id>` for a project's)"
        );
    }
    Ok(format!(
        "/api/webhooks/hooks/{}/{}",
        encode(scope),
        encode(id)
    ))
}

async fn list(client: &Client, project: Option<String>, json: bool) -> Result<ExitCode> {
    let path = match &project {
        Some(p) => format!("/api/webhooks?project={}", encode(p)),
        None => "/api/webhooks".to_string(),
    };
    let answer: Value = client.get(&path).await?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let list: WebhookList = typed(&answer, "webhooks")?;
    match &list.listen {
        Some(listen) => println!(
            "listening on {listen} (node {}); at most {} connections, headers within {} s; {}",
            list.node,
            list.max_connections,
            list.header_timeout_secs,
            match (list.flood_rate, list.flood) {
                (0, _) => "floods: off".to_string(),
                (rate, true) =>
                    format!("a flood is on now (past {rate} req/s): one handler at a time per hook"),
                (rate, false) => {
                    format!("in a flood (past {rate} req/s) each hook runs one handler at a time")
                }
            }
        ),
        None => println!(
            "the webhook listener is off (set [webhooks] bind_port); node {}",
            list.node
        ),
    }
    let rows: Vec<Vec<String>> = list
        .hooks
        .iter()
        .map(|h| {
            vec![
                h.key.clone(),
                h.kind.clone(),
                h.path.clone(),
                if h.served { "yes" } else { "no" }.to_string(),
                if h.auth == AuthMode::Signature {
                    "none: signature only".to_string()
                } else {
                    h.token.clone().unwrap_or_else(|| "-".to_string())
                },
                match &h.hmac {
                    Some(source) => format!("{source} ({})", h.provider),
                    None => "-".to_string(),
                },
                h.respond.mode.to_string(),
            ]
        })
        .collect();
    table_or(
        &[
            "WEBHOOK", "TYPE", "PATH", "SERVED", "TOKEN", "HMAC", "RESPOND",
        ],
        &rows,
        "no webhooks are configured",
    );
    // A hook whose handler no executor serves answers every delivery with a failure: say so.
    for hook in &list.hooks {
        if let Some(problem) = &hook.problem {
            println!(
                "warning: {}: its handler does not validate, so every delivery fails: {problem}",
                hook.key
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(client: &Client, hook: &str, json: bool) -> Result<ExitCode> {
    let answer: Value = client.get(&hook_path(hook)?).await?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let view: WebhookView = typed(&answer, "a webhook")?;
    // The view is already redacted; print it as TOML-ish lines, one key each, nested tables
    // as dotted keys (`respond.mode`), in groups; what is not set is left out (`--json` has
    // every field). The entry's own keys (`command`, `match`…) vary by handler: printed as
    // they come.
    let mut lines = Vec::new();
    flatten("", &answer, &mut lines);
    // The title says its key, id and place in canopy.toml.
    lines.retain(|(key, text)| text != "-" && !matches!(key.as_str(), "id" | "key" | "toml_path"));
    let width = lines
        .iter()
        .map(|(k, _)| k.len())
        .max()
        .unwrap_or(0)
        .max(16);
    println!("webhook {} ({})", view.key, view.toml_path);
    for (title, keys) in SHOW_GROUPS {
        let group: Vec<&(String, String)> = lines
            .iter()
            .filter(|(key, _)| {
                let top = key.split('.').next().unwrap_or_default();
                match keys {
                    Some(keys) => keys.contains(&top),
                    // The rest: every key no group above names.
                    None => !SHOW_GROUPS
                        .iter()
                        .filter_map(|(_, keys)| *keys)
                        .any(|keys| keys.contains(&top)),
                }
            })
            .collect();
        if group.is_empty() {
            continue;
        }
        println!("\n{title}:");
        for (key, text) in group {
            println!("  {key:<width$} {text}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How `webhooks show` groups a hook's fields (by their top-level key); `None`: the rest.
const SHOW_GROUPS: [(&str, Option<&[&str]>); 5] = [
    (
        "where",
        Some(&["url", "path", "served", "problem", "scope", "project"]),
    ),
    (
        "who may call it",
        Some(&["auth", "token", "hmac", "provider", "rotation", "dedup"]),
    ),
    (
        "what it runs",
        Some(&[
            "type",
            "command",
            "action",
            "config",
            "checkout",
            "cwd",
            "body_from",
            "title_from",
            "queue",
        ]),
    ),
    (
        "how it answers and its limits",
        Some(&[
            "respond",
            "concurrency",
            "timeout_secs",
            "max_body_bytes",
            "deliveries",
        ]),
    ),
    ("other", None),
];

/// `value`'s scalars as (dotted key, text) lines; an empty table or list is `-`, a list of
/// scalars one line.
fn flatten(prefix: &str, value: &Value, lines: &mut Vec<(String, String)>) {
    let key = |name: &str| {
        if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        }
    };
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (name, inner) in map {
                flatten(&key(name), inner, lines);
            }
        }
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            let text: Vec<String> = items.iter().map(scalar).collect();
            lines.push((
                prefix.to_string(),
                if text.is_empty() {
                    "-".to_string()
                } else {
                    text.join(", ")
                },
            ));
        }
        Value::Object(_) => lines.push((prefix.to_string(), "-".to_string())),
        other => lines.push((prefix.to_string(), scalar(other))),
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

async fn deliveries(
    client: &Client,
    hook: Option<String>,
    status: Option<String>,
    last: usize,
    json: bool,
) -> Result<ExitCode> {
    let mut query = vec![format!("last={last}")];
    if let Some(hook) = &hook {
        query.push(format!("hook={}", encode(hook)));
    }
    if let Some(status) = &status {
        query.push(format!("status={}", encode(status)));
    }
    let answer: Value = client
        .get(&format!("/api/webhooks/deliveries?{}", query.join("&")))
        .await?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let deliveries: Vec<Delivery> = typed(&answer["deliveries"], "webhook deliveries")?;
    let rows: Vec<Vec<String>> = deliveries
        .iter()
        .map(|d| {
            vec![
                short(&d.id).to_string(),
                format!("{}/{}", d.scope, d.hook),
                d.status.to_string(),
                utc_cell(d.received_at),
                d.size.to_string(),
                d.duration_ms
                    .map_or_else(|| "-".to_string(), |ms| format!("{ms}")),
                d.reason
                    .as_deref()
                    .or(d.error.as_deref())
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(80)
                    .collect(),
            ]
        })
        .collect();
    table_or(
        &[
            "ID",
            "WEBHOOK",
            "STATUS",
            "RECEIVED (UTC)",
            "BYTES",
            "MS",
            "REASON / ERROR",
        ],
        &rows,
        "no deliveries",
    );
    Ok(ExitCode::SUCCESS)
}

async fn delivery(client: &Client, id: &str, json: bool) -> Result<ExitCode> {
    let answer: Value = client
        .get(&format!("/api/webhooks/deliveries/{}", encode(id)))
        .await?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let detail: DeliveryDetail = typed(&answer, "a webhook delivery")?;
    let d = &detail.delivery;
    print_outcome(&Outcome::from(d));
    println!("webhook   {}/{}", d.scope, d.hook);
    let query = d
        .query
        .as_deref()
        .filter(|q| !q.is_empty())
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    println!("request   {} {}{query}", d.method, d.path);
    println!("received  {} UTC", utc_cell(d.received_at));
    for (name, value) in &d.headers {
        println!("header    {name}: {value}");
    }
    println!("body      ({} bytes)", d.size);
    println!("{}", detail.body);
    Ok(ExitCode::SUCCESS)
}

/// The delivery id, status, reason or error, and output of an outcome or delivery.
fn print_outcome(outcome: &Outcome) {
    println!("delivery  {}", outcome.delivery_id);
    println!("status    {}", outcome.status);
    if let Some(reason) = &outcome.reason {
        println!("reason    {reason}");
    }
    if let Some(error) = &outcome.error {
        println!("error     {error}");
    }
    if let Some(result) = outcome.result.as_ref().filter(|r| !r.is_null()) {
        println!("result    {result}");
    }
    if let Some(output) = outcome.output.as_deref().filter(|o| !o.is_empty()) {
        println!("output:\n{output}");
    }
}

/// An answer that is an outcome (a waited delivery) or a delivery (one that was only
/// accepted), as an outcome.
fn outcome_of(answer: &Value) -> Result<Outcome> {
    if answer.get("delivery_id").is_some() {
        typed(answer, "a webhook outcome")
    } else {
        typed::<Delivery>(answer, "a webhook delivery").map(|d| Outcome::from(&d))
    }
}

/// Exit status 1 unless the outcome is one that ended well (or has not ended yet).
fn exit_for(outcome: &Outcome) -> ExitCode {
    match outcome.status {
        DeliveryStatus::Failed
        | DeliveryStatus::TimedOut
        | DeliveryStatus::Interrupted
        | DeliveryStatus::InterruptedUnknown => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    }
}

async fn redeliver(client: &Client, id: &str, wait: bool, json: bool) -> Result<ExitCode> {
    let answer: Value = client
        .post(
            &format!("/api/webhooks/deliveries/{}/redeliver", encode(id)),
            &RedeliverBody { wait },
        )
        .await?;
    let outcome = outcome_of(&answer)?;
    if json {
        print_json(&answer)?;
    } else {
        print_outcome(&outcome);
    }
    Ok(exit_for(&outcome))
}

async fn test(
    client: &Client,
    hook: &str,
    body: Option<PathBuf>,
    headers: Vec<String>,
    query: Option<String>,
    json: bool,
) -> Result<ExitCode> {
    let body = match body {
        None => String::new(),
        Some(path) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the body from stdin")?;
            text
        }
        Some(path) => std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read --body {}", path.display()))?,
    };
    let mut pairs = Vec::new();
    for header in &headers {
        let Some((name, value)) = header.split_once(':') else {
            bail!("--header `{header}` is not `Name: value`");
        };
        pairs.push((name.trim().to_string(), value.trim().to_string()));
    }
    let answer: Value = client
        .post(
            &format!("{}/test", hook_path(hook)?),
            &WebhookTestBody {
                body,
                headers: pairs,
                query,
            },
        )
        .await?;
    let outcome = outcome_of(&answer)?;
    if json {
        print_json(&answer)?;
    } else {
        print_outcome(&outcome);
    }
    Ok(exit_for(&outcome))
}
