//! A firing of a graph's hooks: which seed-000 key an engine event fires, with its run, its
//! marker values and the specs `spec_ids` filters match against.

use serde_json::{Map, Value};

use super::completed_specs_text;
use super::config::spec_ids;
use crate::engine::events::{EngineEvent, RunContext};
use canopy_model::hook_keys::HookEvent;
use canopy_model::markers::MarkerValues;

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
            EngineEvent::SpecFailed {
                run,
                spec,
                node,
                reason,
            } => {
                markers.insert("spec_name".into(), spec.name.clone());
                markers.insert("spec_id".into(), spec.id.clone());
                markers.insert("node".into(), node.clone());
                markers.insert("blocker".into(), reason.clone());
                specs.push(spec.id.clone());
                (HookEvent::OnSpecFailed, run, Some(spec.id.clone()))
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
    pub fn markers_for(&self, spec: Option<&String>) -> MarkerValues {
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
