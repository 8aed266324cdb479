//! The engine: specs, graphs, queues and runs on SQLite, and the drivers that take a graph's
//! specs through its nodes.
//!
//! [`Engine`] is the public face: the API and CLI call it; it validates node configs against the
//! executor host, writes every state change in one transaction, runs one driver task per running
//! graph, and records what happens as events on the [`Bus`] inside the write that makes it
//! true (the feed, and the hooks that fire, see [`crate::bus`]).

mod control;
mod driver;
mod error;
pub mod events;
pub mod git;
pub mod graphs;
pub mod queues;
pub mod runs;
pub mod specs;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

pub use control::ControlRequest;
pub use error::{EngineError, invalid};
pub use graphs::{Graph, GraphInput, GraphStatus, Node};
pub use queues::{NewQueue, Queue};
pub use runs::{NodeRun, NodeRunStatus, Run, RunSpec, RunStatus, SpecResult};
pub use specs::{NewSpec, Spec, SpecPatch};
pub use view::{GraphView, Progress, ProgressResult, RunView, ViewPage};

use control::{cancel, continue_run, interrupt_active, interrupt_run, reset, start_run};

/// How long a cancel waits for the run's driver (and the node's processes) to end.
const DRIVER_STOP: std::time::Duration = std::time::Duration::from_secs(10);
use view::remaining_events;

use crate::bus::{Bus, Recorded};
use crate::hooks::{HookMap, SpecScope, validate_hooks};
use canopy_model::events::graph::CompletedSpec;
use canopy_model::events::{self as taxonomy, Cause, Event};
use canopy_model::hook_keys::HookEvent;

use canopy_executors::plugins::{PluginError, PluginHost, WorkConfig, split_work_config};
use canopy_model::markers::NODE_MARKERS;
use canopy_model::time::Timestamp;
use canopy_store::{Rd, Store, Tx, ids};

/// The engine. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

struct Inner {
    store: Store,
    plugins: PluginHost,
    bus: Bus,
    /// The driver task of each running graph.
    drivers: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    /// The timer of each graph whose run waits for an agent's usage limit to reset.
    wakeups: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    /// How long this node's lease on a run it drives lasts without a heartbeat.
    lease: std::sync::atomic::AtomicU64,
}

/// A lease on a run, unless the daemon sets another ([`Engine::set_lease`]).
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(15);

impl Engine {
    /// An engine over `store`, running work through `plugins`, recording events on `bus`.
    pub fn new(store: Store, plugins: PluginHost, bus: Bus) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                plugins,
                bus,
                drivers: Mutex::new(HashMap::new()),
                wakeups: Mutex::new(HashMap::new()),
                lease: std::sync::atomic::AtomicU64::new(
                    u64::try_from(DEFAULT_LEASE.as_millis()).unwrap_or(u64::MAX),
                ),
            }),
        }
    }

    /// A graph's workdir, checked on this daemon when its runs are made here (it must exist),
    /// as an absolute path when the graph names another node (where it lives).
    fn check_graph_workdir(
        &self,
        node: Option<&str>,
        workdir: &str,
    ) -> Result<String, EngineError> {
        match node {
            Some(node) if node != self.store().node() => {
                graphs::check_remote_workdir("workdir", workdir)
            }
            _ => graphs::check_workdir("workdir", workdir),
        }
    }

    /// Sets how long this node's lease on a run it drives lasts without a heartbeat.
    pub fn set_lease(&self, lease: std::time::Duration) {
        self.inner.lease.store(
            u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// How long this node's lease on a run lasts without a heartbeat.
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.inner.lease.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    pub(crate) fn plugins(&self) -> &PluginHost {
        &self.inner.plugins
    }

    pub(crate) fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// Publishes events recorded by a write that has committed.
    pub(crate) async fn publish(&self, recorded: Recorded) {
        self.inner.bus.publish(recorded).await;
    }

    /// A write that also records the events it returns (as [`Cause::current`]), published
    /// once it has committed.
    async fn write_with_events<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<(T, Vec<Event>), EngineError> + Send + 'static,
    ) -> Result<T, EngineError> {
        let bus = self.inner.bus.clone();
        let cause = Cause::current();
        let (value, recorded) = self
            .write(move |tx| {
                let (value, events) = work(tx)?;
                Ok((value, bus.record(tx, events, &cause)?))
            })
            .await?;
        self.publish(recorded).await;
        Ok(value)
    }

    async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Rd<'_>) -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, EngineError> {
        self.inner.store.read(work).await
    }

    async fn write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, EngineError> {
        self.inner.store.write(work).await
    }

    // ----- specs -----

    pub async fn create_spec(&self, new: NewSpec) -> Result<Spec, EngineError> {
        self.write_with_events(move |tx| {
            let spec = specs::create(tx, new)?;
            let event = Event::new(&taxonomy::spec::SpecCreated {
                spec_id: spec.id.clone(),
                spec_name: spec.name.clone(),
                workdir: spec.workdir.clone(),
            });
            Ok((spec, vec![event]))
        })
        .await
    }

    pub async fn list_specs(&self, workdir: Option<&str>) -> Result<Vec<Spec>, EngineError> {
        let workdir = workdir.map(str::to_string);
        self.read(move |rd| specs::list(rd, workdir.as_deref()))
            .await
    }

    pub async fn get_spec(&self, id: &str) -> Result<Spec, EngineError> {
        let id = id.to_string();
        self.read(move |rd| specs::get(rd, &id)).await
    }

    pub async fn update_spec(&self, id: &str, patch: SpecPatch) -> Result<Spec, EngineError> {
        let id = id.to_string();
        let fields = patch.fields();
        self.write_with_events(move |tx| {
            let spec = specs::update(tx, &id, patch)?;
            let event = Event::new(&taxonomy::spec::SpecUpdated {
                spec_id: spec.id.clone(),
                spec_name: spec.name.clone(),
                workdir: spec.workdir.clone(),
                fields,
            });
            Ok((spec, vec![event]))
        })
        .await
    }

    pub async fn delete_spec(&self, id: &str) -> Result<Spec, EngineError> {
        let id = id.to_string();
        self.write_with_events(move |tx| {
            let spec = specs::delete(tx, &id)?;
            let event = Event::new(&taxonomy::spec::SpecDeleted {
                spec_id: spec.id.clone(),
                spec_name: spec.name.clone(),
                workdir: spec.workdir.clone(),
            });
            Ok((spec, vec![event]))
        })
        .await
    }

    // ----- queues -----

    pub async fn create_queue(&self, new: NewQueue) -> Result<Queue, EngineError> {
        self.write(move |tx| queues::create(tx, new)).await
    }

    pub async fn list_queues(&self) -> Result<Vec<Queue>, EngineError> {
        self.read(queues::list).await
    }

    pub async fn get_queue(&self, id: &str) -> Result<Queue, EngineError> {
        let id = id.to_string();
        self.read(move |rd| queues::get(rd, &id)).await
    }

    pub async fn queue_add(
        &self,
        queue: &str,
        spec: &str,
        group: Option<&str>,
    ) -> Result<Queue, EngineError> {
        let (queue, spec, group) = (
            queue.to_string(),
            spec.to_string(),
            group.map(str::to_string),
        );
        self.write(move |tx| queues::add_spec(tx, &queue, &spec, group.as_deref()))
            .await
    }

    pub async fn queue_remove(&self, queue: &str, spec: &str) -> Result<Queue, EngineError> {
        let (queue, spec) = (queue.to_string(), spec.to_string());
        self.write(move |tx| queues::remove_spec(tx, &queue, &spec))
            .await
    }

    pub async fn queue_set_group(
        &self,
        queue: &str,
        spec: &str,
        group: Option<&str>,
    ) -> Result<Queue, EngineError> {
        let (queue, spec, group) = (
            queue.to_string(),
            spec.to_string(),
            group.map(str::to_string),
        );
        self.write(move |tx| queues::set_group(tx, &queue, &spec, group.as_deref()))
            .await
    }

    pub async fn queue_reorder(&self, queue: &str, order: &[String]) -> Result<Queue, EngineError> {
        let (queue, order) = (queue.to_string(), order.to_vec());
        self.write(move |tx| queues::reorder(tx, &queue, &order))
            .await
    }

    pub async fn delete_queue(&self, queue: &str) -> Result<Queue, EngineError> {
        let queue = queue.to_string();
        self.write(move |tx| queues::delete(tx, &queue)).await
    }

    // ----- graphs -----

    /// Checks every node's executor config (mode, the executor's own validation, markers).
    async fn validate_nodes(&self, nodes: &[Node]) -> Result<(), EngineError> {
        for (index, node) in nodes.iter().enumerate() {
            let at = format!("nodes[{index}] (`{}`)", node.name);
            let work = split_work_config(&node.config)
                .and_then(|work| work.host().check_no_spec_ids().map(|()| work))
                .and_then(|work| work.host().check_not_sync().map(|()| work))
                .map_err(|err| EngineError::Invalid(format!("{at}: {err}")))?;
            self.validate_work(&at, &work, NODE_MARKERS).await?;
        }
        Ok(())
    }

    async fn validate_work(
        &self,
        at: &str,
        work: &WorkConfig,
        markers: &[&str],
    ) -> Result<(), EngineError> {
        self.plugins()
            .validate(work, markers)
            .await
            .map_err(|err| match err {
                PluginError::UnknownMode { .. }
                | PluginError::Disabled { .. }
                | PluginError::InvalidConfig(_) => EngineError::Invalid(format!("{at}: {err}")),
                other => EngineError::Plugin(other),
            })
    }

    /// The specs a hook's `spec_ids` may name: the backlog, the graph's bound specs and its
    /// active run's queue members first.
    async fn spec_scope(
        &self,
        graph: Option<&Graph>,
        bound: &[String],
    ) -> Result<SpecScope, EngineError> {
        let mut ids = bound.to_vec();
        let run_id = graph.and_then(|g| g.current_run_id.clone());
        self.read(move |rd| {
            if let Some(run_id) = run_id {
                let run = rd.run(&run_id)?;
                if let (Some(queue_id), true) = (&run.queue_id, run.status.is_active()) {
                    ids.extend(rd.queue_members(queue_id)?.into_iter().map(|m| m.spec_id));
                }
            }
            let backlog = rd.spec_ids()?;
            Ok(SpecScope { ids, backlog })
        })
        .await
    }

    /// The hooks map a create / update asks for: `current` with the events named in `hooks`
    /// replaced, and `on_completed` (the single-hook shape) replacing that event's list.
    async fn merged_hooks(
        &self,
        current: &HookMap,
        hooks: Option<&Value>,
        on_completed: Option<&Value>,
        scope: &SpecScope,
    ) -> Result<HookMap, EngineError> {
        let mut merged = current.clone();
        let mut requested = match hooks {
            Some(Value::Object(map)) => map.clone(),
            Some(Value::Null) | None => serde_json::Map::new(),
            Some(_) => {
                return invalid(format!(
                    "field `hooks` must be an object mapping events ({}) to arrays of hook configs",
                    HookEvent::names()
                ));
            }
        };
        if let Some(single) = on_completed {
            if requested.contains_key("on_completed") {
                return invalid(
                    "give the completion hook either in `hooks.on_completed` or in `on_completed`, not both",
                );
            }
            requested.insert("on_completed".to_string(), single.clone());
        }
        let validated = validate_hooks(self.plugins(), &Value::Object(requested.clone()), scope)
            .await
            .map_err(EngineError::Invalid)?;
        for event in requested.keys() {
            merged.remove(event);
        }
        merged.extend(validated);
        Ok(merged)
    }

    /// Creates a graph from the API's JSON.
    pub async fn create_graph(&self, input: GraphInput) -> Result<GraphView, EngineError> {
        let name = graphs::check_name(input.name.as_deref().unwrap_or_default())?;
        let Some(workdir) = &input.workdir else {
            return invalid("field `workdir` is required: the directory the graph works in");
        };
        let node = graphs::check_node(input.node.as_deref())?;
        let workdir = self.check_graph_workdir(node.as_deref(), workdir)?;
        let nodes = graphs::parse_nodes(input.nodes.as_deref().unwrap_or_default())?;
        self.validate_nodes(&nodes).await?;
        let prefixes = input.specs.clone().unwrap_or_default();
        let specs = self
            .read(move |rd| graphs::resolve_specs(rd, &prefixes))
            .await?;
        let scope = self.spec_scope(None, &specs).await?;
        let hooks = self
            .merged_hooks(
                &HookMap::new(),
                input.hooks.as_ref(),
                input.on_completed.as_ref(),
                &scope,
            )
            .await?;
        if input.version.is_some() {
            return invalid("field `version` belongs to an edit: a new graph starts at version 1");
        }
        let write = graphs::GraphWrite {
            name,
            workdir,
            nodes,
            specs,
            allow_dirty_start: input.allow_dirty_start.unwrap_or(false),
            hooks,
            node,
        };
        let id = self
            .write_with_events(move |tx| {
                let id = graphs::insert(tx, &write)?;
                let event = Event::new(&taxonomy::graph::GraphCreated {
                    graph: taxonomy::graph::GraphRef {
                        graph_id: id.clone(),
                        graph_name: write.name.clone(),
                        workdir: write.workdir.clone(),
                    },
                });
                Ok((id, vec![event]))
            })
            .await?;
        self.graph_view(&id, ViewPage::default()).await
    }

    /// Applies a partial update, validated whole before anything is written. Nodes and hooks
    /// edited while a run is active take effect at the run's next dispatch / next event; when
    /// hooks change then, the answer names the events still to come (`remaining_events`).
    ///
    /// `input.version` (or `if_version`, from an `If-Match` header) makes the edit conditional:
    /// it is refused with [`EngineError::Stale`], changing nothing, when the graph is no longer
    /// at that version. Without one, the edit is applied to whatever the graph is now; it is
    /// still never mixed with a concurrent edit (it is written whole, on the version it read).
    pub async fn update_graph(
        &self,
        name_or_id: &str,
        input: GraphInput,
        if_version: Option<i64>,
    ) -> Result<GraphView, EngineError> {
        let based_on = match (input.version, if_version) {
            (Some(body), Some(header)) if body != header => {
                return invalid(format!(
                    "field `version` ({body}) and the If-Match header ({header}) disagree; give one"
                ));
            }
            (body, header) => body.or(header),
        };
        let lookup = name_or_id.to_string();
        let current = self.read(move |rd| graphs::get(rd, &lookup)).await?;
        if let Some(expected) = based_on
            && expected != current.version
        {
            return Err(EngineError::Stale {
                kind: "graph",
                name: current.name.clone(),
                expected,
                current: current.version,
            });
        }
        let name = match &input.name {
            Some(name) => graphs::check_name(name)?,
            None => current.name.clone(),
        };
        let node = match &input.node {
            Some(node) => graphs::check_node(Some(node))?,
            None => current.node.clone(),
        };
        let workdir = match &input.workdir {
            Some(workdir) => self.check_graph_workdir(node.as_deref(), workdir)?,
            None => current.workdir.clone(),
        };
        let nodes = match &input.nodes {
            Some(nodes) => {
                let nodes = graphs::parse_nodes(nodes)?;
                self.validate_nodes(&nodes).await?;
                nodes
            }
            None => current.nodes.clone(),
        };
        let specs = match &input.specs {
            Some(prefixes) => {
                let prefixes = prefixes.clone();
                self.read(move |rd| graphs::resolve_specs(rd, &prefixes))
                    .await?
            }
            None => current.specs.iter().map(|s| s.id.clone()).collect(),
        };
        let hooks_touched = input.hooks.is_some() || input.on_completed.is_some();
        let hooks = if hooks_touched {
            let scope = self.spec_scope(Some(&current), &specs).await?;
            self.merged_hooks(
                &current.hooks,
                input.hooks.as_ref(),
                input.on_completed.as_ref(),
                &scope,
            )
            .await?
        } else {
            current.hooks.clone()
        };
        let hooks_changed = hooks != current.hooks;
        let write = graphs::GraphWrite {
            name,
            workdir,
            nodes,
            specs,
            allow_dirty_start: input.allow_dirty_start.unwrap_or(current.allow_dirty_start),
            hooks,
            node,
        };
        // An edit that changes nothing writes nothing: the version stays, no event is sent.
        let as_it_is = graphs::GraphWrite {
            name: current.name.clone(),
            workdir: current.workdir.clone(),
            nodes: current.nodes.clone(),
            specs: current.specs.iter().map(|s| s.id.clone()).collect(),
            allow_dirty_start: current.allow_dirty_start,
            hooks: current.hooks.clone(),
            node: current.node.clone(),
        };
        if write == as_it_is {
            let mut view = self.graph_view(&current.id, ViewPage::default()).await?;
            view.unchanged = true;
            return Ok(view);
        }
        // Written on the version this edit read: a concurrent edit in between makes a
        // conditional edit stale, and an unconditional one is redone on the newer version.
        let id = current.id.clone();
        let read_version = current.version;
        let written = {
            let write = write.clone();
            let id = id.clone();
            let fields = input.fields();
            self.write_with_events(move |tx| {
                let version = graphs::replace(tx, &id, &write, Some(read_version))?;
                let event = Event::new(&taxonomy::graph::GraphUpdated {
                    graph: taxonomy::graph::GraphRef {
                        graph_id: id.clone(),
                        graph_name: write.name.clone(),
                        workdir: write.workdir.clone(),
                    },
                    version,
                    fields,
                });
                Ok((version, vec![event]))
            })
            .await
        };
        match written {
            Ok(_) => {}
            Err(EngineError::Stale { .. }) if based_on.is_none() => {
                // An unconditional edit applies its fields to the graph as it is now.
                return Box::pin(self.update_graph(name_or_id, input, None)).await;
            }
            Err(EngineError::Stale { current, name, .. }) => {
                return Err(EngineError::Stale {
                    kind: "graph",
                    name,
                    expected: based_on.unwrap_or(read_version),
                    current,
                });
            }
            Err(other) => return Err(other),
        }
        let mut view = self.graph_view(&id, ViewPage::default()).await?;
        if hooks_changed {
            view.remaining_events = view
                .current_run
                .as_ref()
                .filter(|r| r.run.status.is_active())
                .map(|run| remaining_events(&view, run));
        }
        Ok(view)
    }

    /// Every graph's view, read in one snapshot.
    pub async fn list_graphs(&self) -> Result<Vec<GraphView>, EngineError> {
        let engine = self.clone();
        self.read(move |rd| {
            rd.graph_ids()?
                .iter()
                .map(|id| view::build(rd, id, engine.driver_active(id), ViewPage::default()))
                .collect()
        })
        .await
    }

    /// `graph get`: the graph, its current run, progress and warnings.
    pub async fn get_graph(&self, name_or_id: &str) -> Result<GraphView, EngineError> {
        self.get_graph_page(name_or_id, ViewPage::default()).await
    }

    /// `graph get` with a chosen window of the per-spec progress list.
    pub async fn get_graph_page(
        &self,
        name_or_id: &str,
        page: ViewPage,
    ) -> Result<GraphView, EngineError> {
        self.graph_view(name_or_id, page).await
    }

    /// A graph's view by name or id: the lookup and the view are one read (one snapshot, one
    /// trip to the read pool).
    async fn graph_view(&self, name_or_id: &str, page: ViewPage) -> Result<GraphView, EngineError> {
        let engine = self.clone();
        let lookup = name_or_id.to_string();
        self.read(move |rd| {
            let id = graphs::resolve(rd, &lookup)?;
            view::build(rd, &id, engine.driver_active(&id), page)
        })
        .await
    }

    pub async fn delete_graph(&self, name_or_id: &str) -> Result<Graph, EngineError> {
        let lookup = name_or_id.to_string();
        self.write_with_events(move |tx| {
            let graph = graphs::delete(tx, &lookup)?;
            let event = Event::new(&taxonomy::graph::GraphDeleted {
                graph: taxonomy::graph::GraphRef {
                    graph_id: graph.id.clone(),
                    graph_name: graph.name.clone(),
                    workdir: graph.workdir.clone(),
                },
            });
            Ok((graph, vec![event]))
        })
        .await
    }

    /// Runs of a graph (or all), newest first.
    pub async fn list_runs(
        &self,
        graph: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Run>, EngineError> {
        let graph = graph.map(str::to_string);
        self.read(move |rd| {
            let graph_id = graph.map(|g| graphs::resolve(rd, &g)).transpose()?;
            Ok(rd.runs(graph_id.as_deref(), limit)?)
        })
        .await
    }

    /// One run with its specs and node runs.
    pub async fn get_run(&self, id: &str) -> Result<RunView, EngineError> {
        let prefix = id.to_string();
        self.read(move |rd| {
            let id = rd.resolve_run(&prefix)?;
            Ok(RunView {
                run: rd.run(&id)?,
                specs: rd.run_specs(&id)?,
                specs_total: None,
                node_runs: rd.node_runs(&id)?,
            })
        })
        .await
    }

    /// One node run by id or unique prefix, with its stored output (`detail`).
    pub async fn get_node_run(&self, id: &str) -> Result<NodeRun, EngineError> {
        let prefix = id.to_string();
        self.read(move |rd| Ok(rd.node_run(&prefix)?)).await
    }

    /// One run with `in_flight`: true while a driver works on it (it is running, or it has just
    /// stopped and the driver is still recording its end and firing its hooks), or while it
    /// waits for an agent's usage limit to reset (it goes on by itself). When false, the
    /// view holds everything the driver recorded, every hook it fired included.
    ///
    /// The driver is checked after the read; a driver that ended between the two may have
    /// recorded more than the first read saw, so the run is read again once no driver works on
    /// it. A run that reads `running` then has a driver just starting: it is in flight.
    pub async fn get_run_in_flight(&self, id: &str) -> Result<(RunView, bool), EngineError> {
        let view = self.get_run(id).await?;
        if self.run_in_flight(&view.run).await? {
            return Ok((view, true));
        }
        let view = self.get_run(&view.run.id).await?;
        // A run paused on a usage limit goes on by itself at the reset: it is in flight.
        let waits_for_reset = view.run.status == RunStatus::Paused && view.run.resumes_at.is_some();
        let in_flight = view.run.status == RunStatus::Running
            || waits_for_reset
            || self.run_in_flight(&view.run).await?;
        Ok((view, in_flight))
    }

    /// True while a driver works on this run (see [`Engine::get_run_in_flight`]).
    async fn run_in_flight(&self, run: &Run) -> Result<bool, EngineError> {
        let graph_id = run.graph_id.clone();
        let current = self
            .read(move |rd| Ok(rd.graph_shallow(&graph_id)?))
            .await?;
        Ok(current.current_run_id.as_deref() == Some(run.id.as_str())
            && self.driver_active(&run.graph_id))
    }

    /// Node runs of every run of a graph, newest first.
    pub async fn graph_node_runs(
        &self,
        name_or_id: &str,
        limit: usize,
    ) -> Result<Vec<NodeRun>, EngineError> {
        let lookup = name_or_id.to_string();
        self.read(move |rd| {
            let id = graphs::resolve(rd, &lookup)?;
            Ok(rd.graph_node_runs(&id, limit)?)
        })
        .await
    }

    /// The event `event` would be for a past run of a graph (its latest run unless `run` names
    /// one), rebuilt from the run history; `None` when that event would not fire for it.
    pub async fn event_from_history(
        &self,
        name_or_id: &str,
        event: HookEvent,
        run: Option<&str>,
        spec: Option<&str>,
    ) -> Result<(Graph, Run, Option<Event>), EngineError> {
        let (name_or_id, run, spec) = (
            name_or_id.to_string(),
            run.map(str::to_string),
            spec.map(str::to_string),
        );
        self.read(move |conn| {
            let graph = graphs::get(conn, &name_or_id)?;
            let run_id = match run {
                Some(prefix) => conn.resolve_run(&prefix)?,
                None => match conn.runs(Some(&graph.id), 1)?.into_iter().next() {
                    Some(run) => run.id,
                    None => {
                        return Err(EngineError::Conflict(format!(
                            "graph `{}` has no run yet to test its hooks against; run it first",
                            graph.name
                        )));
                    }
                },
            };
            let run = conn.run(&run_id)?;
            if run.graph_id != graph.id {
                return invalid(format!(
                    "field `run`: run {} belongs to another graph",
                    ids::short(&run.id)
                ));
            }
            let context = events::RunContext {
                graph_id: graph.id.clone(),
                graph_name: graph.name.clone(),
                run_id: run.id.clone(),
                workdir: run.workdir.clone(),
                queue_id: run.queue_id.clone(),
                cause: run.cause(),
            };
            let specs = conn.run_specs(&run.id)?;
            let completed: Vec<CompletedSpec> = specs
                .iter()
                .filter(|s| s.status == SpecResult::Completed)
                .map(|s| CompletedSpec {
                    id: s.spec_id.clone(),
                    name: s.spec_name.clone().unwrap_or_default(),
                    summary: s.summary.clone(),
                })
                .collect();
            let spec_id = spec.map(|s| specs::resolve(conn, &s)).transpose()?;
            let node_runs = conn.node_runs(&run.id)?;
            let last_node = |status: NodeRunStatus| {
                node_runs
                    .iter()
                    .rev()
                    .find(|n| n.status == status)
                    .map(|n| n.node.clone())
            };
            let built = match event {
                HookEvent::OnCompleted => Some(context.completed(completed)),
                HookEvent::OnSpecCompleted => {
                    let spec = match &spec_id {
                        Some(id) => {
                            let found = conn.spec(id)?;
                            let summary = specs
                                .iter()
                                .find(|s| &s.spec_id == id)
                                .and_then(|s| s.summary.clone());
                            Some(CompletedSpec {
                                id: found.id,
                                name: found.name,
                                summary,
                            })
                        }
                        None => completed.last().cloned(),
                    };
                    spec.map(|spec| context.spec_completed(spec))
                }
                HookEvent::OnFailed => {
                    let failed: Vec<&RunSpec> = specs
                        .iter()
                        .filter(|s| s.status == SpecResult::Failed)
                        .collect();
                    let spec_id = spec_id.or_else(|| match failed.as_slice() {
                        [one] => Some(one.spec_id.clone()),
                        _ => None,
                    });
                    Some(context.failed(
                        run.blocker.clone().unwrap_or_default(),
                        last_node(NodeRunStatus::Failed),
                        spec_id,
                        failed.iter().map(|s| s.spec_id.clone()).collect(),
                    ))
                }
                HookEvent::OnBlocked => Some(context.blocked(
                    run.blocker.clone().unwrap_or_default(),
                    last_node(NodeRunStatus::Blocked),
                    None,
                )),
                HookEvent::OnSpecFailed => {
                    // The named spec if it failed in this run, else the run's last failed spec.
                    let failed = specs.iter().rev().find(|s| {
                        s.status == SpecResult::Failed
                            && spec_id.as_ref().is_none_or(|id| &s.spec_id == id)
                    });
                    failed.map(|s| {
                        context.spec_failed(
                            CompletedSpec {
                                id: s.spec_id.clone(),
                                name: s.spec_name.clone().unwrap_or_default(),
                                summary: None,
                            },
                            s.reason_node
                                .clone()
                                .or_else(|| last_node(NodeRunStatus::Failed))
                                .unwrap_or_default(),
                            s.reason.clone().unwrap_or_default(),
                        )
                    })
                }
            };
            Ok((graph, run, built))
        })
        .await
    }

    // ----- control -----

    /// `graph_control`: run, reset or continue.
    pub async fn control(
        &self,
        name_or_id: &str,
        request: ControlRequest,
    ) -> Result<GraphView, EngineError> {
        let lookup = name_or_id.to_string();
        let graph_id = self.read(move |rd| graphs::resolve(rd, &lookup)).await?;
        match request.action.as_str() {
            "run" => {
                if request.mode.is_some() || request.node.is_some() {
                    return invalid("fields `mode` and `node` belong to the `continue` action");
                }
                let (queue_id, workdir) = self
                    .ask_pre_start(&graph_id, request.queue_id, request.workdir)
                    .await?;
                self.drive_new(&graph_id, "run", None, move |tx, id| {
                    start_run(tx, id, queue_id.as_deref(), workdir.as_deref())
                })
                .await?;
            }
            "reset" => {
                if request.queue_id.is_some()
                    || request.workdir.is_some()
                    || request.mode.is_some()
                    || request.node.is_some()
                {
                    return invalid("`reset` takes no other field");
                }
                let id = graph_id.clone();
                self.write_with_events(move |tx| {
                    let graph = tx.graph_shallow(&id)?;
                    let run_id = graph.current_run_id.clone();
                    reset(tx, &id)?;
                    let event = Event::new(&taxonomy::graph::RunReset {
                        graph: taxonomy::graph::GraphRef {
                            graph_id: graph.id.clone(),
                            graph_name: graph.name.clone(),
                            workdir: graph.workdir.clone(),
                        },
                        run_id,
                    });
                    Ok(((), vec![event]))
                })
                .await?;
                self.stop_driver(&graph_id);
            }
            "cancel" => {
                if request.queue_id.is_some()
                    || request.workdir.is_some()
                    || request.mode.is_some()
                    || request.node.is_some()
                {
                    return invalid("`cancel` takes no other field");
                }
                let id = graph_id.clone();
                let by = Cause::current().actor.to_string();
                self.write_with_events(move |tx| {
                    let event = cancel(tx, &id, &by)?;
                    Ok(((), vec![event]))
                })
                .await?;
                self.stop_driver_and_wait(&graph_id).await;
            }
            "continue" => {
                if request.queue_id.is_some() || request.workdir.is_some() {
                    return invalid("fields `queue_id` and `workdir` belong to the `run` action");
                }
                let mode = request.mode.clone().unwrap_or_else(|| "plain".to_string());
                self.drive_new(&graph_id, "continue", Some(mode), move |tx, id| {
                    continue_run(tx, id, request.mode.as_deref(), request.node.as_deref())
                })
                .await?;
            }
            other => {
                return invalid(format!(
                    "field `action` must be `run`, `reset`, `continue` or `cancel`, got `{other}`"
                ));
            }
        }
        self.graph_view(&graph_id, ViewPage::default()).await
    }

    /// Asks the sync hooks on `graph.run.pre_start` whether a run starts
    /// ([`crate::hooks::decide`]); returns its queue and workdir as they patched them. A
    /// denial is a conflict naming the hook and its reason: nothing starts.
    async fn ask_pre_start(
        &self,
        graph_id: &str,
        queue_id: Option<String>,
        workdir: Option<String>,
    ) -> Result<(Option<String>, Option<String>), EngineError> {
        const PRE_START: &str = "graph.run.pre_start";
        let id = graph_id.to_string();
        let graph = self.read(move |rd| Ok(rd.graph_shallow(&id)?)).await?;
        let graph_hooks = graph.hooks.contains_key(PRE_START);
        if !graph_hooks && !self.inner.bus.asks(PRE_START) {
            return Ok((queue_id, workdir));
        }
        let cause = Cause::current();
        let asked_workdir = workdir.clone().unwrap_or_else(|| graph.workdir.clone());
        let question = taxonomy::graph::RunPreStart {
            graph: taxonomy::graph::GraphRef {
                graph_id: graph.id.clone(),
                graph_name: graph.name.clone(),
                workdir: asked_workdir.clone(),
            },
            queue_id: queue_id.clone(),
            actor: cause.actor.to_string(),
        };
        let mut question = crate::hooks::decide::Question::of(&question, cause);
        if graph_hooks {
            question = question.in_graph(crate::hooks::decide::GraphScope {
                graph_id: graph.id.clone(),
                graph_name: graph.name.clone(),
                run_id: None,
                workdir: graph.workdir.clone(),
                hooks: std::sync::Arc::new(graph.hooks.clone()),
            });
        }
        let decision = self.inner.bus.decide(question).await?;
        if let crate::hooks::decide::Verdict::Deny { hook, reason } = decision.verdict {
            return Err(EngineError::Conflict(format!(
                "sync hook `{hook}` denied the run of graph `{}`: {reason}",
                graph.name
            )));
        }
        let workdir = decision
            .patched_text("workdir")
            .map(str::to_string)
            .or(workdir);
        let queue_id = decision
            .patched_text("queue_id")
            .map(str::to_string)
            .or(queue_id);
        Ok((queue_id, workdir))
    }

    /// Makes the graph's run running with `begin` (which returns the run's id) and, in the same
    /// write, takes the driver lease and records who started it (the run's events carry that
    /// cause) with its `graph.run.started` event; then starts the driver holding the lease.
    async fn drive_new(
        &self,
        graph_id: &str,
        how: &'static str,
        mode: Option<String>,
        begin: impl FnOnce(&Tx<'_>, &str) -> Result<String, EngineError> + Send + 'static,
    ) -> Result<(), EngineError> {
        let id = graph_id.to_string();
        let bus = self.inner.bus.clone();
        let cause = Cause::current();
        let held_for = self.lease();
        let (lease, recorded) = self
            .write(move |tx| {
                let run_id = begin(tx, &id)?;
                let generation = tx.hold_driver_lease(&id, held_for)?;
                tx.set_run_cause(&run_id, &cause)?;
                let run = tx.run(&run_id)?;
                let graph = tx.graph_shallow(&id)?;
                let event = Event::new(&taxonomy::graph::RunStarted {
                    run: taxonomy::graph::RunRef {
                        graph: taxonomy::graph::GraphRef {
                            graph_id: graph.id.clone(),
                            graph_name: graph.name.clone(),
                            workdir: run.workdir.clone(),
                        },
                        run_id: run_id.clone(),
                        queue_id: run.queue_id.clone(),
                    },
                    how: how.to_string(),
                    mode,
                });
                let recorded = bus.record(tx, [event], &cause)?;
                Ok((
                    driver::Lease {
                        graph_id: id,
                        run_id,
                        generation,
                    },
                    recorded,
                ))
            })
            .await?;
        self.publish(recorded).await;
        self.spawn_driver(lease);
        Ok(())
    }

    fn drivers(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio::task::JoinHandle<()>>> {
        self.inner
            .drivers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn driver_active(&self, graph_id: &str) -> bool {
        self.drivers()
            .get(graph_id)
            .is_some_and(|h| !h.is_finished())
    }

    /// Starts the driver of a run that just became running, holding the lease taken in the
    /// same transaction. A previous driver still listed here lost its lease with that
    /// transaction: it changes nothing more and only ends, so the new run gets its own driver
    /// at once (waiting for the old one would leave the new run undriven).
    fn spawn_driver(&self, lease: driver::Lease) {
        let mut drivers = self.drivers();
        let graph_id = lease.graph_id.clone();
        let task = tokio::spawn(driver::drive(self.clone(), lease));
        drivers.insert(graph_id, task);
    }

    fn stop_driver(&self, graph_id: &str) {
        if let Some(handle) = self.drivers().remove(graph_id) {
            handle.abort();
        }
    }

    /// Stops the graph's driver and waits (up to [`DRIVER_STOP`]) until it has ended: its
    /// executor call is dropped, and with it the node's processes, killed as it goes.
    async fn stop_driver_and_wait(&self, graph_id: &str) {
        let Some(handle) = self.drivers().remove(graph_id) else {
            return;
        };
        handle.abort();
        if tokio::time::timeout(DRIVER_STOP, handle).await.is_err() {
            tracing::warn!(
                graph = graph_id,
                "the cancelled run's driver has not ended yet"
            );
        }
    }

    /// Called by a driver task as it ends.
    fn driver_finished(&self, graph_id: &str) {
        let me = tokio::task::try_id();
        let mut drivers = self.drivers();
        if drivers.get(graph_id).is_some_and(|h| Some(h.id()) == me) {
            drivers.remove(graph_id);
        }
    }

    /// Goes on with a run paused on a usage limit at `resumes_at`, by itself, as a
    /// plain continue would: the node runs again. A run that was continued, reset or cancelled
    /// meanwhile is left alone. A later wait of the same graph replaces this one.
    pub(crate) fn wake_at(&self, graph_id: &str, run_id: &str, resumes_at: Timestamp) {
        let engine = self.clone();
        let (graph, run, at) = (graph_id.to_string(), run_id.to_string(), resumes_at);
        let wait = resumes_at.duration_since(Timestamp::now());
        tracing::info!(
            graph = graph_id,
            run = run_id,
            %resumes_at,
            "the run waits for a usage limit to reset"
        );
        let task = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Err(err) = engine.resume_after_limit(&graph, &run, at).await {
                tracing::error!(graph = %graph, run = %run, error = %err, "cannot go on with the run after its usage limit reset");
            }
            let me = tokio::task::try_id();
            let mut wakeups = engine.wakeups();
            if wakeups.get(&graph).is_some_and(|h| Some(h.id()) == me) {
                wakeups.remove(&graph);
            }
        });
        if let Some(before) = self.wakeups().insert(graph_id.to_string(), task) {
            before.abort();
        }
    }

    fn wakeups(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio::task::JoinHandle<()>>> {
        self.inner
            .wakeups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The wake-up of [`Self::wake_at`]: continues the run when it still waits for that reset,
    /// as the actor that last started or continued it.
    async fn resume_after_limit(
        &self,
        graph_id: &str,
        run_id: &str,
        resumes_at: Timestamp,
    ) -> Result<(), EngineError> {
        let id = run_id.to_string();
        let run = self.read(move |rd| Ok(rd.run(&id)?)).await?;
        let at = resumes_at;
        let cause = run.cause();
        let started = cause
            .scope(self.drive_new(
                graph_id,
                "continue",
                Some("after_limit".to_string()),
                move |tx, id| {
                    let graph = tx.graph_shallow(id)?;
                    let run = tx.run(&run.id)?;
                    // A continue, reset or cancel may have come first.
                    if !(graph.current_run_id.as_deref() == Some(run.id.as_str())
                        && run.status == RunStatus::Paused
                        && run.resumes_at == Some(at))
                    {
                        return Err(EngineError::Conflict(
                            "the run no longer waits for that reset".to_string(),
                        ));
                    }
                    continue_run(tx, id, None, None)
                },
            ))
            .await;
        match started {
            Err(EngineError::Conflict(why)) => {
                tracing::debug!(graph = graph_id, run = run_id, %why, "not resumed");
                Ok(())
            }
            other => other,
        }
    }

    /// At daemon start: runs that were in progress when the daemon died are marked interrupted
    /// (never silently re-run); their graphs pause with a blocker that says so. Runs paused on
    /// a usage limit wait for their reset again (at once when it passed while the daemon was
    /// down).
    pub async fn recover(&self) -> Result<usize, EngineError> {
        let bus = self.inner.bus.clone();
        let (count, recorded) = self
            .write(move |tx| {
                let events = interrupt_active(
                    tx,
                    "the daemon stopped (crash or kill) while this run was in progress",
                )?;
                let count = events.len();
                let mut recorded = Recorded::default();
                for (event, cause) in events {
                    recorded.extend(bus.record(tx, [event], &cause)?);
                }
                Ok((count, recorded))
            })
            .await?;
        self.publish(recorded).await;
        let waiting = self.read(|rd| Ok(rd.limit_paused_runs()?)).await?;
        for (graph_id, run_id, resumes_at) in waiting {
            self.wake_at(&graph_id, &run_id, resumes_at);
        }
        Ok(count)
    }

    /// Takes over the runs whose driver's node let its lease run out (the daemon died, hung, or
    /// lost the database): each is marked interrupted exactly as after a crash, its graph
    /// paused with a blocker that names the node, and `on_blocked` fires once, here. The
    /// claim skips what another node is taking over at the same moment. Returns how many.
    pub async fn take_over_expired(&self) -> Result<usize, EngineError> {
        let bus = self.inner.bus.clone();
        let (count, recorded) = self
            .write(move |tx| {
                let mut recorded = Recorded::default();
                let mut count = 0;
                for (graph_id, node) in tx.expired_leases()? {
                    let graph = tx.graph_shallow(&graph_id)?;
                    let Some(run_id) = graph.current_run_id else {
                        tx.take_driver_lease(&graph_id)?;
                        continue;
                    };
                    let why = format!(
                        "node `{node}`, which drove this run, stopped renewing its lease (its daemon died, hung or lost the database)"
                    );
                    let (event, cause) = interrupt_run(tx, &run_id, &why)?;
                    recorded.extend(bus.record(tx, [event], &cause)?);
                    count += 1;
                }
                Ok((count, recorded))
            })
            .await?;
        self.publish(recorded).await;
        if count > 0 {
            tracing::warn!(
                runs = count,
                "took over runs whose node's lease ran out; they are interrupted"
            );
        }
        Ok(count)
    }

    /// At daemon shutdown: stops every driver; in-flight node runs are recorded as interrupted.
    pub async fn shutdown(&self) -> Result<usize, EngineError> {
        let handles: Vec<tokio::task::JoinHandle<()>> =
            self.drivers().drain().map(|(_, h)| h).collect();
        for handle in &handles {
            handle.abort();
        }
        for (_, wakeup) in self.wakeups().drain() {
            wakeup.abort();
        }
        let events = self
            .write(|tx| interrupt_active(tx, "the daemon shut down while this run was in progress"))
            .await?;
        Ok(events.len())
    }
}
