//! The MCP server over any [`Api`]: the tools of [`super::tools`], the resources
//! `canopy://graphs/{name}` and `canopy://specs/{id}`, and change notifications for the
//! resources a client subscribed to, read from the feed: on the session for
//! `resources/subscribe` (protocol versions up to 2025-11-25), on the stream of a
//! `subscriptions/listen` (2026-07-28).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use axum::http::Method;
use futures_util::StreamExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations,
    UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RequestContext, RoleServer, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;

use super::api::Api;
use super::tools::{self, Args, CALL_TIMEOUT, TOOLS};
use canopy_client::encode;

const GRAPHS: &str = "canopy://graphs/";
const SPECS: &str = "canopy://specs/";

/// What the server tells a client it is for.
const INSTRUCTIONS: &str = "Canopy runs agent work as graphs over specs and queues. Add specs (spec_add), put them in a queue (queue_create), create a graph with nodes and hooks (graph_edit create), start it over the queue (graph_control run with queue_id) and poll graph_get until graph.status is no longer running; a paused graph names its blocker and the ways out (graph_control continue). Every id argument also takes a name (graphs, queues, sessions) or a unique id prefix. Resources canopy://graphs/{name} and canopy://specs/{id} can be subscribed to for change notifications.";

/// One client's MCP server. Cheap to clone.
pub struct CanopyMcp<A> {
    api: Arc<A>,
    /// The resource URIs this client subscribed to.
    subscriptions: Arc<Mutex<HashSet<String>>>,
    /// Set once the feed watcher that sends notifications runs.
    watching: Arc<OnceLock<()>>,
}

impl<A> Clone for CanopyMcp<A> {
    fn clone(&self) -> Self {
        Self {
            api: self.api.clone(),
            subscriptions: self.subscriptions.clone(),
            watching: self.watching.clone(),
        }
    }
}

impl<A> std::fmt::Debug for CanopyMcp<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CanopyMcp").finish_non_exhaustive()
    }
}

impl<A: Api> CanopyMcp<A> {
    pub fn new(api: Arc<A>) -> Self {
        Self {
            api,
            subscriptions: Arc::default(),
            watching: Arc::default(),
        }
    }

    /// The answer's JSON text.
    async fn get(&self, path: &str) -> Result<String, McpError> {
        self.api
            .call(Method::GET, path, None, CALL_TIMEOUT)
            .await
            .map_err(|failure| match failure.status {
                404 => McpError::resource_not_found(failure.message, None),
                400 => McpError::invalid_params(failure.message, None),
                _ => McpError::internal_error(failure.message, None),
            })
    }

    async fn get_json(&self, path: &str) -> Result<Value, McpError> {
        let text = self.get(path).await?;
        serde_json::from_str(&text).map_err(|err| {
            McpError::internal_error(format!("the answer of {path} is not JSON: {err}"), None)
        })
    }

    /// The API path a resource URI reads.
    fn resource_path(uri: &str) -> Result<String, McpError> {
        if let Some(name) = uri.strip_prefix(GRAPHS).filter(|n| !n.is_empty()) {
            return Ok(format!("/api/graphs/{}", encode(&decode(name))));
        }
        if let Some(id) = uri.strip_prefix(SPECS).filter(|n| !n.is_empty()) {
            return Ok(format!("/api/specs/{}", encode(&decode(id))));
        }
        Err(McpError::invalid_params(
            format!(
                "unknown resource `{uri}`; the resources are {GRAPHS}{{name}} and {SPECS}{{id}}"
            ),
            None,
        ))
    }

    /// Starts the feed watcher for this client, once, and waits (a little) for it to have the
    /// feed open, so a change made once `resources/subscribe` has answered is not missed.
    async fn watch(&self, peer: Peer<RoleServer>) {
        if self.watching.set(()).is_err() {
            return;
        }
        let session = Session {
            peer,
            subscriptions: self.subscriptions.clone(),
        };
        let (ready, opened) = tokio::sync::oneshot::channel();
        tokio::spawn(watch(self.api.clone(), session, Some(ready)));
        if tokio::time::timeout(Duration::from_secs(5), opened)
            .await
            .is_err()
        {
            tracing::warn!("the feed did not open in time; notifications start once it does");
        }
    }
}

/// Percent-decodes a URI segment (`web%20app` is `web app`).
fn decode(segment: &str) -> String {
    form_urlencoded::parse(format!("x={segment}").as_bytes())
        .next()
        .map(|(_, value)| value.replace('+', " "))
        .unwrap_or_default()
}

/// The tools as `tools/list` gives them, built once.
fn tool_list() -> &'static [Tool] {
    static LIST: OnceLock<Vec<Tool>> = OnceLock::new();
    LIST.get_or_init(|| {
        TOOLS
            .iter()
            .map(|tool| {
                let schema = match serde_json::to_value((tool.schema)()) {
                    Ok(Value::Object(mut schema)) => {
                        schema.remove("$schema");
                        schema
                    }
                    _ => serde_json::Map::new(),
                };
                Tool::new(tool.name, tool.description, schema).with_annotations(
                    ToolAnnotations::new()
                        .read_only(tool.read_only)
                        .destructive(tool.name == "graph_edit"),
                )
            })
            .collect()
    })
}

impl<A: Api> ServerHandler for CanopyMcp<A> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("canopy", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tool_list().to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = tools::find(&request.name) else {
            let names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`{}; the tools are {}",
                    request.name,
                    canopy_model::text::did_you_mean(&request.name, names.iter().copied()),
                    names.join(", ")
                ),
                None,
            ));
        };
        let result = match (tool.route)(Args::new(request.arguments)) {
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
            Ok(call) => match self
                .api
                .call(call.method, &call.path, call.body, call.timeout)
                .await
            {
                Ok(answer) => CallToolResult::success(vec![ContentBlock::text(answer)]),
                Err(failure) => {
                    tracing::debug!(tool = tool.name, status = failure.status, "tool refused");
                    CallToolResult::error(vec![ContentBlock::text(failure.message)])
                }
            },
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let graphs = self.get_json("/api/graphs").await?;
        let specs = self.get_json("/api/specs").await?;
        let named = |list: &Value, key: &str, prefix: &str, field: &str, what: &str| {
            list[key]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(|item| {
                    let id = item[field].as_str()?;
                    let name = item["name"].as_str().unwrap_or(id);
                    Some(
                        Resource::new(format!("{prefix}{}", encode(id)), name.to_string())
                            .with_description(format!("{what} `{name}`"))
                            .with_mime_type("application/json"),
                    )
                })
                .collect::<Vec<_>>()
        };
        let mut resources = named(&graphs, "graphs", GRAPHS, "name", "graph");
        resources.extend(named(&specs, "specs", SPECS, "id", "spec"));
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{GRAPHS}{{name}}"), "graph")
                .with_description("A graph as graph_get shows it (name, id or unique id prefix); subscribe to be told when its status changes")
                .with_mime_type("application/json"),
            ResourceTemplate::new(format!("{SPECS}{{id}}"), "spec")
                .with_description("A spec with its body (id or unique id prefix); subscribe to be told when it changes")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let path = Self::resource_path(&request.uri)?;
        let text = self.get(&path).await?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, request.uri).with_mime_type("application/json"),
        ])
        .into())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // The SDK keeps only what the capabilities advertise: resource updates and list changes.
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let accepted = context.accepted();
        let listen = Listen {
            sink: context.sink().clone(),
            uris: accepted
                .resource_subscriptions
                .iter()
                .flatten()
                .cloned()
                .collect(),
            list_changed: accepted.resources_list_changed == Some(true),
        };
        tokio::select! {
            () = context.cancelled() => {}
            () = watch(self.api.clone(), listen, None) => {}
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // Refuse what does not exist, as a read would.
        self.get(&Self::resource_path(&request.uri)?).await?;
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(request.uri);
        self.watch(context.peer).await;
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&request.uri);
        Ok(())
    }
}

/// What one feed event means to a client.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    /// A subscribed resource changed.
    Updated(String),
    /// A graph or spec was created or deleted.
    ListChanged,
}

/// The first string at `key` anywhere in `value`.
fn find_str<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    match value {
        Value::Object(map) => map
            .get(key)
            .and_then(Value::as_str)
            .or_else(|| map.values().find_map(|v| find_str(v, key))),
        Value::Array(items) => items.iter().find_map(|v| find_str(v, key)),
        _ => None,
    }
}

/// The changes a feed envelope makes to a client subscribed to `subscribed`.
fn changes(envelope: &Value, subscribed: &HashSet<String>) -> Vec<Change> {
    let event = envelope["event"].as_str().unwrap_or_default();
    let payload = &envelope["payload"];
    let mut out = Vec::new();
    let (prefix, name, id) = match envelope["family"].as_str() {
        Some("graph") => (
            GRAPHS,
            find_str(payload, "graph_name").or(envelope["target"].as_str()),
            find_str(payload, "graph_id"),
        ),
        Some("spec") => (SPECS, None, find_str(payload, "spec_id")),
        _ => return out,
    };
    if matches!(
        event,
        "graph.created" | "graph.deleted" | "spec.created" | "spec.deleted"
    ) {
        out.push(Change::ListChanged);
    }
    for uri in subscribed {
        let Some(key) = uri.strip_prefix(prefix).map(decode) else {
            continue;
        };
        let names_it = name.is_some_and(|name| name == key)
            || id.is_some_and(|id| !key.is_empty() && id.starts_with(&key));
        if names_it {
            out.push(Change::Updated(uri.clone()));
        }
    }
    out
}

/// Where a client's change notifications go.
trait Listener: Send + Sync {
    /// The resource URIs it wants to hear about now.
    fn subscribed(&self) -> HashSet<String>;
    /// Sends one; false once the client is gone.
    fn send(&self, change: Change) -> impl std::future::Future<Output = bool> + Send;
    /// The client has gone.
    fn gone(&self) -> bool;
}

/// A 2025-era session: `resources/subscribe` added to the set; notifications on the session.
struct Session {
    peer: Peer<RoleServer>,
    subscriptions: Arc<Mutex<HashSet<String>>>,
}

impl Listener for Session {
    fn subscribed(&self) -> HashSet<String> {
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn send(&self, change: Change) -> bool {
        match change {
            Change::Updated(uri) => self
                .peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await
                .is_ok(),
            Change::ListChanged => self.peer.notify_resource_list_changed().await.is_ok(),
        }
    }

    fn gone(&self) -> bool {
        self.peer.is_transport_closed()
    }
}

/// A `subscriptions/listen` stream (protocol 2026-07-28): what its filter accepted.
struct Listen {
    sink: SubscriptionSink,
    uris: HashSet<String>,
    list_changed: bool,
}

impl Listener for Listen {
    fn subscribed(&self) -> HashSet<String> {
        self.uris.clone()
    }

    async fn send(&self, change: Change) -> bool {
        match change {
            Change::Updated(uri) => self.sink.notify_resource_updated(uri).await.is_ok(),
            Change::ListChanged if self.list_changed => {
                self.sink.notify_resource_list_changed().await.is_ok()
            }
            Change::ListChanged => true,
        }
    }

    fn gone(&self) -> bool {
        false
    }
}

/// Follows the feed and tells `listener` of the changes to what it subscribed to, until it
/// goes away. A dropped stream is opened again after the last event seen (`Last-Event-ID`), so
/// nothing in between is missed.
/// `ready` is told once the feed is open: a change after that is not missed.
async fn watch<A: Api>(
    api: Arc<A>,
    listener: impl Listener,
    mut ready: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let mut last_id: Option<String> = None;
    let mut pause = Duration::from_millis(200);
    let mut check = tokio::time::interval(Duration::from_secs(2));
    while !listener.gone() {
        // `last=0`: from now on, not the newest events before.
        match api
            .follow("/api/feed?follow=true&last=0", last_id.clone())
            .await
        {
            Ok(mut frames) => loop {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                let frame = tokio::select! {
                    frame = frames.next() => frame,
                    _ = check.tick() => {
                        if listener.gone() {
                            return;
                        }
                        continue;
                    }
                };
                let frame = match frame {
                    Some(Ok(frame)) => frame,
                    Some(Err(err)) => {
                        tracing::debug!(err = %format!("{err:#}"), "the feed stream broke; opening it again");
                        break;
                    }
                    None => break,
                };
                pause = Duration::from_millis(200);
                if frame.id.is_some() {
                    last_id.clone_from(&frame.id);
                }
                if frame.event != "feed" {
                    continue;
                }
                for change in changes(&frame.json(), &listener.subscribed()) {
                    if !listener.send(change).await {
                        return;
                    }
                }
            },
            Err(err) => {
                tracing::debug!(err = %format!("{err:#}"), "cannot follow the feed; trying again");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_graph_event_updates_the_graph_subscribed_by_name_or_id_prefix() {
        let envelope = json!({
            "event": "graph.run.completed", "family": "graph", "target": "web",
            "payload": {"run": {"graph": {"graph_id": "3f2a9c1e0b7d", "graph_name": "web"}}}
        });
        let subscribed: HashSet<String> = [
            "canopy://graphs/web",
            "canopy://graphs/3f2a",
            "canopy://graphs/api",
            "canopy://specs/3f2a",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let mut found: Vec<String> = changes(&envelope, &subscribed)
            .into_iter()
            .map(|c| match c {
                Change::Updated(uri) => uri,
                Change::ListChanged => "list".into(),
            })
            .collect();
        found.sort();
        assert_eq!(found, ["canopy://graphs/3f2a", "canopy://graphs/web"]);
    }

    #[test]
    fn a_created_graph_changes_the_list() {
        let envelope = json!({
            "event": "graph.created", "family": "graph", "target": "web",
            "payload": {"graph": {"graph_id": "3f2a", "graph_name": "web"}}
        });
        assert_eq!(changes(&envelope, &HashSet::new()), [Change::ListChanged]);
        assert!(changes(&json!({"family": "hook"}), &HashSet::new()).is_empty());
    }
}
