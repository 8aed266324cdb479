//! The API's front door, in front of every route (and the 404/405 fallbacks).
//!
//! The API listens on loopback, but loopback is not private: any web page the user opens can send
//! requests to it (a `text/plain` POST goes cross-origin without a preflight), and a DNS-rebinding
//! page can even read the answers. So every request must
//! 1. be addressed to this daemon: `Host` is `127.0.0.1:PORT`, `localhost:PORT` or `[::1]:PORT`
//!    (else 403 `forbidden_host`);
//! 2. come from no web page but this daemon's own origin: an `Origin` header, when there is one,
//!    is `http://` + one of those (else 403 `forbidden_origin`);
//! 3. carry the daemon's token, `Authorization: Bearer <token>`, read from `daemon.token` in the
//!    data dir (0600, kept across restarts, replaced by `canopy daemon rotate-token`), or the
//!    token of a call running now (a hook's, a
//!    cron's, a node's process finds it in `CANOPY_CALL_TOKEN`); else 401 `unauthorized`;
//! 4. send a body, if it has one, as `application/json`, or `application/wasm` for the component
//!    of a plugin install (else 415 `unsupported_media_type`).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq as _;

use super::ApiError;
use canopy_executors::plugins::credentials::{CallCredentials, Presented};
use canopy_model::events::{Actor, Cause};

/// Who may use the API: requests to this port carrying the daemon's token, or a live call's.
pub struct Access {
    port: u16,
    token: Arc<ApiToken>,
    calls: CallCredentials,
}

/// The daemon's API token and its file; [`ApiToken::rotate`] replaces both at once.
pub struct ApiToken {
    current: std::sync::RwLock<String>,
    file: PathBuf,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("current", &"<redacted>")
            .field("file", &self.file)
            .finish()
    }
}

impl ApiToken {
    /// `token`, as written to `file`.
    pub fn new(token: String, file: PathBuf) -> Self {
        canopy_executors::secrets::register(&token);
        Self {
            current: std::sync::RwLock::new(token),
            file,
        }
    }

    /// The file the token is in.
    pub fn file(&self) -> &std::path::Path {
        &self.file
    }

    /// Whether `presented` is the token, compared in constant time.
    fn matches(&self, presented: &str) -> bool {
        let current = self
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        bool::from(presented.as_bytes().ct_eq(current.as_bytes()))
    }

    /// Writes a new token to the file and uses it from now on: the old one is refused at once.
    /// Requests are held while the file is written, so none sees the file and the daemon
    /// disagree.
    pub fn rotate(&self) -> anyhow::Result<()> {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let token = canopy_datadir::token::write_new(&self.file)?;
        canopy_executors::secrets::register(&token);
        *current = token;
        Ok(())
    }
}

/// Marks a request made with a call's token (a process the daemon runs), for the routes only
/// the user may take.
#[derive(Debug, Clone, Copy)]
pub struct ByCall;

/// Whose token a request carries.
enum Caller {
    /// The daemon's own: a person, or a tool acting for one.
    Daemon,
    /// A running call's: its processes act as this, whatever they claim.
    Call(Cause),
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("port", &self.port)
            .field("token", &self.token)
            .finish()
    }
}

impl Access {
    /// The daemon listening on `port`, whose token is `token`, which also accepts the tokens
    /// of the calls in `calls` while they run.
    pub fn new(port: u16, token: Arc<ApiToken>, calls: CallCredentials) -> Self {
        Self { port, token, calls }
    }

    /// The `Host` values this daemon answers to.
    fn hosts(&self) -> [String; 3] {
        let port = self.port;
        [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]
    }

    fn check(&self, request: &Request) -> Result<Caller, ApiError> {
        self.check_host(request.headers(), request.uri())?;
        self.check_origin(request.headers())?;
        let caller = self.check_token(request.headers())?;
        check_content_type(request.method(), request.uri(), request.headers())?;
        check_no_nul(request.uri())?;
        Ok(caller)
    }

    fn check_host(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
        let hosts = self.hosts();
        let allowed = |host: &str| hosts.iter().any(|h| h.eq_ignore_ascii_case(host));
        let refuse = |what: String| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!(
                    "{what}; this daemon answers only requests addressed to {}",
                    hosts.join(", ")
                ),
            )
        };
        // An absolute-form request target (`GET http://evil.example/...`) names a host too.
        if let Some(authority) = uri.authority()
            && !allowed(authority.as_str())
        {
            return Err(refuse(format!(
                "request target host `{authority}` is not this daemon"
            )));
        }
        match headers.get(header::HOST) {
            None => Err(refuse("the request has no Host header".to_string())),
            Some(host) => match host.to_str() {
                Ok(host) if allowed(host) => Ok(()),
                _ => Err(refuse(format!("Host `{}` is not this daemon", shown(host)))),
            },
        }
    }

    fn check_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origins = self.hosts().map(|host| format!("http://{host}"));
        match origin.to_str() {
            Ok(text) if origins.iter().any(|o| o.eq_ignore_ascii_case(text)) => Ok(()),
            _ => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!(
                    "Origin `{}` may not use this API (web pages cannot drive the daemon); allowed origins: {}",
                    shown(origin),
                    origins.join(", ")
                ),
            )),
        }
    }

    fn check_token(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let problem = match presented {
            None => "missing API token",
            Some(token) if self.token.matches(token) => return Ok(Caller::Daemon),
            Some(token) => match self.calls.lookup(token) {
                Presented::Live(cause) => return Ok(Caller::Call(cause)),
                Presented::Ended => {
                    return Err(ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "this call token's call has ended: a process's `CANOPY_CALL_TOKEN` is valid only while the hook, cron, webhook handler or node that started it runs",
                    ));
                }
                Presented::Other => "wrong API token",
            },
        };
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "{problem}: send `Authorization: Bearer <token>`; the daemon's token is in {} (the CLI reads it from there; `canopy daemon rotate-token` replaces it)",
                self.token.file().display()
            ),
        ))
    }
}

/// The content type a request with a body must have.
fn required_content_type(method: &Method, uri: &Uri) -> &'static str {
    let path = uri.path().trim_end_matches('/');
    if method == Method::POST && path == "/api/plugins" {
        "application/wasm"
    } else {
        "application/json"
    }
}

fn has_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    headers.get(header::CONTENT_LENGTH).is_some_and(|length| {
        length
            .to_str()
            .ok()
            .and_then(|l| l.trim().parse::<u64>().ok())
            != Some(0)
    })
}

/// A NUL character (`%00`) in the path or the query string: no name, id or value Canopy keeps
/// can hold one (PostgreSQL's text cannot), so it is refused before it reaches a lookup.
fn check_no_nul(uri: &Uri) -> Result<(), ApiError> {
    let has_nul = |text: &str| text.to_ascii_lowercase().contains("%00");
    let place = if has_nul(uri.path()) {
        "the path"
    } else if uri.query().is_some_and(has_nul) {
        "the query string"
    } else {
        return Ok(());
    };
    Err(ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_request",
        format!(
            "{place} holds a NUL character (%00); no name, id or value Canopy keeps can contain one"
        ),
    ))
}

fn check_content_type(method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
    if !has_body(headers) {
        return Ok(());
    }
    let required = required_content_type(method, uri);
    let given = headers.get(header::CONTENT_TYPE);
    let essence = given
        .and_then(|value| value.to_str().ok())
        .map(|value| value.split(';').next().unwrap_or_default().trim());
    if essence.is_some_and(|essence| essence.eq_ignore_ascii_case(required)) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "{method} {} takes a body of `Content-Type: {required}`; got {}",
            uri.path(),
            given.map_or_else(
                || "no Content-Type".to_string(),
                |v| format!("`{}`", shown(v))
            )
        ),
    ))
}

/// A header value for a message: its text, or a note that it is not text; at most 200 chars.
fn shown(value: &HeaderValue) -> String {
    match value.to_str() {
        Ok(text) => text.chars().take(200).collect(),
        Err(_) => "(not visible ASCII)".to_string(),
    }
}

/// The MCP endpoint: its refusals are JSON-RPC errors, which MCP clients display.
const MCP_PATH: &str = "/mcp";

/// The liveness probe's path: without a token it answers only that the daemon is up.
pub const HEALTH_PATH: &str = "/api/health";

/// The middleware: refuses what [`Access`] does not allow, before any handler runs.
pub async fn guard(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    // A liveness probe (a service manager's, a load check's) has no token: it learns that the
    // daemon answers and nothing else (no version, no data dir). Host and Origin still apply.
    if request.method() == axum::http::Method::GET
        && request.uri().path() == HEALTH_PATH
        && !request.headers().contains_key(header::AUTHORIZATION)
    {
        return match access
            .check_host(request.headers(), request.uri())
            .and_then(|()| access.check_origin(request.headers()))
        {
            Ok(()) => axum::Json(serde_json::json!({ "status": "ok" })).into_response(),
            Err(err) => err.into_response(),
        };
    }
    // A launched agent's runtime hook calls back with its launch's secret, which the handler
    // checks: Host and Origin apply as to every request.
    if request
        .uri()
        .path()
        .strip_prefix(canopy_executors::plugins::launch::CALLBACK_ROUTE)
        .is_some_and(|rest| rest.starts_with('/'))
    {
        return match access
            .check_host(request.headers(), request.uri())
            .and_then(|()| access.check_origin(request.headers()))
        {
            Ok(()) => next.run(request).await,
            Err(err) => err.into_response(),
        };
    }
    match access.check(&request) {
        Ok(Caller::Call(cause)) => {
            let mut request = request;
            request.extensions_mut().insert(ByCall);
            cause.scope(next.run(request)).await
        }
        Ok(Caller::Daemon) => match cause_of(&request) {
            Ok(cause) => cause.scope(next.run(request)).await,
            Err(err) => err.into_response(),
        },
        Err(err) => {
            tracing::warn!(
                method = %request.method(),
                path = %request.uri().path(),
                code = err.code,
                "API request refused"
            );
            let unauthorized = err.status == StatusCode::UNAUTHORIZED;
            let mut response = if request.uri().path() == MCP_PATH {
                // An MCP client shows a JSON-RPC error's message; a plain API error reaches its
                // user as "Server returned an error response".
                (
                    err.status,
                    axum::Json(serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": null,
                        "error": {
                            "code": -32001,
                            "message": err.message,
                            "data": { "code": err.code },
                        },
                    })),
                )
                    .into_response()
            } else {
                err.into_response()
            };
            if unauthorized {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"canopy\""),
                );
            }
            response
        }
    }
}

/// Who a request made with the daemon's token acts as: the user, or an agent when its
/// `X-Canopy-Actor` says so (an MCP client). An automation actor (`hook:`, `cron:`, `webhook:`)
/// claimed here is ignored: only a call's own token acts as its automation, so a process cannot
/// pass its requests off as another's, nor escape the dispatch depth by leaving a header out.
fn cause_of(request: &Request) -> Result<Cause, ApiError> {
    let actor = match request.headers().get(super::ACTOR_HEADER) {
        None => Actor::User,
        Some(value) => {
            let text = value.to_str().map_err(|_| {
                ApiError::bad_request(format!("header `{}` is not text", super::ACTOR_HEADER))
            })?;
            let actor = Actor::parse(text).map_err(|err| {
                ApiError::bad_request(format!("header `{}`: {err}", super::ACTOR_HEADER))
            })?;
            if actor.is_automation() {
                tracing::debug!(claimed = %actor, "an automation actor claimed with the daemon token is ignored");
                Actor::User
            } else {
                actor
            }
        }
    };
    Ok(Cause { actor, depth: 0 })
}
