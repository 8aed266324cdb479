//! "The API" as the MCP server sees it: a JSON call on a route, and a followed SSE stream. Two
//! implementations, so the tools are written once and no handler twice: [`DaemonApi`] reaches
//! the daemon of a data dir over HTTP exactly as the CLI does (`canopy mcp`), and [`RouterApi`]
//! calls the daemon's own routes in-process (`/mcp` inside the daemon). Either way the request
//! meets the same validation and comes back with the same error message.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context as _;
use axum::body::Body;
use axum::http::{Method, Request, header};
use futures_util::{Stream, StreamExt as _};
use http_body_util::BodyExt as _;
use serde_json::Value;
use tower::ServiceExt as _;

use canopy_client::sse::{SseEvents, SseFrame};
use canopy_datadir::DataDir;
use canopy_model::events::{Actor, Cause};

pub use canopy_client::ApiFailure;

/// No answer came: why, in words.
fn unanswered(message: String) -> ApiFailure {
    ApiFailure {
        status: 0,
        code: String::new(),
        message,
    }
}

/// Reads an answer's status and body: the body's JSON text on success (passed on as it came,
/// not parsed and written again), else the API's error.
fn check(status: u16, body: &[u8]) -> Result<String, ApiFailure> {
    if (200..300).contains(&status) {
        return String::from_utf8(body.to_vec()).map_err(|err| {
            unanswered(format!("the daemon's answer ({status}) is not text: {err}"))
        });
    }
    Err(ApiFailure::from_answer(status, body))
}

/// The code of a failure to reach any daemon (nothing was sent).
const NOT_RUNNING: &str = "not_running";

/// The events of a followed stream, in order.
pub type Frames = Pin<Box<dyn Stream<Item = anyhow::Result<SseFrame>> + Send>>;

/// What the tools and resources are built on.
pub trait Api: Send + Sync + 'static {
    /// `method path` with a JSON `body`; the answer's JSON text, or the API's error. Gives up
    /// after `timeout`.
    fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> impl Future<Output = Result<String, ApiFailure>> + Send;

    /// Opens a server-sent-event stream (`/api/feed?follow=true...`), resuming after
    /// `last_event_id` when given.
    fn follow(
        &self,
        path: &str,
        last_event_id: Option<String>,
    ) -> impl Future<Output = anyhow::Result<Frames>> + Send;
}

/// The actor header the MCP server's requests carry: `CANOPY_ACTOR` when the process has one
/// (the CLI's client sends it already), else `agent`.
fn agent_header() -> Option<(&'static str, &'static str)> {
    std::env::var_os(canopy_model::call_env::ACTOR)
        .is_none()
        .then_some((crate::api::ACTOR_HEADER, "agent"))
}

/// The daemon of a data dir, over HTTP, with the CLI's client (address, token and actor from
/// the data dir and the environment, as every CLI command). The daemon writes a new address
/// and token at every start, so a call that cannot reach it, or is refused the token, reads them
/// again and tries once more: `canopy mcp` outlives daemon restarts.
#[derive(Debug)]
pub struct DaemonApi {
    data: DataDir,
    client: std::sync::Mutex<Option<canopy_client::Client>>,
}

impl DaemonApi {
    /// The daemon of `data`, reached when a call is made (it need not run yet).
    pub fn new(data: &DataDir) -> Self {
        Self {
            data: data.clone(),
            client: std::sync::Mutex::new(None),
        }
    }

    /// The client: the one in use, or a new one read from the data dir (`fresh`: always new).
    fn client(&self, fresh: bool) -> Result<canopy_client::Client, ApiFailure> {
        let mut slot = self
            .client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !fresh && let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let client = canopy_client::Client::connect(&self.data).map_err(|err| ApiFailure {
            code: NOT_RUNNING.to_string(),
            ..unanswered(format!("{err:#}"))
        })?;
        *slot = Some(client.clone());
        Ok(client)
    }

    fn unreachable(&self, client: &canopy_client::Client, err: &reqwest::Error) -> ApiFailure {
        let dir = self.data.root().display();
        if err.is_connect() {
            return ApiFailure {
                code: NOT_RUNNING.to_string(),
                ..unanswered(format!(
                    "no canopy daemon is running for data dir {dir}; start one with `canopy daemon start --data-dir {dir}`"
                ))
            };
        }
        unanswered(if err.is_timeout() {
            format!("the daemon at {} did not answer in time", client.base())
        } else {
            format!("cannot reach the daemon at {}: {err}", client.base())
        })
    }

    async fn call_once(
        &self,
        client: &canopy_client::Client,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<String, ApiFailure> {
        let mut request = client.request(method, path).timeout(timeout);
        if let Some((name, value)) = agent_header() {
            request = request.header(name, value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|err| self.unreachable(client, &err))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|err| self.unreachable(client, &err))?;
        check(status, &body)
    }
}

impl Api for DaemonApi {
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<String, ApiFailure> {
        let client = self.client(false)?;
        match self
            .call_once(&client, method.clone(), path, body.as_ref(), timeout)
            .await
        {
            // Not reached, or refused the token: the daemon may have restarted since (a call
            // that may have reached it is not sent twice).
            Err(failure) if failure.code == NOT_RUNNING || failure.status == 401 => {
                let client = self.client(true)?;
                self.call_once(&client, method, path, body.as_ref(), timeout)
                    .await
            }
            answer => answer,
        }
    }

    async fn follow(&self, path: &str, last_event_id: Option<String>) -> anyhow::Result<Frames> {
        // A stream is opened again after it ends: read the address and token anew each time.
        let client = self.client(true)?;
        let mut request = client.stream(path);
        if let Some((name, value)) = agent_header() {
            request = request.header(name, value);
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let events = SseEvents::open(request).await?;
        Ok(Box::pin(futures_util::stream::unfold(
            events,
            |mut events| async move { events.next().await.map(|frame| (frame, events)) },
        )))
    }
}

/// The daemon's own routes, called in-process (no socket, no second handler), as `agent`.
#[derive(Debug, Clone)]
pub struct RouterApi {
    routes: axum::Router,
}

impl RouterApi {
    /// Calls these routes: the API's, without the guard (the request reaching a tool passed it).
    pub fn new(routes: axum::Router) -> Self {
        Self { routes }
    }

    async fn send(&self, request: Request<Body>) -> axum::response::Response {
        let cause = Cause {
            actor: Actor::Agent,
            depth: 0,
        };
        // The router's error type is Infallible.
        match cause.scope(self.routes.clone().oneshot(request)).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

impl Api for RouterApi {
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<String, ApiFailure> {
        let bytes = match &body {
            Some(body) => serde_json::to_vec(body).unwrap_or_default(),
            None => Vec::new(),
        };
        let mut request = Request::builder().method(method).uri(path);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Body::from(bytes))
            .map_err(|err| unanswered(format!("bad request to {path}: {err}")))?;
        let work = async {
            let response = self.send(request).await;
            let status = response.status().as_u16();
            let body =
                response.into_body().collect().await.map_err(|err| {
                    unanswered(format!("cannot read the answer of {path}: {err}"))
                })?;
            check(status, &body.to_bytes())
        };
        tokio::time::timeout(timeout, work).await.map_err(|_| {
            unanswered(format!(
                "{path} did not answer within {}",
                humantime::format_duration(timeout)
            ))
        })?
    }

    async fn follow(&self, path: &str, last_event_id: Option<String>) -> anyhow::Result<Frames> {
        let mut request = Request::builder().method(Method::GET).uri(path);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let request = request.body(Body::empty()).context("bad stream request")?;
        let response = self.send(request).await;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let body = response.into_body().collect().await?.to_bytes();
            return Err(match check(status, &body) {
                Err(failure) => failure.into(),
                Ok(_) => anyhow::anyhow!("{path} answered {status}"),
            });
        }
        let stream = sse_stream::SseStream::new(response.into_body());
        Ok(Box::pin(stream.map(|item| {
            item.map(|sse| SseFrame {
                event: sse.event.unwrap_or_else(|| "message".to_string()),
                id: sse.id,
                data: sse.data.unwrap_or_default(),
            })
            .map_err(|err| anyhow::anyhow!("the event stream broke: {err}"))
        })))
    }
}
