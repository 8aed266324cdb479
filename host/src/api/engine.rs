//! `/api/specs`, `/api/graphs`, `/api/runs`, `/api/queues`: the engine's resources.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson, ApiQuery, AppState};
use crate::engine::{
    ControlRequest, GraphInput, GraphView, NewQueue, NewSpec, NodeRun, Queue, RunView, Spec,
    SpecPatch,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/specs", get(list_specs).post(create_spec))
        .route(
            "/specs/{id}",
            get(get_spec).patch(update_spec).delete(delete_spec),
        )
        .route("/graphs", get(list_graphs).post(create_graph))
        .route(
            "/graphs/{name}",
            get(get_graph).patch(update_graph).delete(delete_graph),
        )
        .route("/graphs/{name}/control", post(control))
        .route("/graphs/{name}/node-runs", get(graph_node_runs))
        .route("/runs", get(list_runs))
        .route("/runs/{id}", get(get_run))
        .route("/node-runs/{id}", get(get_node_run))
        .route("/queues", get(list_queues).post(create_queue))
        .route("/queues/{id}", get(get_queue).delete(delete_queue))
        .route("/queues/{id}/specs", post(queue_add))
        .route(
            "/queues/{id}/specs/{spec}",
            axum::routing::delete(queue_remove),
        )
        .route("/queues/{id}/specs/{spec}/group", put(queue_group))
        .route("/queues/{id}/order", put(queue_reorder))
}

// ----- specs -----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecQuery {
    #[serde(default)]
    workdir: Option<String>,
}

async fn list_specs(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SpecQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let specs = state.engine.list_specs(query.workdir.as_deref())?;
    Ok(ApiJson(json!({ "specs": specs })))
}

async fn create_spec(
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewSpec>,
) -> Result<(StatusCode, ApiJson<Spec>), ApiError> {
    Ok((StatusCode::CREATED, ApiJson(state.engine.create_spec(new)?)))
}

async fn get_spec(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Spec>, ApiError> {
    Ok(ApiJson(state.engine.get_spec(&id)?))
}

async fn update_spec(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(patch): ApiJson<SpecPatch>,
) -> Result<ApiJson<Spec>, ApiError> {
    Ok(ApiJson(state.engine.update_spec(&id, patch)?))
}

async fn delete_spec(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Spec>, ApiError> {
    Ok(ApiJson(state.engine.delete_spec(&id)?))
}

// ----- graphs -----

async fn list_graphs(State(state): State<AppState>) -> Result<ApiJson<Value>, ApiError> {
    Ok(ApiJson(json!({ "graphs": state.engine.list_graphs()? })))
}

/// Creates a graph; the answer is `graph get` with `warnings` (a workdir that is not a git
/// repository, which the dirty-tree guard cannot check).
async fn create_graph(
    State(state): State<AppState>,
    ApiJson(input): ApiJson<GraphInput>,
) -> Result<(StatusCode, ApiJson<Value>), ApiError> {
    let view = state.engine.create_graph(input).await?;
    Ok((StatusCode::CREATED, ApiJson(with_warnings(view).await?)))
}

/// The view as JSON, with `warnings` about its workdir: empty, or a line saying it is not a git
/// repository, so the dirty-tree guard does not apply.
async fn with_warnings(view: GraphView) -> Result<Value, ApiError> {
    let workdir = view.graph.workdir.clone();
    let mut warnings = Vec::new();
    if let crate::engine::git::TreeState::NotARepo(why) =
        crate::engine::git::tree_state(std::path::Path::new(&workdir)).await
    {
        let why = why.lines().next().unwrap_or_default().to_string();
        warnings.push(format!(
            "workdir {workdir} is not a git repository ({why}): the dirty-tree guard cannot check it, so runs start on whatever is there; make it one (`git init`) to guard it"
        ));
    }
    let mut value = serde_json::to_value(view).map_err(|err| ApiError::internal(&err.into()))?;
    value["warnings"] = json!(warnings);
    Ok(value)
}

async fn get_graph(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<GraphView>, ApiError> {
    Ok(ApiJson(state.engine.get_graph(&name)?))
}

/// Updates a graph; the answer is `graph get`, with `warnings` when the edit set a workdir that
/// is not a git repository.
async fn update_graph(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(input): ApiJson<GraphInput>,
) -> Result<ApiJson<Value>, ApiError> {
    let workdir_set = input.workdir.is_some();
    let view = state.engine.update_graph(&name, input).await?;
    if workdir_set {
        return Ok(ApiJson(with_warnings(view).await?));
    }
    serde_json::to_value(view)
        .map(ApiJson)
        .map_err(|err| ApiError::internal(&err.into()))
}

async fn delete_graph(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<Value>, ApiError> {
    let graph = state.engine.delete_graph(&name)?;
    Ok(ApiJson(json!({ "deleted": graph.name, "id": graph.id })))
}

async fn control(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<ControlRequest>,
) -> Result<ApiJson<GraphView>, ApiError> {
    Ok(ApiJson(state.engine.control(&name, request)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeRunsQuery {
    #[serde(default)]
    last: Option<usize>,
}

async fn graph_node_runs(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<NodeRunsQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let runs = state
        .engine
        .graph_node_runs(&name, query.last.unwrap_or(50).min(10_000))?;
    Ok(ApiJson(json!({ "node_runs": runs })))
}

// ----- runs -----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    #[serde(default)]
    last: Option<usize>,
    #[serde(default)]
    graph: Option<String>,
}

/// Each run with its graph's name (`graph_name`; null when the graph is gone).
async fn list_runs(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let runs = state
        .engine
        .list_runs(query.graph.as_deref(), query.last.unwrap_or(50).min(10_000))?;
    let names = graph_names(&state)?;
    let runs: Vec<Value> = runs
        .into_iter()
        .map(|run| {
            let name = names.get(&run.graph_id).cloned();
            let mut value = json!(run);
            value["graph_name"] = json!(name);
            value
        })
        .collect();
    Ok(ApiJson(json!({ "runs": runs })))
}

/// Graph id -> name.
fn graph_names(state: &AppState) -> Result<std::collections::HashMap<String, String>, ApiError> {
    let conn = state.store.conn();
    let names = conn
        .prepare_cached("SELECT id, name FROM graphs")
        .and_then(|mut statement| {
            statement
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(|err| ApiError::internal(&err.into()))?;
    Ok(names)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunQuery {
    /// Leave out each node run's `detail` and each hook run's `output` (what progress polling
    /// does not need).
    #[serde(default)]
    brief: bool,
}

/// A run with its specs, node runs, hook runs (newest first), its graph's name, and
/// `in_flight`: true while the engine still works on it (once false, every hook it fired is in
/// `hook_runs`).
async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<RunQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let mut view: RunView = state.engine.get_run(&id)?;
    let in_flight = state.engine.run_in_flight(&view.run)?;
    let mut hook_runs = crate::hooks::runs::query(
        &state.store.conn(),
        &crate::hooks::runs::HookRunFilter {
            run_id: Some(view.run.id.clone()),
            last: 10_000,
            ..Default::default()
        },
    )
    .map_err(|err| ApiError::internal(&err.into()))?;
    if query.brief {
        for node_run in &mut view.node_runs {
            node_run.detail = None;
        }
        for hook_run in &mut hook_runs {
            hook_run.output = None;
        }
    }
    let graph_name = graph_names(&state)?.remove(&view.run.graph_id);
    let mut value = json!(view);
    value["graph_name"] = json!(graph_name);
    value["hook_runs"] = json!(hook_runs);
    value["in_flight"] = json!(in_flight);
    Ok(ApiJson(value))
}

/// One node run (id or unique prefix) with its stored output in `detail`.
async fn get_node_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<NodeRun>, ApiError> {
    Ok(ApiJson(state.engine.get_node_run(&id)?))
}

// ----- queues -----

async fn list_queues(State(state): State<AppState>) -> Result<ApiJson<Value>, ApiError> {
    Ok(ApiJson(json!({ "queues": state.engine.list_queues()? })))
}

async fn create_queue(
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewQueue>,
) -> Result<(StatusCode, ApiJson<Queue>), ApiError> {
    Ok((
        StatusCode::CREATED,
        ApiJson(state.engine.create_queue(new)?),
    ))
}

async fn get_queue(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.get_queue(&id)?))
}

async fn delete_queue(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.delete_queue(&id)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddSpec {
    spec: String,
    #[serde(default)]
    group: Option<String>,
}

async fn queue_add(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AddSpec>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.queue_add(
        &id,
        &body.spec,
        body.group.as_deref(),
    )?))
}

async fn queue_remove(
    State(state): State<AppState>,
    Path((id, spec)): Path<(String, String)>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.queue_remove(&id, &spec)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetGroup {
    group: Option<String>,
}

async fn queue_group(
    State(state): State<AppState>,
    Path((id, spec)): Path<(String, String)>,
    ApiJson(body): ApiJson<SetGroup>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.queue_set_group(
        &id,
        &spec,
        body.group.as_deref(),
    )?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reorder {
    order: Vec<String>,
}

async fn queue_reorder(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Reorder>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.queue_reorder(&id, &body.order)?))
}
