//! Sync hooks: hooks that decide, before an action happens, whether it does.
//!
//! An action that sync hooks may gate asks a **question** ([`Question`]): an event of the
//! taxonomy marked `sync_eligible` (`node.pre_dispatch`, `graph.run.pre_start`, ...) whose
//! payload is the action's input. [`Bus::decide`] gathers the sync hooks that match it (a
//! graph's hooks map under the event's name, `[[hooks]]` with `mode = "sync"`), runs them one
//! after another by priority (higher first), then source, then declaration order, and answers:
//!
//! - **allow**: every hook allowed (or patched); the action goes ahead with the input as the
//!   patches left it;
//! - **deny**: a hook denied, with its reason. The hooks after it are `skipped`.
//!
//! Each hook's call is one job through the one runner, with the input as its
//! `decision-input` (and in the `data` marker). A patch is an object whose fields replace the
//! input's; it must fit the event's patch type and may change only a field the input has, or it
//! is `rejected` and not applied (the next hooks see the input without it). A hook that fails
//! or times out is `failed`: when it is `required` the action is denied (fail-closed), else it
//! goes on (fail-open), and the record says which.
//!
//! The action waits for the answer, so nothing is written until it is made: the hook runs of
//! one decision are recorded together, each as it ended, in one write (the action's own, where
//! the caller has one) with the `hook.run.*` events of the hooks that denied, patched, had a
//! patch rejected or failed; a hook that only allowed changed nothing and has its hook run as
//! its record. A question with no matching hook costs a scan of the hooks in memory and nothing
//! else. A question is never recorded in the feed: it is not a fact.

pub use canopy_model::records::hook_reports::HookAnswer;
use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::bus::Bus;
use crate::hooks::config::{HookMap, sync_hooks_of, sync_markers};
use crate::hooks::daemon::{DATA_MARKER, EventFields, SYNC_TIMEOUT};
use crate::hooks::runs::{Finished, Fired, HookRunStatus, OUTPUT_LIMIT};
use crate::runner::{self, Job, Kind, Ran};
use canopy_executors::plugins::launch::Launch;
use canopy_executors::plugins::{Decision as Answer, Ending, WorkConfig, split_work_config};
use canopy_model::events::{Actor, Cause, EventDef, Payload, scalar_text};
use canopy_model::markers::MarkerValues;
use canopy_model::records::hook_runs::{Dispatch, HookOutcome, HookSourceKind, graph_hook_name};
use canopy_model::runtime_hooks::{HookGroup, Phase};
use canopy_model::time::Timestamp;
use canopy_model::work::Provenance;
use canopy_store::hook_runs::SyncHookRun;
use canopy_store::{StoreError, Tx};

/// An action about to happen, asked of the sync hooks.
pub struct Question {
    pub def: &'static EventDef,
    /// The action's input: the event's payload.
    pub input: Value,
    /// The graph the action belongs to, with its hooks map (its sync hooks are asked first).
    pub graph: Option<GraphScope>,
    /// The project (workdir) the action is in, when it has one.
    pub project: Option<String>,
    /// Who asks for the action, at which dispatch depth.
    pub cause: Cause,
    /// The spec the action is about, recorded with its hook runs.
    pub spec_id: Option<String>,
    /// The agent launch the action happens in, whose runtime hooks of the event's phase are
    /// asked first (see [`crate::runtime_hooks`]).
    pub launch: Option<Arc<Launch>>,
}

impl Question {
    /// The question `payload` asks (its event must be sync-eligible).
    pub fn of<P: Payload>(payload: &P, cause: Cause) -> Self {
        Self {
            def: P::DEF,
            input: serde_json::to_value(payload).unwrap_or(Value::Null),
            graph: None,
            project: payload.project(),
            cause,
            spec_id: None,
            launch: None,
        }
    }

    /// The action happens in `launch`: its runtime hooks decide too.
    pub fn in_launch(self, launch: Arc<Launch>) -> Self {
        Self {
            launch: Some(launch),
            ..self
        }
    }

    pub fn in_graph(self, graph: GraphScope) -> Self {
        Self {
            graph: Some(graph),
            ..self
        }
    }

    pub fn about_spec(self, spec_id: impl Into<String>) -> Self {
        Self {
            spec_id: Some(spec_id.into()),
            ..self
        }
    }
}

/// The graph an action belongs to.
#[derive(Debug, Clone)]
pub struct GraphScope {
    pub graph_id: String,
    pub graph_name: String,
    pub run_id: Option<String>,
    pub workdir: String,
    pub hooks: Arc<HookMap>,
}

/// The answer to a question.
#[derive(Debug, Clone)]
pub struct Decision {
    pub verdict: Verdict,
    /// The input as the applied patches left it (the question's, when none applied).
    pub input: Value,
    /// The fields the applied patches changed, with their final values (empty: none was).
    pub patch: Map<String, Value>,
    /// Its hook runs, to record (none when no hook matched): by [`Bus::decide`] in a write of
    /// its own, or by the caller in the write of the action's own outcome
    /// ([`Bus::record_decision`]), which saves the decision a transaction.
    pub record: Option<DecisionRecord>,
}

/// The hook runs of one decision, each as it ended, and their `hook.run.*` events.
#[derive(Debug, Clone)]
pub struct DecisionRecord {
    runs: Vec<SyncHookRun>,
    fired_by: &'static str,
    project: Option<String>,
    depth: u32,
}

impl DecisionRecord {
    /// What each hook answered, in the order they ran (`hooks test`, `canopy hooks decide`).
    pub fn answers(&self) -> Vec<HookAnswer> {
        self.runs
            .iter()
            .map(|run| HookAnswer {
                hook_name: run.fired.hook_name.clone(),
                source: run.fired.source,
                mode: run.fired.mode.clone(),
                status: run.finished.status,
                outcome: run.outcome,
                required: run.required,
                error: run.finished.error.clone(),
                patch_applied: run.patch_applied.clone(),
                duration_ms: run.finished.duration_ms,
            })
            .collect()
    }
}

/// Whether the action goes ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Denied by the hook named, for this reason.
    Deny {
        hook: String,
        reason: String,
    },
}

impl Decision {
    /// The answer when no hook matches.
    fn unasked(input: Value) -> Self {
        Self {
            verdict: Verdict::Allow,
            input,
            patch: Map::new(),
            record: None,
        }
    }

    /// Whether a patch was applied.
    pub fn patched(&self) -> bool {
        !self.patch.is_empty()
    }

    /// The text a patch gave `field`, if one changed it.
    pub fn patched_text(&self, field: &str) -> Option<&str> {
        self.patch.get(field).and_then(Value::as_str)
    }
}

/// One sync hook that matched a question.
struct SyncHook {
    source: HookSourceKind,
    name: String,
    index: usize,
    priority: i64,
    required: bool,
    timeout: Duration,
    config: Arc<str>,
    work: Result<WorkConfig, String>,
    /// Where its call runs.
    workdir: PathBuf,
    /// A daemon hook's `cwd` template, rendered with the question's markers.
    cwd: Option<String>,
}

impl SyncHook {
    /// A hook from its config as written (a graph's or a launch's): its `priority`, `required`
    /// and `timeout_ms` read from the config's own keys.
    fn written(
        source: HookSourceKind,
        name: String,
        index: usize,
        config: &Map<String, Value>,
        workdir: PathBuf,
    ) -> Self {
        let work = split_work_config(config);
        let host = work.as_ref().ok().map(|w| w.host().clone());
        Self {
            source,
            name,
            index,
            priority: host.as_ref().and_then(|h| h.priority().ok()).unwrap_or(0),
            required: host
                .as_ref()
                .and_then(|h| h.required().ok())
                .unwrap_or(false),
            timeout: host
                .as_ref()
                .and_then(|h| h.timeout())
                .unwrap_or(SYNC_TIMEOUT),
            config: Value::Object(config.clone()).to_string().into(),
            work,
            workdir,
            cwd: None,
        }
    }
}

/// How one sync hook went, before it is recorded.
struct Answered {
    hook: SyncHook,
    status: HookRunStatus,
    outcome: HookOutcome,
    error: Option<String>,
    patch_applied: Option<Value>,
    ran: Option<Ran>,
}

impl Bus {
    /// Whether a daemon hook may decide questions of `event` (graph hooks aside): a caller
    /// with no graph hooks for it need not build its question at all.
    pub fn asks(&self, event: &str) -> bool {
        self.daemon_hooks()
            .hooks
            .iter()
            .any(|hook| hook.dispatch == Dispatch::Sync && hook.pattern.matches(event))
    }

    /// Asks the sync hooks matching `question`, answers it (see the module's docs) and records
    /// its hook runs in a write of their own. Errs only when they cannot be recorded; the
    /// action must not go ahead then either. The action waits on that write alone (an agent's
    /// tool call, a run's start): it is watched, not slept on.
    pub async fn decide(&self, question: Question) -> Result<Decision, StoreError> {
        let mut decision = self.decide_unrecorded(question).await;
        if let Some(record) = decision.record.take() {
            let bus = self.clone();
            let recorded = self
                .store()
                .write_watched(move |tx| bus.record_decision(tx, record))
                .await?;
            self.publish(recorded).await;
        }
        Ok(decision)
    }

    /// [`Bus::decide`] without the write: the caller records [`Decision::record`] with
    /// [`Bus::record_decision`] inside the write of the action's outcome, and publishes it.
    pub async fn decide_unrecorded(&self, mut question: Question) -> Decision {
        let hooks = self.sync_hooks(&question);
        if hooks.is_empty() {
            return Decision::unasked(question.input);
        }
        let daemon = self.daemon_hooks();
        let max_depth = daemon.max_depth;
        let node = daemon.identity.node.clone();
        // Asking takes the input over: the hooks see it as each patch leaves it.
        let mut input = std::mem::take(&mut question.input);
        let mut patch = Map::new();
        let mut verdict = Verdict::Allow;
        let mut answered = Vec::with_capacity(hooks.len());
        let fired_at = Timestamp::now();
        for hook in hooks {
            if verdict != Verdict::Allow {
                answered.push(Answered {
                    hook,
                    status: HookRunStatus::Skipped,
                    outcome: HookOutcome::Skipped,
                    error: Some("not run: a hook before it denied the action".to_string()),
                    patch_applied: None,
                    ran: None,
                });
                continue;
            }
            if question.cause.depth > max_depth {
                let why = format!(
                    "not run: the action was caused at dispatch depth {}, past the limit of {max_depth}",
                    question.cause.depth
                );
                if hook.required {
                    verdict = Verdict::Deny {
                        hook: hook.name.clone(),
                        reason: format!("required hook `{}` {why}", hook.name),
                    };
                }
                answered.push(Answered {
                    hook,
                    status: HookRunStatus::Dropped,
                    outcome: HookOutcome::Dropped,
                    error: Some(why),
                    patch_applied: None,
                    ran: None,
                });
                continue;
            }
            let ran = self.ask(&question, &hook, &input, &node).await;
            let one = judge(&question, hook, &mut input, ran);
            if let Some(Value::Object(fields)) = &one.patch_applied {
                patch.extend(fields.clone());
            }
            match one.outcome {
                HookOutcome::Denied => {
                    verdict = Verdict::Deny {
                        hook: one.hook.name.clone(),
                        reason: one.error.clone().unwrap_or_default(),
                    };
                }
                HookOutcome::Failed if one.hook.required => {
                    verdict = Verdict::Deny {
                        hook: one.hook.name.clone(),
                        reason: format!(
                            "required hook `{}` failed: {}",
                            one.hook.name,
                            one.error.as_deref().unwrap_or("no reason given")
                        ),
                    };
                }
                _ => {}
            }
            answered.push(one);
        }
        let record = record_of(&question, fired_at, answered);
        match &verdict {
            Verdict::Allow => {}
            Verdict::Deny { hook, reason } => tracing::info!(
                event = question.def.name,
                %hook,
                reason = %reason,
                "a sync hook denied the action"
            ),
        }
        Decision {
            verdict,
            input,
            patch,
            record: Some(record),
        }
    }

    /// The sync hooks matching a question, in the order they run: priority (higher first),
    /// then the launch's runtime hooks, the graph's, the daemon's, then declaration order.
    fn sync_hooks(&self, question: &Question) -> Vec<SyncHook> {
        let mut hooks = Vec::new();
        let fallback = |project: Option<&str>| {
            project
                .map(PathBuf::from)
                .filter(|p| p.is_dir())
                .unwrap_or_else(|| self.fallback_dir().to_path_buf())
        };
        if let Some(launch) = &question.launch
            && let Some(phase) = Phase::of_event(question.def.name)
        {
            let name = question.input.get("tool_name").and_then(Value::as_str);
            for (group_index, group) in launch.hooks.matching(phase, name) {
                for (index, config) in group.hooks.iter().enumerate() {
                    hooks.push(SyncHook::written(
                        runtime_hook_source(group),
                        runtime_hook_name(phase, group_index, index, group),
                        index,
                        config,
                        launch.workdir.clone(),
                    ));
                }
            }
        }
        if let Some(graph) = &question.graph {
            let configs = sync_hooks_of(&graph.hooks, question.def.name);
            // The workdir is looked at once per question, not once per hook (a stat each); a
            // run's is the one the run checked as it started, and is not looked at again at
            // every dispatch (a hook whose workdir went away meanwhile fails, saying so).
            let workdir = OnceCell::new();
            for (index, config) in configs.into_iter().enumerate() {
                hooks.push(SyncHook::written(
                    HookSourceKind::Graph,
                    graph_hook_name(&graph.graph_name, question.def.name, index),
                    index,
                    &config,
                    workdir
                        .get_or_init(|| match &graph.run_id {
                            Some(_) => PathBuf::from(&graph.workdir),
                            None => fallback(Some(&graph.workdir)),
                        })
                        .clone(),
                ));
            }
        }
        let daemon = self.daemon_hooks();
        let node = daemon.identity.node.clone();
        let actor = question.cause.actor.to_string();
        let fields = EventFields {
            event: question.def.name,
            node: &node,
            actor: &actor,
            project: question.project.as_deref(),
            target: None,
            payload: &question.input,
        };
        let project_dir = OnceCell::new();
        for hook in &daemon.hooks {
            if !hook.serves(&daemon.identity) || !hook.decides(&fields) {
                continue;
            }
            hooks.push(SyncHook {
                source: HookSourceKind::Config,
                name: hook.name().to_string(),
                index: hook.index,
                priority: hook.priority,
                required: hook.required,
                timeout: hook.timeout.unwrap_or(SYNC_TIMEOUT),
                config: hook.recorded_config.clone(),
                work: Ok(hook.work.clone()),
                workdir: project_dir
                    .get_or_init(|| fallback(question.project.as_deref()))
                    .clone(),
                cwd: hook.config.cwd.clone(),
            });
        }
        // Stable: equal priorities keep the graph's first, then declaration order.
        hooks.sort_by_key(|hook| std::cmp::Reverse(hook.priority));
        hooks
    }

    /// Runs one sync hook on the input as it stands.
    async fn ask(&self, question: &Question, hook: &SyncHook, input: &Value, node: &str) -> Ran {
        let mut markers = MarkerValues::new();
        markers.insert("event".to_string(), question.def.name.to_string());
        markers.insert("node".to_string(), node.to_string());
        markers.insert("actor".to_string(), question.cause.actor.to_string());
        if let Some(project) = &question.project {
            markers.insert("project".to_string(), project.clone());
        }
        if let Value::Object(fields) = input {
            for (key, value) in fields {
                if let Some(text) = scalar_text(value) {
                    markers.insert(key.clone(), text);
                }
            }
        }
        // The input's text, once: the `data` marker and the call's decision input.
        let data = input.to_string();
        markers.insert(DATA_MARKER.to_string(), data.clone());
        let workdir = hook
            .cwd
            .as_deref()
            .map(|cwd| PathBuf::from(canopy_model::markers::render_plain(cwd, &markers)))
            .unwrap_or_else(|| hook.workdir.clone());
        let graph = question.graph.as_ref();
        let provenance = Provenance {
            graph_id: graph.map(|g| g.graph_id.clone()).unwrap_or_default(),
            graph_name: graph.map(|g| g.graph_name.clone()).unwrap_or_default(),
            run_id: graph.and_then(|g| g.run_id.clone()).unwrap_or_default(),
            event: question.def.name.to_string(),
            hook_index: u32::try_from(hook.index).ok(),
            spec_id: question.spec_id.clone(),
            // The runner says what kind of work it is.
            ..Default::default()
        };
        let cause = Cause {
            actor: Actor::Hook(hook.name.clone()),
            depth: question.cause.depth.saturating_add(1),
        };
        let job = Job {
            markers,
            supported_markers: Cow::Borrowed(supported_markers(question.def)),
            timeout: Some(hook.timeout),
            decision_input: Some(data),
            ..Job::new(Kind::Hook, hook.work.clone(), workdir, provenance, cause)
        };
        runner::run(self.plugins(), job).await
    }

    /// Records a decision's hook runs and their `hook.run.*` events inside the caller's
    /// write; publish what it returns once that write has committed.
    pub fn record_decision(
        &self,
        tx: &Tx<'_>,
        record: DecisionRecord,
    ) -> Result<crate::bus::Recorded, StoreError> {
        let ids = tx.insert_sync_hook_runs(&record.runs)?;
        let mut recorded = crate::bus::Recorded::default();
        for (run, id) in record.runs.iter().zip(&ids) {
            // A hook that never ran (skipped, dropped) has no end to announce, and one that
            // only allowed changed nothing: its hook run is its record (a feed row per allowing
            // hook was a third of a sync hook's cost on every dispatch). A denial, a patch, a
            // rejected patch and a failure are announced.
            let only_allowed = run.outcome == HookOutcome::Applied && run.patch_applied.is_none();
            if run.started_at.is_none() || only_allowed {
                continue;
            }
            let event = crate::bus::hook_run_event(
                id,
                &run.fired.hook_name,
                run.fired.source,
                &run.finished,
                record.fired_by,
                record.project.clone(),
            );
            let cause = Cause {
                actor: Actor::Hook(run.fired.hook_name.clone()),
                depth: record.depth.saturating_add(1),
            };
            recorded.extend(self.record(tx, [event], &cause)?);
        }
        Ok(recorded)
    }
}

/// The markers a sync hook of `def` may use: the event's, `data`, the envelope's. Made once
/// per event (a dispatch asks on every node).
fn supported_markers(def: &EventDef) -> &'static [&'static str] {
    static BY_EVENT: LazyLock<HashMap<&'static str, Vec<&'static str>>> = LazyLock::new(|| {
        canopy_model::events::all()
            .filter(|def| def.sync_eligible)
            .map(|def| {
                let mut markers = sync_markers(def);
                markers.extend(canopy_model::events::ENVELOPE_MARKERS);
                (def.name, markers)
            })
            .collect()
    });
    BY_EVENT.get(def.name).map_or(&[], Vec::as_slice)
}

/// Where a runtime hook is declared, as its hook runs record it: a profile is `canopy.toml`'s,
/// an agent config's own is its graph's (or hook's).
pub(crate) fn runtime_hook_source(group: &HookGroup) -> HookSourceKind {
    if group.from.starts_with("profile ") {
        HookSourceKind::Config
    } else {
        HookSourceKind::Graph
    }
}

/// A runtime hook's name in its hook runs: `runtime.PHASE.GROUP.INDEX`, with the profile it
/// comes from (`runtime.before_tool.0.0@base`).
pub(crate) fn runtime_hook_name(
    phase: Phase,
    group_index: usize,
    index: usize,
    group: &HookGroup,
) -> String {
    let at = format!("runtime.{phase}.{group_index}.{index}");
    match group.from.strip_prefix("profile ") {
        Some(profile) => format!("{at}@{profile}"),
        None => at,
    }
}

/// The record of a decision's hook runs.
fn record_of(question: &Question, fired_at: Timestamp, answered: Vec<Answered>) -> DecisionRecord {
    let graph = question.graph.as_ref();
    let runs = answered
        .into_iter()
        .map(|one| {
            let Answered {
                hook,
                status,
                outcome,
                error,
                patch_applied,
                ran,
            } = one;
            let report = ran.as_ref().and_then(Ran::report);
            let finished = Finished {
                status,
                summary: report.and_then(|r| r.outcome.summary.clone()),
                error,
                output: ran.as_ref().and_then(|r| r.output(OUTPUT_LIMIT)),
                rendered: ran.as_ref().map(|r| rendered(r, report)),
                duration_ms: ran.as_ref().map_or(0, |r| r.duration_ms),
            };
            SyncHookRun {
                fired: Fired {
                    source: hook.source,
                    hook_name: hook.name,
                    graph_id: graph.map(|g| g.graph_id.clone()),
                    graph_name: graph.map(|g| g.graph_name.clone()),
                    run_id: graph.and_then(|g| g.run_id.clone()),
                    event: question.def.name.to_string(),
                    hook_index: hook.index,
                    hook_config: hook.config,
                    spec_id: question.spec_id.clone(),
                    mode: hook.work.as_ref().ok().map(|w| w.mode.clone()),
                    test: false,
                    fired_at,
                    running: false,
                    plugin: None,
                    dispatch_depth: question.cause.depth,
                    feed_id: None,
                    project: question.project.clone(),
                    dropped: None,
                },
                started_at: ran.as_ref().map(|_| fired_at),
                plugin: report.map(|r| r.plugin.clone()),
                finished,
                required: hook.required,
                outcome,
                patch_applied,
            }
        })
        .collect();
    DecisionRecord {
        runs,
        fired_by: question.def.name,
        project: question.project.clone(),
        depth: question.cause.depth,
    }
}

/// What a hook's call was given, as its record keeps it (`data` is the question itself, kept
/// once in the markers' place).
fn rendered(ran: &Ran, report: Option<&canopy_executors::plugins::CallReport>) -> Value {
    let shown: Map<String, Value> = ran
        .markers
        .iter()
        .filter(|(k, _)| k.as_str() != DATA_MARKER)
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    match report {
        Some(report) => serde_json::json!({
            "config": report.rendered_config,
            "markers": shown,
            "deadline_ms": report.deadline_ms,
        }),
        None => serde_json::json!({ "markers": shown }),
    }
}

/// What one sync hook's run means for the action; applies its patch to `input` when it fits.
fn judge(question: &Question, hook: SyncHook, input: &mut Value, ran: Ran) -> Answered {
    let required = hook.required;
    let failed = |status, why: String| {
        let what = if required {
            "required: the action is denied"
        } else {
            "not required: the action goes on"
        };
        (status, HookOutcome::Failed, Some(format!("{why} ({what})")))
    };
    let (status, outcome, error, patch) = match &ran.ending {
        Ending::Completed => {
            let decision = ran.report().and_then(|r| r.outcome.decision.clone());
            match decision {
                None | Some(Answer::Allow) => {
                    (HookRunStatus::Completed, HookOutcome::Applied, None, None)
                }
                Some(Answer::Deny { reason }) => (
                    HookRunStatus::Completed,
                    HookOutcome::Denied,
                    Some(reason),
                    None,
                ),
                Some(Answer::Patch { patch }) => match check_patch(question.def, input, &patch) {
                    Ok(fields) => (
                        HookRunStatus::Completed,
                        HookOutcome::Applied,
                        None,
                        Some(fields),
                    ),
                    Err(why) => (
                        HookRunStatus::Completed,
                        HookOutcome::Rejected,
                        Some(format!("patch rejected, not applied: {why}")),
                        None,
                    ),
                },
            }
        }
        Ending::Failed(why) | Ending::Blocked(why) => {
            let (s, o, e) = failed(HookRunStatus::Failed, why.clone());
            (s, o, e, None)
        }
        Ending::LimitBlocked(hit) => {
            let (s, o, e) = failed(HookRunStatus::Failed, hit.as_failure());
            (s, o, e, None)
        }
        Ending::TimedOut(why) => {
            let (s, o, e) = failed(HookRunStatus::TimedOut, why.clone());
            (s, o, e, None)
        }
        Ending::Interrupted(why) => {
            let (s, o, e) = failed(
                HookRunStatus::Interrupted,
                why.clone()
                    .unwrap_or_else(|| "interrupted by a planned stop".to_string()),
            );
            (s, o, e, None)
        }
    };
    let patch_applied = patch.map(|fields: Map<String, Value>| {
        if let Value::Object(target) = input {
            for (key, value) in &fields {
                target.insert(key.clone(), value.clone());
            }
        }
        Value::Object(fields)
    });
    Answered {
        hook,
        status,
        outcome,
        error,
        patch_applied,
        ran: Some(ran),
    }
}

/// The compiled patch schema of every sync event that takes a patch, by event name: each
/// schema is the one the taxonomy publishes (`patch_schema`), so what a hook author reads is
/// what a patch is checked against.
static PATCH_VALIDATORS: LazyLock<HashMap<&'static str, Result<jsonschema::Validator, String>>> =
    LazyLock::new(|| {
        canopy_model::events::all()
            .filter_map(|def| {
                let schema = def.patch_schema?;
                let compiled = jsonschema::validator_for(schema().as_value()).map_err(|err| {
                    format!("the patch schema of {} does not compile: {err}", def.name)
                });
                Some((def.name, compiled))
            })
            .collect()
    });

/// A patch's fields, when it fits the question: a JSON object valid against the event's patch
/// schema (without fields set to null), each a field the input has.
fn check_patch(def: &EventDef, input: &Value, patch: &str) -> Result<Map<String, Value>, String> {
    let Some(validator) = PATCH_VALIDATORS.get(def.name) else {
        return Err(format!("{} takes no patch (allow or deny only)", def.name));
    };
    let validator = validator.as_ref().map_err(Clone::clone)?;
    let value: Value =
        serde_json::from_str(patch).map_err(|err| format!("it is not JSON: {err}"))?;
    if let Some(error) = validator.iter_errors(&value).next() {
        let path = error.instance_path.to_string();
        return Err(match path.strip_prefix('/') {
            Some(field) if !field.is_empty() => format!("field `{field}`: {error}"),
            _ => format!("it does not fit the patch schema of {}: {error}", def.name),
        });
    }
    let Value::Object(fields) = value else {
        return Err("it is not a JSON object".to_string());
    };
    let fields: Map<String, Value> = fields.into_iter().filter(|(_, v)| !v.is_null()).collect();
    if fields.is_empty() {
        return Err("it changes nothing (an empty object)".to_string());
    }
    for key in fields.keys() {
        if input.get(key).is_none_or(Value::is_null) {
            return Err(format!(
                "field `{key}`: the action has none to change (a patch only changes what the input has)"
            ));
        }
    }
    Ok(fields)
}
