//! The webhook listener: `POST /hooks/<scope>/<id>` on `[webhooks] bind_host:bind_port`, apart
//! from the loopback API.
//!
//! Answers: 202 `{"delivery_id", "status": "accepted"}` once the delivery is committed (or the
//! hook's `respond.status`); 202 `{"delivery_id", "status": "ignored", "reason"}` when the
//! hook's rules refuse it; with `?wait=true` or `respond = "sync"`, the handler's outcome (200,
//! or 500 when it failed); 401 with an empty body on any auth failure; 404 for a hook this
//! node does not serve; 413 past `max_body_bytes`; 503 when the delivery cannot be recorded.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt as _;
use serde_json::json;

use canopy_core::webhooks::config::Hook;
use canopy_core::webhooks::intake::{Intake, intake};
use canopy_core::webhooks::{Ingress, Outcome, Taken, auth};
use canopy_model::records::webhooks::DeliveryStatus;
use canopy_model::records::webhooks::RespondMode;

/// How long a request's body may take to arrive (its headers have `webhooks.header_timeout_secs`).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a refused request's body is read and thrown away before the answer, and for how
/// long: closing a connection with unread bytes makes the kernel reset it, and a client still
/// sending its body then gets a broken pipe instead of the 401 or 413. Past either bound the
/// connection is closed as it is.
pub const DISCARD_LIMIT: usize = 8 * 1024 * 1024;
pub const DISCARD_TIMEOUT: Duration = Duration::from_secs(2);

/// The file in the data dir holding the listener's URL.
pub const ADDRESS_FILE: &str = "webhooks.addr";

/// Binds the listener when `[webhooks]` sets a port (before the daemon touches its data dir,
/// so a taken port refuses the start cleanly).
pub async fn bind(config: &canopy_core::config::Config) -> Result<Option<tokio::net::TcpListener>> {
    let webhooks = canopy_core::webhooks::config::compile(config)
        .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
    let Some((host, port)) = &webhooks.bind else {
        return Ok(None);
    };
    let address = format!(
        "{}:{port}",
        if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        }
    );
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| {
            format!("cannot listen for webhooks on {address} ([webhooks] bind_host / bind_port): the port is taken or the address is not this machine's")
        })?;
    Ok(Some(listener))
}

/// Serves the listener until `stopped` resolves; writes its URL to [`ADDRESS_FILE`].
pub fn spawn(
    ingress: Ingress,
    listener: tokio::net::TcpListener,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>> {
    let bound = listener.local_addr()?;
    let url = format!("http://{bound}");
    let file = ingress.data_dir().join(ADDRESS_FILE);
    std::fs::write(&file, format!("{url}\n"))
        .with_context(|| format!("cannot write {}", file.display()))?;
    ingress.set_listen(url.clone());
    tracing::info!(%url, hooks = ingress.webhooks().hooks.values().filter(|h| h.served).count(), "webhook listener listening");
    let limits = crate::listener::Limits {
        name: "webhook",
        settings: "webhooks.max_connections, max_connections_per_peer, header_timeout_secs",
        max_connections: ingress.webhooks().max_connections,
        max_per_peer: Some(ingress.webhooks().max_per_peer),
        header_timeout: ingress.webhooks().header_timeout,
        idle_timeout: ingress.webhooks().idle_timeout,
    };
    let app = router(ingress);
    Ok(tokio::spawn(async move {
        crate::listener::serve(listener, app, limits, stopped).await;
        let _ = std::fs::remove_file(&file);
    }))
}

/// The listener's routes.
pub fn router(ingress: Ingress) -> Router {
    Router::new()
        .route("/hooks/{scope}/{id}", post(receive))
        .method_not_allowed_fallback(|method: Method| async move {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("a webhook takes POST, not {method}"),
            )
        })
        .fallback(|uri: Uri| async move {
            error(
                StatusCode::NOT_FOUND,
                &format!(
                    "no webhook at {}; webhooks are served at /hooks/<scope>/<id>",
                    uri.path()
                ),
            )
        })
        .with_state(ingress)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

/// 401 and nothing else.
fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
    )
        .into_response()
}

/// Whether `?wait=true` (or `wait=1`) is in the query.
fn wants_wait(query: &[(String, String)]) -> bool {
    query
        .iter()
        .any(|(k, v)| k == "wait" && matches!(v.as_str(), "true" | "1" | "yes" | ""))
}

async fn receive(
    State(ingress): State<Ingress>,
    Path((scope, id)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(hook) = ingress.hook(&scope, &id).filter(|h| h.served) else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("no webhook {scope}/{id} is served here"),
        );
    };
    let base = ingress.data_dir().to_path_buf();
    if let Err(refusal) = auth::check_token(&hook, &headers, &base) {
        tracing::info!(webhook = %hook.key(), %peer, why = %refusal, "webhook request refused (401)");
        discard_unread(body, &headers).await;
        return unauthorized();
    }
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the body is larger than this webhook's max_body_bytes ({})",
                hook.max_body
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > hook.max_body as u64) {
        discard_unread(body, &headers).await;
        return too_large();
    }
    let body = match read_body(body, hook.max_body).await {
        Ok(body) => body,
        Err(BodyRefused::TooLarge) => return too_large(),
        Err(BodyRefused::TimedOut) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            );
        }
        Err(BodyRefused::Unreadable) => {
            return error(StatusCode::BAD_REQUEST, "the body could not be read");
        }
    };
    if let Err(refusal) = auth::check_signature(&hook, &headers, &body, &base) {
        tracing::info!(webhook = %hook.key(), %peer, why = %refusal, "webhook request refused (401)");
        return unauthorized();
    }
    let Intake { received, ignored } = match intake(
        &hook,
        method.as_str(),
        uri.path().to_string(),
        uri.query(),
        &headers,
        body,
    ) {
        Ok(taken) => taken,
        Err(refused) => {
            tracing::info!(webhook = %hook.key(), %peer, why = %refused, "webhook request refused (400)");
            return error(StatusCode::BAD_REQUEST, &refused.to_string());
        }
    };
    let query: Vec<(String, String)> = uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let sync = hook.respond.mode == RespondMode::Sync || wants_wait(&query);
    let success = hook
        .respond
        .status
        .and_then(|s| StatusCode::from_u16(s).ok());
    let received = if sync && ignored.is_none() {
        match ingress.run_waited(&hook, received).await {
            Ok(Ok(outcome)) => return waited_answer(&hook, outcome, success),
            // It takes the queue.
            Ok(Err(received)) => received,
            Err(err) => return unrecorded(&hook, &err),
        }
    } else {
        received
    };
    let delivery_id = match ingress
        .record(&hook, received, ignored.clone(), None, false)
        .await
    {
        Ok(Taken::New(id)) => id,
        Ok(Taken::Duplicate(first)) => return duplicate_answer(&first),
        Err(err) => return unrecorded(&hook, &err),
    };
    if let Some(reason) = ignored {
        tracing::debug!(webhook = %hook.key(), delivery = %delivery_id, %reason, "webhook delivery ignored by its rules");
        return (
            StatusCode::ACCEPTED,
            axum::Json(
                json!({ "delivery_id": delivery_id, "status": "ignored", "reason": reason }),
            ),
        )
            .into_response();
    }
    let watch = sync.then(|| ingress.watch(&delivery_id));
    if !sync {
        // Noted before it is queued: a worker it wakes sees the flood it may make.
        ingress.note_answered_at_once();
    }
    if let Err(err) = ingress.enqueue(&hook, delivery_id.clone()) {
        // Not reachable for a served hook; the delivery stays accepted all the same.
        tracing::error!(webhook = %hook.key(), error = %err, "cannot queue a webhook delivery");
    }
    let Some(watch) = watch else {
        return (
            success.unwrap_or(StatusCode::ACCEPTED),
            axum::Json(json!({ "delivery_id": delivery_id, "status": "accepted" })),
        )
            .into_response();
    };
    let outcome = match ingress
        .wait(&delivery_id, watch, hook.timeout + Duration::from_secs(30))
        .await
    {
        Ok(outcome) => outcome,
        Err(err) => {
            tracing::error!(webhook = %hook.key(), error = %err, "cannot read a webhook delivery back");
            return (
                StatusCode::ACCEPTED,
                axum::Json(json!({ "delivery_id": delivery_id, "status": "accepted" })),
            )
                .into_response();
        }
    };
    waited_answer(&hook, outcome, success)
}

/// 200 for a delivery its sender sent before (a retry, a replay): the first one's id and
/// status; nothing new was recorded or runs.
fn duplicate_answer(first: &Outcome) -> Response {
    (
        StatusCode::OK,
        axum::Json(json!({
            "delivery_id": first.delivery_id,
            "status": first.status,
            "duplicate": first.duplicate,
        })),
    )
        .into_response()
}

/// 503 for a delivery that could not be recorded (nothing of it runs).
fn unrecorded(hook: &Hook, err: &canopy_core::webhooks::IngressError) -> Response {
    tracing::error!(webhook = %hook.key(), error = %err, "cannot record a webhook delivery");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the delivery could not be recorded; send it again",
    )
}

/// The answer to a request that waited for its handler: `success` (or 200) when it completed,
/// 403 when a sync hook denied it, 500 when it failed, 202 when it has not ended yet.
fn waited_answer(hook: &Hook, outcome: Outcome, success: Option<StatusCode>) -> Response {
    let status = match outcome.status {
        DeliveryStatus::Completed => success.unwrap_or(StatusCode::OK),
        DeliveryStatus::Accepted | DeliveryStatus::Running | DeliveryStatus::Ignored => {
            StatusCode::ACCEPTED
        }
        DeliveryStatus::Failed
        | DeliveryStatus::TimedOut
        | DeliveryStatus::Interrupted
        | DeliveryStatus::InterruptedUnknown
        | DeliveryStatus::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
        // A sync hook on `webhook.pre_handle` refused to let it be handled.
        DeliveryStatus::Denied => StatusCode::FORBIDDEN,
    };
    let mut answer = json!({
        "delivery_id": outcome.delivery_id,
        "status": outcome.status,
        "error": outcome.error,
        "result": outcome.result,
        "duration_ms": outcome.duration_ms,
    });
    if hook.respond.output {
        answer["output"] = json!(outcome.output);
    }
    if outcome.duplicate {
        // A copy of an earlier delivery: its answer, and nothing ran now.
        answer["duplicate"] = json!(true);
    }
    (status, axum::Json(answer)).into_response()
}

/// Why a body was not taken.
enum BodyRefused {
    TooLarge,
    TimedOut,
    Unreadable,
}

/// Reads a body of at most `limit` bytes within [`BODY_TIMEOUT`]. A larger one is refused
/// once past the limit, the rest of it read and thrown away first (see [`discard`]).
async fn read_body(mut body: Body, limit: usize) -> Result<Vec<u8>, BodyRefused> {
    let reading = async {
        let mut taken = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map(|f| f.into_data()) else {
                return Err(BodyRefused::Unreadable);
            };
            let Ok(data) = data else { continue };
            if taken.len() + data.len() > limit {
                return Err(BodyRefused::TooLarge);
            }
            taken.extend_from_slice(&data);
        }
        Ok(taken)
    };
    let read = tokio::time::timeout(BODY_TIMEOUT, reading).await;
    match read {
        Ok(Err(BodyRefused::TooLarge)) => {
            discard(body, limit).await;
            Err(BodyRefused::TooLarge)
        }
        Ok(read) => read,
        Err(_) => Err(BodyRefused::TimedOut),
    }
}

/// [`discard`] for a body refused before any of it was read. A client that sent
/// `Expect: 100-continue` sends its body only once asked to (by the first read of it): it has
/// nothing in flight, and is answered at once.
async fn discard_unread(body: Body, headers: &HeaderMap) {
    let waiting = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !waiting {
        discard(body, 0).await;
    }
}

/// Reads what is left of a refused request's body and throws it away, up to [`DISCARD_LIMIT`]
/// bytes in all (`read` of them already taken) and for at most [`DISCARD_TIMEOUT`], so the
/// client reads the answer instead of a reset connection.
async fn discard(mut body: Body, read: usize) {
    let draining = async {
        let mut read = read;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                read += data.len();
                if read > DISCARD_LIMIT {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIMEOUT, draining).await;
}
