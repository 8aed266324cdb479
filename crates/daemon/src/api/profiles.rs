//! `GET /api/profiles`: the profiles of `canopy.toml` (`[profiles.NAME]`), and
//! `GET /api/profiles/{names}`: the runtime hooks an agent listing those profiles (comma
//! separated, in order) gets, phase by phase, before its own.

use super::docs::get;
use aide::axum::ApiRouter;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use canopy_model::records::config::{
    GroupHooks, PhaseCount, PhaseHooks, ProfileStack, ProfileSummary, Profiles,
};
use serde_json::json;

use super::{ApiJson, AppState};
use crate::api::error::ApiError;
use canopy_model::runtime_hooks::RuntimeHooks;

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/profiles", get(list))
        .api_route("/profiles/{names}", get(show))
}

async fn list(State(state): State<AppState>) -> ApiJson<Profiles> {
    let profiles: Vec<ProfileSummary> = state
        .reloader
        .profiles()
        .iter()
        .map(|(name, hooks)| {
            let stack = RuntimeHooks::parse(hooks, "runtime_hooks", name).unwrap_or_default();
            let phases: Vec<PhaseCount> = stack
                .phases
                .iter()
                .map(|(phase, groups)| PhaseCount {
                    phase: phase.as_str().to_string(),
                    hooks: groups.iter().map(|g| g.hooks.len()).sum::<usize>(),
                })
                .collect();
            ProfileSummary {
                name: name.clone(),
                phases,
                runtime_hooks: json!(hooks),
            }
        })
        .collect();
    ApiJson(Profiles { profiles })
}

async fn show(
    State(state): State<AppState>,
    Path(names): Path<String>,
) -> Result<ApiJson<ProfileStack>, ApiError> {
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
    let phases: Vec<PhaseHooks> = stack
        .phases
        .iter()
        .map(|(phase, groups)| PhaseHooks {
            phase: phase.as_str().to_string(),
            event: phase.event().to_string(),
            decides: phase.decides(),
            groups: groups
                .iter()
                .map(|group| GroupHooks {
                    from: group.from.clone(),
                    matcher: group.matcher_text.clone(),
                    hooks: group.hooks.clone(),
                })
                .collect(),
        })
        .collect();
    Ok(ApiJson(ProfileStack {
        profiles: names,
        phases,
    }))
}
