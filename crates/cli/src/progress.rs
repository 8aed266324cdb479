//! Waiting for a run (`graph run --wait`, `graph continue --wait`) with progress on stderr, in
//! the style of cargo's status lines: a right-aligned verb, bold and coloured when stderr is a
//! terminal, plain otherwise. Polls `GET /api/runs/{id}`; then waits for the run's own hooks.

use std::collections::HashSet;
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use super::run::{duration_ms, human, spec_name_in};
use super::{Client, encode, short, typed};
use canopy_model::records::hook_runs::{HookRun, HookRunStatus, HookSourceKind};
use canopy_model::records::runs::{NodeRunStatus, RunStatus, SpecResult};
use canopy_model::records::views::RunDetail;
use canopy_model::time::Timestamp;

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
    /// When; a stopped run without an end time ends the list.
    at: Option<Timestamp>,
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
fn hook_label(hook: &HookRun) -> String {
    let mode = hook.mode.as_deref().unwrap_or("?");
    // A named hook (a daemon or project hook: `announce-blocked`) by its name, as `hooks runs`
    // shows it; a graph's by its event and place.
    let named = hook.source != HookSourceKind::Graph;
    if named && !hook.hook_name.is_empty() {
        format!("hook {} ({mode})", hook.hook_name)
    } else {
        format!("hook {}[{}] ({mode})", hook.event, hook.hook_index)
    }
}

/// The run's hook runs that have not ended (test runs of `hooks test --execute` aside).
fn pending_hooks(view: &RunDetail) -> Vec<&HookRun> {
    view.hook_runs
        .iter()
        .filter(|h| !h.test && !h.status.is_finished())
        .collect()
}

/// `: why`, or nothing.
fn because(why: Option<&String>) -> String {
    why.map(|r| format!(": {r}")).unwrap_or_default()
}

/// Everything the run view tells that happened, in time order: specs starting and ending, node
/// runs and hook runs starting and ending, and (once the engine is done with it) how the run
/// stopped.
fn events(detail: &RunDetail) -> Vec<Event> {
    let mut events = Vec::new();
    let mut add = |at: Option<Timestamp>, key: String, tone, verb, message: String| {
        if at.is_some() {
            events.push(Event {
                at,
                key,
                tone,
                verb,
                message,
            });
        }
    };
    let view = &detail.view;
    let specs = &view.specs;
    let spec_name = |id: &str| spec_name_in(specs, id);
    for spec in specs {
        let id = &spec.spec_id;
        let name = spec_name(id);
        add(
            Some(spec.started_at),
            format!("spec-start:{id}"),
            Tone::Good,
            "Starting",
            format!("spec {name} ({})", short(id)),
        );
        // Failed, blocked and interrupted specs are told by their node's line.
        let end = match spec.status {
            SpecResult::Completed => Some((Tone::Good, "Completed")),
            SpecResult::Skipped => Some((Tone::Note, "Skipped")),
            _ => None,
        };
        if let Some((tone, verb)) = end {
            add(
                spec.finished_at,
                format!("spec-end:{id}"),
                tone,
                verb,
                format!("spec {name}"),
            );
        }
    }
    for node in &view.node_runs {
        let id = &node.id;
        let label = format!("node {} ({})", node.node, spec_name(&node.spec_id));
        add(
            Some(node.started_at),
            format!("node-start:{id}"),
            Tone::Good,
            "Running",
            label.clone(),
        );
        let took = duration_ms(node.duration_ms);
        let reason = because(node.reason.as_ref());
        let (tone, verb, message) = match node.status {
            NodeRunStatus::Running => continue,
            NodeRunStatus::Completed => (Tone::Good, "Finished", format!("{label} in {took}")),
            NodeRunStatus::Failed => (Tone::Bad, "Failed", format!("{label} in {took}{reason}")),
            NodeRunStatus::Blocked => (Tone::Warn, "Blocked", format!("{label}{reason}")),
            NodeRunStatus::LimitBlocked => (Tone::Warn, "Waiting", format!("{label}{reason}")),
            NodeRunStatus::Cancelled => (
                Tone::Warn,
                "Cancelled",
                format!("{label} after {took}{reason}"),
            ),
            other => (Tone::Warn, "Stopped", format!("{label}: {other}{reason}")),
        };
        add(
            node.finished_at,
            format!("node-end:{id}"),
            tone,
            verb,
            message,
        );
    }
    for hook in &detail.hook_runs {
        if hook.test {
            continue;
        }
        let id = &hook.id;
        let label = hook_label(hook);
        add(
            hook.started_at,
            format!("hook-start:{id}"),
            Tone::Good,
            "Running",
            label.clone(),
        );
        let took = duration_ms(hook.duration_ms);
        let error = because(hook.error.as_ref());
        let (tone, verb, message) = match hook.status {
            HookRunStatus::Queued | HookRunStatus::Running => continue,
            HookRunStatus::Completed => (Tone::Good, "Finished", format!("{label} in {took}")),
            HookRunStatus::Failed => (Tone::Bad, "Failed", format!("{label} in {took}{error}")),
            // timed_out, interrupted, dropped: said, since the verb does not.
            other => (
                Tone::Bad,
                "Failed",
                format!("{label} ({other}) in {took}{error}"),
            ),
        };
        add(
            hook.finished_at,
            format!("hook-end:{id}"),
            tone,
            verb,
            message,
        );
    }
    if !detail.in_flight {
        let run = &view.run;
        let short_id = short(&run.id);
        let blocker = because(run.blocker.as_ref());
        let took = super::run::run_duration(run);
        let (tone, verb, message) = match run.status {
            RunStatus::Completed => (Tone::Good, "Completed", format!("run {short_id} in {took}")),
            RunStatus::Failed => (
                Tone::Bad,
                "Failed",
                format!("run {short_id} in {took}{blocker}"),
            ),
            RunStatus::Paused => (Tone::Warn, "Paused", format!("run {short_id}{blocker}")),
            RunStatus::Cancelled => (Tone::Warn, "Cancelled", format!("run {short_id}{blocker}")),
            other => (
                Tone::Warn,
                "Stopped",
                format!("run {short_id} is {other}{blocker}"),
            ),
        };
        // A paused run has no end time: it stopped when its last node run ended.
        let at = run
            .finished_at
            .or_else(|| view.node_runs.iter().filter_map(|n| n.finished_at).max());
        let key = format!(
            "run-end:{}:{}",
            run.status,
            at.map_or_else(|| "~".to_string(), |at| at.to_string())
        );
        events.push(Event {
            at,
            key,
            tone,
            verb,
            message,
        });
    }
    // Stable: what has the same time stays in the order above (a spec starts before its node);
    // a run end without a time comes last.
    events.sort_by_key(|event| (event.at.is_none(), event.at));
    events
}

impl Seen {
    /// Takes in what happened before the wait, without reporting it (a continue).
    fn absorb(&mut self, view: &RunDetail) {
        for event in events(view) {
            self.reported.insert(event.key);
        }
    }

    /// Reports what happened since the last poll, in time order.
    fn report(&mut self, status: &Status, view: &RunDetail) {
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
    before: Option<&RunDetail>,
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
    let read = async || -> Result<RunDetail> {
        let answer: Value = client.get(&path).await.map_err(gone)?;
        typed(&answer, "a run")
    };
    let mut view = read().await?;
    loop {
        seen.report(&status, &view);
        if !view.in_flight {
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
                    view.view.run.status,
                    short(run_id)
                ),
            );
            return Ok(Waited::TimedOut);
        }
        tokio::time::sleep(POLL).await;
        view = read().await?;
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
        view = read().await?;
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
