//! The one automation runner: every piece of work Canopy runs -- a graph's node, a hook, a
//! cron's action, a webhook's handler -- is one [`Job`] through [`run`].
//!
//! [`run`] resolves the workdir (unless the caller resolved it once for many calls), sets the
//! variables that say which automation the processes run for, gives the call the identity it
//! acts as, calls the executor with the deadline and stop signal the job carries, times it and
//! maps its result to an [`Ending`]. What stays with each caller is its record: which markers
//! its kind of work offers, and which of its statuses each ending is.

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Instant;

use canopy_executors::plugins::{
    CallReport, CallRequest, Ending, PluginError, PluginHost, StopSignal, WorkConfig, Workdir,
};
use canopy_model::events::{Actor, Cause};
use canopy_model::markers::MarkerValues;
use canopy_model::work::{Origin, Provenance};

/// What kind of work a job is. A hook's, a cron's and a webhook's processes see theirs in
/// `CANOPY_AUTOMATION_KIND` (with the actor in `CANOPY_AUTOMATION_ID`); a node is the work
/// itself, not an automation, and gets neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Node,
    Hook,
    Cron,
    Webhook,
}

impl Kind {
    fn automation(self) -> Option<&'static str> {
        match self {
            Self::Node => None,
            Self::Hook => Some("hook"),
            Self::Cron => Some("cron"),
            Self::Webhook => Some("webhook"),
        }
    }
}

/// What a job is, as its call's provenance says: a node, or the automation (by its actor's
/// name) it runs for.
fn origin(kind: Kind, actor: &Actor) -> Origin {
    let name = match actor {
        Actor::Hook(name) | Actor::Cron(name) | Actor::Webhook(name) => name.clone(),
        Actor::User | Actor::Agent => actor.to_string(),
    };
    match kind {
        Kind::Node => Origin::Node,
        Kind::Hook => Origin::Hook(name),
        Kind::Cron => Origin::Cron(name),
        Kind::Webhook => Origin::Webhook(name),
    }
}

/// Where a job runs: a workdir resolved once for many calls (a run's nodes), or a path to
/// resolve for this call.
#[derive(Debug, Clone)]
pub enum Place {
    Resolved(Workdir),
    Path(PathBuf),
}

impl From<Workdir> for Place {
    fn from(workdir: Workdir) -> Self {
        Self::Resolved(workdir)
    }
}

impl From<PathBuf> for Place {
    fn from(path: PathBuf) -> Self {
        Self::Path(path)
    }
}

/// One piece of work to run.
pub struct Job {
    pub kind: Kind,
    /// The executor's mode and config, or why the declaration names none (the job then fails
    /// with it, as a call would).
    pub work: Result<WorkConfig, String>,
    /// Marker values (raw); the kind's known markers missing here render `(none)`.
    pub markers: MarkerValues,
    /// The markers this kind of work offers.
    pub supported_markers: Cow<'static, [&'static str]>,
    pub place: Place,
    pub provenance: Provenance,
    /// Who the work acts for, at which dispatch depth: what it asks of the host, and (for an
    /// automation, or a node of a run an automation started) what its processes ask of the API.
    pub cause: Cause,
    /// Overrides the deadline the config names (or the default).
    pub timeout: Option<std::time::Duration>,
    pub resume_session: Option<String>,
    /// The kind's own inputs for its processes (`CANOPY_CRON_NAME`, a webhook's headers).
    pub env: Vec<(String, String)>,
    /// A file the processes read as stdin (a webhook's body for its `command` handler).
    pub stdin: Option<PathBuf>,
    /// Also stops the job's processes (a cron firing replaced by the next).
    pub stop: Option<StopSignal>,
    /// The call is set up ahead and its processes start on this mark (a cron's second); the
    /// job's time counts from it.
    pub not_before: Option<tokio::time::Instant>,
    /// A sync hook's job: the input of the action it decides on, a JSON object's text.
    pub decision_input: Option<String>,
    /// A node's: its graph's hooks map, when it keys what an agent's launch asks (see
    /// [`CallRequest::graph_hooks`]).
    pub graph_hooks: Option<std::sync::Arc<crate::hooks::HookMap>>,
}

impl Job {
    /// A job with no inputs beyond its markers, run now.
    pub fn new(
        kind: Kind,
        work: Result<WorkConfig, String>,
        place: impl Into<Place>,
        provenance: Provenance,
        cause: Cause,
    ) -> Self {
        Self {
            kind,
            work,
            markers: MarkerValues::new(),
            supported_markers: Cow::Borrowed(&[]),
            place: place.into(),
            provenance,
            cause,
            timeout: None,
            resume_session: None,
            env: Vec::new(),
            stdin: None,
            stop: None,
            not_before: None,
            decision_input: None,
            graph_hooks: None,
        }
    }
}

/// How a job went.
pub struct Ran {
    /// The call's report, or why there was none.
    pub result: Result<CallReport, PluginError>,
    pub ending: Ending,
    /// The marker values the job was given.
    pub markers: MarkerValues,
    pub duration_ms: i64,
}

impl Ran {
    /// The last `limit` bytes of what the work printed, when it ran: its outcome's detail,
    /// then what the plugin itself printed, when it printed anything.
    pub fn output(&self, limit: usize) -> Option<String> {
        self.result.as_ref().ok().map(|report| {
            let said = &report.said;
            if said.is_empty() {
                return canopy_model::text::tail(&report.outcome.detail, limit);
            }
            let mut text = report.outcome.detail.clone();
            for (stream, printed) in [("stdout", &said.stdout), ("stderr", &said.stderr)] {
                if !printed.is_empty() {
                    if !text.is_empty() && !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&format!("[plugin {stream}]\n{printed}\n"));
                }
            }
            canopy_model::text::tail(&text, limit)
        })
    }

    pub fn report(&self) -> Option<&CallReport> {
        self.result.as_ref().ok()
    }
}

/// Runs one job to its end.
pub async fn run(plugins: &PluginHost, job: Job) -> Ran {
    let Job {
        kind,
        work,
        markers,
        supported_markers,
        place,
        provenance,
        cause,
        timeout,
        resume_session,
        mut env,
        stdin,
        stop,
        not_before,
        decision_input,
        graph_hooks,
    } = job;
    let provenance = Provenance {
        origin: origin(kind, &cause.actor),
        ..provenance
    };
    let now = Instant::now();
    // Timed from the mark when the call was prepared ahead of it.
    let started = not_before.map_or(now, |at| at.into_std().max(now));
    if let Some(automation) = kind.automation() {
        env.splice(
            0..0,
            [
                ("CANOPY_AUTOMATION_KIND".to_string(), automation.to_string()),
                ("CANOPY_AUTOMATION_ID".to_string(), cause.actor.to_string()),
            ],
        );
    }
    // An automation's processes act as it with a token of their own; so do the nodes of a run
    // an automation started. A node of a run a person started acts as whoever's token its
    // processes use.
    let acts_as = match kind {
        Kind::Node => (cause.actor.is_automation() || cause.depth > 0).then(|| cause.clone()),
        Kind::Hook | Kind::Cron | Kind::Webhook => Some(cause.clone()),
    };
    let call = async {
        let work = work.map_err(PluginError::InvalidConfig)?;
        let workdir = match place {
            Place::Resolved(workdir) => workdir,
            Place::Path(path) => Workdir::resolve(&path)?,
        };
        let request = CallRequest {
            work,
            markers: markers.clone(),
            supported_markers,
            workdir,
            provenance,
            timeout,
            resume_session,
            cause: acts_as,
            env,
            stdin,
            decision_input,
            graph_hooks,
        };
        plugins.execute_at(request, stop, not_before).await
    };
    // What the work asks of the host (a message it queues) is its cause's, as its processes'
    // requests are.
    let result = cause.scope(call).await;
    let duration_ms = i64::try_from(
        Instant::now()
            .saturating_duration_since(started)
            .as_millis(),
    )
    .unwrap_or(i64::MAX);
    Ran {
        ending: Ending::of(&result),
        result,
        markers,
        duration_ms,
    }
}
