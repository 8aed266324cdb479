//! `/api/hook-runs`, `/api/hooks/events`, `/api/graphs/{name}/hooks/test`: hook-run history, the
//! event taxonomy, and dry runs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson, ApiQuery, AppState};
use crate::hooks::dry_run::{DryRun, evaluate};
use crate::hooks::runs::{HookRunFilter, HookRunStatus};
use crate::hooks::{EVENTS, HookEvent};
use crate::markers::HOOK_MARKERS;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/hook-runs", get(list_runs))
        .route("/hooks/events", get(events))
        .route("/hooks/catalog", get(catalog))
        .route("/graphs/{name}/hooks/test", post(test))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    #[serde(default)]
    graph: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    status: Option<String>,
    /// RFC 3339 instant, or a duration back from now (`10m`, `2h`).
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    last: Option<usize>,
}

/// Parses an event name; the error lists the events.
fn parse_event(text: &str) -> Result<HookEvent, ApiError> {
    HookEvent::parse(text).ok_or_else(|| {
        ApiError::bad_request(format!(
            "field `event`: unknown event `{text}`{}; the events are {}",
            crate::text::did_you_mean(text, EVENTS.iter().map(|e| e.as_str())),
            HookEvent::names()
        ))
    })
}

/// Parses `since`: an instant (RFC 3339) or a span back from now, which may reach back no
/// further than 1970-01-01 (the times the store can hold).
fn parse_since(text: &str) -> Result<String, ApiError> {
    let now = SystemTime::now();
    let instant = match humantime::parse_rfc3339_weak(text) {
        Ok(instant) => instant,
        Err(_) => {
            let span = humantime::parse_duration(text).map_err(|_| {
                ApiError::bad_request(format!(
                    "query parameter `since`: `{text}` is neither an RFC 3339 time (2026-01-31T12:00:00Z) nor a duration (10m, 2h)"
                ))
            })?;
            now.checked_sub(span)
                .ok_or_else(|| since_out_of_range(text, now))?
        }
    };
    if instant < UNIX_EPOCH {
        return Err(since_out_of_range(text, now));
    }
    Ok(humantime::format_rfc3339_micros(instant).to_string())
}

fn since_out_of_range(text: &str, now: SystemTime) -> ApiError {
    // humantime's year is 365.25 days.
    let years = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() / 31_557_600);
    ApiError::bad_request(format!(
        "query parameter `since`: `{text}` reaches back before 1970-01-01T00:00:00Z; give a duration of at most {years}y or a time from 1970 on"
    ))
}

async fn list_runs(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let graph_id = match query.graph.as_deref() {
        Some(graph) => Some(state.engine.get_graph(graph).await?.graph.id),
        None => None,
    };
    let event = query.event.as_deref().map(parse_event).transpose()?;
    let status = query
        .status
        .as_deref()
        .map(|text| {
            text.parse::<HookRunStatus>().map_err(|_| {
                ApiError::bad_request(format!(
                    "field `status`: unknown status `{text}`; statuses: {}",
                    HookRunStatus::ALL
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        })
        .transpose()?;
    let since = query.since.as_deref().map(parse_since).transpose()?;
    let filter = HookRunFilter {
        graph_id,
        run_id: None,
        event: event.map(|e| e.as_str().to_string()),
        status,
        source: None,
        hook: None,
        project: None,
        since,
        last: query.last.unwrap_or(50).clamp(1, 10_000),
    };
    let found = state
        .store
        .read(move |rd| rd.hook_runs(&filter))
        .await
        .map_err(|e| ApiError::internal(&e.into()))?;
    Ok(ApiJson(json!({ "runs": found })))
}

async fn events() -> ApiJson<Value> {
    let events: Vec<Value> = EVENTS
        .iter()
        .map(|event| {
            let markers: Vec<&str> = ["graph_name", "workdir"]
                .into_iter()
                .chain(event.markers().iter().copied())
                .collect();
            json!({
                "event": event.as_str(),
                "description": event.description(),
                "markers": markers,
                "spec_ids": event.takes_spec_ids(),
            })
        })
        .collect();
    ApiJson(
        json!({ "events": events, "markers": HOOK_MARKERS, "unset_marker_value": crate::markers::NONE }),
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogQuery {
    #[serde(default)]
    graph: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    mode: Option<String>,
}

/// Every configured hook across graphs (or one graph), in firing order per event, with the
/// executor that would run it now.
async fn catalog(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<CatalogQuery>,
) -> Result<ApiJson<Value>, ApiError> {
    let event = query.event.as_deref().map(parse_event).transpose()?;
    let graphs = match &query.graph {
        Some(name) => vec![state.engine.get_graph(name).await?],
        None => state.engine.list_graphs().await?,
    };
    let mut hooks = Vec::new();
    for view in graphs {
        for candidate in EVENTS {
            if event.is_some_and(|e| e != candidate) {
                continue;
            }
            for (index, hook) in crate::hooks::config::hooks_of(&view.graph.hooks, candidate)
                .into_iter()
                .enumerate()
            {
                let mode = crate::plugins::split_work_config(&hook)
                    .ok()
                    .map(|w| w.mode);
                if query.mode.is_some() && query.mode != mode {
                    continue;
                }
                let executor = mode
                    .as_deref()
                    .and_then(|m| state.plugins.plugin_ref(m).ok());
                hooks.push(json!({
                    "graph": view.graph.name,
                    "graph_id": view.graph.id,
                    "event": candidate.as_str(),
                    "index": index,
                    "mode": mode,
                    "executor": executor,
                    "spec_ids": hook.get("spec_ids"),
                    "config": hook,
                }));
            }
        }
    }
    Ok(ApiJson(json!({ "hooks": hooks })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestBody {
    event: String,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    spec: Option<String>,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    execute: bool,
}

/// How long `execute` waits for the test runs to finish.
const EXECUTE_WAIT: Duration = Duration::from_secs(600);

async fn test(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<TestBody>,
) -> Result<ApiJson<DryRun>, ApiError> {
    let event = parse_event(&body.event)?;
    let (graph, run, engine_event) = state
        .engine
        .event_from_history(&name, event, body.run.as_deref(), body.spec.as_deref())
        .await?;
    let count = crate::hooks::config::hooks_of(&graph.hooks, event).len();
    if let Some(index) = body.index
        && index >= count
    {
        return Err(ApiError::bad_request(format!(
            "field `index`: {} has {count} hook(s) on {}",
            graph.name,
            event.as_str()
        )));
    }
    let firing = engine_event.as_ref().and_then(crate::hooks::Firing::of);
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
            .fire_test(firing.clone(), body.index)
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
