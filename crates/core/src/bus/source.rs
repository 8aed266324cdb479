//! The contract of the one hook pipeline: a [`HookSource`] says which of its hooks an event
//! fires, in order; the bus records every one of them with one constructor and runs them with
//! one request builder (`select.rs`, `batch.rs`). What a hook's call takes from where it was
//! declared (its markers, workdir, provenance and deadline) is its [`HookCall`].
//!
//! The sources are one list, made in [`sources`]: a graph's `hooks` map
//! ([`crate::hooks::graph_source`]), the daemon hooks of `canopy.toml`
//! ([`crate::hooks::daemon`]), the projects' hooks ([`crate::projects`]) and the runtime hooks
//! of the agents launched now ([`crate::runtime_hooks`]). A new source is a
//! file with its implementation and a line in that list.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Bus;
use super::batch::Queued;
use crate::hooks::catalog::{CatalogEntry, CatalogFilter};
use crate::hooks::daemon::{DATA_MARKER, DaemonHooks};
use canopy_executors::plugins::WorkConfig;
use canopy_model::events::Envelope;
use canopy_model::hook_keys::Firing;
use canopy_model::markers::MarkerValues;
use canopy_model::records::hook_runs::HookSourceKind;
use canopy_model::work::Provenance;
use canopy_store::{StoreError, Tx};

/// Where hooks are declared: each source is one implementation, registered in [`sources`].
pub(crate) trait HookSource: Send + Sync {
    /// The source recorded with each of its hook runs.
    fn kind(&self) -> HookSourceKind;

    /// The hooks `event` fires from this source, in firing order, with what fired them;
    /// `None` when it fires none. Called inside the event's write: read what it needs from
    /// `event.tx`, and keep it quick.
    fn select(&self, event: &Occurrence<'_>) -> Result<Option<Selection>, StoreError>;

    /// Every hook of this source as the hook catalog lists it (`GET /api/hooks/catalog`), in
    /// firing order, those the request's filters let through.
    fn catalog(&self, filter: &CatalogFilter<'_>) -> Vec<CatalogEntry>;
}

/// What a hook's call takes from where the hook was declared.
pub(crate) trait HookCall: Send + Sync {
    /// The markers, workdir, provenance and deadline of one run's call (`queued`), for the event
    /// that fired it (`trigger`). `fallback_dir` is where a hook with no workdir of its own runs.
    fn parts(&self, trigger: &Trigger, queued: &Queued, fallback_dir: &Path) -> CallParts;
}

/// The sources, in the order their batches are recorded for one event.
pub(crate) fn sources(
    graph: Arc<crate::hooks::graph_source::GraphHooks>,
) -> Vec<Arc<dyn HookSource>> {
    vec![
        graph,
        Arc::new(crate::hooks::daemon::DaemonHookSource),
        Arc::new(crate::projects::ProjectHookSource),
        Arc::new(crate::runtime_hooks::RuntimeHookSource),
    ]
}

/// An event as the hook sources see it, inside the write that records it.
pub(crate) struct Occurrence<'a> {
    pub bus: &'a Bus,
    pub tx: &'a Tx<'a>,
    /// The daemon hooks and identity in force for this event.
    pub daemon: &'a DaemonHooks,
    /// Its feed row.
    pub envelope: &'a Arc<Envelope>,
    /// The graph-hook firing it makes, when it is an engine event that fires one.
    pub firing: Option<&'a Arc<Firing>>,
}

/// The hooks one source selected for one event.
pub(crate) struct Selection {
    pub trigger: Trigger,
    /// The event as its hook runs record it: a graph hook's key (`on_completed`), else the
    /// taxonomy event.
    pub recorded_as: String,
    /// The graph run the event belongs to, recorded with each hook run.
    pub graph: GraphRun,
    pub hooks: Vec<Chosen>,
}

impl Selection {
    /// The selection of a source whose hooks are keyed by feed events: the event and its graph
    /// run are the envelope's.
    pub fn of_envelope(envelope: &Arc<Envelope>, hooks: Vec<Chosen>) -> Option<Self> {
        if hooks.is_empty() {
            return None;
        }
        let text = |field: &str| {
            envelope
                .payload
                .get(field)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Some(Self {
            recorded_as: envelope.event.clone(),
            graph: GraphRun {
                graph_id: text("graph_id"),
                graph_name: text("graph_name"),
                run_id: text("run_id"),
            },
            trigger: Trigger {
                event: envelope.event.clone(),
                depth: envelope.dispatch_depth,
                project: envelope.project.clone(),
                envelope: Some(envelope.clone()),
            },
            hooks,
        })
    }
}

/// The graph run an event belongs to, as its hook runs record it.
#[derive(Debug, Clone, Default)]
pub(crate) struct GraphRun {
    pub graph_id: Option<String>,
    pub graph_name: Option<String>,
    pub run_id: Option<String>,
}

/// One hook a source chose for an event.
pub(crate) struct Chosen {
    /// Its name, as `hooks runs` shows it.
    pub name: String,
    /// Its place in its list.
    pub index: usize,
    /// Its config as written, as JSON text (recorded with the run).
    pub config: Arc<str>,
    /// The executor's mode and config, or why the config names none.
    pub work: Result<WorkConfig, String>,
    /// The spec this run is about (`{{spec_id}}`).
    pub spec_id: Option<String>,
    /// How its call is made.
    pub call: Arc<dyn HookCall>,
    /// Where it was declared, when not where its source's hooks usually are (a runtime hook
    /// from a profile is the config's, one from an agent's own config the graph's).
    pub declared_in: Option<HookSourceKind>,
}

/// What fired a batch of hook runs: the event, as the batch reports it.
pub(crate) struct Trigger {
    /// The taxonomy event (`fired_by` of the `hook.run.*` events).
    pub event: String,
    /// Its dispatch depth: a hook's work is one level deeper.
    pub depth: u32,
    /// The project (workdir) it belongs to.
    pub project: Option<String>,
    /// Its feed row; none for a test firing (`hooks test --execute`).
    pub envelope: Option<Arc<Envelope>>,
}

/// The parts of a hook's call that depend on where it was declared.
pub(crate) struct CallParts {
    pub markers: MarkerValues,
    pub supported_markers: Cow<'static, [&'static str]>,
    pub workdir: PathBuf,
    pub provenance: Provenance,
    pub timeout: Option<Duration>,
}

impl CallParts {
    /// The call of a hook keyed by feed events: the envelope's markers and `{{data}}` (the
    /// envelope as JSON), its graph run as provenance. `workdir` picks the directory from the
    /// markers (a `cwd` template, say); with none, the event's project when it is a directory,
    /// else `fallback_dir`.
    pub fn of_envelope(
        trigger: &Trigger,
        queued: &Queued,
        fallback_dir: &Path,
        supported_markers: &[&'static str],
        workdir: impl FnOnce(&MarkerValues) -> Option<PathBuf>,
        timeout: Option<Duration>,
    ) -> Self {
        let mut markers = MarkerValues::new();
        if let Some(envelope) = &trigger.envelope {
            markers.extend(envelope.markers());
            markers.insert(
                DATA_MARKER.to_string(),
                serde_json::to_string(envelope.as_ref()).unwrap_or_default(),
            );
        }
        let workdir = workdir(&markers)
            .or_else(|| {
                trigger
                    .project
                    .as_deref()
                    .map(PathBuf::from)
                    .filter(|p| p.is_dir())
            })
            .unwrap_or_else(|| fallback_dir.to_path_buf());
        let text = |field: &str| markers.get(field).cloned().unwrap_or_default();
        let provenance = Provenance {
            graph_id: text("graph_id"),
            graph_name: text("graph_name"),
            run_id: text("run_id"),
            event: trigger.event.clone(),
            hook_index: u32::try_from(queued.index).ok(),
            spec_id: queued.spec_id.clone(),
            // The runner says what kind of work it is.
            ..Default::default()
        };
        Self {
            markers,
            supported_markers: Cow::Owned(supported_markers.to_vec()),
            workdir,
            provenance,
            timeout,
        }
    }
}

/// A hook's config as its hook runs record it: JSON text of an object (empty when it is not one).
pub(crate) fn config_text(config: &impl serde::Serialize) -> Arc<str> {
    match serde_json::to_value(config) {
        Ok(value @ Value::Object(_)) => value.to_string().into(),
        _ => Value::Object(serde_json::Map::new()).to_string().into(),
    }
}
