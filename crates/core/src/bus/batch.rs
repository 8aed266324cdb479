//! Running a batch of recorded hook runs: one source's hooks for one event, one after another.
//!
//! A hook run costs two small writes, which the store's writer commits together with whatever
//! else is waiting: the one that recorded the event, and one that records a hook run's end
//! (with its `hook.run.*` event) together with the next one's start. A hook run is marked
//! running (committed) before its executor starts, so a long hook shows as running for as long
//! as it runs.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::source::{HookCall, Trigger};
use super::{Bus, Recorded};
use crate::hooks::daemon::DATA_MARKER;
use crate::hooks::runs::{Finished, HookRunStatus, OUTPUT_LIMIT};
use crate::runner::{self, Job, Kind, Ran};
use canopy_executors::plugins::{Ending, WorkConfig};
use canopy_model::events::{self, Actor, Cause, Event};
use canopy_model::markers::MarkerValues;
use canopy_model::records::hook_runs::HookSourceKind;
use canopy_model::work::PluginRef;
use canopy_store::StoreError;

/// A recorded hook run waiting its turn.
pub(crate) struct Queued {
    pub record_id: String,
    pub index: usize,
    pub hook_name: String,
    /// The executor's mode and config, or why the hook config names none.
    pub work: Result<WorkConfig, String>,
    /// The spec this run is about (`{{spec_id}}`).
    pub spec_id: Option<String>,
    /// The source it was declared in.
    pub source: HookSourceKind,
    /// How its call is made.
    pub call: Arc<dyn HookCall>,
    /// Recorded as running already (the first of a batch that had a slot when recorded).
    pub started: bool,
}

/// A hook run's end, waiting to be recorded.
struct Ended {
    record_id: String,
    hook_name: String,
    source: HookSourceKind,
    finished: Finished,
}

/// A recorded batch not yet started. Dropped before that -- its emitter stopped waiting, even
/// before the write that recorded it was answered -- it hands itself to a task of its own,
/// which runs whatever of it was committed once a slot is free: recorded hook runs always run.
pub struct Unstarted {
    bus: Bus,
    trigger: Arc<Trigger>,
    /// The hook runs recorded, in firing order; `None` once handed on.
    queued: Option<Vec<Queued>>,
    /// The slot taken when the batch was recorded, if one was free then.
    slot: Option<OwnedSemaphorePermit>,
}

impl Unstarted {
    pub(crate) fn new(
        bus: Bus,
        trigger: Arc<Trigger>,
        queued: Vec<Queued>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Self {
        Self {
            bus,
            trigger,
            queued: Some(queued),
            slot,
        }
    }

    /// The records' ids, in firing order.
    pub fn ids(&self) -> Vec<String> {
        self.queued
            .iter()
            .flatten()
            .map(|q| q.record_id.clone())
            .collect()
    }

    /// Takes a slot (waiting while every one is busy) and starts the batch's task.
    pub(super) async fn start(mut self, slots: &Arc<Semaphore>) {
        let Some(queued) = self.queued.take().filter(|q| !q.is_empty()) else {
            return;
        };
        let held = self.slot.take();
        let slot = match held {
            Some(slot) => Ok(slot),
            None => slots.clone().acquire_owned().await,
        };
        match slot {
            Ok(slot) => {
                let (bus, trigger) = (self.bus.clone(), self.trigger.clone());
                tokio::spawn(async move { run_batch(&bus, &trigger, queued, slot).await });
            }
            // The semaphore is never closed; should it be, the records stay queued and the
            // next start marks them interrupted.
            Err(_) => tracing::error!("no hook slot can be taken; the hook runs stay queued"),
        }
    }
}

impl Unstarted {
    /// Starts the batch without waiting: at once when a slot is free, else from a task that
    /// waits for one (see [`Bus::publish_from_batch`]).
    pub(super) fn start_detached(mut self, slots: &Arc<Semaphore>) {
        let Some(queued) = self.queued.take().filter(|q| !q.is_empty()) else {
            return;
        };
        let (bus, trigger, slots) = (self.bus.clone(), self.trigger.clone(), slots.clone());
        let held = self
            .slot
            .take()
            .map_or_else(|| slots.clone().try_acquire_owned(), Ok);
        match held {
            Ok(slot) => {
                tokio::spawn(async move { run_batch(&bus, &trigger, queued, slot).await });
            }
            Err(_) => {
                tokio::spawn(async move {
                    match slots.acquire_owned().await {
                        Ok(slot) => run_batch(&bus, &trigger, queued, slot).await,
                        Err(_) => {
                            tracing::error!("no hook slot can be taken; the hook runs stay queued");
                        }
                    }
                });
            }
        }
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        let Some(queued) = self.queued.take().filter(|q| !q.is_empty()) else {
            return;
        };
        let (bus, trigger) = (self.bus.clone(), self.trigger.clone());
        bus.inner
            .runtime
            .clone()
            .spawn(async move { rescue(bus, trigger, queued).await });
    }
}

/// Runs what was committed of a batch whose emitter stopped waiting, once a slot is free. Its
/// write may not have committed at all: only the hook runs on record are run.
async fn rescue(bus: Bus, trigger: Arc<Trigger>, queued: Vec<Queued>) {
    let ids: Vec<String> = queued.iter().map(|q| q.record_id.clone()).collect();
    let recorded = match bus
        .inner
        .store
        .read(move |rd| rd.hook_runs_by_id(&ids))
        .await
    {
        Ok(recorded) => recorded,
        Err(err) => {
            tracing::error!(error = %err, "cannot read back hook runs whose emitter went away; they stay as recorded");
            return;
        }
    };
    let status: HashMap<String, HookRunStatus> =
        recorded.into_iter().map(|r| (r.id, r.status)).collect();
    // Queued ones run; one recorded as running when the batch was recorded was never started
    // by anyone else, so it runs too.
    let queued: Vec<Queued> = queued
        .into_iter()
        .filter(|q| match status.get(&q.record_id) {
            Some(HookRunStatus::Queued) => true,
            Some(HookRunStatus::Running) => q.started,
            _ => false,
        })
        .collect();
    if queued.is_empty() {
        return;
    }
    match bus.inner.slots.clone().acquire_owned().await {
        Ok(slot) => run_batch(&bus, &trigger, queued, slot).await,
        Err(_) => tracing::error!("no hook slot can be taken; the hook runs stay queued"),
    }
}

/// Runs a batch's hooks in order, holding its slot until the last one is recorded.
async fn run_batch(
    bus: &Bus,
    trigger: &Arc<Trigger>,
    queued: Vec<Queued>,
    _slot: OwnedSemaphorePermit,
) {
    let mut ended: Option<Ended> = None;
    // The drain admission of the hook running now, held until its end is recorded.
    let mut holding = None;
    for hook in queued {
        // A planned stop has closed admission: the rest of the batch does not start (the stop
        // records them interrupted).
        let Some(admitted) = bus.drain().admit() else {
            break;
        };
        if !hook.started {
            let plugin = plugin_of(bus, &hook.work);
            let start = Some((hook.record_id.clone(), plugin));
            let started = advance(bus, trigger, ended.take(), start).await;
            holding = None;
            if !started {
                continue;
            }
        }
        holding = Some(admitted);
        let finished = run_one(bus, trigger, &hook).await;
        ended = Some(Ended {
            source: hook.source,
            record_id: hook.record_id,
            hook_name: hook.hook_name,
            finished,
        });
    }
    if ended.is_some() {
        advance(bus, trigger, ended, None).await;
    }
    drop(holding);
}

/// The executor a hook run would be recorded with, if its mode is served now.
fn plugin_of(bus: &Bus, work: &Result<WorkConfig, String>) -> Option<PluginRef> {
    work.as_ref()
        .ok()
        .and_then(|w| bus.inner.plugins.plugin_ref(&w.mode).ok())
}

/// Records, in one write, a hook run's end (and its `hook.run.*` event) and the next one's
/// start; returns whether the next one was marked running (false: a shutdown interrupted it,
/// or the write failed; it must not run).
async fn advance(
    bus: &Bus,
    trigger: &Arc<Trigger>,
    ended: Option<Ended>,
    start: Option<(String, Option<PluginRef>)>,
) -> bool {
    let writer = bus.clone();
    let depth = trigger.depth;
    // The end's event is made before the write: the writer thread only records it.
    let ending = ended.map(|ended| {
        let event = hook_run_event(
            &ended.record_id,
            &ended.hook_name,
            ended.source,
            &ended.finished,
            &trigger.event,
            trigger.project.clone(),
        );
        let cause = hook_cause(&ended.hook_name, depth);
        (ended, event, cause)
    });
    let written = bus
        .inner
        .store
        .write(move |tx| {
            let mut recorded = Recorded::default();
            if let Some((Ended {
                record_id,
                finished,
                ..
            }, event, cause)) = ending
            {
                match tx.finish_hook_run(&record_id, &finished) {
                    Ok(true) => match writer.record(tx, [event], &cause) {
                        Ok(events) => recorded = events,
                        Err(err) => {
                            tracing::error!(hook_run = %record_id, error = %err, "cannot record a hook run's event");
                        }
                    },
                    Ok(false) => {
                        tracing::debug!(hook_run = %record_id, "the hook run was interrupted before it ended; its end is not recorded");
                    }
                    Err(err) => {
                        tracing::error!(hook_run = %record_id, error = %err, "cannot record a hook run's end");
                    }
                }
            }
            let started = match &start {
                Some((record_id, plugin)) => tx
                    .start_hook_run(record_id, plugin.as_ref())
                    .unwrap_or_else(|err| {
                        tracing::error!(hook_run = %record_id, error = %err, "cannot record a hook run's start; it does not run");
                        false
                    }),
                None => false,
            };
            Ok::<_, StoreError>((started, recorded))
        })
        .await;
    match written {
        Ok((started, recorded)) => {
            bus.publish_from_batch(recorded);
            started
        }
        Err(err) => {
            tracing::error!(error = %err, "cannot record a hook run's end or the next one's start");
            false
        }
    }
}

/// The `hook.run.completed` / `hook.run.failed` event of a hook run that ended.
pub(crate) fn hook_run_event(
    record_id: &str,
    hook_name: &str,
    source: HookSourceKind,
    finished: &Finished,
    fired_by: &str,
    project: Option<String>,
) -> Event {
    let ended = events::hook::HookRunEnded {
        hook_run_id: record_id.to_string(),
        source: source.as_str().to_string(),
        hook_name: hook_name.to_string(),
        fired_by: fired_by.to_string(),
        status: finished.status,
        error: finished.error.clone(),
        duration_ms: finished.duration_ms,
        project,
    };
    if finished.status == HookRunStatus::Completed {
        Event::new(&events::hook::HookRunCompleted(ended))
    } else {
        Event::new(&events::hook::HookRunFailed(ended))
    }
}

/// The job one queued hook run is: what its source gives its call ([`HookCall`]), acting as
/// the hook one dispatch level deeper than its event.
fn job(bus: &Bus, trigger: &Trigger, queued: &Queued) -> Job {
    let parts = queued.call.parts(trigger, queued, &bus.inner.fallback_dir);
    Job {
        markers: parts.markers,
        supported_markers: parts.supported_markers,
        timeout: parts.timeout,
        ..Job::new(
            Kind::Hook,
            queued.work.clone(),
            parts.workdir,
            parts.provenance,
            hook_cause(&queued.hook_name, trigger.depth),
        )
    }
}

/// Who a hook run acts as, and what its end is caused by: the hook, one dispatch level deeper
/// than the event that fired it.
fn hook_cause(hook_name: &str, depth: u32) -> Cause {
    Cause {
        actor: Actor::Hook(hook_name.to_string()),
        depth: depth.saturating_add(1),
    }
}

/// Runs one hook (already marked running); returns how it ended.
async fn run_one(bus: &Bus, trigger: &Trigger, queued: &Queued) -> Finished {
    let ran = runner::run(&bus.inner.plugins, job(bus, trigger, queued)).await;
    let finished = finished_of(ran);
    match finished.status {
        HookRunStatus::Completed => {}
        HookRunStatus::Failed | HookRunStatus::TimedOut => tracing::warn!(
            hook = %queued.hook_name,
            event = %trigger.event,
            status = %finished.status,
            error = finished.error.as_deref().unwrap_or(""),
            "hook did not complete"
        ),
        HookRunStatus::Queued
        | HookRunStatus::Running
        | HookRunStatus::Interrupted
        | HookRunStatus::Dropped
        | HookRunStatus::Skipped
        | HookRunStatus::Unknown => {
            tracing::error!(status = %finished.status, "a hook run ended with a status it cannot end with");
        }
    }
    finished
}

/// The record of a hook's outcome. A hook run is `timed_out` when the call says it was
/// stopped at its deadline ([`CallError::Timeout`]), or when the host saw a command it ran
/// stopped at its timeout and the call failed ([`CallReport::timed_out`]).
fn finished_of(ran: Ran) -> Finished {
    // `data` repeats the whole event; the record keeps the event's id instead (feed_id).
    let shown: MarkerValues = ran
        .markers
        .iter()
        .filter(|(k, _)| k.as_str() != DATA_MARKER)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let markers_json = json!(shown);
    let output = ran.output(OUTPUT_LIMIT);
    let (status, error) = match ran.ending {
        Ending::Completed => (HookRunStatus::Completed, None),
        Ending::Failed(reason) => (HookRunStatus::Failed, Some(reason)),
        Ending::TimedOut(reason) => (HookRunStatus::TimedOut, Some(reason)),
        Ending::Interrupted(_) => (
            HookRunStatus::Interrupted,
            Some(
                "a planned stop forced it after its drain budget; the output is what it printed until then"
                    .to_string(),
            ),
        ),
        Ending::LimitBlocked(hit) => (HookRunStatus::Failed, Some(hit.as_failure())),
        Ending::Blocked(blocker) => (
            HookRunStatus::Failed,
            Some(format!(
                "the hook reported blocked (hooks cannot block a graph): {blocker}"
            )),
        ),
    };
    let duration_ms = ran.duration_ms;
    match ran.result {
        Ok(report) => Finished {
            status,
            summary: report.outcome.summary,
            error,
            output,
            rendered: Some(json!({
                "config": report.rendered_config,
                "markers": markers_json,
                "deadline_ms": report.deadline_ms,
            })),
            duration_ms,
        },
        Err(_) => Finished {
            status,
            summary: None,
            error,
            output: None,
            rendered: Some(json!({ "markers": markers_json })),
            duration_ms,
        },
    }
}
