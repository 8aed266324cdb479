//! What the engine reports as it goes: the events graph hooks react to, and how each maps onto
//! the taxonomy ([`canopy_model::events`]).
//!
//! The engine records an event inside the transaction that makes it true (its feed row and the
//! hook runs it fires commit with it), and publishes it once that has committed.

use serde::Serialize;

use canopy_model::events::{Cause, Event, graph, spec};

/// A spec this run completed, for `{{completed_specs}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompletedSpec {
    pub id: String,
    pub name: String,
    pub summary: Option<String>,
}

/// What every event knows about its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunContext {
    pub graph_id: String,
    pub graph_name: String,
    pub run_id: String,
    /// The workdir the run was launched with (its override, else the graph's).
    pub workdir: String,
    pub queue_id: Option<String>,
    /// Who started (or last continued) the run: its events carry this actor and depth.
    #[serde(skip)]
    pub cause: Cause,
}

impl RunContext {
    fn graph_ref(&self) -> graph::GraphRef {
        graph::GraphRef {
            graph_id: self.graph_id.clone(),
            graph_name: self.graph_name.clone(),
            workdir: self.workdir.clone(),
        }
    }

    /// The run as the taxonomy's payloads name it.
    pub fn run_ref(&self) -> graph::RunRef {
        graph::RunRef {
            graph: self.graph_ref(),
            run_id: self.run_id.clone(),
            queue_id: self.queue_id.clone(),
        }
    }
}

/// An engine event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EngineEvent {
    /// A run reached completed.
    RunCompleted {
        run: RunContext,
        completed: Vec<CompletedSpec>,
    },
    /// A run (and its graph) reached failed.
    RunFailed {
        run: RunContext,
        blocker: String,
        /// The node that ended the run, when one did.
        node: Option<String>,
        /// The spec the failure belongs to, when it belongs to one.
        spec_id: Option<String>,
        /// Every spec of the run that failed (or was interrupted), in run order: `on_failed`
        /// hooks filtered by `spec_ids` fire once for each of theirs.
        failed_specs: Vec<String>,
    },
    /// The graph paused with a blocker.
    RunBlocked {
        run: RunContext,
        blocker: String,
        node: Option<String>,
        spec_id: Option<String>,
    },
    /// A spec reached completed.
    SpecCompleted {
        run: RunContext,
        spec: CompletedSpec,
    },
    /// A spec failed: one of its nodes failed.
    SpecFailed {
        run: RunContext,
        spec: CompletedSpec,
        node: String,
        reason: String,
    },
}

impl EngineEvent {
    pub fn run(&self) -> &RunContext {
        match self {
            Self::RunCompleted { run, .. }
            | Self::RunFailed { run, .. }
            | Self::RunBlocked { run, .. }
            | Self::SpecCompleted { run, .. }
            | Self::SpecFailed { run, .. } => run,
        }
    }

    /// The taxonomy event this is.
    pub fn to_event(&self) -> Event {
        match self {
            Self::RunCompleted { run, completed } => Event::new(&graph::RunCompleted {
                run: run.run_ref(),
                completed_specs: crate::hooks::completed_specs_text(completed),
                specs: completed
                    .iter()
                    .map(|s| graph::CompletedSpec {
                        id: s.id.clone(),
                        name: s.name.clone(),
                        summary: s.summary.clone(),
                    })
                    .collect(),
            }),
            Self::RunFailed {
                run,
                blocker,
                node,
                spec_id,
                failed_specs,
            } => Event::new(&graph::RunFailed {
                run: run.run_ref(),
                blocker: blocker.clone(),
                node: node.clone(),
                spec_id: spec_id.clone(),
                failed_specs: failed_specs.clone(),
            }),
            Self::RunBlocked {
                run,
                blocker,
                node,
                spec_id,
            } => Event::new(&graph::RunBlocked {
                run: run.run_ref(),
                blocker: blocker.clone(),
                node: node.clone(),
                spec_id: spec_id.clone(),
            }),
            Self::SpecCompleted { run, spec } => Event::new(&spec::SpecCompleted {
                run: run.run_ref(),
                spec_id: spec.id.clone(),
                spec_name: spec.name.clone(),
                summary: spec.summary.clone(),
            }),
            Self::SpecFailed {
                run,
                spec,
                node,
                reason,
            } => Event::new(&spec::SpecFailed {
                run: run.run_ref(),
                spec_id: spec.id.clone(),
                spec_name: spec.name.clone(),
                node: node.clone(),
                reason: reason.clone(),
            }),
        }
    }
}

/// Logs one engine event.
pub fn log(event: &EngineEvent) {
    match &event {
        EngineEvent::RunCompleted { run, completed } => {
            tracing::info!(graph = %run.graph_name, run = %run.run_id, specs = completed.len(), "run completed");
        }
        EngineEvent::RunFailed { run, blocker, .. } => {
            tracing::info!(graph = %run.graph_name, run = %run.run_id, %blocker, "run failed");
        }
        EngineEvent::RunBlocked { run, blocker, .. } => {
            tracing::info!(graph = %run.graph_name, run = %run.run_id, %blocker, "run paused");
        }
        EngineEvent::SpecCompleted { run, spec } => {
            tracing::debug!(graph = %run.graph_name, run = %run.run_id, spec = %spec.name, "spec completed");
        }
        EngineEvent::SpecFailed {
            run, spec, node, ..
        } => {
            tracing::debug!(graph = %run.graph_name, run = %run.run_id, spec = %spec.name, %node, "spec failed");
        }
    }
}
