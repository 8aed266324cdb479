//! Firing hooks: the engine's events become hook runs, run in declaration order off the engine's
//! path.
//!
//! At an event the dispatcher reads the graph's hooks as stored at that moment, keeps those whose
//! `spec_ids` match, records each as a queued hook run (one transaction), and hands the batch to
//! a task that runs them one after another. Batches of different events run concurrently (up to
//! [`CONCURRENT_BATCHES`]); within a batch a failing hook is recorded and the next one runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rusqlite::OptionalExtension;
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

use super::config::{HookMap, hooks_of, spec_ids};
use super::runs::{self, Finished, Fired, OUTPUT_LIMIT};
use super::{HookEvent, completed_specs_text};
use crate::engine::events::{EngineEvent, EventSink, LogEvents, RunContext};
use crate::markers::{HOOK_MARKERS, MarkerValues};
use crate::plugins::{
    CallError, CallRequest, PluginError, PluginHost, Provenance, Status, split_work_config,
};
use crate::store::Store;

/// Event batches whose hooks may run at the same time.
pub const CONCURRENT_BATCHES: usize = 32;

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
    hook: Map<String, Value>,
    /// The spec this run is about (`{{spec_id}}`).
    spec_id: Option<String>,
}

impl HookDispatcher {
    pub fn new(store: Store, plugins: PluginHost) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                plugins,
                slots: Arc::new(Semaphore::new(CONCURRENT_BATCHES)),
            }),
        }
    }

    /// The graph's hooks as stored now.
    fn stored_hooks(&self, graph_id: &str) -> rusqlite::Result<HookMap> {
        let text: Option<String> = self
            .inner
            .store
            .conn()
            .prepare_cached("SELECT hooks FROM graphs WHERE id = ?1")?
            .query_row([graph_id], |r| r.get(0))
            .optional()?;
        Ok(text
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default())
    }

    /// Fires a firing: records its matching hooks as queued and starts running them.
    /// `only` restricts it to one hook index (dry runs); `test` marks the records.
    pub fn fire(
        &self,
        firing: Firing,
        only: Option<usize>,
        test: bool,
    ) -> rusqlite::Result<Vec<String>> {
        let hooks = hooks_of(&self.stored_hooks(&firing.run.graph_id)?, firing.event);
        let selected: Vec<(usize, Map<String, Value>, Option<String>)> = hooks
            .into_iter()
            .enumerate()
            .filter(|(index, _)| only.is_none_or(|o| o == *index))
            .flat_map(|(index, hook)| {
                firing
                    .runs_of(&hook)
                    .into_iter()
                    .map(move |spec| (index, hook.clone(), spec))
            })
            .collect();
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        let queued: Vec<Queued> = {
            let mut conn = self.inner.store.conn();
            let tx = conn.transaction()?;
            let mut queued = Vec::with_capacity(selected.len());
            for (index, hook, spec_id) in selected {
                let config = Value::Object(hook.clone());
                let mode = split_work_config(&hook).ok().map(|w| w.mode);
                let record_id = runs::insert_queued(
                    &tx,
                    &Fired {
                        graph_id: &firing.run.graph_id,
                        graph_name: &firing.run.graph_name,
                        run_id: Some(&firing.run.run_id),
                        event: firing.event,
                        hook_index: index,
                        hook_config: &config,
                        spec_id: spec_id.as_deref(),
                        mode: mode.as_deref(),
                        test,
                    },
                )?;
                queued.push(Queued {
                    record_id,
                    index,
                    hook,
                    spec_id,
                });
            }
            tx.commit()?;
            queued
        };
        let ids = queued.iter().map(|q| q.record_id.clone()).collect();
        let dispatcher = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move { dispatcher.run_batch(firing, queued).await });
            }
            Err(_) => tracing::error!("hooks fired outside the runtime; they stay queued"),
        }
        Ok(ids)
    }

    async fn run_batch(&self, firing: Firing, queued: Vec<Queued>) {
        let Ok(_slot) = self.inner.slots.clone().acquire_owned().await else {
            return;
        };
        for hook in queued {
            self.run_one(&firing, hook).await;
        }
    }

    async fn run_one(&self, firing: &Firing, queued: Queued) {
        let Queued {
            record_id,
            index,
            hook,
            spec_id,
        } = queued;
        let markers = firing.markers_for(spec_id.as_ref());
        let started = Instant::now();
        let work = split_work_config(&hook);
        let plugin = work
            .as_ref()
            .ok()
            .and_then(|w| self.inner.plugins.plugin_ref(&w.mode).ok());
        let begun = {
            let conn = self.inner.store.conn();
            runs::mark_started(&conn, &record_id, plugin.as_ref())
        };
        match begun {
            Ok(true) => {}
            Ok(false) => return,
            Err(err) => {
                tracing::error!(%err, "cannot record a hook run start");
                return;
            }
        }
        let result = match work {
            Ok(work) => {
                self.inner
                    .plugins
                    .execute(CallRequest {
                        work,
                        markers: markers.clone(),
                        supported_markers: HOOK_MARKERS,
                        workdir: PathBuf::from(&firing.run.workdir),
                        provenance: Provenance {
                            graph_id: firing.run.graph_id.clone(),
                            graph_name: firing.run.graph_name.clone(),
                            run_id: firing.run.run_id.clone(),
                            event: firing.event.as_str().to_string(),
                            hook_index: u32::try_from(index).ok(),
                            spec_id,
                        },
                        timeout: None,
                        resume_session: None,
                    })
                    .await
            }
            Err(message) => Err(PluginError::InvalidConfig(message)),
        };
        let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let finished = finished_of(result, &markers, duration_ms);
        if finished.status != "completed" {
            tracing::warn!(
                graph = %firing.run.graph_name,
                event = firing.event.as_str(),
                hook_index = index,
                status = finished.status,
                error = finished.error.as_deref().unwrap_or(""),
                "hook did not complete"
            );
        }
        let conn = self.inner.store.conn();
        if let Err(err) = runs::finish(&conn, &record_id, &finished) {
            tracing::error!(%err, "cannot record a hook run's end");
        }
    }
}

/// The record of a hook's outcome.
fn finished_of(
    result: Result<crate::plugins::CallReport, PluginError>,
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
                Status::Completed => ("completed", None),
                Status::Failed { reason } if reason.starts_with("timed out") => {
                    ("timed_out", Some(reason))
                }
                Status::Failed { reason } => ("failed", Some(reason)),
                Status::Blocked { blocker } => (
                    "failed",
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
        Err(PluginError::Call(err @ CallError::Timeout { .. })) => Finished {
            status: "timed_out",
            error: Some(err.to_string()),
            rendered: Some(json!({ "markers": markers_json })),
            duration_ms,
            ..Finished::default()
        },
        Err(err) => Finished {
            status: "failed",
            error: Some(err.to_string()),
            rendered: Some(json!({ "markers": markers_json })),
            duration_ms,
            ..Finished::default()
        },
    }
}

impl EventSink for HookDispatcher {
    fn emit(&self, event: EngineEvent) {
        let firing = Firing::of(&event);
        LogEvents.emit(event);
        if let Some(firing) = firing
            && let Err(err) = self.fire(firing, None, false)
        {
            tracing::error!(%err, "cannot record fired hooks");
        }
    }
}
