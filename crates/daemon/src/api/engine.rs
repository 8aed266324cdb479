//! `/api/specs`, `/api/graphs`, `/api/runs`, `/api/queues`: the engine's resources.

use aide::axum::ApiRouter;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header;
use canopy_model::requests::graphs::{GraphQuery, NodeRunsQuery, RunListQuery, RunQuery};
use canopy_model::requests::queues::{AddSpec, Reorder, SetGroup};
use canopy_model::requests::specs::SpecQuery;

use super::docs::{Created, Tagged, delete, get, patch, post, put};
use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_core::engine::{
    ControlRequest, GraphInput, GraphView, NewQueue, NewSpec, NodeRun, Queue, Spec, SpecPatch,
    ViewPage,
};
use canopy_model::records::answers::{
    DeletedGraph, GraphAnswer, GraphList, NodeRunList, QueueList, RunList, SpecList,
};
use canopy_model::records::views::{NamedRun, RunDetail};

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/specs", get(list_specs))
        .api_route("/specs", post(create_spec))
        .api_route("/specs/{id}", get(get_spec))
        .api_route("/specs/{id}", patch(update_spec))
        .api_route("/specs/{id}", delete(delete_spec))
        .api_route("/graphs", get(list_graphs))
        .api_route("/graphs", post(create_graph))
        .api_route("/graphs/{name}", get(get_graph))
        .api_route("/graphs/{name}", patch(update_graph))
        .api_route("/graphs/{name}", delete(delete_graph))
        .api_route("/graphs/{name}/control", post(control))
        .api_route("/graphs/{name}/node-runs", get(graph_node_runs))
        .api_route("/runs", get(list_runs))
        .api_route("/runs/{id}", get(get_run))
        .api_route("/node-runs/{id}", get(get_node_run))
        .api_route("/queues", get(list_queues))
        .api_route("/queues", post(create_queue))
        .api_route("/queues/{id}", get(get_queue))
        .api_route("/queues/{id}", delete(delete_queue))
        .api_route("/queues/{id}/specs", post(queue_add))
        .api_route("/queues/{id}/specs/{spec}", delete(queue_remove))
        .api_route("/queues/{id}/specs/{spec}/group", put(queue_group))
        .api_route("/queues/{id}/order", put(queue_reorder))
}

// ----- specs -----

async fn list_specs(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SpecQuery>,
) -> Result<ApiJson<SpecList>, ApiError> {
    let specs = state.engine.list_specs(query.workdir.as_deref()).await?;
    Ok(ApiJson(SpecList { specs }))
}

async fn create_spec(
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewSpec>,
) -> Result<Created<Spec>, ApiError> {
    Ok(Created(state.engine.create_spec(new).await?))
}

async fn get_spec(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Spec>, ApiError> {
    Ok(ApiJson(state.engine.get_spec(&id).await?))
}

async fn update_spec(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(patch): ApiJson<SpecPatch>,
) -> Result<ApiJson<Spec>, ApiError> {
    Ok(ApiJson(state.engine.update_spec(&id, patch).await?))
}

async fn delete_spec(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Spec>, ApiError> {
    Ok(ApiJson(state.engine.delete_spec(&id).await?))
}

// ----- graphs -----

async fn list_graphs(State(state): State<AppState>) -> Result<ApiJson<GraphList>, ApiError> {
    Ok(ApiJson(GraphList {
        graphs: state.engine.list_graphs().await?,
    }))
}

/// Creates a graph; the answer is `graph get` with `warnings` (a workdir that is not a git
/// repository, which the dirty-tree guard cannot check).
async fn create_graph(
    State(state): State<AppState>,
    ApiJson(input): ApiJson<GraphInput>,
) -> Result<Created<GraphAnswer>, ApiError> {
    let view = state.engine.create_graph(input).await?;
    Ok(Created(with_warnings(view).await))
}

/// The view as JSON, with `warnings` about its workdir: empty, or a line saying it is not a git
/// repository, so the dirty-tree guard does not apply.
async fn with_warnings(view: GraphView) -> GraphAnswer {
    let workdir = view.graph.workdir.clone();
    let mut warnings = Vec::new();
    if let canopy_core::engine::git::TreeState::NotARepo(why) =
        canopy_core::engine::git::tree_state(std::path::Path::new(&workdir)).await
    {
        let why = why.lines().next().unwrap_or_default().to_string();
        warnings.push(format!(
            "workdir {workdir} is not a git repository ({why}): the dirty-tree guard cannot check it, so runs start on whatever is there; make it one (`git init`) to guard it"
        ));
    }
    GraphAnswer {
        view,
        warnings: Some(warnings),
    }
}

/// The version an `If-Match` header names: `"7"`, `7` or `W/"7"`; `*` names none.
fn if_match(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(None);
    }
    let bare = text.trim_start_matches("W/").trim_matches('"');
    bare.parse::<i64>().map(Some).map_err(|_| {
        ApiError::bad_request(format!(
            "header `If-Match` must name a graph version as `graph get` gives it in `ETag` (e.g. \"3\"), got `{text}`"
        ))
    })
}

async fn get_graph(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<GraphQuery>,
) -> Result<Tagged<GraphView>, ApiError> {
    let defaults = ViewPage::default();
    let page = ViewPage {
        offset: query.offset.unwrap_or(defaults.offset),
        limit: query.limit.unwrap_or(defaults.limit),
    }
    .checked()?;
    let view = state.engine.get_graph_page(&name, page).await?;
    Ok(Tagged {
        version: view.graph.version,
        body: view,
    })
}

/// Updates a graph; the answer is `graph get`, with `warnings` when the edit set a workdir that
/// is not a git repository. `If-Match` (or `version` in the body) makes it conditional: 412
/// with the current version when the graph was edited since.
async fn update_graph(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    ApiJson(input): ApiJson<GraphInput>,
) -> Result<Tagged<GraphAnswer>, ApiError> {
    let workdir_set = input.workdir.is_some();
    let view = state
        .engine
        .update_graph(&name, input, if_match(&headers)?)
        .await?;
    let version = view.graph.version;
    let body = if workdir_set {
        with_warnings(view).await
    } else {
        GraphAnswer {
            view,
            warnings: None,
        }
    };
    Ok(Tagged { version, body })
}

async fn delete_graph(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<DeletedGraph>, ApiError> {
    let graph = state.engine.delete_graph(&name).await?;
    Ok(ApiJson(DeletedGraph {
        deleted: graph.name,
        id: graph.id,
    }))
}

async fn control(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<ControlRequest>,
) -> Result<ApiJson<GraphView>, ApiError> {
    // A planned stop has closed admission: a run or continue would start nothing (a reset or
    // a cancel only stops work).
    if state.drain.is_closed() && !matches!(request.action.as_str(), "reset" | "cancel") {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "stopping",
            format!(
                "the daemon is stopping (a planned stop is draining); `{}` starts nothing now: run it again once the daemon is back",
                request.action
            ),
        ));
    }
    Ok(ApiJson(state.engine.control(&name, request).await?))
}

async fn graph_node_runs(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<NodeRunsQuery>,
) -> Result<ApiJson<NodeRunList>, ApiError> {
    let node_runs = state
        .engine
        .graph_node_runs(&name, query.last.unwrap_or(50).min(10_000))
        .await?;
    Ok(ApiJson(NodeRunList { node_runs }))
}

// ----- runs -----

/// Each run with its graph's name (`graph_name`; null when the graph is gone).
async fn list_runs(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<RunListQuery>,
) -> Result<ApiJson<RunList>, ApiError> {
    let runs = state
        .engine
        .list_runs(query.graph.as_deref(), query.last.unwrap_or(50).min(10_000))
        .await?;
    let names = graph_names(&state).await?;
    let runs: Vec<NamedRun> = runs
        .into_iter()
        .map(|run| NamedRun {
            graph_name: names.get(&run.graph_id).cloned(),
            run,
        })
        .collect();
    Ok(ApiJson(RunList { runs }))
}

/// Graph id -> name.
async fn graph_names(
    state: &AppState,
) -> Result<std::collections::HashMap<String, String>, ApiError> {
    Ok(state.store.read(|rd| rd.graph_names()).await?)
}

/// A run with its specs, node runs, hook runs (newest first), its graph's name, and
/// `in_flight`: true while the engine still works on it (once false, every hook it fired is in
/// `hook_runs`).
async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<RunQuery>,
) -> Result<ApiJson<RunDetail>, ApiError> {
    let (mut view, in_flight) = state.engine.get_run_in_flight(&id).await?;
    let filter = canopy_core::hooks::runs::HookRunFilter {
        run_id: Some(view.run.id.clone()),
        last: 10_000,
        ..Default::default()
    };
    let mut hook_runs = state.store.read(move |rd| rd.hook_runs(&filter)).await?;
    if query.brief {
        for node_run in &mut view.node_runs {
            node_run.detail = None;
        }
        for hook_run in &mut hook_runs {
            hook_run.output = None;
        }
    }
    let graph_name = graph_names(&state).await?.remove(&view.run.graph_id);
    Ok(ApiJson(RunDetail {
        view,
        graph_name,
        hook_runs,
        in_flight,
    }))
}

/// One node run (id or unique prefix) with its stored output in `detail`.
async fn get_node_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<NodeRun>, ApiError> {
    Ok(ApiJson(state.engine.get_node_run(&id).await?))
}

// ----- queues -----

async fn list_queues(State(state): State<AppState>) -> Result<ApiJson<QueueList>, ApiError> {
    Ok(ApiJson(QueueList {
        queues: state.engine.list_queues().await?,
    }))
}

async fn create_queue(
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewQueue>,
) -> Result<Created<Queue>, ApiError> {
    Ok(Created(state.engine.create_queue(new).await?))
}

async fn get_queue(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.get_queue(&id).await?))
}

async fn delete_queue(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.delete_queue(&id).await?))
}

async fn queue_add(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AddSpec>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(
        state
            .engine
            .queue_add(&id, &body.spec, body.group.as_deref())
            .await?,
    ))
}

async fn queue_remove(
    State(state): State<AppState>,
    Path((id, spec)): Path<(String, String)>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.queue_remove(&id, &spec).await?))
}

async fn queue_group(
    State(state): State<AppState>,
    Path((id, spec)): Path<(String, String)>,
    ApiJson(body): ApiJson<SetGroup>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(
        state
            .engine
            .queue_set_group(&id, &spec, body.group.as_deref())
            .await?,
    ))
}

async fn queue_reorder(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Reorder>,
) -> Result<ApiJson<Queue>, ApiError> {
    Ok(ApiJson(state.engine.queue_reorder(&id, &body.order).await?))
}
