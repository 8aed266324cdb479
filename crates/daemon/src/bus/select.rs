//! Which hooks an event fires, from every source, recorded as hook runs inside the event's write.
//!
//! - **graph**: the seed-000 keys of the event's graph (`on_spec_completed`, ...), read as
//!   stored at that moment (live edits apply to the events still to come, nothing is
//!   retroactive), filtered by `spec_ids`.
//! - **config**: the daemon hooks whose event pattern and `match` fields match, on nodes (and
//!   roles) that serve them.
//! - **project**: a project event's project's hooks for that event (`[projects.NAME.hooks]`).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::Bus;
use super::batch::{HookKind, Queued, Trigger, Unstarted};
use crate::hooks::Firing;
use crate::hooks::breaker::Admit;
use crate::hooks::config::{HookMap, hooks_of};
use crate::hooks::daemon::DaemonHooks;
use crate::hooks::runs::Fired;
use canopy_executors::plugins::split_work_config;
use canopy_model::events::{Actor, Cause, Envelope, Event};
use canopy_store::hook_runs::{HookSource, graph_hook_name};
use canopy_store::{Rd, StoreError, Tx};

/// Graphs' hooks maps as last parsed, by graph id, with the text they were parsed from. The
/// map is read inside every event's write (so an edit applies from the next event on); parsing
/// it again each time was a tenth of the writer's time under a burst of hook runs. An entry is
/// used only while the stored text is the same.
#[derive(Default)]
pub(super) struct GraphHooksCache(std::sync::Mutex<HashMap<String, (String, Arc<HookMap>)>>);

/// Graphs whose parsed maps are kept; past that the cache starts over.
const CACHED_GRAPHS: usize = 256;

impl GraphHooksCache {
    /// The graph's hooks as stored now: a missing graph or an unreadable map has none.
    fn stored(&self, rd: &Rd<'_>, graph_id: &str) -> Result<Arc<HookMap>, StoreError> {
        let Some(text) = rd.graph_hooks_json(graph_id)? else {
            return Ok(Arc::new(HookMap::new()));
        };
        let mut cache = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((parsed_from, map)) = cache.get(graph_id)
            && *parsed_from == text
        {
            return Ok(map.clone());
        }
        let map = Arc::new(serde_json::from_str(&text).unwrap_or_else(|err| {
            tracing::error!(graph = %graph_id, error = %err, "the graph's stored hooks are not a JSON object; none fire");
            HookMap::new()
        }));
        if cache.len() >= CACHED_GRAPHS {
            cache.clear();
        }
        cache.insert(graph_id.to_string(), (text, map.clone()));
        Ok(map)
    }
}

/// One hook run a firing makes, before it is recorded.
struct Selected {
    fired: Fired,
    queued: Queued,
}

/// The hook runs a graph-hook firing makes, in firing order: each matching hook (only `only`,
/// when given) once, or once per matching spec when it filters by `spec_ids`.
fn select_graph(
    hooks: Vec<Map<String, Value>>,
    firing: &Firing,
    only: Option<usize>,
    envelope: Option<&Envelope>,
    fired_at: &str,
    test: bool,
) -> Vec<Selected> {
    let mut selected = Vec::new();
    for (index, hook) in hooks.into_iter().enumerate() {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let specs = firing.runs_of(&hook);
        if specs.is_empty() {
            continue;
        }
        let work = split_work_config(&hook);
        let hook_name = graph_hook_name(&firing.run.graph_name, firing.event.as_str(), index);
        // Serialized once per hook, whatever the number of specs it runs for.
        let hook_config: Arc<str> = Value::Object(hook).to_string().into();
        for spec_id in specs {
            selected.push(Selected {
                fired: Fired {
                    source: HookSource::Graph,
                    hook_name: hook_name.clone(),
                    graph_id: Some(firing.run.graph_id.clone()),
                    graph_name: Some(firing.run.graph_name.clone()),
                    run_id: Some(firing.run.run_id.clone()),
                    event: firing.event.as_str().to_string(),
                    hook_index: index,
                    hook_config: hook_config.clone(),
                    spec_id: spec_id.clone(),
                    mode: work.as_ref().ok().map(|w| w.mode.clone()),
                    test,
                    fired_at: fired_at.to_string(),
                    running: false,
                    plugin: None,
                    dispatch_depth: envelope.map_or(firing.run.cause.depth, |e| e.dispatch_depth),
                    feed_id: envelope.map(|e| e.id),
                    project: Some(firing.run.workdir.clone()),
                    dropped: None,
                },
                queued: Queued {
                    record_id: String::new(),
                    index,
                    hook_name: hook_name.clone(),
                    work: work.clone(),
                    spec_id,
                    kind: HookKind::Graph,
                    started: false,
                },
            });
        }
    }
    selected
}

/// The hook runs of daemon hooks an event makes, in `canopy.toml` order.
fn select_config(daemon: &DaemonHooks, envelope: &Envelope, fired_at: &str) -> Vec<Selected> {
    let payload_text = |field: &str| {
        envelope
            .payload
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    daemon
        .hooks
        .iter()
        .filter(|hook| hook.serves(&daemon.node, &daemon.roles) && hook.matches(envelope))
        .map(|hook| {
            let mut config = Map::new();
            if let Ok(Value::Object(map)) = serde_json::to_value(&hook.config) {
                config = map;
            }
            Selected {
                fired: Fired {
                    source: HookSource::Config,
                    hook_name: hook.name().to_string(),
                    graph_id: payload_text("graph_id"),
                    graph_name: payload_text("graph_name"),
                    run_id: payload_text("run_id"),
                    event: envelope.event.clone(),
                    hook_index: hook.index,
                    hook_config: Value::Object(config).to_string().into(),
                    spec_id: payload_text("spec_id"),
                    mode: Some(hook.work.mode.clone()),
                    test: false,
                    fired_at: fired_at.to_string(),
                    running: false,
                    plugin: None,
                    dispatch_depth: envelope.dispatch_depth,
                    feed_id: Some(envelope.id),
                    project: envelope.project.clone(),
                    dropped: None,
                },
                queued: Queued {
                    record_id: String::new(),
                    index: hook.index,
                    hook_name: hook.name().to_string(),
                    work: Ok(hook.work.clone()),
                    spec_id: payload_text("spec_id"),
                    kind: HookKind::Config(hook.clone()),
                    started: false,
                },
            }
        })
        .collect()
}

/// The hook runs of project hooks a project event makes: its project's hooks for that event,
/// in order.
fn select_project(
    projects: &crate::projects::Projects,
    envelope: &Envelope,
    fired_at: &str,
) -> Vec<Selected> {
    projects
        .fired_by(envelope)
        .map(|hook| {
            let config = match serde_json::to_value(&hook.config) {
                Ok(value @ Value::Object(_)) => value,
                _ => Value::Object(Map::new()),
            };
            Selected {
                fired: Fired {
                    source: HookSource::Project,
                    hook_name: hook.name.clone(),
                    graph_id: None,
                    graph_name: None,
                    run_id: None,
                    event: envelope.event.clone(),
                    hook_index: hook.index,
                    hook_config: config.to_string().into(),
                    spec_id: None,
                    mode: Some(hook.work.mode.clone()),
                    test: false,
                    fired_at: fired_at.to_string(),
                    running: false,
                    plugin: None,
                    dispatch_depth: envelope.dispatch_depth,
                    feed_id: Some(envelope.id),
                    project: envelope.project.clone(),
                    dropped: None,
                },
                queued: Queued {
                    record_id: String::new(),
                    index: hook.index,
                    hook_name: hook.name.clone(),
                    work: Ok(hook.work.clone()),
                    spec_id: None,
                    kind: HookKind::Project(hook.clone()),
                    started: false,
                },
            }
        })
        .collect()
}

/// Records the selected hook runs; returns the batch that runs those not dropped: past the
/// dispatch-depth limit every one is dropped, and a hook tripped by its firing breaker is.
fn record(
    bus: &Bus,
    tx: &Tx<'_>,
    trigger: Arc<Trigger>,
    mut selected: Vec<Selected>,
    max_depth: u32,
) -> Result<Option<Unstarted>, StoreError> {
    if selected.is_empty() {
        return Ok(None);
    }
    let depth = trigger.depth();
    let mut tripped = Vec::new();
    if depth > max_depth {
        let why = format!(
            "not run: its event is at dispatch depth {depth}, past the limit of {max_depth} (a chain of hooks causing events that fire hooks stops here)"
        );
        for one in &mut selected {
            one.fired.dropped = Some(why.clone());
        }
        tracing::warn!(event = %trigger.event_name(), depth, max_depth, "hook dispatch dropped past the depth limit");
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
fn announce_tripped(bus: &Bus, trigger: &Trigger, tripped: Vec<(HookSource, String)>) {
    let daemon = bus.daemon_hooks();
    let (firings, window_secs) = (daemon.breaker_firings, daemon.breaker_window.as_secs());
    let fired_by = trigger.event_name();
    let depth = trigger.depth().saturating_add(1);
    let project = trigger.project();
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
    let mut batches = Vec::new();
    // The event's own time: the hook runs it fires were fired when it was recorded.
    let fired_at = &envelope.timestamp;
    if let Some(firing) = firing {
        let map = bus.inner.graph_hooks.stored(tx, &firing.run.graph_id)?;
        let hooks = hooks_of(&map, firing.event);
        if !hooks.is_empty() {
            let selected = select_graph(hooks, &firing, None, Some(envelope), fired_at, false);
            let trigger = Arc::new(Trigger::Graph {
                firing: Box::new(firing),
                envelope: Some(envelope.clone()),
            });
            batches.extend(record(bus, tx, trigger, selected, daemon.max_depth)?);
        }
    }
    if !daemon.hooks.is_empty() {
        let selected = select_config(daemon, envelope, fired_at);
        let trigger = Arc::new(Trigger::Config {
            envelope: envelope.clone(),
        });
        batches.extend(record(bus, tx, trigger, selected, daemon.max_depth)?);
    }
    if envelope.family == canopy_model::events::Family::Project {
        let selected = select_project(&bus.project_hooks(), envelope, fired_at);
        let trigger = Arc::new(Trigger::Config {
            envelope: envelope.clone(),
        });
        batches.extend(record(bus, tx, trigger, selected, daemon.max_depth)?);
    }
    Ok(batches)
}

/// Records a graph-hook firing as test runs (`hooks test --execute`).
pub(super) fn record_graph_test(
    bus: &Bus,
    tx: &Tx<'_>,
    firing: Firing,
    only: Option<usize>,
) -> Result<Option<Unstarted>, StoreError> {
    let fired_at = canopy_store::now();
    let map = bus.inner.graph_hooks.stored(tx, &firing.run.graph_id)?;
    let selected = select_graph(
        hooks_of(&map, firing.event),
        &firing,
        only,
        None,
        &fired_at,
        true,
    );
    let trigger = Arc::new(Trigger::Graph {
        firing: Box::new(firing),
        envelope: None,
    });
    record(bus, tx, trigger, selected, u32::MAX)
}
