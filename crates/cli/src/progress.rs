//! Waiting for a run (`graph run --wait`, `graph continue --wait`) with progress on stderr, in
//! the style of cargo's status lines: a right-aligned verb, bold and coloured when stderr is a
//! terminal, plain otherwise. Polls `GET /api/runs/{id}`; then waits for the run's own hooks.

use std::collections::HashSet;
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use super::run::{duration_ms, human, spec_name_in};
use super::{Client, encode, items, short, str_at};

/// How often the run is polled.
const POLL: Duration = Duration::from_millis(150);

/// How long a wait gives the run's own hooks once it has stopped, unless `--hooks-timeout` says.
pub const HOOKS_TIMEOUT: Duration = Duration::from_secs(120);

/// How `--wait` waits: the flags of `graph run` and `graph continue`.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitOptions {
    /// With --wait: no progress lines on stderr.
    #[arg(long, short, requires = "wait")]
    pub quiet: bool,
    /// With --wait: how long to wait for the run's own hooks (on_completed, on_failed…) once
    /// it has stopped; then say which still run and return.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "2m", requires = "wait")]
    pub hooks_timeout: Duration,
    /// With --wait: stop waiting after this long (30s, 2h) even if the run goes on.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, requires = "wait")]
    pub timeout: Option<Duration>,
}

/// How the wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The run stopped (completed, failed, paused…) and its hooks ended.
    Done,
    /// The run stopped, but some of its hooks were still running when the bound passed.
    HooksRunning,
    /// `timeout` passed while the run was still going.
    TimedOut,
}

#[derive(Debug, Clone, Copy)]
enum Tone {
    Good,
    Bad,
    Warn,
    Note,
}

/// Writes status lines to stderr.
struct Status {
    quiet: bool,
    tty: bool,
}

impl Status {
    fn line(&self, tone: Tone, verb: &str, message: &str) {
        if self.quiet {
            return;
        }
        self.always(tone, verb, message);
    }

    /// A line `--quiet` does not silence (the wait returned before everything ended).
    fn always(&self, tone: Tone, verb: &str, message: &str) {
        let message = message.replace('\n', "\n             ");
        if self.tty {
            let colour = match tone {
                Tone::Good => 32,
                Tone::Bad => 31,
                Tone::Warn => 33,
                Tone::Note => 36,
            };
            eprintln!("\x1b[1;{colour}m{verb:>12}\x1b[0m {message}");
        } else {
            eprintln!("{verb:>12} {message}");
        }
    }
}

/// One thing that happened in a run, at a time the API recorded.
struct Event {
    /// RFC 3339 with microseconds, so that text order is time order.
    at: String,
    /// What it is about, to report it once: `node-end:ID`…
    key: String,
    tone: Tone,
    verb: &'static str,
    message: String,
}

/// What has been reported so far.
#[derive(Default)]
struct Seen {
    reported: HashSet<String>,
    waiting_for_hooks: bool,
}

/// A hook run as `hook on_completed[0] (command)`.
fn hook_label(hook: &Value) -> String {
    let mode = hook["mode"].as_str().unwrap_or("?");
    // A named hook (a daemon or project hook: `announce-blocked`) by its name, as `hooks runs`
    // shows it; a graph's by its event and place.
    let named = hook["source"]
        .as_str()
        .is_some_and(|source| source != "graph");
    match hook["hook_name"]
        .as_str()
        .filter(|name| named && !name.is_empty())
    {
        Some(name) => format!("hook {name} ({mode})"),
        None => format!(
            "hook {}[{}] ({mode})",
            str_at(hook, "/event"),
            hook["hook_index"]
        ),
    }
}

/// The run's hook runs that have not ended (test runs of `hooks test --execute` aside).
fn pending_hooks(view: &Value) -> Vec<&Value> {
    items(&view["hook_runs"])
        .iter()
        .filter(|h| h["test"].as_bool() != Some(true))
        .filter(|h| matches!(h["status"].as_str(), Some("queued" | "running")))
        .collect()
}

/// `: why`, or nothing.
fn because(value: &Value, field: &str) -> String {
    value[field]
        .as_str()
        .map(|r| format!(": {r}"))
        .unwrap_or_default()
}

/// Everything the run view tells that happened, in time order: specs starting and ending, node
/// runs and hook runs starting and ending, and (once the engine is done with it) how the run
/// stopped.
fn events(view: &Value) -> Vec<Event> {
    let mut events = Vec::new();
    let mut add = |at: &str, key: String, tone, verb, message: String| {
        if !at.is_empty() {
            events.push(Event {
                at: at.to_string(),
                key,
                tone,
                verb,
                message,
            });
        }
    };
    let specs = items(&view["specs"]);
    let spec_name = |id: &str| spec_name_in(specs, id);
    for spec in specs {
        let id = str_at(spec, "/spec_id");
        let name = spec_name(id);
        add(
            str_at(spec, "/started_at"),
            format!("spec-start:{id}"),
            Tone::Good,
            "Starting",
            format!("spec {name} ({})", short(id)),
        );
        // Failed, blocked and interrupted specs are told by their node's line.
        let end = match str_at(spec, "/status") {
            "completed" => Some((Tone::Good, "Completed")),
            "skipped" => Some((Tone::Note, "Skipped")),
            _ => None,
        };
        if let Some((tone, verb)) = end {
            add(
                str_at(spec, "/finished_at"),
                format!("spec-end:{id}"),
                tone,
                verb,
                format!("spec {name}"),
            );
        }
    }
    for node in items(&view["node_runs"]) {
        let id = str_at(node, "/id");
        let label = format!(
            "node {} ({})",
            str_at(node, "/node"),
            spec_name(str_at(node, "/spec_id"))
        );
        add(
            str_at(node, "/started_at"),
            format!("node-start:{id}"),
            Tone::Good,
            "Running",
            label.clone(),
        );
        let took = duration_ms(node);
        let reason = because(node, "reason");
        let (tone, verb, message) = match str_at(node, "/status") {
            "running" => continue,
            "completed" => (Tone::Good, "Finished", format!("{label} in {took}")),
            "failed" => (Tone::Bad, "Failed", format!("{label} in {took}{reason}")),
            "blocked" => (Tone::Warn, "Blocked", format!("{label}{reason}")),
            "limit_blocked" => (Tone::Warn, "Waiting", format!("{label}{reason}")),
            "cancelled" => (
                Tone::Warn,
                "Cancelled",
                format!("{label} after {took}{reason}"),
            ),
            other => (Tone::Warn, "Stopped", format!("{label}: {other}{reason}")),
        };
        add(
            str_at(node, "/finished_at"),
            format!("node-end:{id}"),
            tone,
            verb,
            message,
        );
    }
    for hook in items(&view["hook_runs"]) {
        if hook["test"].as_bool() == Some(true) {
            continue;
        }
        let id = str_at(hook, "/id");
        let label = hook_label(hook);
        add(
            str_at(hook, "/started_at"),
            format!("hook-start:{id}"),
            Tone::Good,
            "Running",
            label.clone(),
        );
        let took = duration_ms(hook);
        let (tone, verb, message) = match str_at(hook, "/status") {
            "queued" | "running" => continue,
            "completed" => (Tone::Good, "Finished", format!("{label} in {took}")),
            "failed" => (
                Tone::Bad,
                "Failed",
                format!("{label} in {took}{}", because(hook, "error")),
            ),
            // timed_out, interrupted, dropped: said, since the verb does not.
            other => (
                Tone::Bad,
                "Failed",
                format!("{label} ({other}) in {took}{}", because(hook, "error")),
            ),
        };
        add(
            str_at(hook, "/finished_at"),
            format!("hook-end:{id}"),
            tone,
            verb,
            message,
        );
    }
    if view["in_flight"].as_bool() != Some(true) {
        let run = short(str_at(view, "/id"));
        let blocker = because(view, "blocker");
        let took = super::run::run_duration(view);
        let (tone, verb, message) = match str_at(view, "/status") {
            "completed" => (Tone::Good, "Completed", format!("run {run} in {took}")),
            "failed" => (Tone::Bad, "Failed", format!("run {run} in {took}{blocker}")),
            "paused" => (Tone::Warn, "Paused", format!("run {run}{blocker}")),
            "cancelled" => (Tone::Warn, "Cancelled", format!("run {run}{blocker}")),
            other => (
                Tone::Warn,
                "Stopped",
                format!("run {run} is {other}{blocker}"),
            ),
        };
        // A paused run has no end time: it stopped when its last node run ended.
        let at = view["finished_at"]
            .as_str()
            .map(str::to_string)
            .or_else(|| {
                items(&view["node_runs"])
                    .iter()
                    .filter_map(|n| n["finished_at"].as_str())
                    .max()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "~".to_string());
        add(
            &at,
            format!("run-end:{}:{at}", str_at(view, "/status")),
            tone,
            verb,
            message,
        );
    }
    // Stable: what has the same time stays in the order above (a spec starts before its node).
    events.sort_by(|a, b| a.at.cmp(&b.at));
    events
}

impl Seen {
    /// Takes in what happened before the wait, without reporting it (a continue).
    fn absorb(&mut self, view: &Value) {
        for event in events(view) {
            self.reported.insert(event.key);
        }
    }

    /// Reports what happened since the last poll, in time order.
    fn report(&mut self, status: &Status, view: &Value) {
        for event in events(view) {
            if self.reported.insert(event.key) {
                status.line(event.tone, event.verb, &event.message);
            }
        }
    }
}

/// Waits for run `run_id` of graph `graph` to stop, then for its hooks, reporting progress.
/// `before`: the run as it was before a continue (what it did then is not reported again);
/// None for a run that has just started.
pub async fn wait(
    client: &Client,
    graph: &str,
    run_id: &str,
    before: Option<&Value>,
    options: &WaitOptions,
) -> Result<Waited> {
    let status = Status {
        quiet: options.quiet,
        tty: std::io::stderr().is_terminal(),
    };
    let path = format!("/api/runs/{}?brief=true", encode(run_id));
    let mut seen = Seen::default();
    let started = Instant::now();
    let verb = match before {
        Some(before) => {
            seen.absorb(before);
            "Continuing"
        }
        None => "Started",
    };
    status.line(
        Tone::Good,
        verb,
        &format!("run {} of graph {graph}", short(run_id)),
    );
    let gone = |err: anyhow::Error| daemon_gone(err, graph, run_id);
    let mut view: Value = client.get(&path).await.map_err(gone)?;
    loop {
        seen.report(&status, &view);
        if view["in_flight"].as_bool() != Some(true) {
            break;
        }
        if options.timeout.is_some_and(|t| started.elapsed() >= t) {
            status.always(
                Tone::Warn,
                "Waiting",
                &format!(
                    "stopped after {}: run {} is still {}; `canopy run show {}` shows where it is",
                    human(started.elapsed()),
                    short(run_id),
                    str_at(&view, "/status"),
                    short(run_id)
                ),
            );
            return Ok(Waited::TimedOut);
        }
        tokio::time::sleep(POLL).await;
        view = client.get(&path).await.map_err(gone)?;
    }

    // Every hook the run fired is recorded now; wait for them to end.
    let hooks_deadline = Instant::now() + options.hooks_timeout;
    loop {
        let pending = pending_hooks(&view);
        if pending.is_empty() {
            return Ok(Waited::Done);
        }
        let names = pending
            .iter()
            .map(|h| hook_label(h).trim_start_matches("hook ").to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if Instant::now() >= hooks_deadline {
            status.always(
                Tone::Warn,
                "Warning",
                &format!(
                    "{} of run {} still running after {}: {names}; `canopy hooks runs --graph {graph}` shows how they end",
                    plural(pending.len(), "hook"),
                    short(run_id),
                    human(options.hooks_timeout)
                ),
            );
            return Ok(Waited::HooksRunning);
        }
        if !seen.waiting_for_hooks {
            seen.waiting_for_hooks = true;
            status.line(
                Tone::Note,
                "Waiting",
                &format!("for {} of the run: {names}", plural(pending.len(), "hook")),
            );
        }
        tokio::time::sleep(POLL).await;
        view = client.get(&path).await.map_err(gone)?;
        seen.report(&status, &view);
    }
}

/// What a wait says when the daemon it waits on stops answering: that it stopped, what a stop
/// does to the run, and how to go on.
fn daemon_gone(err: anyhow::Error, graph: &str, run_id: &str) -> anyhow::Error {
    if err.downcast_ref::<canopy_client::NoDaemon>().is_none() {
        return err;
    }
    anyhow::anyhow!(
        "the daemon stopped while this waited for run {run} of graph {graph}. The run did not end here: a planned stop records the work in flight interrupted, and the run stays until it is continued. `canopy status` says why the daemon stopped; after `canopy daemon start`, `canopy graph get {graph}` shows where the run stands and `canopy graph continue {graph}` goes on",
        run = short(run_id)
    )
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}
