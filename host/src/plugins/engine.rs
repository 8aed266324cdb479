//! The one wasmtime [`Engine`] of a daemon, its epoch ticker, and the on-disk cache of compiled
//! components.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; deadlines are counted in these ticks.
pub const TICK: Duration = Duration::from_millis(5);

/// Bytes of a call's linear memory reset in place (rather than unmapped) when the call ends.
const KEEP_RESIDENT: usize = 2 * 1024 * 1024;

/// Plugin calls that may run at the same time (the pooling allocator's slots).
pub const MAX_CONCURRENT_CALLS: u32 = 128;

/// Builds the engine: component model, pooling allocator, epoch interruption.
pub fn new_engine(memory_cap: usize) -> Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_CONCURRENT_CALLS)
        .total_core_instances(MAX_CONCURRENT_CALLS * 4)
        .total_memories(MAX_CONCURRENT_CALLS * 2)
        .total_tables(MAX_CONCURRENT_CALLS * 4)
        .total_stacks(MAX_CONCURRENT_CALLS)
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

/// Advances the engine's epoch every [`TICK`] until the engine is dropped.
fn start_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("canopy-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
            }
        });
    if let Err(err) = spawned {
        tracing::error!(%err, "cannot start the epoch ticker; plugin deadlines will not be enforced");
    }
}

/// Epoch ticks for a deadline.
pub fn ticks(deadline: Duration) -> u64 {
    let tick = TICK.as_micros().max(1);
    u64::try_from(deadline.as_micros().div_ceil(tick))
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

/// A key for "this engine, this wasmtime, these settings": precompiled artifacts are only
/// valid for the engine that made them.
pub fn engine_key(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Where a component came from when it was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadSource {
    /// Deserialised from the on-disk cache.
    Cache,
    /// Compiled from the `.wasm` (and then written to the cache).
    Compiled,
}

/// How a component was loaded, for `plugin inspect`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LoadInfo {
    pub source: LoadSource,
    pub micros: u64,
}

/// The cache of precompiled components in the data dir.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    key: String,
}

impl ComponentCache {
    pub fn new(dir: &Path, engine: &Engine) -> Self {
        Self {
            dir: dir.to_path_buf(),
            key: engine_key(engine),
        }
    }

    /// The artifact path for a component's sha256.
    pub fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.key))
    }

    /// Loads the component: from the cache when a valid artifact exists, else by compiling
    /// `bytes` and writing the artifact for next time.
    pub fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<(Component, LoadInfo)> {
        let path = self.path(sha256);
        let started = Instant::now();
        if path.is_file() {
            // SAFETY: the artifact was written by `Component::serialize` of an engine with the
            // same compatibility hash (it is in the file name), into the daemon's own data dir.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => {
                    return Ok((
                        component,
                        LoadInfo {
                            source: LoadSource::Cache,
                            micros: micros(started),
                        },
                    ));
                }
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "ignoring an unusable cached artifact")
                }
            }
        }
        let component = Component::new(engine, bytes()?)
            .map_err(anyhow::Error::from)
            .context("cannot compile the component")?;
        let load = LoadInfo {
            source: LoadSource::Compiled,
            micros: micros(started),
        };
        if let Err(err) = self.store(&component, &path) {
            tracing::warn!(path = %path.display(), err = %format!("{err:#}"), "cannot cache the compiled component");
        }
        Ok((component, load))
    }

    fn store(&self, component: &Component, path: &Path) -> Result<()> {
        let artifact = component.serialize()?;
        let partial = path.with_extension("cwasm.partial");
        std::fs::write(&partial, artifact)?;
        std::fs::rename(&partial, path)?;
        Ok(())
    }

    /// Removes the artifact of a component (after it is uninstalled).
    pub fn forget(&self, sha256: &str) {
        let _ = std::fs::remove_file(self.path(sha256));
    }
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}
