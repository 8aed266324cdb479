//! `GET /api/profiles`: the profiles of `canopy.toml` (`[profiles.NAME]`), and
//! `GET /api/profiles/{names}`: the runtime hooks an agent listing those profiles (comma
//! separated, in order) gets, phase by phase, before its own.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

use super::{ApiJson, AppState};
use crate::api::error::ApiError;
use canopy_model::runtime_hooks::RuntimeHooks;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/profiles", get(list))
        .route("/profiles/{names}", get(show))
}

async fn list(State(state): State<AppState>) -> ApiJson<Value> {
    let profiles: Vec<Value> = state
        .reloader
        .profiles()
        .iter()
        .map(|(name, hooks)| {
            let stack = RuntimeHooks::parse(hooks, "runtime_hooks", name).unwrap_or_default();
            let phases: Vec<Value> = stack
                .phases
                .iter()
                .map(|(phase, groups)| {
                    json!({
                        "phase": phase.as_str(),
                        "hooks": groups.iter().map(|g| g.hooks.len()).sum::<usize>(),
                    })
                })
                .collect();
            json!({ "name": name, "phases": phases, "runtime_hooks": hooks })
        })
        .collect();
    ApiJson(json!({ "profiles": profiles }))
}

async fn show(
    State(state): State<AppState>,
    Path(names): Path<String>,
) -> Result<ApiJson<Value>, ApiError> {
    let names: Vec<String> = names
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect();
    let stack = state
        .plugins
        .profile_stack(&names)
        .map_err(|err| ApiError::new(StatusCode::NOT_FOUND, "not_found", err))?;
    let phases: Vec<Value> = stack
        .phases
        .iter()
        .map(|(phase, groups)| {
            json!({
                "phase": phase.as_str(),
                "event": phase.event(),
                "decides": phase.decides(),
                "groups": groups.iter().map(|group| json!({
                    "from": group.from,
                    "matcher": group.matcher_text,
                    "hooks": group.hooks,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(ApiJson(json!({ "profiles": names, "phases": phases })))
}
