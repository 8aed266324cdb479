//! The API's one error type and its JSON body.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::engine::EngineError;
use crate::plugins::PluginError;

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with a message naming the field.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 500; the cause goes to the log, not to the client.
    pub fn internal(err: &anyhow::Error) -> Self {
        tracing::error!(err = %format!("{err:#}"), "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the daemon log",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(err: anyhow::Error) -> Self {
        Self::internal(&err)
    }
}

impl From<PluginError> for ApiError {
    fn from(err: PluginError) -> Self {
        let message = err.to_string();
        match err {
            PluginError::NotFound { .. } => Self::not_found(message),
            PluginError::UnknownMode { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "unknown_mode", message)
            }
            PluginError::Refused(_) => Self::new(StatusCode::BAD_REQUEST, "refused", message),
            PluginError::InvalidConfig(_) => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_config", message)
            }
            PluginError::Conflict(_) => Self::conflict(message),
            PluginError::Call(_) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "call_failed", message)
            }
            PluginError::Internal(err) => Self::internal(&err),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        let message = err.to_string();
        match err {
            EngineError::NotFound { .. } => Self::not_found(message),
            EngineError::Ambiguous { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "ambiguous_id", message)
            }
            EngineError::Invalid(_) => Self::bad_request(message),
            EngineError::Conflict(_) => Self::conflict(message),
            EngineError::Plugin(err) => err.into(),
            EngineError::Internal(err) => Self::internal(&err),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self::bad_request(format!("invalid JSON body: {}", rejection.body_text()))
    }
}

/// `axum::Json`, but a bad body answers with our JSON error.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Query`, but a bad query string answers with our JSON error (400) naming the
/// parameter. Query structs deny unknown fields, so a misspelt parameter is refused too.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parse_query(parts.uri.query().unwrap_or_default()).map(ApiQuery)
    }
}

/// Deserializes a query string; the error names the parameter and the value it refused.
fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let deserializer =
        serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let parameter = err.path().iter().find_map(|segment| match segment {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            _ => None,
        });
        let problem = err.into_inner().to_string();
        // An unknown, missing or repeated parameter: serde's message names it.
        let about_a_name = [
            ("unknown field ", "unknown query parameter "),
            ("missing field ", "missing query parameter "),
            ("duplicate field ", "repeated query parameter "),
        ]
        .iter()
        .find_map(|(serde, ours)| {
            problem
                .strip_prefix(serde)
                .map(|rest| format!("{ours}{rest}"))
        });
        let message = match (about_a_name, parameter) {
            (Some(message), _) => message,
            (None, Some(name)) => {
                let value = form_urlencoded::parse(query.as_bytes())
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| value.into_owned())
                    .unwrap_or_default();
                format!("query parameter `{name}`: `{value}` is not valid: {problem}")
            }
            (None, None) => format!("query string: {problem}"),
        };
        ApiError::bad_request(message)
    })
}
