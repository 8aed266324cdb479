//! The `hooks` map on a graph, and its validation at edit time.
//!
//! The map goes from event name to an ordered array of hook configs. A config names exactly one
//! mode (as a node does) and may carry `spec_ids` (on `on_spec_completed` / `on_failed` only),
//! which the hooks read themselves: like every reserved key it never reaches the executor (see
//! [`canopy_executors::plugins::RESERVED_KEYS`]). The whole map is checked before anything is written, and
//! the first problem is reported with its event, index and field.

use serde_json::{Map, Value};

use canopy_executors::plugins::{PluginHost, split_work_config};
use canopy_model::events::{EventDef, Family};
use canopy_model::hook_keys::{Firing, HookEvent};
use canopy_model::markers::HOOK_MARKERS;

/// A validated hooks map: event name → array of hook config objects (`spec_ids` resolved to
/// full ids).
pub type HookMap = Map<String, Value>;

/// The specs a hook's `spec_ids` may name: any spec in the backlog, so a queue-driven graph can
/// name the specs its queue will bring. A prefix unique among the graph's own specs (bound, and
/// its active run's queue members) means that spec even when other backlog specs share it.
#[derive(Debug, Clone, Default)]
pub struct SpecScope {
    /// The graph's own specs.
    pub ids: Vec<String>,
    /// Every spec in the backlog.
    pub backlog: Vec<String>,
}

impl SpecScope {
    /// Resolves a full id or an unambiguous prefix within the scope.
    pub fn resolve(&self, prefix: &str) -> Result<String, String> {
        let prefix = prefix.trim().to_ascii_lowercase();
        let matching = |ids: &[String]| -> Vec<String> {
            let mut found: Vec<String> = ids
                .iter()
                .filter(|id| !prefix.is_empty() && id.starts_with(&prefix))
                .cloned()
                .collect();
            found.sort();
            found.dedup();
            found
        };
        if let [one] = matching(&self.ids).as_slice() {
            return Ok(one.clone());
        }
        match matching(&self.backlog).as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(format!("`{prefix}` matches no spec in the backlog")),
            several => Err(format!(
                "`{prefix}` is ambiguous; it matches {}",
                several.join(", ")
            )),
        }
    }
}

/// The `spec_ids` of a hook, if it has them.
pub fn spec_ids(hook: &Map<String, Value>) -> Option<Vec<String>> {
    hook.get("spec_ids").and_then(Value::as_array).map(|ids| {
        ids.iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    })
}

/// The spec each run of `hook` is about for this firing: once with the event's spec for a hook
/// without `spec_ids`, once per matching spec for a filtered one (none: it does not run).
pub fn runs_of(firing: &Firing, hook: &Map<String, Value>) -> Vec<Option<String>> {
    firing.runs_for(spec_ids(hook).as_deref())
}

/// Parses and checks a whole hooks map. `raw` may give an event a single config object (the
/// shape completion hooks had before hooks were lists) instead of an array.
pub async fn validate_hooks(
    plugins: &PluginHost,
    raw: &Value,
    scope: &SpecScope,
) -> Result<HookMap, String> {
    let Some(map) = raw.as_object() else {
        return Err(format!(
            "field `hooks` must be an object mapping events ({}) to arrays of hook configs",
            HookEvent::names()
        ));
    };
    let mut validated = HookMap::new();
    for (key, value) in map {
        let asked = graph_sync_event(key);
        let event = HookEvent::parse(key);
        if event.is_none() && asked.is_none() {
            let keys = canopy_model::hook_keys::EVENTS
                .iter()
                .map(|e| e.as_str())
                .chain(graph_sync_events().map(|def| def.name));
            return Err(format!(
                "field `hooks`: unknown event `{key}`{}; the events are {}, and the sync ones (asked before their action) {}",
                canopy_model::text::did_you_mean(key, keys),
                HookEvent::names(),
                graph_sync_events()
                    .map(|def| def.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let list = match value {
            Value::Array(items) => items.clone(),
            Value::Object(_) => vec![value.clone()],
            Value::Null => Vec::new(),
            _ => return Err(format!("hooks.{key} must be an array of hook configs")),
        };
        let mut hooks = Vec::with_capacity(list.len());
        for (index, hook) in list.iter().enumerate() {
            let at = format!("hooks.{key}[{index}]");
            let Some(config) = hook.as_object() else {
                return Err(format!("{at} must be a hook config object"));
            };
            let mut config = config.clone();
            if let Some(ids) = config.get("spec_ids") {
                if !event.is_some_and(HookEvent::takes_spec_ids) {
                    return Err(format!(
                        "{at}: field `spec_ids` is not allowed on {key}, which is not per-spec (spec_ids filters on_spec_completed and on_failed)"
                    ));
                }
                let Some(ids) = ids
                    .as_array()
                    .filter(|ids| ids.iter().all(Value::is_string))
                else {
                    return Err(format!(
                        "{at}: field `spec_ids` must be an array of spec ids"
                    ));
                };
                if ids.is_empty() {
                    return Err(format!(
                        "{at}: field `spec_ids` must name at least one spec (leave it out to fire for every spec)"
                    ));
                }
                let mut resolved = Vec::with_capacity(ids.len());
                for (i, id) in ids.iter().enumerate() {
                    let full = scope
                        .resolve(id.as_str().unwrap_or_default())
                        .map_err(|err| format!("{at}: field `spec_ids[{i}]`: {err}"))?;
                    resolved.push(Value::String(full));
                }
                config.insert("spec_ids".to_string(), Value::Array(resolved));
            }
            let work = split_work_config(&config).map_err(|err| format!("{at}: {err}"))?;
            match asked {
                Some(def) => {
                    plugins
                        .check_decides(&work.mode)
                        .map_err(|err| format!("{at}: {err}"))?;
                    let markers = sync_markers(def);
                    plugins
                        .validate(&work, &markers)
                        .await
                        .map_err(|err| format!("{at} ({} mode): {err}", work.mode))?;
                }
                None => {
                    work.host()
                        .check_not_sync()
                        .map_err(|err| format!("{at}: {err}"))?;
                    plugins
                        .validate(&work, HOOK_MARKERS)
                        .await
                        .map_err(|err| format!("{at} ({} mode): {err}", work.mode))?;
                }
            }
            hooks.push(Value::Object(config));
        }
        if !hooks.is_empty() {
            validated.insert(key.clone(), Value::Array(hooks));
        }
    }
    Ok(validated)
}

/// The sync-eligible events a graph's hooks map may key on: those about one graph (its runs,
/// its nodes, and what the agents its nodes launch ask: `tool.pre_call`, `agent.pre_complete`).
pub fn graph_sync_events() -> impl Iterator<Item = &'static EventDef> {
    canopy_model::events::all().filter(|def| {
        def.sync_eligible
            && matches!(
                def.family,
                Family::Graph | Family::Node | Family::Tool | Family::Agent
            )
    })
}

/// The sync-eligible event a graph's hooks map key names, if it names one.
pub fn graph_sync_event(key: &str) -> Option<&'static EventDef> {
    graph_sync_events().find(|def| def.name == key)
}

/// The markers a sync hook on `def` may use: the question's fields and `data` (the whole
/// question as JSON).
pub fn sync_markers(def: &EventDef) -> Vec<&'static str> {
    let mut markers = def.markers.to_vec();
    markers.push(crate::hooks::daemon::DATA_MARKER);
    markers
}

/// The sync hooks of one event, from a stored map.
pub fn sync_hooks_of(map: &HookMap, event: &str) -> Vec<Map<String, Value>> {
    map.get(event)
        .and_then(Value::as_array)
        .map(|hooks| hooks.iter().filter_map(Value::as_object).cloned().collect())
        .unwrap_or_default()
}

/// The hooks of one event, from a stored map.
pub fn hooks_of(map: &HookMap, event: HookEvent) -> Vec<Map<String, Value>> {
    map.get(event.as_str())
        .and_then(Value::as_array)
        .map(|hooks| hooks.iter().filter_map(Value::as_object).cloned().collect())
        .unwrap_or_default()
}
