//! The events the engine emits about a run, made from its [`RunContext`]: each is a taxonomy
//! payload ([`canopy_model::events`]), whose definition says which graph-hook key it fires
//! and whose payload gives the firing.
//!
//! The engine records an event inside the transaction that makes it true (its feed row and the
//! hook runs it fires commit with it), and publishes it once that has committed.

use canopy_model::events::graph::{self, CompletedSpec};
use canopy_model::events::{Cause, Event, spec};
use canopy_model::time::Timestamp;

/// What every event knows about its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunContext {
    pub graph_id: String,
    pub graph_name: String,
    pub run_id: String,
    /// The workdir the run was launched with (its override, else the graph's).
    pub workdir: String,
    pub queue_id: Option<String>,
    /// Who started (or last continued) the run: its events carry this actor and depth.
    pub cause: Cause,
}

impl RunContext {
    /// The run as the taxonomy's payloads name it.
    pub fn run_ref(&self) -> graph::RunRef {
        graph::RunRef {
            graph: graph::GraphRef {
                graph_id: self.graph_id.clone(),
                graph_name: self.graph_name.clone(),
                workdir: self.workdir.clone(),
            },
            run_id: self.run_id.clone(),
            queue_id: self.queue_id.clone(),
        }
    }

    /// `graph.run.completed`.
    pub fn completed(&self, completed: Vec<CompletedSpec>) -> Event {
        tracing::info!(graph = %self.graph_name, run = %self.run_id, specs = completed.len(), "run completed");
        Event::new(&graph::RunCompleted {
            run: self.run_ref(),
            completed_specs: completed_specs_text(&completed),
            specs: completed,
        })
    }

    /// `graph.run.failed`: `spec_id` when the failure belongs to one spec, `failed_specs` every
    /// spec that failed (or was interrupted), in run order.
    pub fn failed(
        &self,
        blocker: String,
        node: Option<String>,
        spec_id: Option<String>,
        failed_specs: Vec<String>,
    ) -> Event {
        tracing::info!(graph = %self.graph_name, run = %self.run_id, %blocker, "run failed");
        Event::new(&graph::RunFailed {
            run: self.run_ref(),
            blocker,
            node,
            spec_id,
            failed_specs,
        })
    }

    /// `graph.run.blocked`: the graph paused with a blocker.
    pub fn blocked(&self, blocker: String, node: Option<String>, spec_id: Option<String>) -> Event {
        tracing::info!(graph = %self.graph_name, run = %self.run_id, %blocker, "run paused");
        Event::new(&graph::RunBlocked {
            run: self.run_ref(),
            blocker,
            node,
            spec_id,
            resumes_at: None,
        })
    }

    /// `graph.run.blocked` for a pause on an agent's usage limit, until `resumes_at`.
    pub fn limit_blocked(
        &self,
        blocker: String,
        node: String,
        spec_id: String,
        resumes_at: Timestamp,
    ) -> Event {
        tracing::info!(graph = %self.graph_name, run = %self.run_id, %resumes_at, "run paused on a usage limit");
        Event::new(&graph::RunBlocked {
            run: self.run_ref(),
            blocker,
            node: Some(node),
            spec_id: Some(spec_id),
            resumes_at: Some(resumes_at),
        })
    }

    /// `spec.completed`.
    pub fn spec_completed(&self, spec: CompletedSpec) -> Event {
        tracing::debug!(graph = %self.graph_name, run = %self.run_id, spec = %spec.name, "spec completed");
        Event::new(&spec::SpecCompleted {
            run: self.run_ref(),
            spec_id: spec.id,
            spec_name: spec.name,
            summary: spec.summary,
        })
    }

    /// `spec.failed`: one of its nodes failed.
    pub fn spec_failed(&self, spec: CompletedSpec, node: String, reason: String) -> Event {
        tracing::debug!(graph = %self.graph_name, run = %self.run_id, spec = %spec.name, %node, "spec failed");
        Event::new(&spec::SpecFailed {
            run: self.run_ref(),
            spec_id: spec.id,
            spec_name: spec.name,
            node,
            reason,
        })
    }
}

/// `{{completed_specs}}`: each completed spec's name and one-line summary, one per line.
pub fn completed_specs_text(specs: &[CompletedSpec]) -> String {
    specs
        .iter()
        .map(|s| match &s.summary {
            Some(summary) => format!("{} — {summary}", s.name),
            None => s.name.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
