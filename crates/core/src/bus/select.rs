//! Which hooks an event fires, from every source (see [`super::source`]), recorded as hook runs
//! inside the event's write: each source's selection is one batch, every hook run recorded by
//! one constructor ([`Selected::new`]), checked against the dispatch depth and its firing
//! breaker.

use std::sync::Arc;

use super::Bus;
use super::batch::{Queued, Unstarted};
use super::source::{Chosen, GraphRun, Occurrence, Selection, Trigger};
use crate::hooks::breaker::Admit;
use crate::hooks::daemon::DaemonHooks;
use crate::hooks::runs::Fired;
use canopy_model::events::{Actor, Cause, Envelope, Event};
use canopy_model::hook_keys::Firing;
use canopy_model::records::hook_runs::HookSourceKind;
use canopy_model::time::Timestamp;
use canopy_store::{StoreError, Tx};

/// One hook run a firing makes, before it is recorded.
struct Selected {
    fired: Fired,
    queued: Queued,
}

impl Selected {
    /// The record of one hook run, and its place in the batch: the one constructor of both.
    fn new(
        source: HookSourceKind,
        trigger: &Trigger,
        graph: &GraphRun,
        recorded_as: &str,
        chosen: Chosen,
        fired_at: Timestamp,
        test: bool,
    ) -> Self {
        let Chosen {
            name,
            index,
            config,
            work,
            spec_id,
            call,
            declared_in,
        } = chosen;
        Self {
            fired: Fired {
                source: declared_in.unwrap_or(source),
                hook_name: name.clone(),
                graph_id: graph.graph_id.clone(),
                graph_name: graph.graph_name.clone(),
                run_id: graph.run_id.clone(),
                event: recorded_as.to_string(),
                hook_index: index,
                hook_config: config,
                spec_id: spec_id.clone(),
                mode: work.as_ref().ok().map(|w| w.mode.clone()),
                test,
                fired_at,
                running: false,
                plugin: None,
                dispatch_depth: trigger.depth,
                feed_id: trigger.envelope.as_ref().map(|e| e.id),
                project: trigger.project.clone(),
                dropped: None,
            },
            queued: Queued {
                record_id: String::new(),
                index,
                hook_name: name,
                work,
                spec_id,
                source,
                call,
                started: false,
            },
        }
    }
}

/// Records the selected hook runs; returns the batch that runs those not dropped: past the
/// dispatch-depth limit every one is dropped, and a hook tripped by its firing breaker is.
fn record(
    bus: &Bus,
    tx: &Tx<'_>,
    source: HookSourceKind,
    selection: Selection,
    test: bool,
    max_depth: u32,
) -> Result<Option<Unstarted>, StoreError> {
    let Selection {
        trigger,
        recorded_as,
        graph,
        hooks,
    } = selection;
    // The event's own time: the hook runs it fires were fired when it was recorded.
    let fired_at = match &trigger.envelope {
        Some(envelope) => envelope.timestamp,
        None => Timestamp::now(),
    };
    let mut selected: Vec<Selected> = hooks
        .into_iter()
        .map(|chosen| {
            Selected::new(
                source,
                &trigger,
                &graph,
                &recorded_as,
                chosen,
                fired_at,
                test,
            )
        })
        .collect();
    if selected.is_empty() {
        return Ok(None);
    }
    let trigger = Arc::new(trigger);
    let depth = trigger.depth;
    let mut tripped = Vec::new();
    if depth > max_depth {
        let why = format!(
            "not run: its event is at dispatch depth {depth}, past the limit of {max_depth} (a chain of hooks causing events that fire hooks stops here)"
        );
        for one in &mut selected {
            one.fired.dropped = Some(why.clone());
        }
        tracing::warn!(event = %trigger.event, depth, max_depth, "hook dispatch dropped past the depth limit");
    } else {
        for one in selected.iter_mut().filter(|one| !one.fired.test) {
            match bus
                .inner
                .breakers
                .admit(one.fired.source.as_str(), &one.fired.hook_name)
            {
                Admit::Run => {}
                Admit::Tripped(why) => {
                    tracing::warn!(source = %one.fired.source, hook = %one.fired.hook_name, event = %one.fired.event, "a hook fired too often and is tripped; its firings are dropped until a reload or `canopy hooks reset`");
                    tripped.push((one.fired.source, one.fired.hook_name.clone()));
                    one.fired.dropped = Some(why);
                }
                Admit::Dropped(why) => one.fired.dropped = Some(why),
            }
        }
    }
    if !tripped.is_empty() {
        announce_tripped(bus, &trigger, tripped);
    }
    // With a slot free now, the batch starts the moment it is recorded: its first hook is
    // recorded as running (one write fewer than marking it running later).
    let runs_any = selected.iter().any(|one| one.fired.dropped.is_none());
    let slot = if runs_any {
        bus.inner.slots.clone().try_acquire_owned().ok()
    } else {
        None
    };
    if slot.is_some()
        && let Some(first) = selected.iter_mut().find(|one| one.fired.dropped.is_none())
    {
        first.fired.running = true;
        first.fired.plugin = first
            .queued
            .work
            .as_ref()
            .ok()
            .and_then(|w| bus.inner.plugins.plugin_ref(&w.mode).ok());
        first.queued.started = true;
    }
    let fired: Vec<&Fired> = selected.iter().map(|s| &s.fired).collect();
    let ids = tx.insert_hook_runs(&fired)?;
    if !runs_any {
        return Ok(None);
    }
    let queued = selected
        .into_iter()
        .zip(ids)
        .filter(|(one, _)| one.fired.dropped.is_none())
        .map(|(one, record_id)| Queued {
            record_id,
            ..one.queued
        })
        .collect();
    Ok(Some(Unstarted::new(bus.clone(), trigger, queued, slot)))
}

/// Emits `hook.tripped` for each hook just tripped, off the write that tripped it (one
/// dispatch level deeper than the event that fired it, so hooks on it cannot loop either).
fn announce_tripped(bus: &Bus, trigger: &Trigger, tripped: Vec<(HookSourceKind, String)>) {
    let daemon = bus.daemon_hooks();
    let (firings, window_secs) = (daemon.breaker_firings, daemon.breaker_window.as_secs());
    let fired_by = trigger.event.clone();
    let depth = trigger.depth.saturating_add(1);
    let project = trigger.project.clone();
    let events: Vec<(Event, Cause)> = tripped
        .into_iter()
        .map(|(source, hook_name)| {
            let event = Event::new(&canopy_model::events::hook::HookTripped {
                source: source.as_str().to_string(),
                hook_name: hook_name.clone(),
                fired_by: fired_by.clone(),
                firings,
                window_secs,
                project: project.clone(),
            });
            let cause = Cause {
                actor: Actor::Hook(hook_name),
                depth,
            };
            (event, cause)
        })
        .collect();
    let bus_for_task = bus.clone();
    bus.inner.runtime.spawn(async move {
        for (event, cause) in events {
            if let Err(err) = bus_for_task.emit(vec![event], cause).await {
                tracing::error!(error = %err, "cannot record hook.tripped");
            }
        }
    });
}

/// Records the hook runs an event fires, from every source (inside the event's write).
pub(super) fn record_hooks(
    bus: &Bus,
    tx: &Tx<'_>,
    daemon: &DaemonHooks,
    envelope: &Arc<Envelope>,
    firing: Option<Firing>,
) -> Result<Vec<Unstarted>, StoreError> {
    let firing = firing.map(Arc::new);
    let event = Occurrence {
        bus,
        tx,
        daemon,
        envelope,
        firing: firing.as_ref(),
    };
    let mut batches = Vec::new();
    for source in &bus.inner.sources {
        if let Some(selection) = source.select(&event)? {
            batches.extend(record(
                bus,
                tx,
                source.kind(),
                selection,
                false,
                daemon.max_depth,
            )?);
        }
    }
    Ok(batches)
}

/// Records a graph-hook firing as test runs (`hooks test --execute`).
pub(super) fn record_graph_test(
    bus: &Bus,
    tx: &Tx<'_>,
    firing: Firing,
    only: Option<usize>,
    depth: u32,
) -> Result<Option<Unstarted>, StoreError> {
    let firing = Arc::new(firing);
    match bus
        .inner
        .graph_hooks
        .selection(tx, &firing, only, None, depth)?
    {
        Some(selection) => record(bus, tx, HookSourceKind::Graph, selection, true, u32::MAX),
        None => Ok(None),
    }
}
