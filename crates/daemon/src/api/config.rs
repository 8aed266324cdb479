//! `/api/config/reload` and `/api/config/validate`: putting an edited `canopy.toml` in force
//! without a restart, and checking one first.

use super::docs::post;
use aide::axum::ApiRouter;
use axum::extract::State;
use axum::http::StatusCode;
use canopy_model::records::config::{ConfigCheck, Reloaded};
use canopy_model::requests::daemon::ValidateBody;

use super::{ApiError, ApiJson, AppState};

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/config/reload", post(reload))
        .api_route("/config/validate", post(validate))
}

/// Every problem of a file, one per line, after a first line saying what happened.
fn problems_message(first: &str, problems: &[String]) -> String {
    let mut message = first.to_string();
    for problem in problems {
        message.push_str("\n  ");
        message.push_str(problem);
    }
    message
}

async fn reload(State(state): State<AppState>) -> Result<ApiJson<Reloaded>, ApiError> {
    match state.reloader.reload().await {
        Ok(report) => Ok(ApiJson(Reloaded {
            reloaded: true,
            report,
        })),
        Err(problems) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_config",
            problems_message(
                &format!(
                    "{} does not validate; nothing changed, the configuration in force stays:",
                    state.reloader.path().display()
                ),
                &problems,
            ),
        )),
    }
}

/// Checks a configuration text as a reload would, changing nothing: `{"valid", "problems"}`.
async fn validate(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ValidateBody>,
) -> ApiJson<ConfigCheck> {
    match state.reloader.check(&body.text).await {
        Ok((_, hooks)) => ApiJson(ConfigCheck {
            valid: true,
            problems: Vec::new(),
            hooks: Some(hooks.hooks.len()),
            node: Some(hooks.identity.node.clone()),
        }),
        Err(problems) => ApiJson(ConfigCheck {
            valid: false,
            problems,
            hooks: None,
            node: None,
        }),
    }
}
