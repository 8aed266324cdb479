//! The SDK's own types for what crosses the contract. The generated WIT bindings stay private:
//! a plugin names these, which keep their shape when the contract gains a version.

use crate::wit;

/// Severity of a log line sent to the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very fine detail.
    Trace,
    /// Detail for debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

impl From<Level> for wit::Level {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => Self::Trace,
            Level::Debug => Self::Debug,
            Level::Info => Self::Info,
            Level::Warn => Self::Warn,
            Level::Error => Self::Error,
        }
    }
}

/// How the host escapes a marker's value when it renders it into a template field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// Inserted as is (prompts, messages).
    Plain,
    /// For fields a shell runs: the value is never parsed by a shell (see [`crate::Command::shell`]).
    Shell,
}

impl From<Escape> for wit::Escape {
    fn from(escape: Escape) -> Self {
        match escape {
            Escape::Plain => Self::Plain,
            Escape::Shell => Self::Shell,
        }
    }
}

/// How a piece of work ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Done; a graph moves on to its next node.
    Completed,
    /// Failed, with the reason.
    Failed(String),
    /// Cannot go on without a person; the graph pauses with this blocker.
    Blocked(String),
    /// Something the work waited on was stopped at its deadline; the text says what.
    TimedOut(String),
}

impl From<Status> for wit::Status {
    fn from(status: Status) -> Self {
        match status {
            Status::Completed => Self::Completed,
            Status::Failed(reason) => Self::Failed(reason),
            Status::Blocked(blocker) => Self::Blocked(blocker),
            Status::TimedOut(reason) => Self::TimedOut(reason),
        }
    }
}

/// A sync hook's answer about the action it was asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The action goes ahead as asked.
    Allow,
    /// The action does not happen, for this reason.
    Deny(String),
    /// The action goes ahead with these fields of its input replaced (JSON text of an object).
    Patch(String),
}

impl From<Decision> for wit::Decision {
    fn from(decision: Decision) -> Self {
        match decision {
            Decision::Allow => Self::Allow,
            Decision::Deny(reason) => Self::Deny(reason),
            Decision::Patch(patch) => Self::Patch(patch),
        }
    }
}

/// What kind of work a call is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A graph's node.
    Node,
    /// A hook, by its name.
    Hook(String),
    /// A cron's action, by the cron's name.
    Cron(String),
    /// A webhook's handler, by the webhook (`<scope>/<id>`).
    Webhook(String),
    /// A direct call: `canopy plugin run`, a benchmark.
    Manual,
}

/// The graph a piece of work belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphRef {
    /// Id of the graph.
    pub id: String,
    /// Its name when the work was launched.
    pub name: String,
}

/// Where a piece of work came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// What kind of work it is.
    pub origin: Origin,
    /// The graph it belongs to, if any (a cron's action or a webhook's handler has none).
    pub graph: Option<GraphRef>,
    /// The run it is part of: the graph run, the cron's firing or the webhook's delivery.
    pub run_id: Option<String>,
    /// The event served (`on_completed`, `node.pre_dispatch`, `node`, `manual`).
    pub event: String,
    /// Position of the hook within its list; none for other work.
    pub hook_index: Option<u32>,
    /// The spec the work is about, when there is one.
    pub spec_id: Option<String>,
}

impl From<&wit::Provenance> for Provenance {
    fn from(p: &wit::Provenance) -> Self {
        Self {
            origin: match &p.origin {
                wit::Origin::Node => Origin::Node,
                wit::Origin::Hook(name) => Origin::Hook(name.clone()),
                wit::Origin::Cron(name) => Origin::Cron(name.clone()),
                wit::Origin::Webhook(name) => Origin::Webhook(name.clone()),
                wit::Origin::Manual => Origin::Manual,
            },
            graph: p.graph.as_ref().map(|g| GraphRef {
                id: g.id.clone(),
                name: g.name.clone(),
            }),
            run_id: p.run_id.clone(),
            event: p.event.clone(),
            hook_index: p.hook_index,
            spec_id: p.spec_id.clone(),
        }
    }
}

impl From<&Provenance> for wit::Provenance {
    fn from(p: &Provenance) -> Self {
        Self {
            origin: match &p.origin {
                Origin::Node => wit::Origin::Node,
                Origin::Hook(name) => wit::Origin::Hook(name.clone()),
                Origin::Cron(name) => wit::Origin::Cron(name.clone()),
                Origin::Webhook(name) => wit::Origin::Webhook(name.clone()),
                Origin::Manual => wit::Origin::Manual,
            },
            graph: p.graph.as_ref().map(|g| wit::GraphRef {
                id: g.id.clone(),
                name: g.name.clone(),
            }),
            run_id: p.run_id.clone(),
            event: p.event.clone(),
            hook_index: p.hook_index,
            spec_id: p.spec_id.clone(),
        }
    }
}

/// Which interactive session a message is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionTarget {
    /// The session with exactly this id.
    Id(String),
    /// The one live session with this name, resolved when the message is delivered.
    Name(String),
}

impl From<&SessionTarget> for wit::SessionTarget {
    fn from(target: &SessionTarget) -> Self {
        match target {
            SessionTarget::Id(id) => Self::Id(id.clone()),
            SessionTarget::Name(name) => Self::Name(name.clone()),
        }
    }
}

/// How the daemon launches an agent CLI, from its configuration (`canopy.toml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPlatform {
    /// argv template; `{prompt}` is replaced by the prompt.
    pub command: Vec<String>,
    /// Fragment used when a model is set; `{model}` is replaced by it.
    pub model_args: Vec<String>,
    /// Fragment used when an effort is set; `{effort}` is replaced by it.
    pub effort_args: Vec<String>,
    /// Fragment used to resume a harness session; `{session}` is replaced by its id.
    pub resume_args: Vec<String>,
}

impl From<wit::Platform> for AgentPlatform {
    fn from(p: wit::Platform) -> Self {
        Self {
            command: p.command,
            model_args: p.model_args,
            effort_args: p.effort_args,
            resume_args: p.resume_args,
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Exit code; none when killed by a signal (including at the timeout).
    pub code: Option<i32>,
    /// True when the process was killed at its timeout.
    pub timed_out: bool,
    /// The last bytes of stdout (64 KiB), lossily decoded as UTF-8.
    pub stdout: String,
    /// The last bytes of stderr (64 KiB).
    pub stderr: String,
    /// Wall time from spawn to exit.
    pub duration_ms: u64,
    /// What the process wrote to `CANOPY_RESULT_FILE`, when asked to capture it.
    pub result: Option<String>,
}

impl From<wit::Exit> for Exit {
    fn from(e: wit::Exit) -> Self {
        Self {
            code: e.code,
            timed_out: e.timed_out,
            stdout: e.stdout,
            stderr: e.stderr,
            duration_ms: e.duration_ms,
            result: e.result,
        }
    }
}
