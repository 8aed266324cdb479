//! The hooks API: hook-run history (`/api/hook-runs`, and one workspace's in the terms of seed
//! 004), the event taxonomy (`/api/hooks/events`), the hook catalog resolved across every source
//! (`/api/hooks/catalog`: graphs' hooks and the daemon hooks of `canopy.toml`), dry runs
//! (`/api/graphs/{name}/hooks/test`), and the firing breaker (`/api/hooks/tripped`,
//! `/api/hooks/reset`).

use canopy_model::records::hook_reports::{
    DecideReport, DecisionKind, EventInfo, HookKeyInfo, Taxonomy,
};
use canopy_model::requests::hooks::{
    CatalogQuery, DecideBody, EventsQuery, HookRunsQuery, HookTestBody, ResetBody,
    WorkspaceRunsQuery,
};
use std::time::{Duration, SystemTime};

use super::docs::{get, post};
use aide::axum::ApiRouter;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use canopy_model::records::answers::{
    HookCatalog, HookRunList, ResetHooks, SeedHookRunList, TrippedList,
};
use serde_json::Value;

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_core::engine::EngineError;
use canopy_core::hooks::catalog::{CatalogFilter, EventFilter, ModeFilter};
use canopy_core::hooks::dry_run::{DryRun, evaluate};
use canopy_core::hooks::runs::{HookRunFilter, HookRunStatus};
use canopy_model::events::{FAMILIES, Family};
use canopy_model::hook_keys::{EVENTS, HookEvent};
use canopy_model::markers::HOOK_MARKERS;
use canopy_model::records::hook_runs::{HookOutcome, HookSourceKind};

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/hook-runs", get(list_runs))
        .api_route("/workspaces/{workspace_id}/hooks/runs", get(workspace_runs))
        .api_route("/hooks/events", get(events))
        .api_route("/hooks/catalog", get(catalog))
        .api_route("/hooks/tripped", get(tripped))
        .api_route("/hooks/reset", post(reset))
        .api_route("/graphs/{name}/hooks/test", post(test))
        .api_route("/hooks/decide", post(decide))
}

/// Parses a graph-hook key (the `hooks test` body's `event`); the error lists the keys.
fn parse_event(text: &str) -> Result<HookEvent, ApiError> {
    HookEvent::parse(text).ok_or_else(|| {
        ApiError::bad_request(format!(
            "field `event`: unknown event `{text}`{}; the events are {}",
            canopy_model::text::did_you_mean(text, EVENTS.iter().map(|e| e.as_str())),
            HookEvent::names()
        ))
    })
}

/// Parses the `event` query parameter.
fn parse_event_filter(text: &str) -> Result<EventFilter, ApiError> {
    EventFilter::parse(text)
        .map_err(|err| ApiError::bad_request(format!("query parameter `event`: {err}")))
}

/// The allowed values of a parameter, for its error.
fn one_of(values: impl IntoIterator<Item = &'static str>) -> String {
    values.into_iter().collect::<Vec<_>>().join(", ")
}

/// Parses a query parameter that takes one of a state's values: `param` names it, `what` is
/// (singular, plural), and the error lists the `allowed` values.
fn parse_one_of<T: std::str::FromStr>(
    param: &str,
    what: (&str, &str),
    text: &str,
    allowed: String,
) -> Result<T, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "query parameter `{param}`: unknown {} `{text}`; the {} are {allowed}",
            what.0, what.1
        ))
    })
}

fn parse_status(text: &str) -> Result<HookRunStatus, ApiError> {
    let allowed = one_of(HookRunStatus::ALL.iter().map(|s| s.as_str()));
    parse_one_of("status", ("status", "statuses"), text, allowed)
}

fn parse_outcome(text: &str) -> Result<HookOutcome, ApiError> {
    let allowed = one_of(HookOutcome::ALL.iter().map(|o| o.as_str()));
    parse_one_of("outcome", ("outcome", "outcomes"), text, allowed)
}

fn parse_source(text: &str) -> Result<HookSourceKind, ApiError> {
    let allowed = format!(
        "{} (graph: a graph's `hooks`; config: `[[hooks]]` in canopy.toml; project: `[projects.NAME.hooks]` in canopy.toml)",
        one_of(HookSourceKind::ALL.iter().map(|s| s.as_str()))
    );
    parse_one_of("source", ("source", "sources"), text, allowed)
}

/// Parses `since`: an instant (RFC 3339) or a span back from now, which may reach back no
/// further than 1970-01-01 (the times the store can hold).
fn parse_since(text: &str) -> Result<canopy_model::time::Timestamp, ApiError> {
    canopy_model::since::instant(text, SystemTime::now()).map_err(|err| {
        ApiError::bad_request(err.message(
            "query parameter `since`",
            text,
            "an RFC 3339 time (2026-01-31T12:00:00Z) nor a duration (10m, 2h)",
        ))
    })
}

/// How many hook runs a listing returns at most: `last`, 50 by default.
fn last_of(last: Option<usize>) -> usize {
    last.unwrap_or(50).min(10_000)
}

async fn list_runs(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<HookRunsQuery>,
) -> Result<ApiJson<HookRunList>, ApiError> {
    let graph_id = match query.graph.as_deref() {
        Some(graph) => Some(state.engine.get_graph(graph).await?.graph.id),
        None => None,
    };
    let filter = HookRunFilter {
        graph_id,
        events: query
            .event
            .as_deref()
            .map(parse_event_filter)
            .transpose()?
            .map(|e| e.recorded()),
        status: query.status.as_deref().map(parse_status).transpose()?,
        outcome: query.outcome.as_deref().map(parse_outcome).transpose()?,
        source: query.source.as_deref().map(parse_source).transpose()?,
        hook: query.hook,
        since: query.since.as_deref().map(parse_since).transpose()?,
        last: last_of(query.last),
        ..HookRunFilter::default()
    };
    let found = state
        .store
        .read(move |rd| rd.hook_runs(&filter))
        .await
        .map_err(|e| ApiError::internal(&e.into()))?;
    Ok(ApiJson(HookRunList { runs: found }))
}

/// Resolves a workspace: an absolute path (a project, canonical when it exists), or a graph's
/// name, id or unique id prefix (its workdir). `None` when it is neither.
async fn resolve_workspace(state: &AppState, text: &str) -> Result<Option<String>, ApiError> {
    let text = text.trim();
    if text.starts_with('/') {
        let path = match tokio::fs::canonicalize(text).await {
            Ok(real) => real.to_string_lossy().into_owned(),
            Err(_) if text.len() > 1 => text.trim_end_matches('/').to_string(),
            Err(_) => text.to_string(),
        };
        return Ok(Some(path));
    }
    if text.is_empty() {
        return Ok(None);
    }
    match state.engine.get_graph(text).await {
        Ok(view) => Ok(Some(view.graph.workdir)),
        Err(EngineError::NotFound { .. }) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// What a workspace is, for its errors.
const WORKSPACE_IS: &str =
    "a workspace is a project's absolute path (URL-encoded in a path) or a graph's name";

/// One workspace's hook runs in the terms of the hook API (seed 004), newest first.
async fn workspace_runs(
    State(state): State<AppState>,
    Path(workspace_id): Path<String>,
    ApiQuery(query): ApiQuery<WorkspaceRunsQuery>,
) -> Result<ApiJson<SeedHookRunList>, ApiError> {
    let Some(project) = resolve_workspace(&state, &workspace_id).await? else {
        return Err(ApiError::not_found(format!(
            "no workspace `{workspace_id}`: it is neither an absolute path nor a graph; {WORKSPACE_IS}"
        )));
    };
    let filter = HookRunFilter {
        project: Some(project),
        session: query.session.filter(|s| !s.trim().is_empty()),
        events: query
            .event
            .as_deref()
            .map(parse_event_filter)
            .transpose()?
            .map(|e| e.recorded()),
        outcome: query.outcome.as_deref().map(parse_outcome).transpose()?,
        since: query.since.as_deref().map(parse_since).transpose()?,
        last: last_of(query.last),
        ..HookRunFilter::default()
    };
    let found = state
        .store
        .read(move |rd| rd.hook_runs(&filter))
        .await
        .map_err(|e| ApiError::internal(&e.into()))?;
    let runs = found.iter().map(|run| run.seed()).collect();
    Ok(ApiJson(SeedHookRunList { runs }))
}

/// The event taxonomy (every event, or one family's, or the sync-eligible ones), and the
/// graph-hook keys with the taxonomy events they fire on.
async fn events(ApiQuery(query): ApiQuery<EventsQuery>) -> Result<ApiJson<Taxonomy>, ApiError> {
    let family = query
        .family
        .as_deref()
        .map(|text| {
            Family::parse(text).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "query parameter `family`: unknown family `{text}`{}; the families are {}",
                    canopy_model::text::did_you_mean(text, FAMILIES.iter().map(|f| f.as_str())),
                    Family::names()
                ))
            })
        })
        .transpose()?;
    let wanted = |def: &canopy_model::events::EventDef| {
        family.is_none_or(|f| f == def.family) && (!query.sync_only || def.sync_eligible)
    };
    let strings = |list: &[&str]| list.iter().map(|m| m.to_string()).collect::<Vec<_>>();
    let events: Vec<EventInfo> = canopy_model::events::all()
        .filter(|def| wanted(def))
        .map(|def| EventInfo {
            event: def.name.to_string(),
            family: def.family,
            description: def.description.to_string(),
            markers: strings(def.markers),
            sync_eligible: def.sync_eligible,
            payload_schema: (def.payload_schema)().into(),
            patch_schema: def.patch_schema.map(|schema| schema().into()),
        })
        .collect();
    // Graph hooks are async: none is listed for sync_only.
    let graph_hooks: Vec<HookKeyInfo> = EVENTS
        .iter()
        .filter(|key| {
            !query.sync_only
                && canopy_model::events::find(key.taxonomy_event())
                    .is_some_and(|def| family.is_none_or(|f| f == def.family))
        })
        .map(|key| HookKeyInfo {
            event: key.as_str().to_string(),
            taxonomy_event: key.taxonomy_event().to_string(),
            description: key.description().to_string(),
            markers: ["graph_name", "workdir"]
                .into_iter()
                .chain(key.markers().iter().copied())
                .map(str::to_string)
                .collect(),
            spec_ids: Some(key.takes_spec_ids()),
        })
        .collect();
    // The keys of `[projects.NAME.hooks]`, with the taxonomy events they fire on.
    let project_hooks: Vec<HookKeyInfo> = canopy_core::projects::EVENTS
        .iter()
        .filter(|key| !query.sync_only && family.is_none_or(|f| f == key.def().family))
        .map(|key| HookKeyInfo {
            event: key.as_str().to_string(),
            taxonomy_event: key.taxonomy_event().to_string(),
            description: key.def().description.to_string(),
            markers: strings(key.def().markers),
            spec_ids: None,
        })
        .collect();
    Ok(ApiJson(Taxonomy {
        events,
        envelope_markers: strings(canopy_model::events::ENVELOPE_MARKERS),
        graph_hooks,
        project_hooks,
        markers: strings(HOOK_MARKERS),
        unset_marker_value: canopy_model::markers::NONE.to_string(),
    }))
}

/// Parses the `mode` query parameter.
fn parse_mode_filter(text: &str) -> Result<ModeFilter, ApiError> {
    ModeFilter::parse(text)
        .map_err(|err| ApiError::bad_request(format!("query parameter `mode`: {err}")))
}

/// Every configured hook, resolved across its sources: each graph's hooks (or one graph's),
/// in firing order per key, then the daemon hooks of `canopy.toml` in force, in their order,
/// then the projects' hooks; each with the executor that would run it now.
/// The hooks their firing breaker has tripped (see [`canopy_core::hooks::breaker`]).
async fn tripped(State(state): State<AppState>) -> ApiJson<TrippedList> {
    ApiJson(TrippedList {
        tripped: state.bus.tripped_hooks(),
    })
}

/// Puts a tripped hook back: its next firing runs.
async fn reset(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ResetBody>,
) -> Result<ApiJson<ResetHooks>, ApiError> {
    let reset = state.bus.reset_hook(&body.name);
    if reset.is_empty() {
        let tripped: Vec<String> = state
            .bus
            .tripped_hooks()
            .into_iter()
            .map(|t| t.hook_name)
            .collect();
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "field `name`: hook `{}` is not tripped; {}",
                body.name,
                if tripped.is_empty() {
                    "no hook is".to_string()
                } else {
                    format!("tripped now: {}", tripped.join(", "))
                }
            ),
        ));
    }
    Ok(ApiJson(ResetHooks { reset }))
}

async fn catalog(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<CatalogQuery>,
) -> Result<ApiJson<HookCatalog>, ApiError> {
    let event = query.event.as_deref().map(parse_event_filter).transpose()?;
    let source = query.source.as_deref().map(parse_source).transpose()?;
    let mode = query.mode.as_deref().map(parse_mode_filter).transpose()?;
    let workspace = match query.workspace.as_deref() {
        Some(text) => Some(resolve_workspace(&state, text).await?.ok_or_else(|| {
            ApiError::bad_request(format!(
                "query parameter `workspace`: `{text}` is neither an absolute path nor a graph; {WORKSPACE_IS}"
            ))
        })?),
        None => None,
    };
    let graphs = match &query.graph {
        Some(name) => vec![state.engine.get_graph(name).await?.graph],
        None => state
            .engine
            .list_graphs()
            .await?
            .into_iter()
            .map(|view| view.graph)
            .collect(),
    };
    let filter = CatalogFilter {
        event: event.as_ref(),
        mode: mode.as_ref(),
        workspace: workspace.as_deref(),
        graphs: &graphs,
        graph_named: query.graph.is_some(),
        plugins: &state.plugins,
        bus: &state.bus,
    };
    let hooks = state.bus.catalog(source, &filter);
    Ok(ApiJson(HookCatalog { hooks }))
}

/// `POST /api/hooks/decide`: asks the sync hooks of an event about an input, for real (their
/// executors run) but recording nothing, and answers with the decision, the patched input and
/// each hook's answer: what the action would get.
async fn decide(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<DecideBody>,
) -> Result<ApiJson<DecideReport>, ApiError> {
    let sync_events = || {
        canopy_model::events::all()
            .filter(|def| def.sync_eligible)
            .map(|def| def.name)
    };
    let Some(def) = canopy_model::events::find(&body.event).filter(|def| def.sync_eligible) else {
        return Err(ApiError::bad_request(format!(
            "field `event`: `{}` is not asked of sync hooks{}; the events that are: {}",
            body.event,
            canopy_model::text::did_you_mean(&body.event, sync_events()),
            one_of(sync_events())
        )));
    };
    let mut input = body.input;
    let mut question_graph = None;
    if let Some(name) = &body.graph {
        let name = name.clone();
        let graph = state
            .store
            .read(move |rd| {
                let id = rd.resolve_graph(&name)?;
                rd.graph_shallow(&id)
            })
            .await
            .map_err(|err| ApiError::from(EngineError::from(err)))?;
        for (field, value) in [
            ("graph_id", &graph.id),
            ("graph_name", &graph.name),
            ("workdir", &graph.workdir),
        ] {
            input
                .entry(field.to_string())
                .or_insert_with(|| Value::String(value.clone()));
        }
        question_graph = Some(canopy_core::hooks::decide::GraphScope {
            graph_id: graph.id.clone(),
            graph_name: graph.name.clone(),
            run_id: None,
            workdir: graph.workdir.clone(),
            hooks: std::sync::Arc::new(graph.hooks.clone()),
        });
    }
    let question = canopy_core::hooks::decide::Question {
        def,
        project: input
            .get("workdir")
            .and_then(Value::as_str)
            .map(str::to_string),
        input: Value::Object(input),
        graph: question_graph,
        cause: canopy_model::events::Cause::current(),
        spec_id: None,
        launch: None,
    };
    let decision = state.bus.decide_unrecorded(question).await;
    let answers = decision
        .record
        .as_ref()
        .map(canopy_core::hooks::decide::DecisionRecord::answers)
        .unwrap_or_default();
    let (verdict, hook, reason) = match &decision.verdict {
        canopy_core::hooks::decide::Verdict::Allow => (DecisionKind::Allow, None, None),
        canopy_core::hooks::decide::Verdict::Deny { hook, reason } => {
            (DecisionKind::Deny, Some(hook.clone()), Some(reason.clone()))
        }
    };
    Ok(ApiJson(DecideReport {
        event: def.name.to_string(),
        decision: verdict,
        hook,
        reason,
        patched: decision.patched(),
        input: decision.input,
        hooks: answers,
    }))
}

/// How long `execute` waits for the test runs to finish.
const EXECUTE_WAIT: Duration = Duration::from_secs(600);

async fn test(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<HookTestBody>,
) -> Result<ApiJson<DryRun>, ApiError> {
    let event = parse_event(&body.event)?;
    let (graph, run, engine_event) = state
        .engine
        .event_from_history(&name, event, body.run.as_deref(), body.spec.as_deref())
        .await?;
    let count = canopy_core::hooks::config::hooks_of(&graph.hooks, event).len();
    if let Some(index) = body.index
        && index >= count
    {
        return Err(ApiError::bad_request(format!(
            "field `index`: {} has {count} hook(s) on {}",
            graph.name,
            event.as_str()
        )));
    }
    let firing = engine_event.as_ref().and_then(|e| e.firing.clone());
    let event_note = match (&engine_event, &firing) {
        (None, _) => Some(format!(
            "run {} has no spec for {} to be about",
            &run.id[..12],
            event.as_str()
        )),
        (Some(_), None) => {
            Some("on_completed fires only for a run that completed at least one spec".to_string())
        }
        _ => None,
    };
    let hooks = evaluate(
        &state.plugins,
        &graph.hooks,
        event,
        firing.as_ref(),
        body.index,
    )
    .await;
    let mut runs_recorded = Vec::new();
    if body.execute
        && let Some(firing) = &firing
    {
        let ids = state
            .bus
            .fire_test(firing.clone(), body.index, run.cause().depth)
            .await
            .map_err(|e| ApiError::internal(&e.into()))?;
        let deadline = tokio::time::Instant::now() + EXECUTE_WAIT;
        loop {
            let wanted = ids.clone();
            let mine = state
                .store
                .read(move |rd| rd.hook_runs_by_id(&wanted))
                .await
                .map_err(|e| ApiError::internal(&e.into()))?;
            if mine.iter().all(|r| r.status.is_finished()) || tokio::time::Instant::now() > deadline
            {
                runs_recorded = mine;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(ApiJson(DryRun {
        graph: graph.name,
        run_id: run.id,
        event,
        markers: firing.map(|f| f.markers).unwrap_or_default(),
        event_note,
        hooks,
        runs: runs_recorded,
    }))
}
