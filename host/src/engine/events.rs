//! What the engine reports as it goes: the events hooks react to.
//!
//! The engine emits an event after the transaction that made it true has committed; a sink must
//! not block (the hook dispatcher queues the work and returns).

use serde::Serialize;

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
}

/// Receives engine events.
pub trait EventSink: Send + Sync + 'static {
    /// Called once per event, after it is durable. The future resolves once the event's
    /// consequences are recorded (a hook run queued, say), never after they have run: a sink
    /// that is full makes the emitter wait (backpressure) instead of queueing without bound.
    fn emit(&self, event: EngineEvent) -> futures_util::future::BoxFuture<'_, ()>;
}

/// A sink that only logs (used until hooks are attached, and in tools).
#[derive(Debug, Default)]
pub struct LogEvents;

impl EventSink for LogEvents {
    fn emit(&self, event: EngineEvent) -> futures_util::future::BoxFuture<'_, ()> {
        self.log(&event);
        Box::pin(std::future::ready(()))
    }
}

impl LogEvents {
    /// Logs one event.
    pub fn log(&self, event: &EngineEvent) {
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
        }
    }
}
