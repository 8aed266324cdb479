//! The API's one error type and its JSON body.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

use canopy_core::engine::EngineError;
use canopy_executors::plugins::PluginError;
use canopy_model::records::answers::{ErrorBody, ErrorInfo};

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// With `stale_version`: the graph's version now.
    pub current_version: Option<i64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            current_version: None,
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
        let body = ErrorBody {
            error: ErrorInfo {
                code: self.code.to_string(),
                message: self.message,
                current_version: self.current_version,
            },
        };
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
            PluginError::Disabled { .. } => {
                Self::new(StatusCode::CONFLICT, "plugin_disabled", message)
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
            EngineError::Stale { current, .. } => Self {
                current_version: Some(current),
                ..Self::new(StatusCode::PRECONDITION_FAILED, "stale_version", message)
            },
            EngineError::Plugin(err) => err.into(),
            EngineError::Internal(err) => Self::internal(&err),
        }
    }
}

impl From<canopy_store::StoreError> for ApiError {
    fn from(err: canopy_store::StoreError) -> Self {
        EngineError::from(err).into()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        // A syntax error: serde_json's own message (what it expected, where), without axum's
        // wrapping.
        let mut cause: &dyn std::error::Error = &rejection;
        while let Some(source) = cause.source() {
            cause = source;
        }
        match &rejection {
            JsonRejection::JsonSyntaxError(_) | JsonRejection::JsonDataError(_) => {
                Self::bad_request(format!("the request body is not valid JSON: {cause}"))
            }
            _ if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => too_large(),
            _ => Self::bad_request(format!("invalid JSON body: {}", rejection.body_text())),
        }
    }
}

/// The largest JSON body a request may send (axum's default body limit).
pub const MAX_JSON_BODY: usize = 2 * 1024 * 1024;

/// 413 for a body over its limit.
fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!(
            "the request body is larger than the API takes ({} MiB for JSON; a plugin component may be larger)",
            MAX_JSON_BODY / (1024 * 1024)
        ),
    )
}

/// Makes every error answer the API's JSON shape (`{"error": {"code", "message"}}`), also those
/// axum writes itself in plain text: a path that does not decode (`/api/specs/%ff`), a body
/// over its limit. The text becomes the message.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, 64 * 1024).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let error = match status {
        StatusCode::PAYLOAD_TOO_LARGE => too_large(),
        StatusCode::BAD_REQUEST => ApiError::bad_request(if text.is_empty() {
            "bad request".to_string()
        } else {
            text
        }),
        _ => ApiError::new(
            status,
            "error",
            if text.is_empty() {
                status.canonical_reason().unwrap_or("error").to_string()
            } else {
                text
            },
        ),
    };
    let mut answer = error.into_response();
    // Keep what the answer said besides (WWW-Authenticate on a 401, say).
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

/// `axum::Json`, but a bad body answers with our JSON error (400), which names the field it is
/// about in the body's own terms: `field `nodes[0].name` must be a string, got an integer`,
/// `unknown field `nodse`; did you mean `nodes`?`, never serde's wording about target types.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(value) = axum::Json::<Value>::from_request(request, state).await?;
        parse_body(value).map(ApiJson)
    }
}

/// Deserializes a JSON body; the error names the field and says what it must be.
pub(super) fn parse_body<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let problem = err.into_inner().to_string();
        ApiError::bad_request(body_problem(&path, &problem))
    })
}

/// Words serde's message about the body at `path` (`.` for the whole body) for a person.
fn body_problem(path: &str, problem: &str) -> String {
    let field = |name: &str| {
        if path == "." {
            format!("`{name}`")
        } else {
            format!("`{path}.{name}`")
        }
    };
    if let Some(rest) = problem.strip_prefix("unknown field `") {
        let (name, known) = rest.split_once('`').unwrap_or((rest, ""));
        // The path ends at the unknown key itself: say which object it is in.
        let parent = path
            .strip_suffix(name)
            .map(|p| p.trim_end_matches('.'))
            .filter(|p| !p.is_empty())
            .unwrap_or(".");
        let inside = if parent == "." {
            String::new()
        } else {
            format!(" in field `{parent}`")
        };
        let known: Vec<&str> = known
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|k| !k.is_empty())
            .collect();
        let hint = canopy_model::text::did_you_mean(name, known.iter().copied());
        let list = if known.is_empty() {
            String::new()
        } else {
            format!(" (the fields are {})", known.join(", "))
        };
        return format!("unknown field `{name}`{inside}{hint}{list}");
    }
    if let Some(rest) = problem.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        return format!("field {} is required", field(name));
    }
    if let Some(rest) = problem.strip_prefix("duplicate field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        return format!("field {} is given twice", field(name));
    }
    let at = if path == "." {
        "the body".to_string()
    } else {
        format!("field `{path}`")
    };
    for kind in ["invalid type: ", "invalid value: ", "invalid length "] {
        if let Some(rest) = problem.strip_prefix(kind)
            && let Some((got, expected)) = rest.rsplit_once(", expected ")
        {
            return format!("{at} must be {expected}, got {got}");
        }
    }
    format!("{at}: {problem}")
}

/// [`ApiJson`] for a body that may be left out: an empty body is `None`.
#[derive(Debug)]
pub struct OptionalJson<T>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection| match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => too_large(),
                _ => ApiError::bad_request(rejection.body_text()),
            })?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(None));
        }
        let value: Value = serde_json::from_slice(&body).map_err(|err| {
            ApiError::bad_request(format!("the request body is not valid JSON: {err}"))
        })?;
        parse_body(value).map(|body| Self(Some(body)))
    }
}

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

#[cfg(test)]
mod tests {
    use super::body_problem;

    #[test]
    fn body_errors_name_the_field_in_the_bodys_terms() {
        assert_eq!(
            body_problem(
                "nodse",
                "unknown field `nodse`, expected one of `name`, `workdir`, `nodes`"
            ),
            "unknown field `nodse`; did you mean `nodes`? (the fields are name, workdir, nodes)"
        );
        assert_eq!(
            body_problem(
                "config.comand",
                "unknown field `comand`, expected `command`"
            ),
            "unknown field `comand` in field `config`; did you mean `command`? (the fields are command)"
        );
        assert_eq!(
            body_problem(".", "missing field `action`"),
            "field `action` is required"
        );
        assert_eq!(
            body_problem(
                "allow_dirty_start",
                "invalid type: string \"yes\", expected a boolean"
            ),
            "field `allow_dirty_start` must be a boolean, got string \"yes\""
        );
        assert_eq!(
            body_problem("specs[1]", "invalid type: integer `3`, expected a string"),
            "field `specs[1]` must be a string, got integer `3`"
        );
    }
}
