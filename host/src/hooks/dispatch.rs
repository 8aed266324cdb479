//! Firing hooks: the engine's events become hook runs, run in declaration order off the engine's
//! path.
//!
//! At an event the dispatcher reads the graph's hooks as stored at that moment, keeps those whose
//! `spec_ids` match and records each as a queued hook run; the event's emitter waits until that
//! is committed, so the records are durable before the engine goes on. For a graph that had
//! hooks for the event last time, the hooks are read inside the write that records the runs
//! (one round trip); otherwise they are read first from the read pool, so the events of graphs
//! without hooks never wait for the store's writer. The batch then takes one of
//! [`CONCURRENT_BATCHES`] slots (the emitter waits while every slot is busy: nothing queues
//! without bound) and a task runs its hooks one after another. Within a batch a failing hook is
//! recorded and the next one runs.
//!
//! **Recording.** A hook run costs two small writes, which the store's writer commits together
//! with whatever else is waiting (group commit): one records the firing's hook runs (the first
//! one as running already when a slot was free at once), one records a hook run's end together
//! with the next one's start. A hook run is marked running (committed) before its executor
//! starts, so a long hook shows as running for as long as it runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::config::{HookMap, hooks_of, spec_ids};
use super::runs::{Finished, Fired, HookRunStatus, OUTPUT_LIMIT};
use super::{HookEvent, completed_specs_text};
use crate::engine::events::{EngineEvent, EventSink, LogEvents, RunContext};
use crate::markers::{HOOK_MARKERS, MarkerValues};
use crate::plugins::{
    CallError, CallReport, CallRequest, PluginError, PluginHost, PluginRef, Provenance, Status,
    WorkConfig, split_work_config,
};
use crate::store::{self, Rd, Store, StoreError, Tx};

/// Event batches whose hooks may run at the same time.
pub const CONCURRENT_BATCHES: usize = 32;

/// (graph, event) pairs remembered in `had_hooks` at most; past that it starts over.
const MAX_REMEMBERED: usize = 4096;

/// One event, ready to fire: which event, its run, its marker values, and the spec it is about.
#[derive(Debug, Clone)]
pub struct Firing {
    pub event: HookEvent,
    pub run: RunContext,
    pub markers: MarkerValues,
    /// The spec the event is about (on_spec_completed, and on_failed when the failure belongs
    /// to a spec): `{{spec_id}}` of a hook without `spec_ids`.
    pub spec_id: Option<String>,
    /// The specs `spec_ids` are matched against, in order: the completed spec, or every spec
    /// that failed in the run. A filtered hook fires once for each of its own.
    pub specs: Vec<String>,
}

impl Firing {
    /// The firing an engine event makes, if it fires hooks at all (`on_completed` only fires for
    /// a run that completed at least one spec).
    pub fn of(event: &EngineEvent) -> Option<Self> {
        let mut markers = MarkerValues::new();
        let mut specs = Vec::new();
        let (hook_event, run, spec_id) = match event {
            EngineEvent::RunCompleted { run, completed } => {
                if completed.is_empty() {
                    return None;
                }
                markers.insert("completed_specs".into(), completed_specs_text(completed));
                (HookEvent::OnCompleted, run, None)
            }
            EngineEvent::RunFailed {
                run,
                blocker,
                node,
                spec_id,
                failed_specs,
            } => {
                markers.insert("blocker".into(), blocker.clone());
                if let Some(node) = node {
                    markers.insert("node".into(), node.clone());
                }
                if let Some(spec) = spec_id {
                    markers.insert("spec_id".into(), spec.clone());
                }
                specs.clone_from(failed_specs);
                if specs.is_empty() {
                    specs.extend(spec_id.clone());
                }
                (HookEvent::OnFailed, run, spec_id.clone())
            }
            EngineEvent::RunBlocked {
                run, blocker, node, ..
            } => {
                markers.insert("blocker".into(), blocker.clone());
                if let Some(node) = node {
                    markers.insert("node".into(), node.clone());
                }
                (HookEvent::OnBlocked, run, None)
            }
            EngineEvent::SpecCompleted { run, spec } => {
                markers.insert("spec_name".into(), spec.name.clone());
                markers.insert("spec_id".into(), spec.id.clone());
                specs.push(spec.id.clone());
                (HookEvent::OnSpecCompleted, run, Some(spec.id.clone()))
            }
        };
        markers.insert("graph_name".into(), run.graph_name.clone());
        markers.insert("workdir".into(), run.workdir.clone());
        Some(Self {
            event: hook_event,
            run: run.clone(),
            markers,
            spec_id,
            specs,
        })
    }

    /// The spec each run of `hook` is about: once with the event's spec for a hook without
    /// `spec_ids`; once per matching spec for a filtered one (none: it does not fire).
    pub fn runs_of(&self, hook: &Map<String, Value>) -> Vec<Option<String>> {
        match spec_ids(hook) {
            None => vec![self.spec_id.clone()],
            Some(ids) => self
                .specs
                .iter()
                .filter(|spec| ids.contains(spec))
                .map(|spec| Some(spec.clone()))
                .collect(),
        }
    }

    /// The marker values of one run of a hook about `spec`.
    fn markers_for(&self, spec: Option<&String>) -> MarkerValues {
        let mut markers = self.markers.clone();
        if let Some(spec) = spec {
            markers.insert("spec_id".into(), spec.clone());
        }
        markers
    }
}

/// Whether a hook fires for this firing at all: no `spec_ids`, or one of the firing's specs
/// among them.
pub fn matches(hook: &Map<String, Value>, firing: &Firing) -> bool {
    !firing.runs_of(hook).is_empty()
}

/// Runs graphs' hooks as the engine reports events.
#[derive(Clone)]
pub struct HookDispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    plugins: PluginHost,
    slots: Arc<Semaphore>,
    /// Whether each (graph, event) had hooks when last read: only picks how the next firing
    /// reads them (see the module docs), never which hooks fire.
    had_hooks: Mutex<HashMap<(String, HookEvent), bool>>,
}

impl std::fmt::Debug for HookDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookDispatcher").finish_non_exhaustive()
    }
}

/// A recorded hook run waiting its turn.
struct Queued {
    record_id: String,
    index: usize,
    /// The executor's mode and config, or why the hook config names none.
    work: Result<WorkConfig, String>,
    /// The spec this run is about (`{{spec_id}}`).
    spec_id: Option<String>,
    /// Recorded as running already.
    started: bool,
}

/// A hook run's end, waiting to be recorded.
struct Ended {
    record_id: String,
    finished: Finished,
}

/// A firing to record: its hooks are read and selected inside the write.
struct ToFire {
    firing: Arc<Firing>,
    /// Only this hook index (dry runs).
    only: Option<usize>,
    /// Recorded as test runs.
    test: bool,
    fired_at: String,
    /// Record the first hook run as running: its batch holds a slot already.
    start_first: bool,
}

/// A recorded batch not yet handed to its task. Dropped before that -- its firing's caller
/// stopped waiting, even before the write that recorded it was answered -- it hands itself to a
/// task of its own, which runs whatever of it was committed once a slot is free: recorded hook
/// runs always run.
struct Unstarted {
    dispatcher: HookDispatcher,
    runtime: tokio::runtime::Handle,
    firing: Arc<Firing>,
    /// The graph has hooks for the event (whether or not they matched).
    had_hooks: bool,
    /// The hook runs recorded, in firing order; `None` once handed on.
    queued: Option<Vec<Queued>>,
}

impl Unstarted {
    /// The records' ids, in firing order.
    fn ids(&self) -> Vec<String> {
        self.queued
            .iter()
            .flatten()
            .map(|q| q.record_id.clone())
            .collect()
    }

    /// Starts the batch's task, holding `slot`.
    fn start(mut self, slot: OwnedSemaphorePermit) {
        if let Some(queued) = self.queued.take()
            && !queued.is_empty()
        {
            let dispatcher = self.dispatcher.clone();
            let firing = self.firing.clone();
            tokio::spawn(async move { dispatcher.run_batch(firing, queued, slot).await });
        }
    }

    /// Leaves the batch's hook runs as recorded, never to run.
    fn abandon(mut self) {
        self.queued = None;
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        let Some(queued) = self.queued.take().filter(|q| !q.is_empty()) else {
            return;
        };
        let dispatcher = self.dispatcher.clone();
        let firing = self.firing.clone();
        self.runtime
            .spawn(async move { dispatcher.rescue(firing, queued).await });
    }
}

/// The graph's hooks as stored now: a missing graph or an unreadable map has none.
fn stored_hooks(rd: &Rd<'_>, graph_id: &str) -> Result<HookMap, StoreError> {
    let Some(text) = rd.graph_hooks_json(graph_id)? else {
        return Ok(HookMap::new());
    };
    Ok(serde_json::from_str(&text).unwrap_or_else(|err| {
        tracing::error!(graph = %graph_id, error = %err, "the graph's stored hooks are not a JSON object; none fire");
        HookMap::new()
    }))
}

/// The executor a hook run would be recorded with, if its mode is served now.
fn plugin_of(plugins: &PluginHost, work: &Result<WorkConfig, String>) -> Option<PluginRef> {
    work.as_ref()
        .ok()
        .and_then(|w| plugins.plugin_ref(&w.mode).ok())
}

/// A hook run a firing makes: which hook, its executor, and the spec it is about.
struct Selected {
    index: usize,
    hook: Map<String, Value>,
    work: Result<WorkConfig, String>,
    spec_id: Option<String>,
}

/// The hook runs a firing makes from a graph's hooks map, in firing order: each matching hook
/// (only `only`, when given) once, or once per matching spec when it filters by `spec_ids`.
fn select(map: &HookMap, firing: &Firing, only: Option<usize>) -> Vec<Selected> {
    let mut selected = Vec::new();
    for (index, hook) in hooks_of(map, firing.event).into_iter().enumerate() {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let specs = firing.runs_of(&hook);
        if specs.is_empty() {
            continue;
        }
        let work = split_work_config(&hook);
        for spec_id in specs {
            selected.push(Selected {
                index,
                hook: hook.clone(),
                work: work.clone(),
                spec_id,
            });
        }
    }
    selected
}

/// Records a firing's matching hooks (inside a write).
fn record_firing(
    tx: &Tx<'_>,
    plugins: &PluginHost,
    to_fire: &ToFire,
) -> Result<(bool, Vec<Queued>), StoreError> {
    let ToFire {
        firing,
        only,
        test,
        fired_at,
        start_first,
    } = to_fire;
    let graph_id = &firing.run.graph_id;
    let map = stored_hooks(tx, graph_id)?;
    let had_hooks = !hooks_of(&map, firing.event).is_empty();
    let selected = select(&map, firing, *only);
    let fired: Vec<Fired> = selected
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let running = i == 0 && *start_first;
            Fired {
                graph_id: graph_id.clone(),
                graph_name: firing.run.graph_name.clone(),
                run_id: Some(firing.run.run_id.clone()),
                event: firing.event,
                hook_index: run.index,
                hook_config: Value::Object(run.hook.clone()),
                spec_id: run.spec_id.clone(),
                mode: run.work.as_ref().ok().map(|w| w.mode.clone()),
                test: *test,
                fired_at: fired_at.clone(),
                running,
                plugin: if running {
                    plugin_of(plugins, &run.work)
                } else {
                    None
                },
            }
        })
        .collect();
    let ids = if fired.is_empty() {
        Vec::new()
    } else {
        tx.insert_hook_runs(&fired)?
    };
    let queued = selected
        .into_iter()
        .zip(ids)
        .enumerate()
        .map(|(i, (run, record_id))| Queued {
            record_id,
            index: run.index,
            work: run.work,
            spec_id: run.spec_id,
            started: i == 0 && *start_first,
        })
        .collect();
    Ok((had_hooks, queued))
}

/// Records a hook run's end and the next one's start; returns whether the next one started.
/// Each is recorded on its own: a failure of one is logged and leaves the other standing.
fn record_advance(
    tx: &Tx<'_>,
    ended: Option<&Ended>,
    start: Option<&(String, Option<PluginRef>)>,
) -> bool {
    if let Some(Ended {
        record_id,
        finished,
    }) = ended
    {
        match tx.finish_hook_run(record_id, finished) {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(hook_run = %record_id, "the hook run was interrupted before it ended; its end is not recorded");
            }
            Err(err) => {
                tracing::error!(hook_run = %record_id, error = %err, "cannot record a hook run's end");
            }
        }
    }
    match start {
        Some((record_id, plugin)) => tx
            .start_hook_run(record_id, plugin.as_ref())
            .unwrap_or_else(|err| {
                tracing::error!(hook_run = %record_id, error = %err, "cannot record a hook run's start; it does not run");
                false
            }),
        None => false,
    }
}

impl HookDispatcher {
    pub fn new(store: Store, plugins: PluginHost) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                plugins,
                slots: Arc::new(Semaphore::new(CONCURRENT_BATCHES)),
                had_hooks: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Fires a firing: records its matching hooks as queued (committed when this returns),
    /// takes a batch slot (waiting while every slot is busy) and starts running them; returns
    /// the records' ids. `only` restricts it to one hook index (dry runs); `test` marks the
    /// records.
    ///
    /// A caller that stops waiting (a cancelled request, a driver that lost its lease) never
    /// leaves hook runs recorded but never run: once recorded, they run.
    pub async fn fire(
        &self,
        firing: Firing,
        only: Option<usize>,
        test: bool,
    ) -> Result<Vec<String>, StoreError> {
        let fired_at = store::now();
        let firing = Arc::new(firing);
        let key = (firing.run.graph_id.clone(), firing.event);
        if !self.had_hooks(&key) {
            // Most likely no hook matches: find out from the read pool, off the writer.
            let graph_id = key.0.clone();
            let map = self
                .inner
                .store
                .read(move |rd| stored_hooks(rd, &graph_id))
                .await?;
            self.remember(key.clone(), !hooks_of(&map, firing.event).is_empty());
            if select(&map, &firing, only).is_empty() {
                return Ok(Vec::new());
            }
        }
        // With a slot in hand the batch starts the moment it is recorded, so its first hook is
        // recorded as running.
        let slot = self.inner.slots.clone().try_acquire_owned().ok();
        let to_fire = ToFire {
            firing: firing.clone(),
            only,
            test,
            fired_at,
            start_first: slot.is_some(),
        };
        let dispatcher = self.clone();
        let runtime = tokio::runtime::Handle::current();
        let batch = self
            .inner
            .store
            .write(move |tx| {
                let (had_hooks, queued) = record_firing(tx, &dispatcher.inner.plugins, &to_fire)?;
                Ok::<_, StoreError>(Unstarted {
                    dispatcher,
                    runtime,
                    firing: to_fire.firing,
                    had_hooks,
                    queued: Some(queued),
                })
            })
            .await?;
        self.remember(key, batch.had_hooks);
        let ids = batch.ids();
        if ids.is_empty() {
            return Ok(ids);
        }
        let slot = match slot {
            Some(slot) => slot,
            None => match self.inner.slots.clone().acquire_owned().await {
                Ok(slot) => slot,
                Err(_) => {
                    // The semaphore is never closed; should it be, the records stay queued and
                    // the next start marks them interrupted.
                    batch.abandon();
                    tracing::error!("no hook slot can be taken; the hook runs stay queued");
                    return Ok(ids);
                }
            },
        };
        batch.start(slot);
        Ok(ids)
    }

    /// Runs what was committed of a batch whose caller stopped waiting, once a slot is free.
    /// Its write may not have committed at all: only the hook runs on record are run.
    async fn rescue(&self, firing: Arc<Firing>, queued: Vec<Queued>) {
        let ids: Vec<String> = queued.iter().map(|q| q.record_id.clone()).collect();
        let recorded = match self
            .inner
            .store
            .read(move |rd| rd.hook_runs_by_id(&ids))
            .await
        {
            Ok(recorded) => recorded,
            Err(err) => {
                tracing::error!(error = %err, "cannot read back hook runs whose caller went away; they stay as recorded");
                return;
            }
        };
        let status: HashMap<String, HookRunStatus> =
            recorded.into_iter().map(|r| (r.id, r.status)).collect();
        let queued: Vec<Queued> = queued
            .into_iter()
            .filter_map(|mut q| {
                match status.get(&q.record_id) {
                    Some(HookRunStatus::Queued) => q.started = false,
                    Some(HookRunStatus::Running) => {}
                    Some(
                        HookRunStatus::Completed
                        | HookRunStatus::Failed
                        | HookRunStatus::TimedOut
                        | HookRunStatus::Interrupted,
                    )
                    | None => return None,
                }
                Some(q)
            })
            .collect();
        if queued.is_empty() {
            return;
        }
        match self.inner.slots.clone().acquire_owned().await {
            Ok(slot) => self.run_batch(firing, queued, slot).await,
            Err(_) => tracing::error!("no hook slot can be taken; the hook runs stay queued"),
        }
    }

    /// Whether the graph had hooks for the event when last read.
    fn had_hooks(&self, key: &(String, HookEvent)) -> bool {
        self.inner
            .had_hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or(false)
    }

    fn remember(&self, key: (String, HookEvent), had_hooks: bool) {
        let mut known = self
            .inner
            .had_hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() >= MAX_REMEMBERED && !known.contains_key(&key) {
            known.clear();
        }
        known.insert(key, had_hooks);
    }

    /// Runs a batch's hooks in order, holding its slot until the last one is recorded.
    async fn run_batch(
        &self,
        firing: Arc<Firing>,
        queued: Vec<Queued>,
        _slot: OwnedSemaphorePermit,
    ) {
        let mut ended: Option<Ended> = None;
        for hook in queued {
            let started = if hook.started {
                true
            } else {
                let plugin = plugin_of(&self.inner.plugins, &hook.work);
                self.advance(ended.take(), Some((hook.record_id.clone(), plugin)))
                    .await
            };
            if !started {
                continue;
            }
            let finished = self.run_one(&firing, &hook).await;
            ended = Some(Ended {
                record_id: hook.record_id,
                finished,
            });
        }
        if ended.is_some() {
            self.advance(ended, None).await;
        }
    }

    /// Records, in one write, a hook run's end and the next one's start; returns whether the
    /// next one was marked running (false: a shutdown interrupted it, or the write failed; it
    /// must not run).
    async fn advance(
        &self,
        ended: Option<Ended>,
        start: Option<(String, Option<PluginRef>)>,
    ) -> bool {
        self.inner
            .store
            .write(move |tx| {
                Ok::<_, StoreError>(record_advance(tx, ended.as_ref(), start.as_ref()))
            })
            .await
            .unwrap_or_else(|err| {
                tracing::error!(error = %err, "cannot record a hook run's end or the next one's start");
                false
            })
    }

    /// Runs one hook (already marked running); returns how it ended.
    async fn run_one(&self, firing: &Firing, queued: &Queued) -> Finished {
        let markers = firing.markers_for(queued.spec_id.as_ref());
        let started = Instant::now();
        let result = match &queued.work {
            Ok(work) => {
                self.inner
                    .plugins
                    .execute(CallRequest {
                        work: work.clone(),
                        markers: markers.clone(),
                        supported_markers: HOOK_MARKERS,
                        workdir: PathBuf::from(&firing.run.workdir),
                        provenance: Provenance {
                            graph_id: firing.run.graph_id.clone(),
                            graph_name: firing.run.graph_name.clone(),
                            run_id: firing.run.run_id.clone(),
                            event: firing.event.as_str().to_string(),
                            hook_index: u32::try_from(queued.index).ok(),
                            spec_id: queued.spec_id.clone(),
                        },
                        timeout: None,
                        resume_session: None,
                    })
                    .await
            }
            Err(message) => Err(PluginError::InvalidConfig(message.clone())),
        };
        let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let finished = finished_of(result, &markers, duration_ms);
        match finished.status {
            HookRunStatus::Completed => {}
            HookRunStatus::Failed | HookRunStatus::TimedOut => tracing::warn!(
                graph = %firing.run.graph_name,
                event = firing.event.as_str(),
                hook_index = queued.index,
                status = %finished.status,
                error = finished.error.as_deref().unwrap_or(""),
                "hook did not complete"
            ),
            HookRunStatus::Queued | HookRunStatus::Running | HookRunStatus::Interrupted => {
                tracing::error!(status = %finished.status, "a hook run ended with a status it cannot end with");
            }
        }
        finished
    }
}
/// The record of a hook's outcome.
///
/// A hook run is `timed_out` when the call says it was stopped at its deadline
/// ([`CallError::Timeout`]). A command the executor ran that hit its own timeout comes back as
/// the executor's `failed` outcome: the call report does not yet say that a deadline ended it.
fn finished_of(
    result: Result<CallReport, PluginError>,
    markers: &MarkerValues,
    duration_ms: i64,
) -> Finished {
    let markers_json = json!(markers);
    match result {
        Ok(report) => {
            let rendered = Some(json!({
                "config": report.rendered_config,
                "markers": markers_json,
                "deadline_ms": report.deadline_ms,
            }));
            let output = Some(crate::text::tail(&report.outcome.detail, OUTPUT_LIMIT));
            let (status, error) = match report.outcome.status {
                Status::Completed => (HookRunStatus::Completed, None),
                Status::Failed { reason } if report.timed_out => {
                    (HookRunStatus::TimedOut, Some(reason))
                }
                Status::Failed { reason } => (HookRunStatus::Failed, Some(reason)),
                Status::Blocked { blocker } => (
                    HookRunStatus::Failed,
                    Some(format!(
                        "the hook reported blocked (hooks cannot block a graph): {blocker}"
                    )),
                ),
            };
            Finished {
                status,
                summary: report.outcome.summary,
                error,
                output,
                rendered,
                duration_ms,
            }
        }
        Err(err) => {
            let status = match &err {
                PluginError::Call(CallError::Timeout { .. }) => HookRunStatus::TimedOut,
                _ => HookRunStatus::Failed,
            };
            Finished {
                status,
                summary: None,
                error: Some(err.to_string()),
                output: None,
                rendered: Some(json!({ "markers": markers_json })),
                duration_ms,
            }
        }
    }
}

impl EventSink for HookDispatcher {
    fn emit(&self, event: EngineEvent) -> BoxFuture<'_, ()> {
        LogEvents.log(&event);
        let firing = Firing::of(&event);
        Box::pin(async move {
            if let Some(firing) = firing
                && let Err(err) = self.fire(firing, None, false).await
            {
                tracing::error!(error = %err, "cannot record fired hooks");
            }
        })
    }
}
