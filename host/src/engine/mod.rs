//! The engine: specs, graphs, queues and runs on SQLite, and the drivers that take a graph's
//! specs through its nodes.
//!
//! [`Engine`] is the public face: the API and CLI call it; it validates node configs against the
//! executor host, writes every state change in one transaction, runs one driver task per running
//! graph, and reports what happens as [`EngineEvent`]s to an [`EventSink`] (where hooks attach).

mod control;
mod driver;
mod error;
pub mod events;
pub(crate) mod git;
pub mod graphs;
pub mod queues;
pub mod runs;
pub mod spec_format;
pub mod specs;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use serde_json::Value;

pub use control::ControlRequest;
pub use error::{EngineError, invalid};
pub use events::{EngineEvent, EventSink, LogEvents};
pub use graphs::{Graph, GraphInput, GraphStatus, Node};
pub use queues::{NewQueue, Queue};
pub use runs::{NodeRun, Run, RunSpec};
pub use specs::{NewSpec, Spec, SpecPatch};
pub use view::{GraphView, Progress, RunView};

use control::{continue_run, interrupt_active, reset, start_run};
use view::{RECENT_HOOK_RUNS, RECENT_NODE_RUNS, progress, remaining_events};

use crate::hooks::runs::HookRunFilter;
use crate::hooks::{HookEvent, HookMap, SpecScope, validate_hooks};

use crate::markers::NODE_MARKERS;
use crate::plugins::{PluginError, PluginHost, WorkConfig, split_work_config};
use crate::store::{Store, ids};

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
    events: Arc<dyn EventSink>,
    /// The driver task of each running graph.
    drivers: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

impl Engine {
    /// An engine over `store`, running work through `plugins`, reporting to `events`.
    pub fn new(store: Store, plugins: PluginHost, events: Arc<dyn EventSink>) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                plugins,
                events,
                drivers: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    pub(crate) fn plugins(&self) -> &PluginHost {
        &self.inner.plugins
    }

    pub(crate) fn emit(&self, event: EngineEvent) {
        self.inner.events.emit(event);
    }

    fn read<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let conn = self.inner.store.conn();
        work(&conn)
    }

    fn write<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let mut conn = self.inner.store.conn();
        let tx = conn.transaction()?;
        let value = work(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    // ----- specs -----

    pub fn create_spec(&self, new: NewSpec) -> Result<Spec, EngineError> {
        self.write(|tx| specs::create(tx, new))
    }

    pub fn list_specs(&self, workdir: Option<&str>) -> Result<Vec<Spec>, EngineError> {
        self.read(|conn| specs::list(conn, workdir))
    }

    pub fn get_spec(&self, id: &str) -> Result<Spec, EngineError> {
        self.read(|conn| specs::get(conn, id))
    }

    pub fn update_spec(&self, id: &str, patch: SpecPatch) -> Result<Spec, EngineError> {
        self.write(|tx| specs::update(tx, id, patch))
    }

    pub fn delete_spec(&self, id: &str) -> Result<Spec, EngineError> {
        self.write(|tx| specs::delete(tx, id))
    }

    // ----- queues -----

    pub fn create_queue(&self, new: NewQueue) -> Result<Queue, EngineError> {
        self.write(|tx| queues::create(tx, new))
    }

    pub fn list_queues(&self) -> Result<Vec<Queue>, EngineError> {
        self.read(queues::list)
    }

    pub fn get_queue(&self, id: &str) -> Result<Queue, EngineError> {
        self.read(|conn| queues::get(conn, id))
    }

    pub fn queue_add(
        &self,
        queue: &str,
        spec: &str,
        group: Option<&str>,
    ) -> Result<Queue, EngineError> {
        self.write(|tx| queues::add_spec(tx, queue, spec, group))
    }

    pub fn queue_remove(&self, queue: &str, spec: &str) -> Result<Queue, EngineError> {
        self.write(|tx| queues::remove_spec(tx, queue, spec))
    }

    pub fn queue_set_group(
        &self,
        queue: &str,
        spec: &str,
        group: Option<&str>,
    ) -> Result<Queue, EngineError> {
        self.write(|tx| queues::set_group(tx, queue, spec, group))
    }

    pub fn queue_reorder(&self, queue: &str, order: &[String]) -> Result<Queue, EngineError> {
        self.write(|tx| queues::reorder(tx, queue, order))
    }

    pub fn delete_queue(&self, queue: &str) -> Result<Queue, EngineError> {
        self.write(|tx| queues::delete(tx, queue))
    }

    // ----- graphs -----

    /// Checks every node's executor config (mode, the executor's own validation, markers).
    async fn validate_nodes(&self, nodes: &[Node]) -> Result<(), EngineError> {
        for (index, node) in nodes.iter().enumerate() {
            let at = format!("nodes[{index}] (`{}`)", node.name);
            let work = split_work_config(&node.config)
                .and_then(|work| work.host().check_no_spec_ids().map(|()| work))
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
    fn spec_scope(
        &self,
        graph: Option<&Graph>,
        bound: &[String],
    ) -> Result<SpecScope, EngineError> {
        self.read(|conn| {
            let mut ids = bound.to_vec();
            if let Some(run_id) = graph.and_then(|g| g.current_run_id.as_deref()) {
                let run = runs::get(conn, run_id)?;
                if let (Some(queue_id), true) = (&run.queue_id, runs::is_active(&run)) {
                    ids.extend(
                        queues::members(conn, queue_id)?
                            .into_iter()
                            .map(|m| m.spec_id),
                    );
                }
            }
            let backlog = conn
                .prepare_cached("SELECT id FROM specs")?
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(SpecScope { ids, backlog })
        })
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
        let workdir = graphs::check_workdir("workdir", workdir)?;
        let nodes = graphs::parse_nodes(input.nodes.as_deref().unwrap_or_default())?;
        self.validate_nodes(&nodes).await?;
        let specs = self
            .read(|conn| graphs::resolve_specs(conn, input.specs.as_deref().unwrap_or_default()))?;
        let scope = self.spec_scope(None, &specs)?;
        let hooks = self
            .merged_hooks(
                &HookMap::new(),
                input.hooks.as_ref(),
                input.on_completed.as_ref(),
                &scope,
            )
            .await?;
        let id = self.write(|tx| {
            let write = graphs::GraphWrite {
                name,
                workdir,
                nodes,
                specs,
                allow_dirty_start: input.allow_dirty_start.unwrap_or(false),
                hooks,
            };
            graphs::insert(tx, &write)
        })?;
        self.graph_view(&id)
    }

    /// Applies a partial update, validated whole before anything is written. Nodes and hooks
    /// edited while a run is active take effect at the run's next dispatch / next event; when
    /// hooks change then, the answer names the events still to come (`remaining_events`).
    pub async fn update_graph(
        &self,
        name_or_id: &str,
        input: GraphInput,
    ) -> Result<GraphView, EngineError> {
        let current = self.read(|conn| graphs::get(conn, name_or_id))?;
        let name = match &input.name {
            Some(name) => graphs::check_name(name)?,
            None => current.name.clone(),
        };
        let workdir = match &input.workdir {
            Some(workdir) => graphs::check_workdir("workdir", workdir)?,
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
            Some(prefixes) => self.read(|conn| graphs::resolve_specs(conn, prefixes))?,
            None => current.specs.iter().map(|s| s.id.clone()).collect(),
        };
        let hooks_touched = input.hooks.is_some() || input.on_completed.is_some();
        let hooks = if hooks_touched {
            let scope = self.spec_scope(Some(&current), &specs)?;
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
        self.write(|tx| {
            let write = graphs::GraphWrite {
                name,
                workdir,
                nodes,
                specs,
                allow_dirty_start: input.allow_dirty_start.unwrap_or(current.allow_dirty_start),
                hooks,
            };
            graphs::replace(tx, &current.id, &write)
        })?;
        let mut view = self.graph_view(&current.id)?;
        if hooks_changed {
            view.remaining_events = view
                .current_run
                .as_ref()
                .filter(|r| runs::is_active(&r.run))
                .map(|run| remaining_events(&view, run));
        }
        Ok(view)
    }

    pub fn list_graphs(&self) -> Result<Vec<GraphView>, EngineError> {
        let ids: Vec<String> =
            self.read(|conn| Ok(graphs::list(conn)?.into_iter().map(|g| g.id).collect()))?;
        ids.iter().map(|id| self.graph_view(id)).collect()
    }

    /// `graph get`: the graph, its current run, progress and warnings.
    pub fn get_graph(&self, name_or_id: &str) -> Result<GraphView, EngineError> {
        let id = self.read(|conn| graphs::resolve(conn, name_or_id))?;
        self.graph_view(&id)
    }

    fn graph_view(&self, id: &str) -> Result<GraphView, EngineError> {
        let driver_active = self.driver_active(id);
        self.read(|conn| {
            let graph = graphs::get_by_id(conn, id)?;
            let current_run = match &graph.current_run_id {
                Some(run_id) => Some(RunView {
                    run: runs::get(conn, run_id)?,
                    specs: runs::specs_of(conn, run_id)?,
                    node_runs: runs::recent_node_runs_of(conn, run_id, RECENT_NODE_RUNS)?,
                }),
                None => None,
            };
            let in_progress = match &graph.current_run_id {
                Some(run_id) => runs::node_in_progress(conn, run_id)?,
                None => false,
            };
            let consistency_warning = (graph.status == GraphStatus::Running && !in_progress && !driver_active).then(|| {
                format!(
                    "graph `{}` is marked running, but no node run is in progress and no resume is scheduled; `canopy graph continue {}` resumes it, `canopy graph reset {}` abandons the run",
                    graph.name, graph.name, graph.name
                )
            });
            let progress = match &current_run {
                Some(run) => progress(conn, &graph, run)?,
                None => Vec::new(),
            };
            let completion_hook_runs = match &graph.current_run_id {
                Some(run_id) => crate::hooks::runs::query(
                    conn,
                    &HookRunFilter { run_id: Some(run_id.clone()), last: RECENT_HOOK_RUNS, ..HookRunFilter::default() },
                )?,
                None => Vec::new(),
            };
            Ok(GraphView { graph, consistency_warning, current_run, progress, completion_hook_runs, remaining_events: None })
        })
    }

    pub fn delete_graph(&self, name_or_id: &str) -> Result<Graph, EngineError> {
        self.write(|tx| graphs::delete(tx, name_or_id))
    }

    /// Runs of a graph (or all), newest first.
    pub fn list_runs(&self, graph: Option<&str>, limit: usize) -> Result<Vec<Run>, EngineError> {
        self.read(|conn| {
            let graph_id = graph.map(|g| graphs::resolve(conn, g)).transpose()?;
            runs::list(conn, graph_id.as_deref(), limit)
        })
    }

    /// One run with its specs and node runs.
    pub fn get_run(&self, id: &str) -> Result<RunView, EngineError> {
        self.read(|conn| {
            let id = runs::resolve(conn, id)?;
            Ok(RunView {
                run: runs::get(conn, &id)?,
                specs: runs::specs_of(conn, &id)?,
                node_runs: runs::node_runs_of(conn, &id)?,
            })
        })
    }

    /// One node run by id or unique prefix, with its stored output (`detail`).
    pub fn get_node_run(&self, id: &str) -> Result<NodeRun, EngineError> {
        self.read(|conn| runs::get_node_run(conn, id))
    }

    /// True while a driver works on this run: it is running, or it has just stopped and the
    /// driver is still recording its end and firing its hooks. Once false, every hook the run
    /// has fired so far is recorded.
    pub fn run_in_flight(&self, run: &Run) -> Result<bool, EngineError> {
        let current = self.read(|conn| graphs::get_shallow(conn, &run.graph_id))?;
        Ok(current.current_run_id.as_deref() == Some(run.id.as_str())
            && self.driver_active(&run.graph_id))
    }

    /// Node runs of every run of a graph, newest first.
    pub fn graph_node_runs(
        &self,
        name_or_id: &str,
        limit: usize,
    ) -> Result<Vec<NodeRun>, EngineError> {
        self.read(|conn| {
            let id = graphs::resolve(conn, name_or_id)?;
            runs::node_runs_of_graph(conn, &id, limit)
        })
    }

    /// The event `event` would be for a past run of a graph (its latest run unless `run` names
    /// one), rebuilt from the run history; `None` when that event would not fire for it.
    pub fn event_from_history(
        &self,
        name_or_id: &str,
        event: HookEvent,
        run: Option<&str>,
        spec: Option<&str>,
    ) -> Result<(Graph, Run, Option<EngineEvent>), EngineError> {
        self.read(|conn| {
            let graph = graphs::get(conn, name_or_id)?;
            let run_id = match run {
                Some(prefix) => runs::resolve(conn, prefix)?,
                None => match runs::list(conn, Some(&graph.id), 1)?.into_iter().next() {
                    Some(run) => run.id,
                    None => {
                        return Err(EngineError::Conflict(format!(
                            "graph `{}` has no run yet to test its hooks against; run it first",
                            graph.name
                        )));
                    }
                },
            };
            let run = runs::get(conn, &run_id)?;
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
            };
            let specs = runs::specs_of(conn, &run.id)?;
            let completed: Vec<events::CompletedSpec> = specs
                .iter()
                .filter(|s| s.status == "completed")
                .map(|s| events::CompletedSpec {
                    id: s.spec_id.clone(),
                    name: s.spec_name.clone().unwrap_or_default(),
                    summary: s.summary.clone(),
                })
                .collect();
            let spec_id = spec.map(|s| specs::resolve(conn, s)).transpose()?;
            let node_runs = runs::node_runs_of(conn, &run.id)?;
            let last_node = |status: &str| {
                node_runs
                    .iter()
                    .rev()
                    .find(|n| n.status == status)
                    .map(|n| n.node.clone())
            };
            let built = match event {
                HookEvent::OnCompleted => Some(EngineEvent::RunCompleted {
                    run: context,
                    completed,
                }),
                HookEvent::OnSpecCompleted => {
                    let spec = match &spec_id {
                        Some(id) => {
                            let found = specs::get(conn, id)?;
                            let summary = specs
                                .iter()
                                .find(|s| &s.spec_id == id)
                                .and_then(|s| s.summary.clone());
                            Some(events::CompletedSpec {
                                id: found.id,
                                name: found.name,
                                summary,
                            })
                        }
                        None => completed.last().cloned(),
                    };
                    spec.map(|spec| EngineEvent::SpecCompleted { run: context, spec })
                }
                HookEvent::OnFailed => {
                    let failed: Vec<&RunSpec> =
                        specs.iter().filter(|s| s.status == "failed").collect();
                    let spec_id = spec_id.or_else(|| match failed.as_slice() {
                        [one] => Some(one.spec_id.clone()),
                        _ => None,
                    });
                    Some(EngineEvent::RunFailed {
                        run: context,
                        blocker: run.blocker.clone().unwrap_or_default(),
                        node: last_node("failed"),
                        spec_id,
                        failed_specs: failed.iter().map(|s| s.spec_id.clone()).collect(),
                    })
                }
                HookEvent::OnBlocked => Some(EngineEvent::RunBlocked {
                    run: context,
                    blocker: run.blocker.clone().unwrap_or_default(),
                    node: last_node("blocked"),
                    spec_id: None,
                }),
            };
            Ok((graph, run, built))
        })
    }

    // ----- control -----

    /// `graph_control`: run, reset or continue.
    pub fn control(
        &self,
        name_or_id: &str,
        request: ControlRequest,
    ) -> Result<GraphView, EngineError> {
        let graph_id = self.read(|conn| graphs::resolve(conn, name_or_id))?;
        match request.action.as_str() {
            "run" => {
                if request.mode.is_some() || request.node.is_some() {
                    return invalid("fields `mode` and `node` belong to the `continue` action");
                }
                let run_id = self.write(|tx| {
                    start_run(
                        tx,
                        &graph_id,
                        request.queue_id.as_deref(),
                        request.workdir.as_deref(),
                    )
                })?;
                self.spawn_driver(&graph_id, &run_id);
            }
            "reset" => {
                if request.queue_id.is_some()
                    || request.workdir.is_some()
                    || request.mode.is_some()
                    || request.node.is_some()
                {
                    return invalid("`reset` takes no other field");
                }
                self.stop_driver(&graph_id);
                self.write(|tx| reset(tx, &graph_id))?;
            }
            "continue" => {
                if request.queue_id.is_some() || request.workdir.is_some() {
                    return invalid("fields `queue_id` and `workdir` belong to the `run` action");
                }
                let run_id = self.write(|tx| {
                    continue_run(
                        tx,
                        &graph_id,
                        request.mode.as_deref(),
                        request.node.as_deref(),
                    )
                })?;
                self.spawn_driver(&graph_id, &run_id);
            }
            other => {
                return invalid(format!(
                    "field `action` must be `run`, `reset` or `continue`, got `{other}`"
                ));
            }
        }
        self.graph_view(&graph_id)
    }

    fn drivers(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio::task::AbortHandle>> {
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

    /// Starts the driver of a run that just became running. `start_run` / `continue_run` only
    /// succeed on a graph that is not running, so a previous driver still listed here has
    /// already settled or paused its run and is only ending: the new run gets its own driver
    /// at once (waiting for the old one would leave the new run undriven).
    fn spawn_driver(&self, graph_id: &str, run_id: &str) {
        let mut drivers = self.drivers();
        let task = tokio::spawn(driver::drive(
            self.clone(),
            graph_id.to_string(),
            run_id.to_string(),
        ));
        drivers.insert(graph_id.to_string(), task.abort_handle());
    }

    fn stop_driver(&self, graph_id: &str) {
        if let Some(handle) = self.drivers().remove(graph_id) {
            handle.abort();
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

    /// At daemon start: runs that were in progress when the daemon died are marked interrupted
    /// (never silently re-run); their graphs pause with a blocker that says so.
    pub fn recover(&self) -> Result<usize, EngineError> {
        let events = self.write(|tx| {
            interrupt_active(
                tx,
                "the daemon stopped (crash or kill) while this run was in progress",
            )
        })?;
        let count = events.len();
        for event in events {
            self.emit(event);
        }
        Ok(count)
    }

    /// At daemon shutdown: stops every driver; in-flight node runs are recorded as interrupted.
    pub fn shutdown(&self) -> Result<usize, EngineError> {
        let handles: Vec<tokio::task::AbortHandle> =
            self.drivers().drain().map(|(_, h)| h).collect();
        for handle in &handles {
            handle.abort();
        }
        let events = self.write(|tx| {
            interrupt_active(tx, "the daemon shut down while this run was in progress")
        })?;
        Ok(events.len())
    }
}
