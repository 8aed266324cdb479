//! The one wasmtime [`Engine`] of a daemon, its epoch ticker, the admission gate in front of its
//! instance pool, and the on-disk cache of compiled components.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use canopy_model::records::plugins::{LoadInfo, LoadSource};
use canopy_store::Store;

/// How often the epoch advances; deadlines are counted in these ticks.
pub const TICK: Duration = Duration::from_millis(5);

/// Bytes of a call's linear memory reset in place (rather than unmapped) when the call ends.
const KEEP_RESIDENT: usize = 2 * 1024 * 1024;

/// Builds the engine: component model, pooling allocator sized for `max_calls` calls at once,
/// epoch interruption.
pub fn new_engine(memory_cap: usize, max_calls: u32) -> Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    // A component holds several core instances, memories and tables (a componentize-py guest:
    // 14 core instances). Admission counts component instances; the other limits leave room
    // for every admitted call to be a large one. Slots cost address space, not memory.
    pool.total_component_instances(max_calls)
        .total_core_instances(max_calls * 16)
        .total_memories(max_calls * 4)
        .total_tables(max_calls * 16)
        .total_stacks(max_calls)
        .max_memory_size(memory_cap.saturating_add(1 << 20))
        // Reset a finished call's memory by rewriting the pages it touched instead of unmapping
        // them: no page faults on the next call, no TLB shootdown per call (Linux 6.7+ finds
        // the touched pages with PAGEMAP_SCAN; elsewhere the first bytes are kept resident).
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(64 * 1024)
        .async_stack_keep_resident(128 * 1024)
        // Give what is not kept back to the kernel in batches.
        .decommit_batch_size(16);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config)
        .map_err(anyhow::Error::from)
        .context("cannot create the wasmtime engine")?;
    start_ticker(&engine);
    Ok(engine)
}

/// Advances the engine's epoch every [`TICK`] while a call's store is alive, until the engine
/// is dropped. With no store alive nothing needs the epoch, and the ticker sleeps: an idle
/// daemon does not wake 200 times a second.
fn start_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("canopy-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
                Ticking::wait_for_stores(IDLE_CHECK);
            }
        });
    if let Err(err) = spawned {
        tracing::error!(%err, "cannot start the epoch ticker; plugin deadlines will not be enforced");
    }
}

/// How often a sleeping ticker looks whether its engine is gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Stores alive (of any engine of this process), and the sleeping tickers' wake-up.
static LIVE_STORES: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// Held by every call's store for its whole life: the epoch advances while one is held.
#[derive(Debug)]
pub(crate) struct Ticking(());

impl Ticking {
    /// Counts a store as alive, waking the ticker when it slept.
    pub(crate) fn start() -> Self {
        let (count, wake) = &LIVE_STORES;
        let mut live = count
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *live += 1;
        if *live == 1 {
            wake.notify_all();
        }
        Self(())
    }

    /// Returns at once while a store is alive; else once one is, or after `limit`.
    fn wait_for_stores(limit: Duration) {
        let (count, wake) = &LIVE_STORES;
        let live = count
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = wake
            .wait_timeout_while(live, limit, |live| *live == 0)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        let mut live = LIVE_STORES
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *live = live.saturating_sub(1);
    }
}

/// The threads long plugin calls run on: a runtime of their own, apart from the daemon's.
///
/// A call starts on the caller's thread: most calls end within microseconds, and a hop to
/// another thread and back would cost more than the call. A call whose guest has run for
/// [`INLINE_BUDGET`] (a guest yields on every epoch tick, so it is polled again by then) moves
/// to these threads for the rest of its life; one that waits in a host call (a command's
/// process) takes no time of the caller's threads while it waits, and stays. There it competes with other long calls, while the
/// API, the engine and the scheduler keep the main runtime's threads, which the kernel runs as
/// soon as they wake.
pub struct PluginRuntime {
    runtime: Option<tokio::runtime::Runtime>,
}

/// How long a guest may run on the caller's runtime before its call moves to the plugin threads.
pub const INLINE_BUDGET: Duration = Duration::from_millis(2);

impl std::fmt::Debug for PluginRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRuntime").finish_non_exhaustive()
    }
}

impl PluginRuntime {
    pub fn new() -> Result<Self> {
        let threads = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("canopy-plugin")
            .enable_all()
            .build()
            .context("cannot start the plugin runtime")?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Runs `work` to its end: here while it is short, then on the plugin threads. Dropping the
    /// returned future (a cancelled request) cancels the work wherever it is.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, tokio::task::JoinError>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let mut work = Box::pin(work);
        // Time spent inside the guest's polls: a call parked in a host call (a process it
        // waits for) costs nothing here and stays, however long it takes.
        let mut busy = Duration::ZERO;
        let done = std::future::poll_fn(|cx| {
            let polled = Instant::now();
            let poll = work.as_mut().poll(cx);
            busy += polled.elapsed();
            match poll {
                std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
                std::task::Poll::Pending if busy >= INLINE_BUDGET => std::task::Poll::Ready(None),
                std::task::Poll::Pending => std::task::Poll::Pending,
            }
        })
        .await;
        if let Some(output) = done {
            return Ok(output);
        }
        let Some(runtime) = &self.runtime else {
            return Ok(work.await);
        };
        struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
        impl<T> Drop for AbortOnDrop<T> {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let mut task = AbortOnDrop(runtime.spawn(work));
        (&mut task.0).await
    }
}

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        // A runtime cannot be dropped from inside another one; let its threads wind down alone.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The gate in front of the instance pool: a call waits here, within its own deadline, for one
/// of the pool's slots, so a burst of calls queues instead of failing, and a full
/// pool is reported as busy, never as a trap.
#[derive(Clone, Debug)]
pub struct Admission {
    slots: Arc<Semaphore>,
    released: Arc<Notify>,
}

/// A call's slot; freeing it wakes calls waiting for the pool.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    released: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.released.notify_waiters();
    }
}

/// How long a call that found the pool full waits before it tries again, if no call ends first.
const POOL_RETRY: Duration = Duration::from_millis(50);

impl Admission {
    pub fn new(slots: u32) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(slots as usize)),
            released: Arc::new(Notify::new()),
        }
    }

    /// A slot, or none if none freed up before `deadline`.
    pub async fn enter(&self, deadline: Instant) -> Option<Slot> {
        let acquire = self.slots.clone().acquire_owned();
        match tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), acquire).await {
            Ok(Ok(permit)) => Some(Slot {
                _permit: permit,
                released: self.released.clone(),
            }),
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// Waits until a call ends (or a short while); false once `deadline` has passed.
    pub async fn wait_for_release(&self, deadline: Instant) -> bool {
        let until = deadline.min(Instant::now() + POOL_RETRY);
        let _ = tokio::time::timeout_at(
            tokio::time::Instant::from_std(until),
            self.released.notified(),
        )
        .await;
        Instant::now() < deadline
    }
}

/// A key for "this engine, this wasmtime, these settings": precompiled artifacts are only
/// valid for the engine that made them.
pub fn engine_key(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// The cache of precompiled components in the data dir.
///
/// An artifact is native code that the daemon will run, so it is trusted only as far as the
/// database vouches for it: its sha256 is recorded when the daemon writes it, and a cached
/// artifact is loaded only from bytes that match that digest (read once, hashed, then
/// deserialised from memory, so the file cannot change in between). Anything else -- a
/// replaced, truncated or unrecorded file -- is recompiled from the verified `.wasm`, with a
/// warning.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    key: String,
    store: Store,
}

impl ComponentCache {
    pub fn new(dir: &Path, engine: &Engine, store: Store) -> Self {
        Self {
            dir: dir.to_path_buf(),
            key: engine_key(engine),
            store,
        }
    }

    fn file_name(&self, sha256: &str) -> String {
        format!("{sha256}-{}.cwasm", self.key)
    }

    /// The artifact path for a component's sha256.
    pub fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(self.file_name(sha256))
    }

    /// Loads the component: from the cache when an artifact with the recorded digest exists,
    /// else by compiling `bytes` and writing the artifact (and its digest) for next time.
    /// Blocks (compiling, the disk, the database): call it off the async runtime.
    pub fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<(Component, LoadInfo)> {
        let started = Instant::now();
        if let Some(component) = self.cached(engine, sha256) {
            return Ok((
                component,
                LoadInfo {
                    source: LoadSource::Cache,
                    micros: micros(started),
                },
            ));
        }
        let component = Component::new(engine, bytes()?)
            .map_err(anyhow::Error::from)
            .context("cannot compile the component")?;
        let load = LoadInfo {
            source: LoadSource::Compiled,
            micros: micros(started),
        };
        if let Err(err) = self.write(&component, sha256) {
            tracing::warn!(path = %self.path(sha256).display(), err = %format!("{err:#}"), "cannot cache the compiled component");
        }
        Ok((component, load))
    }

    /// [`Self::load`] without writing the artifact: the component, how it was loaded, and
    /// whether it was compiled now (then [`Self::keep`] caches it once it is wanted).
    pub fn load_uncached(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: Vec<u8>,
    ) -> Result<(Component, LoadInfo, bool)> {
        let started = Instant::now();
        if let Some(component) = self.cached(engine, sha256) {
            let load = LoadInfo {
                source: LoadSource::Cache,
                micros: micros(started),
            };
            return Ok((component, load, false));
        }
        let component = Component::new(engine, bytes)
            .map_err(anyhow::Error::from)
            .context("cannot compile the component")?;
        let load = LoadInfo {
            source: LoadSource::Compiled,
            micros: micros(started),
        };
        Ok((component, load, true))
    }

    /// Caches a compiled component's artifact. Blocks: call it off the async runtime.
    pub fn keep(&self, component: &Component, sha256: &str) -> Result<()> {
        self.write(component, sha256)
    }

    /// Removes what no installed component needs: artifacts of components not in
    /// `installed` (a refused install's, a crash's), of another engine build, and partial
    /// writes. Returns how many files it removed. Blocks: call it off the async runtime.
    pub fn sweep(&self, installed: &std::collections::HashSet<String>) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let keep = name
                .strip_suffix(".cwasm")
                .and_then(|stem| stem.split_once('-'))
                .is_some_and(|(sha, key)| key == self.key && installed.contains(sha));
            if keep {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    removed += 1;
                    let file = name.clone();
                    if let Err(err) = self
                        .store
                        .write_blocking(move |tx| tx.forget_artifact(&file))
                    {
                        tracing::warn!(file = %name, err = %format!("{err:#}"), "cannot forget a removed artifact's digest");
                    }
                }
                Err(err) => {
                    tracing::warn!(file = %name, %err, "cannot remove an unused cached artifact");
                }
            }
        }
        removed
    }

    /// The cached artifact, if there is one whose bytes match the recorded digest. Blocks: call
    /// it off the async runtime.
    pub fn cached(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.path(sha256);
        let artifact = match std::fs::read(&path) {
            Ok(artifact) => artifact,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "cannot read a cached artifact; recompiling");
                return None;
            }
        };
        let file = self.file_name(sha256);
        // Called on a blocking thread (compiles and loads run off the async runtime).
        let recorded = match self
            .store
            .read_blocking(move |rd| rd.artifact_digest(&file))
        {
            Ok(recorded) => recorded,
            Err(err) => {
                tracing::warn!(path = %path.display(), err = %format!("{err:#}"), "cannot look up a cached artifact's digest; recompiling");
                return None;
            }
        };
        let actual = super::sha256_hex(&artifact);
        if recorded.as_deref() != Some(actual.as_str()) {
            tracing::warn!(
                path = %path.display(),
                recorded = recorded.as_deref().unwrap_or("(none)"),
                actual = %actual,
                "a cached artifact does not match the digest recorded when it was compiled; ignoring it and recompiling"
            );
            return None;
        }
        // SAFETY: these exact bytes hash to the digest this daemon recorded when it wrote them
        // with `Component::serialize` of an engine with the same compatibility hash (in the
        // file name); deserialising from memory means the file cannot change after the check.
        match unsafe { Component::deserialize(engine, &artifact) } {
            Ok(component) => Some(component),
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "ignoring an unusable cached artifact");
                None
            }
        }
    }

    fn write(&self, component: &Component, sha256: &str) -> Result<()> {
        let artifact = component.serialize()?;
        let path = self.path(sha256);
        let partial = path.with_extension("cwasm.partial");
        std::fs::write(&partial, &artifact)?;
        let (file, digest) = (self.file_name(sha256), super::sha256_hex(&artifact));
        // Called on a blocking thread (see `load`).
        self.store
            .write_blocking(move |tx| tx.record_artifact(&file, &digest))?;
        std::fs::rename(&partial, &path)?;
        Ok(())
    }

    /// Removes the artifact of a component (after it is uninstalled).
    pub async fn forget(&self, sha256: &str) {
        let _ = std::fs::remove_file(self.path(sha256));
        let file = self.file_name(sha256);
        if let Err(err) = self.store.write(move |tx| tx.forget_artifact(&file)).await {
            tracing::warn!(err = %format!("{err:#}"), "cannot forget a removed artifact's digest");
        }
    }
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}
