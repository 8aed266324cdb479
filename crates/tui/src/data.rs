//! The TUI's side of the daemon: API reads and actions through the CLI's [`Client`], and the live
//! feed follower. Every answer goes back to the app as a [`Msg`] over one channel; nothing here
//! keeps state of its own beyond the connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{Result, anyhow};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::app::{Command, FeedEvent, Graph, Loaded, Msg, Resource};
use canopy_client::Client;
use canopy_client::sse::SseEvents;
use canopy_datadir::DataDir;
use canopy_model::records::runs::NodeRun;

/// How long a read or an action may take before the TUI says so.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest wait between two attempts to reach the daemon.
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Hook runs of a graph the main pane lists.
const HOOK_RUNS: usize = 20;

/// The connection, shared by the feed follower (which renews it when the daemon comes back,
/// maybe at another address) and the calls.
#[derive(Clone)]
pub struct Data {
    data: DataDir,
    client: Arc<RwLock<Option<Client>>>,
    tx: UnboundedSender<Msg>,
    /// Reads in flight, per resource, with the newest read asked meanwhile: a resource is
    /// read by one request at a time, and a burst of events on it costs at most one more read.
    inflight: Arc<Mutex<HashMap<Resource, Option<u64>>>>,
}

impl Data {
    /// Calls and the feed for the daemon of `data`; every answer goes to `tx`.
    pub fn new(data: DataDir, tx: UnboundedSender<Msg>) -> Self {
        Self {
            data,
            client: Arc::new(RwLock::new(None)),
            tx,
            inflight: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn client(&self) -> Result<Client> {
        if let Ok(guard) = self.client.read()
            && let Some(client) = guard.as_ref()
        {
            return Ok(client.clone());
        }
        let client = Client::connect(&self.data)?;
        if let Ok(mut guard) = self.client.write() {
            *guard = Some(client.clone());
        }
        Ok(client)
    }

    fn forget_client(&self) {
        if let Ok(mut guard) = self.client.write() {
            *guard = None;
        }
    }

    /// Carries out one command in the background; its answer comes back as a message.
    pub fn execute(&self, command: Command) {
        let this = self.clone();
        match command {
            Command::Quit => {}
            Command::Load { resource, seq } => this.read(resource, seq),
            Command::Control { graph, body, seq } => {
                tokio::spawn(async move {
                    let action = body["action"].as_str().unwrap_or_default().to_string();
                    let answer = this
                        .call::<Graph>(Call::Post(
                            format!("/api/graphs/{}/control", encode(&graph)),
                            body,
                        ))
                        .await;
                    let _ = this.tx.send(Msg::Controlled {
                        graph,
                        action,
                        seq,
                        answer: answer.map(Box::new).map_err(words),
                    });
                });
            }
            Command::Output { node_run } => {
                tokio::spawn(async move {
                    let answer = this
                        .call::<NodeRun>(Call::Get(format!("/api/node-runs/{}", encode(&node_run))))
                        .await
                        .map(|run| {
                            // Why it failed or blocked (whole: the table cuts it), then what it
                            // printed.
                            let reason = run.reason.as_deref().filter(|r| !r.is_empty());
                            let text = run.detail.as_deref().unwrap_or_default();
                            match (reason, text.is_empty()) {
                                (Some(reason), true) => format!("{reason}\n\n(no output)"),
                                (Some(reason), false) => format!("{reason}\n\n{text}"),
                                (None, true) => "(no output)".to_string(),
                                (None, false) => text.to_string(),
                            }
                        });
                    let _ = this.tx.send(Msg::Output {
                        node_run,
                        answer: answer.map_err(words),
                    });
                });
            }
        }
    }

    /// Reads `resource` now, or, when a read of it is in flight, once that one has answered.
    fn read(&self, resource: Resource, seq: u64) {
        {
            let Ok(mut inflight) = self.inflight.lock() else {
                return;
            };
            if let Some(next) = inflight.get_mut(&resource) {
                *next = Some(seq);
                return;
            }
            inflight.insert(resource.clone(), None);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let mut seq = seq;
            loop {
                this.load(resource.clone(), seq).await;
                let Ok(mut inflight) = this.inflight.lock() else {
                    return;
                };
                match inflight.get_mut(&resource).and_then(Option::take) {
                    Some(next) => seq = next,
                    None => {
                        inflight.remove(&resource);
                        return;
                    }
                }
            }
        });
    }

    async fn load(&self, resource: Resource, seq: u64) {
        let answer = match &resource {
            Resource::Specs => self
                .list("/api/specs".into(), "specs")
                .await
                .map(Loaded::Specs),
            Resource::Graphs => self
                .list("/api/graphs".into(), "graphs")
                .await
                .map(Loaded::Graphs),
            Resource::Queues => self
                .list("/api/queues".into(), "queues")
                .await
                .map(Loaded::Queues),
            Resource::Sessions => self
                .list("/api/sessions".into(), "sessions")
                .await
                .map(Loaded::Sessions),
            Resource::HookRuns(graph) => self
                .list(
                    format!("/api/hook-runs?graph={}&last={HOOK_RUNS}", encode(graph)),
                    "runs",
                )
                .await
                .map(Loaded::HookRuns),
            Resource::Graph(name) => {
                match self
                    .call::<Graph>(Call::Get(format!("/api/graphs/{}", encode(name))))
                    .await
                {
                    Ok(graph) => Ok(Loaded::Graph(Some(Box::new(graph)))),
                    Err(err)
                        if err
                            .downcast_ref::<canopy_client::ApiFailure>()
                            .is_some_and(|f| f.status == 404) =>
                    {
                        Ok(Loaded::Graph(None))
                    }
                    Err(err) => Err(err),
                }
            }
        };
        let _ = self.tx.send(Msg::Loaded {
            resource,
            seq,
            answer: answer.map_err(words),
        });
    }

    async fn list<T: DeserializeOwned>(&self, path: String, field: &str) -> Result<Vec<T>> {
        let mut answer: Value = self.call(Call::Get(path)).await?;
        serde_json::from_value(answer[field].take())
            .map_err(|err| anyhow!("unexpected answer from the daemon ({field}): {err}"))
    }

    async fn call<T: DeserializeOwned>(&self, call: Call) -> Result<T> {
        let client = self.client()?;
        let request = async {
            match call {
                Call::Get(path) => client.get(&path).await,
                Call::Post(path, body) => client.post(&path, &body).await,
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, request).await {
            Ok(answer) => answer,
            Err(_) => Err(anyhow!(
                "the daemon did not answer within {}s",
                CALL_TIMEOUT.as_secs()
            )),
        }
    }

    /// Follows the live feed for ever: `Connected` each time the stream opens (the app reads
    /// everything anew), `Feed` per event, `Disconnected` in words when it drops; reconnects
    /// with the last cursor (`Last-Event-ID`), reading the daemon's address and token anew.
    pub async fn follow(self) {
        let mut last_id: Option<String> = None;
        let mut wait = Duration::from_millis(100);
        loop {
            match self.stream_once(&mut last_id).await {
                Ok(()) => {
                    let _ = self
                        .tx
                        .send(Msg::Disconnected("the daemon ended the live feed".into()));
                    wait = Duration::from_millis(100);
                }
                Err(err) => {
                    let _ = self.tx.send(Msg::Disconnected(words(err)));
                }
            }
            self.forget_client();
            if self.tx.is_closed() {
                return;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RECONNECT_MAX);
        }
    }

    async fn stream_once(&self, last_id: &mut Option<String>) -> Result<()> {
        let client = self.client()?;
        let mut request = client.stream("/api/feed?follow=true&last=0");
        if let Some(id) = last_id.as_deref() {
            request = request.header("Last-Event-ID", id);
        }
        let mut events = SseEvents::open(request).await?;
        let _ = self.tx.send(Msg::Connected);
        while let Some(frame) = events.next().await {
            let frame = frame?;
            if frame.event == "feed" {
                // An envelope this TUI cannot read is left out: the next read shows its effect.
                if let Ok(envelope) = serde_json::from_value(frame.json()) {
                    let _ = self.tx.send(Msg::Feed(FeedEvent::from_envelope(envelope)));
                }
                if frame.id.is_some() {
                    *last_id = frame.id;
                }
            }
            // `lagged`: the missed events follow, read back from the feed.
        }
        Ok(())
    }
}

enum Call {
    Get(String),
    Post(String, Value),
}

/// An error as one line for the status bar.
fn words(err: anyhow::Error) -> String {
    format!("{err:#}").replace(['\n', '\r'], " ")
}

fn encode(segment: &str) -> String {
    form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}
