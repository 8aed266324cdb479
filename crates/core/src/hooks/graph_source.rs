//! Graph hooks as a hook source: the seed-000 keys of an engine event's graph
//! (`on_spec_completed`, ...), read as stored at that moment (live edits apply to the events
//! still to come, nothing is retroactive), each filtered by its `spec_ids`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value, json};

use super::catalog::{CatalogEntry, CatalogFilter};
use super::config::runs_of;
use super::config::{HookMap, graph_sync_events, hooks_of, sync_hooks_of};
use super::daemon::SYNC_TIMEOUT;
use crate::bus::Queued;
use crate::bus::source::{
    CallParts, Chosen, GraphRun, HookCall, HookSource, Occurrence, Selection, Trigger,
};
use canopy_executors::plugins::{PluginHost, split_work_config};
use canopy_model::events::Envelope;
use canopy_model::hook_keys::Firing;
use canopy_model::hook_keys::{EVENTS, HookEvent};
use canopy_model::markers::HOOK_MARKERS;
use canopy_model::records::graphs::Graph;
use canopy_model::records::hook_runs::{Dispatch, HookSourceKind, graph_hook_name};
use canopy_model::work::Provenance;
use canopy_store::{Rd, StoreError};

/// Graphs whose parsed maps are kept; past that the cache starts over.
const CACHED_GRAPHS: usize = 256;

/// The graph-hook source. It keeps graphs' hooks maps as last parsed, by graph id, with the
/// text they were parsed from: the map is read inside every event's write (so an edit applies
/// from the next event on), and parsing it again each time was a tenth of the writer's time
/// under a burst of hook runs. An entry is used only while the stored text is the same.
#[derive(Default)]
pub(crate) struct GraphHooks {
    cache: Mutex<HashMap<String, (String, Arc<HookMap>)>>,
}

impl GraphHooks {
    /// The graph's hooks as stored now: a missing graph or an unreadable map has none.
    fn stored(&self, rd: &Rd<'_>, graph_id: &str) -> Result<Arc<HookMap>, StoreError> {
        let Some(text) = rd.graph_hooks_json(graph_id)? else {
            return Ok(Arc::new(HookMap::new()));
        };
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
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

    /// The hooks a firing fires (only hook `only`, when given), as stored now; `envelope` is
    /// its feed row (none for a test firing), `depth` the dispatch depth of its event.
    pub(crate) fn selection(
        &self,
        rd: &Rd<'_>,
        firing: &Arc<Firing>,
        only: Option<usize>,
        envelope: Option<&Arc<Envelope>>,
        depth: u32,
    ) -> Result<Option<Selection>, StoreError> {
        let map = self.stored(rd, &firing.run.graph.graph_id)?;
        let call: Arc<dyn HookCall> = Arc::new(GraphCall {
            firing: firing.clone(),
        });
        let mut hooks = Vec::new();
        for (index, hook) in hooks_of(&map, firing.event).into_iter().enumerate() {
            if only.is_some_and(|o| o != index) {
                continue;
            }
            hooks.extend(chosen(firing, index, hook, &call));
        }
        if hooks.is_empty() {
            return Ok(None);
        }
        let run = &firing.run;
        Ok(Some(Selection {
            recorded_as: firing.event.as_str().to_string(),
            trigger: Trigger {
                event: firing.event.taxonomy_event().to_string(),
                depth,
                project: Some(run.graph.workdir.clone()),
                envelope: envelope.cloned(),
            },
            graph: GraphRun {
                graph_id: Some(run.graph.graph_id.clone()),
                graph_name: Some(run.graph.graph_name.clone()),
                run_id: Some(run.run_id.clone()),
            },
            hooks,
        }))
    }
}

/// The runs one graph hook makes for a firing: once, or once per matching spec when it filters
/// by `spec_ids` (none when no spec matches).
fn chosen(
    firing: &Firing,
    index: usize,
    hook: Map<String, Value>,
    call: &Arc<dyn HookCall>,
) -> Vec<Chosen> {
    let specs = runs_of(firing, &hook);
    if specs.is_empty() {
        return Vec::new();
    }
    let work = split_work_config(&hook);
    let name = graph_hook_name(&firing.run.graph.graph_name, firing.event.as_str(), index);
    // Serialized once per hook, whatever the number of specs it runs for.
    let config: Arc<str> = Value::Object(hook).to_string().into();
    specs
        .into_iter()
        .map(|spec_id| Chosen {
            name: name.clone(),
            index,
            config: config.clone(),
            work: work.clone(),
            spec_id,
            call: call.clone(),
            declared_in: None,
        })
        .collect()
}

impl HookSource for GraphHooks {
    fn kind(&self) -> HookSourceKind {
        HookSourceKind::Graph
    }

    fn select(&self, event: &Occurrence<'_>) -> Result<Option<Selection>, StoreError> {
        match event.firing {
            Some(firing) => self.selection(
                event.tx,
                firing,
                None,
                Some(event.envelope),
                event.envelope.dispatch_depth,
            ),
            None => Ok(None),
        }
    }

    fn catalog(&self, filter: &CatalogFilter<'_>) -> Vec<CatalogEntry> {
        let mut entries = Vec::new();
        for graph in filter.graphs {
            if filter.workspace.is_some_and(|w| w != graph.workdir) {
                continue;
            }
            for key in EVENTS {
                if filter.event.is_some_and(|e| !e.names_key(key)) {
                    continue;
                }
                for (index, hook) in hooks_of(&graph.hooks, key).into_iter().enumerate() {
                    let executor = split_work_config(&hook).ok().map(|w| w.mode);
                    if filter.allows_mode(Dispatch::Async, executor.as_deref()) {
                        entries.push(catalog_entry(filter.plugins, graph, key, index, hook));
                    }
                }
            }
            for def in graph_sync_events() {
                if filter.event.is_some_and(|e| !e.names_event(def.name)) {
                    continue;
                }
                for (index, hook) in sync_hooks_of(&graph.hooks, def.name)
                    .into_iter()
                    .enumerate()
                {
                    let work = split_work_config(&hook).ok();
                    if filter.allows_mode(Dispatch::Sync, work.as_ref().map(|w| w.mode.as_str())) {
                        entries.push(sync_catalog_entry(
                            filter.plugins,
                            graph,
                            def.name,
                            index,
                            hook,
                        ));
                    }
                }
            }
        }
        entries
    }
}

/// A graph's hook as the catalog lists it.
fn catalog_entry(
    plugins: &PluginHost,
    graph: &Graph,
    key: HookEvent,
    index: usize,
    hook: Map<String, Value>,
) -> CatalogEntry {
    let work = split_work_config(&hook).ok();
    let spec_ids = hook.get("spec_ids").cloned().unwrap_or(Value::Null);
    CatalogEntry {
        event: key.taxonomy_event().to_string(),
        key: Some(key.as_str().to_string()),
        matcher: json!({ "graph": graph.name, "spec_ids": spec_ids }),
        metadata: crate::hooks::catalog::metadata([
            ("graph", graph.name.clone()),
            ("graph_id", graph.id.clone()),
            ("key", key.as_str().to_string()),
            ("index", index.to_string()),
            ("workdir", graph.workdir.clone()),
        ]),
        graph: Some(graph.name.clone()),
        graph_id: Some(graph.id.clone()),
        spec_ids,
        config: Value::Object(hook),
        ..crate::hooks::catalog::async_entry(
            HookSourceKind::Graph,
            graph_hook_name(&graph.name, key.as_str(), index),
            index,
            work.as_ref().map(|w| w.mode.as_str()),
            work.as_ref().and_then(|w| w.host().timeout()),
            plugins,
        )
    }
}

/// A graph's sync hook (under a sync-eligible event's name) as the catalog lists it.
fn sync_catalog_entry(
    plugins: &PluginHost,
    graph: &Graph,
    event: &str,
    index: usize,
    hook: Map<String, Value>,
) -> CatalogEntry {
    let work = split_work_config(&hook).ok();
    let host = work.as_ref().map(|w| w.host().clone()).unwrap_or_default();
    CatalogEntry {
        event: event.to_string(),
        key: Some(event.to_string()),
        matcher: json!({ "graph": graph.name }),
        metadata: crate::hooks::catalog::metadata([
            ("graph", graph.name.clone()),
            ("graph_id", graph.id.clone()),
            ("key", event.to_string()),
            ("index", index.to_string()),
            ("workdir", graph.workdir.clone()),
        ]),
        graph: Some(graph.name.clone()),
        graph_id: Some(graph.id.clone()),
        config: Value::Object(hook),
        mode: Dispatch::Sync,
        priority: host.priority().unwrap_or(0),
        required: host.required().unwrap_or(false),
        ..crate::hooks::catalog::async_entry(
            HookSourceKind::Graph,
            graph_hook_name(&graph.name, event, index),
            index,
            work.as_ref().map(|w| w.mode.as_str()),
            Some(host.timeout().unwrap_or(SYNC_TIMEOUT)),
            plugins,
        )
    }
}

/// A graph hook's call: the firing's markers, the graph's workdir, the graph run as provenance.
struct GraphCall {
    firing: Arc<Firing>,
}

impl HookCall for GraphCall {
    fn parts(&self, _trigger: &Trigger, queued: &Queued, _fallback_dir: &Path) -> CallParts {
        let firing = &self.firing;
        CallParts {
            markers: firing.markers_for(queued.spec_id.as_ref()),
            supported_markers: Cow::Borrowed(HOOK_MARKERS),
            workdir: PathBuf::from(&firing.run.graph.workdir),
            provenance: Provenance {
                graph_id: firing.run.graph.graph_id.clone(),
                graph_name: firing.run.graph.graph_name.clone(),
                run_id: firing.run.run_id.clone(),
                event: firing.event.as_str().to_string(),
                hook_index: u32::try_from(queued.index).ok(),
                spec_id: queued.spec_id.clone(),
                // The runner says what kind of work it is.
                ..Default::default()
            },
            timeout: None,
        }
    }
}
