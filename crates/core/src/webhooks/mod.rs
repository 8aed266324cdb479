//! Webhook ingress: inbound HTTP on its own listener, turned into specs, commands and executor
//! runs, each delivery recorded durably before it is answered.
//!
//! - [`config`]: `[webhooks]` and `[projects.NAME.webhooks]`, checked by [`config::compile`]
//!   without reading a secret.
//! - The listener (the daemon's `webhook_listener`): a request for a hook this node serves passes its token (headers
//!   only), then its body is read (413 past `max_body_bytes`), its HMAC signature checked, its
//!   rules evaluated, and it is recorded -- `accepted`, or `ignored` with the reason -- together
//!   with its `webhook.received` event, in one write. Only then is it answered: 202 with the
//!   delivery id, or, with `?wait=true` / `respond = "sync"`, the handler's outcome.
//! - [`Ingress`]: the hooks' queues and workers. Each served hook has `concurrency` workers;
//!   accepted deliveries wait in its queue, which is the `accepted` rows of the database (an
//!   in-memory list of [`MEMORY_QUEUE`] ids in front of them), so nothing is dropped and a
//!   crash loses nothing. A worker takes a delivery through the daemon's drain, marks it
//!   `running` (committed before anything runs), runs the handler and records its end with
//!   `webhook.handled` or `webhook.failed`.
//! - A delivery its caller waits for (`?wait=true`, `respond = "sync"`) skips the queue when
//!   its hook has a slot free and nothing queued ([`Ingress::run_waited`]): it is recorded
//!   `running` in its first write and its handler runs at once, in a task on the listener's
//!   runtime: one write fewer than through the queue, and no hop to a worker.
//! - At start, deliveries found `running` had started before the daemon died: they become
//!   `interrupted_unknown` and are never replayed. Deliveries found `accepted` run.

pub mod auth;
pub mod backlog;
mod bodies;
pub mod config;
pub mod flood;
pub mod intake;
pub mod rules;
mod run;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, oneshot};

use crate::bus::Bus;
use crate::drain::Drain;
use canopy_executors::plugins::PluginHost;
use canopy_model::events::webhook::{Delivery as DeliveryRef, WebhookReceived};
use canopy_model::events::{Actor, Cause, Event};
pub use canopy_model::records::webhooks::Outcome;
use canopy_model::records::webhooks::{DedupView, Delivery, DeliveryStatus, Rotation, WebhookView};
use canopy_model::time::Timestamp;
use canopy_store::webhooks::NewDelivery;
use canopy_store::{Store, StoreError};
pub use config::{Hook, Webhooks};

/// Delivery ids a hook's queue holds in memory; past that they wait in the database only and
/// are read back as the queue empties.
pub const MEMORY_QUEUE: usize = 1024;
/// Longest recorded header value, in bytes.
pub const MAX_HEADER_VALUE: usize = 1024;
/// Longest `CANOPY_HOOK_ARG_*` value, in bytes.
pub const MAX_ARG_VALUE: usize = 8 * 1024;
/// Longest body in `$CANOPY_HOOK_BODY` and the `{{body}}` marker (the whole body is on stdin
/// and in `$CANOPY_HOOK_BODY_FILE`): an environment string must stay well under Linux's 128 KiB.
pub const MAX_BODY_MARKER: usize = 64 * 1024;

/// A request as recorded: everything but the credentials.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    /// The hook's selected headers (never the auth headers), bounded.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The sender's id of the delivery, when the hook deduplicates by one (`dedup_header`).
    pub sender_delivery_id: Option<String>,
}

/// A delivery as the store took it in.
#[derive(Debug, Clone)]
pub enum Taken {
    /// Recorded, with this id.
    New(String),
    /// Its sender's delivery id was seen within the hook's window: this is the first delivery
    /// that had it, and nothing new was recorded or runs.
    Duplicate(Outcome),
}

/// What went wrong taking in a delivery.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    #[error("no webhook `{0}` is configured")]
    UnknownHook(String),
    #[error("webhook `{0}` is not served on this node (its `nodes` filter)")]
    NotServed(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The webhook ingress (cheap to clone): the compiled hooks, their queues and workers.
#[derive(Clone)]
pub struct Ingress {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Ingress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingress").finish_non_exhaustive()
    }
}

struct Inner {
    store: Store,
    bus: Bus,
    plugins: PluginHost,
    backlog: Arc<dyn backlog::Backlog>,
    drain: Drain,
    data_dir: PathBuf,
    node: String,
    /// The compiled hooks now in force ([`Ingress::replace`] swaps them on a reload).
    webhooks: std::sync::RwLock<Arc<Webhooks>>,
    /// The served hooks' queues, by `(scope, id)`.
    queues: std::sync::RwLock<HashMap<(String, String), Arc<HookQueue>>>,
    /// Callers waiting for a delivery's outcome (`?wait=true`), by delivery id.
    waiters: Mutex<HashMap<String, Vec<oneshot::Sender<Outcome>>>>,
    /// Waited deliveries running now (see [`Ingress::run_waited`]): recorded only once their
    /// handler ends, they are shown from here until then.
    in_flight: Mutex<HashMap<String, Flying>>,
    /// The listener's address, once it listens.
    listen: OnceLock<String>,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Whether the listener is taking in a flood (handlers then make way for it).
    flood: flood::Flood,
    /// The files running handlers read their bodies from.
    bodies: bodies::BodyFiles,
    /// Why a served hook's handler does not validate (an executor mode no plugin serves), by
    /// `scope/id`, as found at start: `webhooks list` flags it.
    broken: Mutex<HashMap<String, String>>,
}

/// One served hook's queue.
struct HookQueue {
    /// The hook as the configuration in force has it (a reload may change it).
    hook: std::sync::RwLock<Arc<Hook>>,
    state: Mutex<QueueState>,
    ready: Notify,
    /// Its handlers running now (the workers holding a [`Slot`]).
    running: AtomicUsize,
    /// Its worker tasks: as many as the hook's `concurrency` (a reload that lowers it lets
    /// the surplus end).
    workers: AtomicUsize,
    /// Set when a reload took the hook out: its workers end (accepted deliveries stay in the
    /// database, and run if the hook comes back).
    retired: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct QueueState {
    pending: VecDeque<String>,
    /// Accepted deliveries wait in the database beyond `pending` (it overflowed, or the
    /// daemon just started): read them back once `pending` runs dry.
    backlog: bool,
}

impl HookQueue {
    /// A new queue for `hook`; deliveries accepted before (and left in the database) are read
    /// back first.
    fn new(hook: Arc<Hook>) -> Self {
        Self {
            hook: std::sync::RwLock::new(hook),
            state: Mutex::new(QueueState {
                pending: VecDeque::new(),
                backlog: true,
            }),
            ready: Notify::new(),
            running: AtomicUsize::new(0),
            workers: AtomicUsize::new(0),
            retired: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The hook as it is now.
    fn hook(&self) -> Arc<Hook> {
        self.hook
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts a reloaded hook in force; waiting workers look again (a lower `concurrency` lets
    /// the surplus end).
    fn set_hook(&self, hook: Arc<Hook>) {
        *self
            .hook
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
        self.ready.notify_waiters();
    }

    /// The hook was taken out by a reload: every worker ends.
    fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.ready.notify_waiters();
    }

    /// Whether the calling worker should end: the hook was taken out, or it is one more
    /// worker than the hook's `concurrency` (it is then no longer counted).
    fn worker_ends(&self) -> bool {
        if self.retired.load(Ordering::Acquire) {
            return true;
        }
        let limit = self.hook().concurrency;
        self.workers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |workers| {
                (workers > limit).then(|| workers - 1)
            })
            .is_ok()
    }

    fn push(&self, id: String) {
        {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if state.pending.len() < MEMORY_QUEUE {
                state.pending.push_back(id);
            } else {
                state.backlog = true;
            }
        }
        self.ready.notify_one();
    }

    /// The next id in memory, if any (the backlog is left for [`HookQueue::next`]).
    fn pop(&self) -> Option<String> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pending
            .pop_front()
    }

    /// The next id, or whether the backlog should be read back (taken by one worker only).
    fn next(&self) -> Next {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(id) = state.pending.pop_front() {
            return Next::Run(id);
        }
        if std::mem::take(&mut state.backlog) {
            return Next::Refill;
        }
        Next::Wait
    }
}

enum Next {
    Run(String),
    Refill,
    Wait,
}

impl HookQueue {
    /// A slot to run a handler in, while fewer than the hook's `concurrency` run (one during
    /// a flood, when the hook runs one handler at a time).
    fn claim(&self, flood: bool) -> Option<Slot<'_>> {
        // Lazily: a `Slot` made and dropped when none was taken would free someone else's.
        self.take(flood).then(|| Slot(self))
    }

    /// Counts one more handler running, if fewer than the limit run (see [`HookQueue::claim`]).
    fn take(&self, flood: bool) -> bool {
        let limit = if flood { 1 } else { self.hook().concurrency };
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < limit).then_some(running + 1)
            })
            .is_ok()
    }

    /// Counts one handler fewer running.
    fn release(&self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether nothing waits in the queue, in memory or in the database.
    fn is_empty(&self) -> bool {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.pending.is_empty() && !state.backlog
    }

    /// Wakes a worker when deliveries wait: a handler run outside the workers (see
    /// [`Ingress::run_waited`]) ended, and its slot may be the one a worker waits for.
    fn wake_if_waiting(&self) {
        if !self.is_empty() {
            self.ready.notify_one();
        }
    }
}

/// A handler of a hook running (or about to): held from its start until its end is recorded.
struct Slot<'a>(&'a HookQueue);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A hook's slot taken by a delivery run outside its workers (see
/// [`Ingress::run_waited`]). Freed, it wakes a worker when deliveries wait: the slot may be the
/// one a worker found taken.
struct WaitedSlot(Arc<HookQueue>);

impl WaitedSlot {
    fn claim(queue: &Arc<HookQueue>) -> Option<Self> {
        queue.take(false).then(|| Self(queue.clone()))
    }
}

impl Drop for WaitedSlot {
    fn drop(&mut self) {
        self.0.release();
        self.0.wake_if_waiting();
    }
}

/// The `webhook.received` event of `new`.
fn received_event(hook: &Hook, new: &NewDelivery) -> Event {
    Event::new(&WebhookReceived {
        delivery: delivery_ref(&new.id, hook),
        size: new.body.len() as u64,
        // A delivery run at once was accepted all the same.
        status: match new.status {
            DeliveryStatus::Running => DeliveryStatus::Accepted,
            other => other,
        },
        reason: new.reason.clone(),
    })
}

/// Who receives a hook's deliveries: the webhook itself, at depth 0.
fn receiver_cause(hook: &Hook) -> Cause {
    Cause {
        actor: Actor::Webhook(hook.key()),
        depth: 0,
    }
}

/// The answer to a copy of `first` its sender sent again: `first`'s outcome, marked duplicate.
fn duplicate_of(hook: &Hook, first: &Delivery) -> Outcome {
    tracing::info!(webhook = %hook.key(), first = %first.id, "a webhook delivery its sender sent before is not run again");
    Outcome {
        duplicate: true,
        ..Outcome::from(first)
    }
}

/// A waited delivery running now, as [`Inner::in_flight`] holds it.
struct Flying {
    delivery: Delivery,
    body: Vec<u8>,
    /// Its sender's delivery id, when the hook deduplicates by one.
    sender: Option<String>,
}

impl Flying {
    /// Whether this is a delivery of `scope/hook` its sender gave the id `sender`.
    fn sent_as(&self, scope: &str, hook: &str, sender: &str) -> bool {
        self.delivery.scope == scope
            && self.delivery.hook == hook
            && self.sender.as_deref() == Some(sender)
    }
}

/// A waited delivery registered as running (in memory only) until this is dropped.
struct InFlight {
    ingress: Ingress,
    id: String,
}

impl InFlight {
    /// Registers `flying` as running under `id`; when a delivery of the same hook its sender
    /// gave the same id runs already, registers nothing and returns that one.
    fn register(ingress: &Ingress, id: String, flying: Flying) -> Result<Self, Box<Delivery>> {
        let mut in_flight = ingress
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sender) = flying.sender.as_deref()
            && let Some(twin) = in_flight
                .values()
                .find(|f| f.sent_as(&flying.delivery.scope, &flying.delivery.hook, sender))
        {
            return Err(Box::new(twin.delivery.clone()));
        }
        in_flight.insert(id.clone(), flying);
        Ok(Self {
            ingress: ingress.clone(),
            id,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ingress
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// The pieces the ingress runs with.
pub struct Parts {
    pub store: Store,
    pub bus: Bus,
    pub plugins: PluginHost,
    /// Where `spec` handlers add their specs (the engine).
    pub backlog: Arc<dyn backlog::Backlog>,
    pub drain: Drain,
    pub data_dir: PathBuf,
    /// Turns true once the daemon is stopping: waits for an outcome end then.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

impl Ingress {
    /// The ingress of a configuration. Starts nothing: see [`Ingress::start`].
    pub fn new(parts: Parts, config: &crate::config::Config) -> anyhow::Result<Self> {
        let webhooks = config::compile(config)
            .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
        let node = config.node_name();
        // Deliveries accepted before the last stop run first (a new queue reads them back).
        let queues = webhooks
            .hooks
            .iter()
            .filter(|(_, hook)| hook.served)
            .map(|(key, hook)| (key.clone(), Arc::new(HookQueue::new(hook.clone()))))
            .collect();
        let flood = flood::Flood::new(webhooks.flood_rate);
        let bodies = bodies::BodyFiles::new(parts.data_dir.join("tmp").join("webhooks"));
        Ok(Self {
            inner: Arc::new(Inner {
                store: parts.store,
                bus: parts.bus,
                plugins: parts.plugins,
                backlog: parts.backlog,
                drain: parts.drain,
                data_dir: parts.data_dir,
                node,
                webhooks: std::sync::RwLock::new(Arc::new(webhooks)),
                queues: std::sync::RwLock::new(queues),
                waiters: Mutex::new(HashMap::new()),
                in_flight: Mutex::new(HashMap::new()),
                listen: OnceLock::new(),
                stopping: parts.stopping,
                flood,
                bodies,
                broken: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Marks deliveries that had started before the last stop `interrupted_unknown` (with a
    /// `webhook.failed` each), logs the ones waiting for a hook no longer served, and starts
    /// every served hook's workers and the retention loop.
    pub async fn start(&self) -> anyhow::Result<()> {
        let bus = self.inner.bus.clone();
        let webhooks = self.webhooks();
        let projects: HashMap<(String, String), Option<String>> = webhooks
            .hooks
            .iter()
            .map(|(key, hook)| (key.clone(), hook.project.clone()))
            .collect();
        let recorded = self
            .inner
            .store
            .write(move |tx| {
                let interrupted = tx.interrupt_started_deliveries(
                    "the daemon stopped while this delivery's handler ran; what it did is unknown, so it is not run again (`canopy webhooks redeliver` runs it anew)",
                )?;
                let events: Vec<Event> = interrupted
                    .iter()
                    .map(|d| {
                        let delivery = DeliveryRef {
                            delivery_id: d.id.clone(),
                            scope: d.scope.clone(),
                            hook: d.hook.clone(),
                            handler: d.handler.clone(),
                            project: projects
                                .get(&(d.scope.clone(), d.hook.clone()))
                                .cloned()
                                .flatten(),
                        };
                        run::ended_event(delivery, d.status, d.error.clone(), None)
                    })
                    .collect();
                let count = interrupted.len();
                let recorded = bus.record(tx, events, &Cause::user())?;
                Ok::<_, StoreError>((count, recorded))
            })
            .await;
        match recorded {
            Ok((count, recorded)) => {
                if count > 0 {
                    tracing::warn!(
                        deliveries = count,
                        "webhook deliveries whose handler was running when the daemon last stopped are marked interrupted_unknown"
                    );
                }
                self.inner.bus.publish(recorded).await;
            }
            Err(err) => return Err(err.into()),
        }
        // Body files of handlers that ran when the daemon died (each is written anew).
        let bodies = self.inner.data_dir.join("tmp").join("webhooks");
        match std::fs::remove_dir_all(&bodies) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(dir = %bodies.display(), error = %err, "cannot clear old webhook body files")
            }
        }
        let waiting = self.inner.store.read(|rd| rd.accepted_by_hook()).await?;
        let mut backlogged = std::collections::HashSet::new();
        for (scope, hook, count) in waiting {
            if self.queue(&scope, &hook).is_none() {
                tracing::warn!(hook = %format!("{scope}/{hook}"), deliveries = count, "accepted webhook deliveries wait for a hook this daemon does not serve; they run once it does");
            }
            backlogged.insert((scope, hook));
        }
        // A hook with nothing accepted left has no backlog to read back: its first waited
        // delivery may skip the queue at once, not only after a worker has looked.
        for ((scope, hook), queue) in self
            .inner
            .queues
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            if !backlogged.contains(&(scope.clone(), hook.clone())) {
                queue
                    .state
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .backlog = false;
            }
        }
        *self
            .inner
            .broken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.broken(&webhooks).await;
        let queues: Vec<Arc<HookQueue>> = self
            .inner
            .queues
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for queue in queues {
            self.spawn_workers(&queue);
        }
        tokio::spawn(retention(self.clone()));
        Ok(())
    }

    /// Why each served hook's handler does not validate (an executor mode no plugin serves),
    /// by `scope/id`: its deliveries fail until it does, and `webhooks list` flags it.
    async fn broken(&self, webhooks: &Webhooks) -> HashMap<String, String> {
        let mut broken = HashMap::new();
        for hook in webhooks.hooks.values().filter(|h| h.served) {
            if let config::Handler::Work { work, .. } = &hook.handler
                && let Err(err) = self
                    .inner
                    .plugins
                    .validate(work, run::WEBHOOK_MARKERS)
                    .await
            {
                tracing::warn!(webhook = %hook.key(), toml_path = %hook.toml_path, error = %err, "a webhook's handler does not validate; its deliveries will fail until it does");
                broken.insert(hook.key(), err.to_string());
            }
        }
        broken
    }

    /// Starts workers on `queue` until it has as many as its hook's `concurrency`.
    fn spawn_workers(&self, queue: &Arc<HookQueue>) {
        let handlers = handler_runtime();
        let limit = queue.hook().concurrency;
        while queue
            .workers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |workers| {
                (workers < limit).then_some(workers + 1)
            })
            .is_ok()
        {
            let work = worker(self.clone(), queue.clone());
            match handlers {
                Some(runtime) => drop(runtime.spawn(work)),
                None => drop(tokio::spawn(work)),
            }
        }
    }

    /// Puts a reloaded configuration's hooks in force: a hook added is served (with workers
    /// of its own, and the deliveries accepted for it before read back), a hook changed
    /// takes its new settings from its next delivery (one running ends as it began), a hook
    /// taken out is no longer served (its workers end; its accepted deliveries stay, and run if
    /// it comes back). The listener's own settings (its address, connection limits,
    /// `flood_rate`) are read at start only.
    pub async fn replace(&self, webhooks: Webhooks) {
        let broken = self.broken(&webhooks).await;
        // The listener keeps the settings it started with until a restart: so do the hooks in
        // force, so that `webhooks list` shows what the listener does.
        let current = self.webhooks();
        let webhooks = Arc::new(Webhooks {
            bind: current.bind.clone(),
            max_connections: current.max_connections,
            header_timeout: current.header_timeout,
            idle_timeout: current.idle_timeout,
            max_per_peer: current.max_per_peer,
            flood_rate: current.flood_rate,
            ..webhooks
        });
        let mut grown = Vec::new();
        {
            let mut queues = self
                .inner
                .queues
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut next = HashMap::new();
            for (key, hook) in webhooks.hooks.iter().filter(|(_, hook)| hook.served) {
                let queue = match queues.remove(key) {
                    Some(queue) => {
                        queue.set_hook(hook.clone());
                        queue
                    }
                    None => Arc::new(HookQueue::new(hook.clone())),
                };
                grown.push(queue.clone());
                next.insert(key.clone(), queue);
            }
            for (_, gone) in queues.drain() {
                gone.retire();
            }
            *queues = next;
            *self
                .inner
                .webhooks
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = webhooks;
            *self
                .inner
                .broken
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = broken;
        }
        for queue in grown {
            self.spawn_workers(&queue);
        }
    }

    /// The queue of the served hook `scope/id`.
    fn queue(&self, scope: &str, id: &str) -> Option<Arc<HookQueue>> {
        self.inner
            .queues
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(scope.to_string(), id.to_string()))
            .cloned()
    }

    /// The compiled hooks in force.
    pub fn webhooks(&self) -> Arc<Webhooks> {
        self.inner
            .webhooks
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// The listener's address (`http://host:port`), once it listens.
    /// Why `hook`'s handler does not validate, when it did not at start.
    pub fn problem(&self, hook: &Hook) -> Option<String> {
        self.inner
            .broken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&hook.key())
            .cloned()
    }

    pub fn listen(&self) -> Option<&str> {
        self.inner.listen.get().map(String::as_str)
    }

    pub fn set_listen(&self, url: String) {
        let _ = self.inner.listen.set(url);
    }

    pub fn data_dir(&self) -> &std::path::Path {
        &self.inner.data_dir
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The hook `scope/id`, served here or not.
    pub fn hook(&self, scope: &str, id: &str) -> Option<Arc<Hook>> {
        self.webhooks()
            .hooks
            .get(&(scope.to_string(), id.to_string()))
            .cloned()
    }

    /// Records a delivery (with its `webhook.received` event) in one write: `accepted`, or
    /// `ignored` with `reason`. Returns once it is committed; an accepted one is then queued.
    pub async fn record(
        &self,
        hook: &Arc<Hook>,
        received: Received,
        reason: Option<String>,
        redelivery_of: Option<String>,
        test: bool,
    ) -> Result<Taken, IngressError> {
        let status = if reason.is_some() {
            DeliveryStatus::Ignored
        } else {
            DeliveryStatus::Accepted
        };
        let new = self.new_delivery(hook, received, status, reason, redelivery_of, test);
        let id = new.id.clone();
        Ok(match self.commit(hook, new).await? {
            None => Taken::New(id),
            Some(first) => Taken::Duplicate(first),
        })
    }

    /// A delivery of `hook` to record, as it was received.
    fn new_delivery(
        &self,
        hook: &Hook,
        received: Received,
        status: DeliveryStatus,
        reason: Option<String>,
        redelivery_of: Option<String>,
        test: bool,
    ) -> NewDelivery {
        let received_at = Timestamp::now();
        NewDelivery {
            id: canopy_store::new_ordered_id(),
            scope: hook.scope.clone(),
            hook: hook.id.clone(),
            handler: hook.kind.clone(),
            node: self.inner.node.clone(),
            started_at: (status == DeliveryStatus::Running).then_some(received_at),
            status,
            reason,
            method: received.method,
            path: received.path,
            query: received.query,
            content_type: received.content_type,
            headers: received.headers,
            body: received.body,
            redelivery_of,
            test,
            received_at,
            sender_delivery_id: received.sender_delivery_id,
        }
    }

    /// Records `new` with its `webhook.received` event, unless its sender's delivery id was
    /// seen within the hook's window (recorded, or a waited copy running now): then nothing is
    /// written and the first delivery's outcome is returned. The look and the insert are one
    /// step on the store's writer, as a waited delivery's look and registration are (see
    /// [`Ingress::claim_waited`]), so of two copies sent at once exactly one runs.
    async fn commit(&self, hook: &Hook, new: NewDelivery) -> Result<Option<Outcome>, IngressError> {
        let event = received_event(hook, &new);
        let bus = self.inner.bus.clone();
        let cause = receiver_cause(hook);
        let seen_since = hook
            .dedup
            .as_ref()
            .map(|dedup| Timestamp::ago(dedup.window));
        let ingress = self.clone();
        let taken = self
            .inner
            .store
            .write(move |tx| {
                if let (Some(sender_id), Some(since)) = (&new.sender_delivery_id, &seen_since) {
                    if let Some(first) =
                        tx.delivery_by_sender_id(&new.scope, &new.hook, sender_id, *since)?
                    {
                        return Ok(Err(first));
                    }
                    if let Some(running) = ingress.flying_copy(&new.scope, &new.hook, sender_id) {
                        return Ok(Err(running));
                    }
                }
                tx.insert_delivery(&new)?;
                bus.record(tx, [event], &cause).map(Ok)
            })
            .await?;
        match taken {
            Ok(recorded) => {
                self.inner.bus.publish(recorded).await;
                Ok(None)
            }
            Err(first) => Ok(Some(duplicate_of(hook, &first))),
        }
    }

    /// Records a delivery whose caller waits for its outcome (`?wait=true`, `respond =
    /// "sync"`) and runs its handler at once, in the caller's task: it is held in memory while
    /// it runs and recorded in one write when it ends, with its result and events (a crash
    /// mid-run leaves no record; its caller sees the failure and sends it again). Taken when
    /// the hook has a slot free and nothing queued ahead, outside a flood and a planned stop;
    /// otherwise the request comes back unrecorded, for [`Ingress::record`] and the hook's
    /// queue.
    ///
    /// The handler runs in a task of its own on the caller's runtime (its thread picks it up
    /// next, no other thread is woken): a caller that goes away drops only its wait, never a
    /// started run.
    pub async fn run_waited(
        &self,
        hook: &Arc<Hook>,
        received: Received,
    ) -> Result<Result<Outcome, Received>, IngressError> {
        let Some(queue) = self.queue(&hook.scope, &hook.id) else {
            return Ok(Err(received));
        };
        if self.inner.flood.on_until().is_some() || !queue.is_empty() {
            return Ok(Err(received));
        }
        let Some(admitted) = self.inner.drain.admit() else {
            return Ok(Err(received));
        };
        let Some(slot) = WaitedSlot::claim(&queue) else {
            return Ok(Err(received));
        };
        let new = self.new_delivery(hook, received, DeliveryStatus::Running, None, None, false);
        let id = new.id.clone();
        let in_flight = match self.claim_waited(hook, &new).await? {
            Ok(in_flight) => in_flight,
            // One its sender sent before (recorded, or running now) is answered with that one
            // and not run again.
            Err(first) => return Ok(Ok(first)),
        };
        let (ingress, handler_hook) = (self.clone(), hook.clone());
        let running = tokio::spawn(async move {
            let hook = handler_hook;
            let _slot = slot;
            let _in_flight = in_flight;
            let running = run::Running::recorded(&new, admitted);
            run::run(&ingress, &hook, running.whole(new), || None)
                .await
                .0
        });
        match running.await {
            Ok(outcome) => Ok(Ok(outcome)),
            Err(err) => {
                // A panic in the run: nothing was recorded (its one write is its last step).
                tracing::error!(webhook = %hook.key(), delivery = %id, error = %err, "a waited webhook delivery's run ended abnormally; it is not recorded");
                Ok(Ok(Outcome {
                    delivery_id: id,
                    status: DeliveryStatus::Failed,
                    reason: None,
                    error: Some(
                        "the handler's run ended abnormally; the delivery is not recorded"
                            .to_string(),
                    ),
                    output: None,
                    result: None,
                    duration_ms: None,
                    duplicate: false,
                }))
            }
        }
    }

    /// Registers the waited delivery `new` as running, unless its sender sent it before (the
    /// same delivery id within the hook's window, recorded or running now): then the first
    /// one's outcome. With a sender's id, the look and the registration are one step on the
    /// store's writer, serialized with [`Ingress::commit`]'s look and insert: a copy that
    /// arrives queued while this one runs, or is recorded between a look and a registration,
    /// is found either way. (A waited delivery leaves the registry only after its record is
    /// committed, so at every moment one of the two holds it.)
    async fn claim_waited(
        &self,
        hook: &Hook,
        new: &NewDelivery,
    ) -> Result<Result<InFlight, Outcome>, IngressError> {
        let flying = Flying {
            delivery: new.recorded(),
            body: new.body.clone(),
            sender: new.sender_delivery_id.clone(),
        };
        let (Some(sender_id), Some(dedup)) = (new.sender_delivery_id.clone(), hook.dedup.as_ref())
        else {
            let in_flight = InFlight::register(
                self,
                new.id.clone(),
                Flying {
                    sender: None,
                    ..flying
                },
            );
            return Ok(in_flight.map_err(|first| duplicate_of(hook, &first)));
        };
        let (ingress, id, scope, name, since) = (
            self.clone(),
            new.id.clone(),
            hook.scope.clone(),
            hook.id.clone(),
            Timestamp::ago(dedup.window),
        );
        let claimed = self
            .inner
            .store
            .write(move |tx| {
                if let Some(first) = tx.delivery_by_sender_id(&scope, &name, &sender_id, since)? {
                    return Ok::<_, IngressError>(Err(Box::new(first)));
                }
                Ok(InFlight::register(&ingress, id, flying))
            })
            .await?;
        Ok(claimed.map_err(|first| duplicate_of(hook, &first)))
    }

    /// A waited delivery of `scope/hook` running now that its sender gave the id `sender`.
    fn flying_copy(&self, scope: &str, hook: &str, sender: &str) -> Option<Delivery> {
        self.inner
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .find(|f| f.sent_as(scope, hook, sender))
            .map(|f| f.delivery.clone())
    }

    /// The waited deliveries running now, newest first (they are recorded when they end).
    pub fn deliveries_in_flight(&self) -> Vec<Delivery> {
        let mut list: Vec<Delivery> = self
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(|f| f.delivery.clone())
            .collect();
        list.sort_by(|a, b| b.id.cmp(&a.id));
        list
    }

    /// A waited delivery running now, by id or unique id prefix, with its body.
    pub fn delivery_in_flight(&self, prefix: &str) -> Option<(Delivery, Vec<u8>)> {
        let in_flight = self
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut found = in_flight.iter().filter(|(id, _)| id.starts_with(prefix));
        match (found.next(), found.next()) {
            (Some((_, hit)), None) => Some((hit.delivery.clone(), hit.body.clone())),
            _ => None,
        }
    }

    /// Notes a delivery answered without waiting for its handler (see [`flood`]).
    pub fn note_answered_at_once(&self) {
        self.inner.flood.note();
    }

    /// Whether the listener is taking in a flood now (each hook then runs one handler at a
    /// time; see [`flood`]).
    pub fn flood_on(&self) -> bool {
        self.inner.flood.on_until().is_some()
    }

    /// Queues an accepted delivery on its hook's workers.
    pub fn enqueue(&self, hook: &Hook, id: String) -> Result<(), IngressError> {
        let queue = self
            .queue(&hook.scope, &hook.id)
            .ok_or_else(|| IngressError::NotServed(hook.key()))?;
        queue.push(id);
        Ok(())
    }

    /// Waits (at most `limit`) for a delivery to end; its state then, or as it is at the limit.
    /// Register before the delivery can end: call [`Ingress::watch`] first.
    pub async fn wait(
        &self,
        id: &str,
        watch: oneshot::Receiver<Outcome>,
        limit: Duration,
    ) -> Result<Outcome, IngressError> {
        let mut stopping = self.inner.stopping.clone();
        tokio::select! {
            ended = tokio::time::timeout(limit, watch) => {
                if let Ok(Ok(outcome)) = ended {
                    return Ok(outcome);
                }
            }
            // A planned stop: answer with the delivery as it is (it runs after the restart).
            _ = stopping.wait_for(|stopping| *stopping) => {}
        }
        self.forget(id);
        let id = id.to_string();
        let delivery = self.inner.store.read(move |rd| rd.delivery(&id)).await?;
        Ok(Outcome::from(&delivery))
    }

    /// Registers interest in a delivery's end (see [`Ingress::wait`]).
    pub fn watch(&self, id: &str) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(id.to_string())
            .or_default()
            .push(tx);
        rx
    }

    fn forget(&self, id: &str) {
        self.inner
            .waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    fn notify(&self, outcome: &Outcome) {
        let waiting = self
            .inner
            .waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&outcome.delivery_id);
        for waiter in waiting.into_iter().flatten() {
            let _ = waiter.send(outcome.clone());
        }
    }

    /// Runs a recorded, accepted delivery now, outside the hook's queue (`webhooks test`, a
    /// redelivery of a hook this node does not serve); its outcome.
    pub async fn run_now(&self, hook: &Arc<Hook>, id: &str) -> Result<Outcome, IngressError> {
        let watch = self.watch(id);
        match run::start(self, id).await {
            Ok(running) => {
                run::run(self, hook, running, || None).await;
            }
            Err(run::NotStarted::Refused) => self.forget(id),
            Err(run::NotStarted::Taken) => {}
        }
        self.wait(id, watch, hook.timeout + Duration::from_secs(30))
            .await
    }

    /// Records a new delivery of `id`'s request (the same body and headers), accepted, and
    /// queues it on its hook; with `wait`, the receiver of its outcome (see [`Ingress::wait`]).
    /// The hook's rules are not applied again: a redelivery is the operator's decision.
    pub async fn redeliver(
        &self,
        id: &str,
        wait: bool,
    ) -> Result<(Arc<Hook>, String, Option<oneshot::Receiver<Outcome>>), RedeliverError> {
        let prefix = id.to_string();
        let (old, body) = self
            .inner
            .store
            .read(move |rd| {
                let id = rd.resolve_delivery(&prefix)?;
                rd.delivery_with_body(&id)
            })
            .await?;
        let hook = self
            .hook(&old.scope, &old.hook)
            .ok_or_else(|| RedeliverError::Gone(format!("{}/{}", old.scope, old.hook)))?;
        if !hook.served {
            return Err(IngressError::NotServed(hook.key()).into());
        }
        let received = Received {
            method: old.method,
            path: old.path,
            query: old.query,
            content_type: old.content_type,
            headers: old.headers,
            body,
            // A redelivery is asked for: it runs again whatever the sender's id.
            sender_delivery_id: None,
        };
        let new = match self
            .record(&hook, received, None, Some(old.id), old.test)
            .await?
        {
            Taken::New(id)
            | Taken::Duplicate(Outcome {
                delivery_id: id, ..
            }) => id,
        };
        let watch = wait.then(|| self.watch(&new));
        self.enqueue(&hook, new.clone())?;
        Ok((hook, new, watch))
    }
}

/// A redelivery that cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum RedeliverError {
    #[error("webhook `{0}` is no longer configured; the delivery cannot run again")]
    Gone(String),
    #[error(transparent)]
    Ingress(#[from] IngressError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What every webhook event says about a delivery of this hook.
fn delivery_ref(id: &str, hook: &Hook) -> DeliveryRef {
    DeliveryRef {
        delivery_id: id.to_string(),
        scope: hook.scope.clone(),
        hook: hook.id.clone(),
        handler: hook.kind.clone(),
        project: hook.project.clone(),
    }
}

/// The threads webhook handlers run on, apart from the daemon's runtime (one per core, for the
/// daemon's life); `None` when they cannot start, and the handlers share the daemon's threads.
///
/// A handler run does work of its own between its waits -- a wasm instance, the process's
/// setup, the supervisor's sweep -- and tokio runs a worker thread's tasks one after another:
/// on shared threads, every request of a burst waited behind the handler runs queued on its
/// thread. On threads of their own, the kernel shares the cores between answering and running
/// by time slice. Measured here with 8 handlers at once: 4,600 accepted requests/s on shared
/// threads, 8,500 apart, with as many commands completed per second.
///
/// The threads run [`HANDLER_NICE`] steps below the daemon's: when both want a core, the
/// listener gets it first and a handler's bookkeeping gets the rest; when nothing else runs, a
/// handler gets all of it. Where the kernel groups processes (autogroup, a service's cgroup),
/// nice weighs the daemon's own threads against each other, not the daemon against other
/// programs. The handlers' processes start from the spawner threads, at the daemon's own
/// priority. Measured here during a flood (see [`flood`]): 11,300 accepted requests/s at the
/// same priority, 13,000 at nice 10 (16,000 with the processes at nice 10 too, which a user's
/// command should not pay for).
fn handler_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
            // Every thread of the runtime runs at the daemon's priority lowered by
            // HANDLER_NICE, whichever thread started it (a thread inherits its creator's).
            let nice = thread_nice().map(|base| base.saturating_add(HANDLER_NICE).min(19));
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("canopy-webhook")
                .on_thread_start(move || {
                    if let Some(nice) = nice {
                        set_thread_nice(nice);
                    }
                })
                .enable_all()
                .build()
                .inspect_err(|err| {
                    tracing::warn!(error = %err, "cannot start the webhook handlers' threads; handlers share the daemon's");
                })
                .ok()
        })
        .as_ref()
}

/// How many steps of nice(1) the handlers' threads run below the daemon's other threads.
pub const HANDLER_NICE: i32 = 10;

/// The calling thread's nice value (nice is a thread's own on Linux), if it can be read.
fn thread_nice() -> Option<i32> {
    // SAFETY: gettid(2) takes no arguments and cannot fail.
    let tid = libc::id_t::try_from(unsafe { libc::gettid() }).ok()?;
    // SAFETY: getpriority(2) on this thread's id reads its nice value and nothing else. -1 is a
    // nice value as well as the error return: an error is told apart by errno.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
    }
}

/// Sets the calling thread's nice value (a thread may lower its priority, not raise it).
fn set_thread_nice(nice: i32) {
    // SAFETY: gettid(2) takes no arguments and cannot fail.
    let Ok(tid) = libc::id_t::try_from(unsafe { libc::gettid() }) else {
        return;
    };
    // SAFETY: setpriority(2) on this thread's id changes its nice value and nothing else.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower a webhook handler thread's priority");
    }
}

/// One worker of a hook: runs its queue's deliveries, one at a time, until a planned stop.
/// While the queue has more, each delivery's end is recorded in the write that starts the
/// next one. During a flood (see [`flood`]) only one worker of the hook runs; the others wait
/// for the flood to end.
async fn worker(ingress: Ingress, queue: Arc<HookQueue>) {
    let mut chained: Option<(run::Running, Slot<'_>)> = None;
    loop {
        let (running, slot) = match chained.take() {
            Some(chained) => chained,
            None => {
                if queue.worker_ends() {
                    return;
                }
                let ready = queue.ready.notified();
                tokio::pin!(ready);
                // Registered before looking, so a push (or a slot freed by a waited delivery
                // run outside the workers) in between still wakes this worker.
                ready.as_mut().enable();
                let flood = ingress.inner.flood.on_until();
                let Some(slot) = queue.claim(flood.is_some()) else {
                    match flood {
                        Some(until) => tokio::time::sleep_until(until.into()).await,
                        None => ready.await,
                    }
                    continue;
                };
                match queue.next() {
                    Next::Run(id) => match run::start(&ingress, &id).await {
                        Ok(running) => (running, slot),
                        Err(run::NotStarted::Taken) => continue,
                        // A planned stop: the delivery stays accepted and runs after the restart.
                        Err(run::NotStarted::Refused) => {
                            ingress.notify(&Outcome {
                                delivery_id: id,
                                status: DeliveryStatus::Accepted,
                                reason: Some(
                                    "the daemon is stopping; the delivery runs after it restarts"
                                        .to_string(),
                                ),
                                error: None,
                                output: None,
                                result: None,
                                duration_ms: None,
                                duplicate: false,
                            });
                            return;
                        }
                    },
                    Next::Refill => {
                        drop(slot);
                        refill(&ingress, &queue).await;
                        continue;
                    }
                    Next::Wait => {
                        drop(slot);
                        ready.await;
                        continue;
                    }
                }
            }
        };
        let then = || {
            // During a flood, a worker that is not the hook's only one running stops here and
            // waits for the flood to end.
            if ingress.inner.flood.on_until().is_some() && queue.running.load(Ordering::Acquire) > 1
            {
                return None;
            }
            // Admitted first: a stop that has begun leaves the queue as it is, and the next
            // turn of the loop reports the delivery refused.
            let admitted = ingress.inner.drain.admit()?;
            Some((queue.pop()?, admitted))
        };
        chained = run::run(&ingress, &queue.hook(), running, then)
            .await
            .1
            .map(|running| (running, slot));
    }
}

/// Reads a hook's oldest accepted deliveries back into its queue.
async fn refill(ingress: &Ingress, queue: &Arc<HookQueue>) {
    let hook = queue.hook();
    let (scope, id) = (hook.scope.clone(), hook.id.clone());
    let ids = match ingress
        .inner
        .store
        .read(move |rd| rd.accepted_deliveries(&scope, &id, MEMORY_QUEUE))
        .await
    {
        Ok(ids) => ids,
        Err(err) => {
            tracing::error!(hook = %hook.key(), error = %err, "cannot read a webhook's queued deliveries; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut state = queue
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.backlog = true;
            return;
        }
    };
    let full = ids.len() >= MEMORY_QUEUE;
    {
        let mut state = queue
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in ids {
            if state.pending.len() < MEMORY_QUEUE {
                state.pending.push_back(id);
            } else {
                state.backlog = true;
            }
        }
        // A full read may have left some behind.
        state.backlog |= full;
    }
    queue.ready.notify_waiters();
}

/// Empties idle body files, hourly (old deliveries are pruned by [`crate::retention`]).
async fn retention(ingress: Ingress) {
    let mut interval = tokio::time::interval(Duration::from_secs(3600));
    loop {
        interval.tick().await;
        ingress.inner.bodies.clear_idle();
    }
}

/// A hook as `webhooks list` / `show` show it: what the daemon resolved, every secret redacted
/// (a secret's source is named, never its value), and the rest of its entry as written.
pub fn hook_view(hook: &Hook, listen: Option<&str>, problem: Option<String>) -> WebhookView {
    let entry = match serde_json::to_value(&hook.entry) {
        Ok(Value::Object(entry)) => entry,
        _ => serde_json::Map::new(),
    };
    // How each secret can be changed while the daemon runs.
    let rotation = |secret: Option<&config::Secret>| match secret {
        Some(config::Secret::Env(name)) => Some(format!(
            "${name} is read from the daemon's environment, which is fixed while it runs: changing it needs a restart (a `_file` source is read at every request and rotates live)"
        )),
        Some(config::Secret::File(_)) => {
            Some("read at every request: replacing the file rotates it at once".to_string())
        }
        Some(config::Secret::Inline(_)) => Some(
            "in canopy.toml, whose [webhooks] is read at start: changing it needs a restart"
                .to_string(),
        ),
        None => None,
    };
    WebhookView {
        scope: hook.scope.clone(),
        id: hook.id.clone(),
        key: hook.key(),
        kind: hook.entry.kind.clone(),
        path: hook.url_path(),
        url: listen
            .filter(|_| hook.served)
            .map(|l| format!("{l}{}", hook.url_path())),
        served: hook.served,
        token: hook.token.as_ref().map(config::Secret::describe),
        hmac: hook.hmac.as_ref().map(config::Secret::describe),
        rotation: Rotation {
            token: rotation(hook.token.as_ref()),
            hmac: rotation(hook.hmac.as_ref()),
        },
        auth: hook.auth,
        provider: hook.provider.as_str().to_string(),
        dedup: hook.dedup.as_ref().map(|dedup| DedupView {
            header: dedup.header.clone(),
            window_secs: dedup.window.as_secs(),
        }),
        respond: hook.respond,
        max_body_bytes: u64::try_from(hook.max_body).unwrap_or(u64::MAX),
        concurrency: u64::try_from(hook.concurrency).unwrap_or(u64::MAX),
        timeout_secs: hook.timeout.as_secs(),
        checkout: hook.project.clone(),
        toml_path: hook.toml_path.clone(),
        problem,
        deliveries: None,
        entry: WebhookView::rest_of(entry),
    }
}
