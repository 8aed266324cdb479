//! The keys of a graph's `hooks` map (`on_completed`, `on_spec_failed`, ...) and the firings
//! that run them.
//!
//! A key is declared once, on the event it fires on (see [`crate::events`]): that definition
//! carries the key, whether its hooks may filter by `spec_ids`, the markers it gives values to
//! and what it means ([`GraphHook`]), and its payload says how it fires ([`Firing`]). This
//! enum is only the keys' names.

use serde::{Deserialize, Serialize};

use crate::events::{self, EventDef, graph::RunRef};
use crate::markers::MarkerValues;

/// The keys a graph's hooks are declared under.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    OnCompleted,
    OnFailed,
    OnBlocked,
    OnSpecCompleted,
    OnSpecFailed,
}

/// Every key, in the order they are documented.
pub const EVENTS: [HookEvent; 5] = [
    HookEvent::OnCompleted,
    HookEvent::OnFailed,
    HookEvent::OnBlocked,
    HookEvent::OnSpecCompleted,
    HookEvent::OnSpecFailed,
];

/// What an event's definition says about the graph hooks keyed on it.
#[derive(Debug)]
pub struct GraphHook {
    pub key: HookEvent,
    /// Whether its hooks may filter by `spec_ids`.
    pub takes_spec_ids: bool,
    /// The markers it gives values to besides `graph_name` and `workdir`, which every key has;
    /// every other known marker renders `(none)`.
    pub markers: &'static [&'static str],
    /// What the key means, for the hook taxonomy.
    pub description: &'static str,
}

impl HookEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnCompleted => "on_completed",
            Self::OnFailed => "on_failed",
            Self::OnBlocked => "on_blocked",
            Self::OnSpecCompleted => "on_spec_completed",
            Self::OnSpecFailed => "on_spec_failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        EVENTS.into_iter().find(|e| e.as_str() == text)
    }

    /// The event this key fires on: the one whose definition declares it.
    pub fn def(self) -> &'static EventDef {
        events::all()
            .find(|def| def.graph_hook.is_some_and(|hook| hook.key == self))
            .unwrap_or_else(|| unreachable!("every graph-hook key is declared on an event"))
    }

    fn hook(self) -> &'static GraphHook {
        self.def()
            .graph_hook
            .unwrap_or_else(|| unreachable!("found by its graph hook"))
    }

    /// The taxonomy event this key fires on.
    pub fn taxonomy_event(self) -> &'static str {
        self.def().name
    }

    /// Whether hooks of this key may filter by `spec_ids`.
    pub fn takes_spec_ids(self) -> bool {
        self.hook().takes_spec_ids
    }

    /// The markers this key gives values to (besides `graph_name` and `workdir`).
    pub fn markers(self) -> &'static [&'static str] {
        self.hook().markers
    }

    /// What the key means, for the hook taxonomy.
    pub fn description(self) -> &'static str {
        self.hook().description
    }

    /// The list of all key names, for error messages.
    pub fn names() -> String {
        EVENTS
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What an event's payload gives the graph hooks it fires: the run, the marker values, the
/// spec it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringParts {
    pub run: RunRef,
    pub markers: MarkerValues,
    /// The spec the event is about: `{{spec_id}}` of a hook without `spec_ids`.
    pub spec_id: Option<String>,
    /// The specs `spec_ids` are matched against, in order (the completed spec, or every spec
    /// that failed in the run). A filtered hook runs once for each of its own.
    pub specs: Vec<String>,
}

impl FiringParts {
    /// The parts of a firing about `run`, with its `graph_name` and `workdir` markers.
    pub fn of(run: &RunRef) -> Self {
        let mut markers = MarkerValues::new();
        markers.insert("graph_name".into(), run.graph.graph_name.clone());
        markers.insert("workdir".into(), run.graph.workdir.clone());
        Self {
            run: run.clone(),
            markers,
            spec_id: None,
            specs: Vec::new(),
        }
    }

    pub fn marker(mut self, name: &str, value: impl Into<String>) -> Self {
        self.markers.insert(name.to_string(), value.into());
        self
    }

    pub fn marker_if(self, name: &str, value: Option<&String>) -> Self {
        match value {
            Some(value) => self.marker(name, value.clone()),
            None => self,
        }
    }

    /// The spec the event is about, and the specs `spec_ids` filter on.
    pub fn about(mut self, spec_id: Option<String>, specs: Vec<String>) -> Self {
        self.spec_id = spec_id;
        self.specs = specs;
        self
    }
}

/// One event firing a graph's hooks: its key, and what its payload gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    pub event: HookEvent,
    pub run: RunRef,
    pub markers: MarkerValues,
    pub spec_id: Option<String>,
    pub specs: Vec<String>,
}

impl Firing {
    pub fn new(event: HookEvent, parts: FiringParts) -> Self {
        Self {
            event,
            run: parts.run,
            markers: parts.markers,
            spec_id: parts.spec_id,
            specs: parts.specs,
        }
    }

    /// The spec each run of a hook is about: once with the event's spec for a hook without
    /// `spec_ids`; once per matching spec for a filtered one (none: it does not run).
    pub fn runs_for(&self, spec_ids: Option<&[String]>) -> Vec<Option<String>> {
        match spec_ids {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::events::graph::{CompletedSpec, GraphRef, RunBlocked, RunCompleted, RunFailed};
    use crate::events::spec::{SpecCompleted, SpecFailed};
    use crate::events::{Event, Payload};

    fn run() -> RunRef {
        RunRef {
            graph: GraphRef {
                graph_id: "g1".into(),
                graph_name: "web".into(),
                workdir: "/src/web".into(),
            },
            run_id: "r1".into(),
            queue_id: None,
        }
    }

    /// Every payload a key fires on, with every optional field set.
    fn full_events() -> Vec<Event> {
        vec![
            Event::new(&RunCompleted {
                run: run(),
                completed_specs: "a".into(),
                specs: vec![CompletedSpec {
                    id: "s1".into(),
                    name: "a".into(),
                    summary: None,
                }],
            }),
            Event::new(&RunFailed {
                run: run(),
                blocker: "b".into(),
                node: Some("n".into()),
                spec_id: Some("s1".into()),
                failed_specs: vec!["s1".into(), "s2".into()],
            }),
            Event::new(&RunBlocked {
                run: run(),
                blocker: "b".into(),
                node: Some("n".into()),
                spec_id: Some("s1".into()),
                resumes_at: None,
            }),
            Event::new(&SpecCompleted {
                run: run(),
                spec_id: "s1".into(),
                spec_name: "a".into(),
                summary: Some("done".into()),
            }),
            Event::new(&SpecFailed {
                run: run(),
                spec_id: "s1".into(),
                spec_name: "a".into(),
                node: "n".into(),
                reason: "r".into(),
            }),
        ]
    }

    #[test]
    fn every_key_is_declared_on_one_event_and_fires_with_the_markers_it_declares() {
        let events = full_events();
        for key in EVENTS {
            let declared = crate::events::all()
                .filter(|def| def.graph_hook.is_some_and(|hook| hook.key == key))
                .count();
            assert_eq!(declared, 1, "{key:?}");
            let event = events
                .iter()
                .find(|e| e.def.name == key.taxonomy_event())
                .unwrap_or_else(|| panic!("no sample of {key:?}"));
            let firing = event.firing.as_ref().expect("a full payload fires");
            assert_eq!(firing.event, key);
            let given: BTreeSet<&str> = firing.markers.keys().map(String::as_str).collect();
            let mut declared: BTreeSet<&str> = key.markers().iter().copied().collect();
            declared.extend(["graph_name", "workdir"]);
            assert_eq!(given, declared, "{key:?}");
            // A key's markers are among its event's own.
            for marker in key.markers() {
                let in_event = key.def().markers.contains(marker)
                    || (*marker == "blocker" && key.def().markers.contains(&"reason"));
                assert!(in_event, "{key:?}: {marker}");
            }
        }
        assert_eq!(events.len(), EVENTS.len());
    }

    #[test]
    fn a_run_that_completed_no_spec_fires_no_on_completed_and_a_filtered_hook_runs_per_spec() {
        let empty = RunCompleted {
            run: run(),
            completed_specs: String::new(),
            specs: Vec::new(),
        };
        assert!(Event::new(&empty).firing.is_none());
        assert!(empty.graph_firing().is_none());

        let failed = &full_events()[1];
        let firing = failed.firing.as_ref().expect("fires");
        assert_eq!(firing.runs_for(None), vec![Some("s1".to_string())]);
        assert_eq!(
            firing.runs_for(Some(&["s2".to_string(), "s9".to_string()])),
            vec![Some("s2".to_string())]
        );
        assert_eq!(firing.markers_for(Some(&"s2".to_string()))["spec_id"], "s2");
    }

    #[test]
    fn events_without_a_key_fire_no_graph_hooks() {
        for def in crate::events::all() {
            if let Some(hook) = def.graph_hook {
                assert_eq!(hook.key.def().name, def.name);
            }
        }
        let started = crate::events::graph::RunStarted {
            run: run(),
            how: "run".into(),
            mode: None,
        };
        assert!(Event::new(&started).firing.is_none());
    }
}
