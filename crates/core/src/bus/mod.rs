//! The bus: every event Canopy emits goes through here, once.
//!
//! An emitter records its events **inside the write that makes them true** ([`Bus::record`]):
//! each event is appended to the feed with its envelope, and every hook it fires -- from each
//! hook source ([`source`]: a graph's `hooks` map, the daemon hooks of `canopy.toml`, the
//! projects' hooks) -- is recorded as a queued hook run, in the same transaction. Once that has committed the emitter publishes them ([`Bus::publish`]):
//! live feed readers get the envelopes and the hook batches start, each holding one of
//! [`CONCURRENT_BATCHES`] slots (an emitter waits while every slot is busy: nothing queues
//! without bound). An emitter with no write of its own uses [`Bus::emit`], which is the two.
//!
//! So an event and the hook runs it fires are durable together, before the emitter goes on, at
//! the cost of one transaction (shared with other writes by the store's group commit).
//!
//! Hooks run off the emitter's path, the hooks of one source and event one after another in
//! declaration order; a hook that fails is recorded and never stops the next. A hook's process
//! acts as `hook:<name>` one dispatch level deeper than its event; events deeper than the
//! configured maximum record their hook runs as `dropped` and run nothing, so a loop of hooks
//! ends by itself.

mod batch;
mod select;
pub(crate) mod source;

use std::sync::{Arc, RwLock};

use tokio::sync::{Semaphore, broadcast};

use crate::hooks::daemon::DaemonHooks;
use canopy_executors::plugins::PluginHost;
use canopy_model::events::{Cause, Envelope, Event};
use canopy_model::hook_keys::Firing;
use canopy_store::{Store, StoreError, Tx};

pub use batch::Unstarted;
pub(crate) use batch::{Queued, hook_run_event};

/// Hook batches that may run at the same time.
pub const CONCURRENT_BATCHES: usize = 32;

/// Envelopes a live feed reader may fall behind by before it is told it lagged.
pub const LIVE_BUFFER: usize = 1024;

/// The events of one write, recorded; publish them once it has committed.
#[must_use = "recorded events must be published once their write commits"]
#[derive(Default)]
pub struct Recorded {
    envelopes: Vec<Arc<Envelope>>,
    batches: Vec<Unstarted>,
}

impl std::fmt::Debug for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorded")
            .field("envelopes", &self.envelopes.len())
            .field("batches", &self.batches.len())
            .finish()
    }
}

impl Recorded {
    /// How many events were recorded.
    pub fn events(&self) -> usize {
        self.envelopes.len()
    }

    /// The feed rows recorded, in order.
    pub fn envelopes(&self) -> &[Arc<Envelope>] {
        &self.envelopes
    }

    /// The ids of the hook runs recorded, in firing order.
    pub fn hook_run_ids(&self) -> Vec<String> {
        self.batches.iter().flat_map(Unstarted::ids).collect()
    }

    pub fn extend(&mut self, other: Recorded) {
        self.envelopes.extend(other.envelopes);
        self.batches.extend(other.batches);
    }
}

/// The bus (cheap to clone).
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    plugins: PluginHost,
    runtime: tokio::runtime::Handle,
    slots: Arc<Semaphore>,
    daemon: RwLock<Arc<DaemonHooks>>,
    /// The project hooks in force (none until the daemon sets them).
    projects: RwLock<Arc<crate::projects::Projects>>,
    live: broadcast::Sender<Arc<Envelope>>,
    /// Where a daemon hook with no project and no `cwd` runs.
    fallback_dir: std::path::PathBuf,
    drain: crate::drain::Drain,
    /// The graph-hook source, for test firings (`hooks test --execute`).
    graph_hooks: Arc<crate::hooks::graph_source::GraphHooks>,
    /// Where hooks are declared, in the order their batches are recorded for one event.
    sources: Vec<Arc<dyn source::HookSource>>,
    /// Each hook's recent firings: a hook firing too often is tripped.
    breakers: crate::hooks::breaker::Breakers,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus").finish_non_exhaustive()
    }
}

impl Bus {
    /// A bus on the current tokio runtime.
    pub fn new(
        store: Store,
        plugins: PluginHost,
        daemon: DaemonHooks,
        fallback_dir: std::path::PathBuf,
    ) -> Self {
        let (live, _) = broadcast::channel(LIVE_BUFFER);
        let breakers =
            crate::hooks::breaker::Breakers::new(daemon.breaker_firings, daemon.breaker_window);
        let graph_hooks = Arc::new(crate::hooks::graph_source::GraphHooks::default());
        Self {
            inner: Arc::new(Inner {
                store,
                plugins,
                runtime: tokio::runtime::Handle::current(),
                slots: Arc::new(Semaphore::new(CONCURRENT_BATCHES)),
                daemon: RwLock::new(Arc::new(daemon)),
                projects: RwLock::default(),
                live,
                fallback_dir,
                drain: crate::drain::Drain::default(),
                sources: source::sources(graph_hooks.clone()),
                graph_hooks,
                breakers,
            }),
        }
    }

    /// The catalog entries of every hook source, in the order their batches are recorded for
    /// one event, those `filter` lets through; only those declared in `source`, when given (an
    /// entry says where it was declared: a runtime hook from a profile is the config's).
    pub fn catalog(
        &self,
        source: Option<canopy_model::records::hook_runs::HookSourceKind>,
        filter: &crate::hooks::catalog::CatalogFilter<'_>,
    ) -> Vec<crate::hooks::catalog::CatalogEntry> {
        self.inner
            .sources
            .iter()
            .flat_map(|s| s.catalog(filter))
            .filter(|entry| source.is_none_or(|kind| kind == entry.source))
            .collect()
    }

    /// The daemon hooks and identity in force.
    pub fn daemon_hooks(&self) -> Arc<DaemonHooks> {
        self.inner
            .daemon
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts new daemon hooks in force (a config reload); events recorded from now on use them.
    /// Every tripped hook is put back.
    pub fn set_daemon_hooks(&self, hooks: DaemonHooks) {
        for hook in self
            .inner
            .breakers
            .reset_all(hooks.breaker_firings, hooks.breaker_window)
        {
            tracing::info!(source = %hook.source, hook = %hook.hook_name, dropped = hook.dropped, "a tripped hook is put back by the config reload");
        }
        *self
            .inner
            .daemon
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(hooks);
    }

    /// The hooks tripped now (see [`crate::hooks::breaker`]).
    pub fn tripped_hooks(&self) -> Vec<crate::hooks::breaker::TrippedHook> {
        self.inner.breakers.tripped()
    }

    /// Puts back the tripped hooks named `name`; returns them.
    pub fn reset_hook(&self, name: &str) -> Vec<crate::hooks::breaker::TrippedHook> {
        let reset = self.inner.breakers.reset(name);
        for hook in &reset {
            tracing::info!(source = %hook.source, hook = %hook.hook_name, dropped = hook.dropped, "a tripped hook is put back");
        }
        reset
    }

    /// The project hooks in force.
    pub fn project_hooks(&self) -> Arc<crate::projects::Projects> {
        self.inner
            .projects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts new project hooks in force (at start, and at a config reload); project events
    /// recorded from now on fire them.
    pub fn set_project_hooks(&self, projects: crate::projects::Projects) {
        *self
            .inner
            .projects
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(projects);
    }

    /// This daemon's node name.
    pub fn node(&self) -> String {
        self.daemon_hooks().identity.node.clone()
    }

    /// Live envelopes, from now on. A reader that falls more than [`LIVE_BUFFER`] behind gets
    /// `Lagged(n)` and should read the gap back from the feed.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Envelope>> {
        self.inner.live.subscribe()
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// On a database shared with other daemons: their feed events, live, for this daemon's
    /// followers (`canopy feed --follow`). Each notice that the feed grew reads the rows after
    /// the last one seen, in the order of their ids, and passes on the other nodes' (this
    /// daemon published its own as it recorded them). A row another daemon has not committed
    /// yet is waited for, not passed by (see `Rd::feed_settled`). Daemon hooks do not fire on
    /// them here: a daemon hook acts on the events of the node it runs on. `None` on SQLite.
    pub fn relay_other_nodes(&self) -> Option<tokio::task::JoinHandle<()>> {
        const PAGE: usize = 500;
        const GAP_RETRY: std::time::Duration = std::time::Duration::from_millis(10);
        let notices = self.inner.store.feed_notices()?;
        let bus = self.clone();
        Some(tokio::spawn(async move {
            let store = bus.inner.store.clone();
            let me = store.node().to_string();
            let mut cursor = match store.read(|rd| rd.feed_head()).await {
                Ok(head) => head,
                Err(err) => {
                    tracing::error!(error = %err, "cannot read the feed's head; other nodes' events are not followed live");
                    return;
                }
            };
            let mut gap = canopy_store::feed::FeedGap::default();
            let mut waiting = false;
            loop {
                if waiting {
                    // A row is missing: look again soon, or at the next notice.
                    let _ = tokio::time::timeout(GAP_RETRY, notices.notified()).await;
                } else {
                    notices.notified().await;
                }
                loop {
                    let read = store
                        .read(move |rd| {
                            let settled = rd.feed_settled(cursor, &mut gap)?;
                            let query = canopy_store::feed::FeedQuery {
                                since: Some(canopy_store::feed::Since::Cursor(cursor)),
                                until: Some(settled.through),
                                limit: PAGE,
                                ..Default::default()
                            };
                            Ok::<_, StoreError>((rd.feed(&query)?, settled, gap))
                        })
                        .await;
                    let (rows, settled) = match read {
                        Ok((rows, settled, seen)) => {
                            gap = seen;
                            (rows, settled)
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "cannot read other nodes' feed events; trying at the next notice");
                            break;
                        }
                    };
                    let full = rows.len() == PAGE;
                    for row in rows {
                        cursor = row.id;
                        if row.node != me {
                            // No follower is not an error.
                            let _ = bus.inner.live.send(Arc::new(row));
                        }
                    }
                    if !full {
                        cursor = cursor.max(settled.through);
                        waiting = settled.waiting;
                        break;
                    }
                }
            }
        }))
    }

    /// Where a hook with no workdir of its own runs.
    pub(crate) fn fallback_dir(&self) -> &std::path::Path {
        &self.inner.fallback_dir
    }

    /// The executor host hooks run on.
    pub fn plugins(&self) -> &PluginHost {
        &self.inner.plugins
    }

    /// The daemon's drain: work that a planned stop must wait for is admitted through it.
    pub fn drain(&self) -> &crate::drain::Drain {
        &self.inner.drain
    }

    /// Records events inside the caller's write: their feed rows, and the hook runs they fire
    /// (a graph's own hooks, read as stored now, daemon hooks, project hooks).
    pub fn record(
        &self,
        tx: &Tx<'_>,
        events: impl IntoIterator<Item = Event>,
        cause: &Cause,
    ) -> Result<Recorded, StoreError> {
        let mut recorded = Recorded::default();
        for event in events {
            recorded.extend(self.record_one(tx, event, cause)?);
        }
        Ok(recorded)
    }

    /// Records a graph-hook firing as test runs (`hooks test --execute`): only the graph's
    /// hooks (only hook `only`, when given), no feed row; `depth` is the dispatch depth its
    /// event would have had.
    pub async fn fire_test(
        &self,
        firing: Firing,
        only: Option<usize>,
        depth: u32,
    ) -> Result<Vec<String>, StoreError> {
        let bus = self.clone();
        let recorded = self
            .inner
            .store
            .write(move |tx| {
                let batch = select::record_graph_test(&bus, tx, firing, only, depth)?;
                Ok::<_, StoreError>(Recorded {
                    envelopes: Vec::new(),
                    batches: batch.into_iter().collect(),
                })
            })
            .await?;
        let ids = recorded.hook_run_ids();
        self.publish(recorded).await;
        Ok(ids)
    }

    fn record_one(
        &self,
        tx: &Tx<'_>,
        mut event: Event,
        cause: &Cause,
    ) -> Result<Recorded, StoreError> {
        let firing = event.firing.take();
        let daemon = self.daemon_hooks();
        let envelope = Arc::new(tx.append_feed(&daemon.identity.node, event, cause)?);
        let batches = select::record_hooks(self, tx, &daemon, &envelope, firing)?;
        Ok(Recorded {
            envelopes: vec![envelope],
            batches,
        })
    }

    /// After the recording write committed: live readers get the envelopes, and the hook
    /// batches start (waiting for slots while every one is busy).
    pub fn publish(&self, recorded: Recorded) -> futures_util::future::BoxFuture<'_, ()> {
        // Boxed: a hook run's end publishes its own event, which may start hooks in turn.
        Box::pin(async move {
            for envelope in recorded.envelopes {
                // No reader is not an error.
                let _ = self.inner.live.send(envelope);
            }
            for batch in recorded.batches {
                batch.start(&self.inner.slots).await;
            }
        })
    }

    /// [`Bus::publish`] from inside a running hook batch (a hook run's own `hook.run.*` event):
    /// the batches it starts never wait for a slot here, since the caller holds one and every
    /// slot may be held by a batch doing the same. A batch that finds no free slot waits for one
    /// in a task of its own; there are at most as many as hook runs ending at once.
    pub(crate) fn publish_from_batch(&self, recorded: Recorded) {
        for envelope in recorded.envelopes {
            let _ = self.inner.live.send(envelope);
        }
        for batch in recorded.batches {
            batch.start_detached(&self.inner.slots);
        }
    }

    /// Records events in a write of their own, then publishes them.
    pub async fn emit(&self, events: Vec<Event>, cause: Cause) -> Result<(), StoreError> {
        let bus = self.clone();
        let recorded = self
            .inner
            .store
            .write(move |tx| bus.record(tx, events, &cause))
            .await?;
        self.publish(recorded).await;
        Ok(())
    }

    /// [`Bus::emit`] for an emitter that cannot do anything about a failure: it is logged.
    pub async fn emit_logged(&self, events: Vec<Event>) {
        let names: Vec<&str> = events.iter().map(Event::name).collect();
        let names = names.join(", ");
        if let Err(err) = self.emit(events, Cause::current()).await {
            tracing::error!(events = %names, error = %err, "cannot record events");
        }
    }
}
