//! The executor host: every piece of work Canopy launches runs here, as a call into a sandboxed
//! WebAssembly component.
//!
//! - [`PluginHost`] owns the one wasmtime engine, the installed plugins (each compiled once,
//!   cached on disk, pre-linked into an `InstancePre`) and the install / remove / enable rules.
//! - A config reaches a plugin only through [`split_work_config`] (or [`WorkConfig::with_mode`]),
//!   which takes out the host's own keys ([`RESERVED_KEYS`]: mode, `spec_ids`, deadline,
//!   `detach`); the host reads them and the plugin never sees them.
//! - A call ([`PluginHost::execute`]) renders the config's template fields (see
//!   [`canopy_model::markers`]), gets a fresh store with a memory cap and an epoch deadline, preopens only
//!   what the plugin's grant allows, and maps a trap, timeout or memory blow-up to a
//!   [`CallError`] that fails that call only.
//! - [`HostServices`] is what the daemon provides behind the `host` interface (queued session
//!   messages, agent platforms).

mod bench;
mod bindings;
mod bounds;
mod call;
mod capabilities;
mod contract_v0_1;
pub mod credentials;
mod engine;
mod fs_guard;
mod install;
pub mod launch;
pub use install::{InstallAsk, InstallGate};
mod process;
pub use process::{StopSignal, StopSwitch};
pub mod platforms;
mod registry;
mod shape;
mod work;
mod workdir;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Linker;

pub use bench::BenchRequest;
pub use call::{CallError, Decision, Outcome, Said, Status};

pub use registry::{Manifest, PluginRecord, PluginState, TemplateField};
pub use work::{HostKeys, RESERVED_KEYS, WorkConfig, split as split_work_config};
pub use workdir::Workdir;

use call::{Call, CallEnv, CallSetup, CallState, Reply};
use canopy_datadir::DataDir;
use canopy_model::call_env;
use canopy_model::markers::{self, Escape, MarkerValues};
use canopy_model::records::plugins::{LoadInfo, PluginInfo};
use canopy_model::runtime_hooks::Phase;
pub use canopy_model::work::CallReport;
use canopy_model::work::{MessageTarget, PluginRef, Provenance};
use canopy_store::{Store, StoreError};
use capabilities::Grants;
use engine::{Admission, ComponentCache};
use install::check_contract;
use platforms::Platform;

/// The limits every call runs under (`[limits]` in `canopy.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Memory cap of one call, in MiB.
    pub memory_mib: u64,
    /// Deadline of a call whose config names none.
    pub default_timeout: Duration,
    /// Calls that run at once; the rest wait for a slot within their own deadline.
    pub max_concurrent_calls: u32,
}

/// The future a [`HostServices`] method returns: awaited inside the plugin's host call.
pub type ServiceFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What the daemon provides to plugins behind the `host` interface (beyond processes).
pub trait HostServices: Send + Sync + 'static {
    /// Stores a message for an interactive session; resolves to its id. Asynchronous: the host
    /// call awaits the store's write instead of blocking a runtime thread on it.
    fn enqueue_message<'a>(
        &'a self,
        plugin: &'a str,
        target: MessageTarget,
        text: &'a str,
        provenance: &'a Provenance,
    ) -> ServiceFuture<'a, Result<String, String>>;

    /// The configured agent platform of that name; the error lists the configured ones.
    fn agent_platform(&self, name: &str) -> Result<Platform, String>;

    /// The `runtime_hooks` of the profile of that name (`[profiles.NAME]` in `canopy.toml`);
    /// the error lists the configured ones.
    fn profile(&self, name: &str) -> Result<Value, String> {
        Err(format!(
            "no profile `{name}`: this daemon has no [profiles]"
        ))
    }

    /// The daemon's API as a runtime's hooks reach it (`http://127.0.0.1:PORT`), when it
    /// serves one.
    fn api_url(&self) -> Option<String> {
        None
    }

    /// Whether sync hooks declared outside an agent's config (the daemon's) decide `event`: an
    /// agent launch then calls back on that event's phase even without runtime hooks of its own.
    fn decides_on(&self, event: &str) -> bool {
        let _ = event;
        false
    }

    /// A launch that declares `on_complete` or `on_failure` ended: records its event, whose
    /// hooks the launch's runtime hooks of that phase are.
    fn launch_ended(
        &self,
        launch: std::sync::Arc<launch::Launch>,
        ended: launch::LaunchEnd,
    ) -> ServiceFuture<'_, ()> {
        let _ = (launch, ended);
        Box::pin(async {})
    }
}

/// A sync hook's deadline when its config names none.
pub const SYNC_HOOK_TIMEOUT: Duration = Duration::from_millis(1000);

/// Errors at the plugin host's boundary.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// No plugin of that name (`skipped`: why the daemon did not load it at start, when it is
    /// installed but could not be).
    #[error("{}", not_found(.name, .installed, .skipped.as_deref()))]
    NotFound {
        name: String,
        installed: Vec<String>,
        skipped: Option<String>,
    },
    /// No enabled plugin serves that mode.
    #[error("unknown mode `{mode}`; installed modes: {}", list_or_none(.installed))]
    UnknownMode {
        mode: String,
        installed: Vec<String>,
    },
    /// Only a disabled plugin serves that mode.
    #[error(
        "mode `{mode}` is served by plugin `{plugin}`, which is disabled; `canopy plugin enable {plugin}` enables it"
    )]
    Disabled { mode: String, plugin: String },
    /// The component or request was refused.
    #[error("{0}")]
    Refused(String),
    /// It clashes with what is installed.
    #[error("{0}")]
    Conflict(String),
    /// A config does not pass validation.
    #[error("{0}")]
    InvalidConfig(String),
    /// The call itself failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// Something on the host side broke (disk, database).
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<StoreError> for PluginError {
    fn from(err: StoreError) -> Self {
        Self::Internal(err.into())
    }
}

fn not_found(name: &str, installed: &[String], skipped: Option<&str>) -> String {
    match skipped {
        Some(why) => format!(
            "plugin `{name}` is installed but was not loaded when the daemon started: {why}"
        ),
        None => format!(
            "no plugin named `{name}`; installed: {}",
            list_or_none(installed)
        ),
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".to_string()
    } else {
        items.join(", ")
    }
}

/// One installed plugin, compiled and pre-linked.
pub(crate) struct LoadedPlugin {
    record: PluginRecord,
    pre: bindings::ExecutorPre,
    load: LoadInfo,
    templates: Vec<(String, Escape)>,
}

impl LoadedPlugin {
    fn info(&self) -> PluginInfo {
        PluginInfo {
            record: self.record.clone(),
            load: self.load,
            contract: self.pre.version().as_str().to_string(),
        }
    }
}

/// One `execute` call to make.
#[derive(Debug, Clone)]
pub struct CallRequest {
    /// The work: its mode (which picks the plugin), the executor's config with its markers not
    /// yet rendered, and the host's keys (deadline, `detach`).
    pub work: WorkConfig,
    /// Marker values (raw); known markers missing here render `(none)`.
    pub markers: MarkerValues,
    /// The markers this kind of work may use (graph hooks, nodes, or a daemon hook's event).
    pub supported_markers: std::borrow::Cow<'static, [&'static str]>,
    /// Resolved by the caller, once for all the calls that share it (a run's nodes).
    pub workdir: Workdir,
    pub provenance: Provenance,
    /// Overrides the timeout the config names (or the default).
    pub timeout: Option<Duration>,
    pub resume_session: Option<String>,
    /// Who the call's processes act as, when it is an automation: the events their `canopy`
    /// requests cause are this actor's, at this dispatch depth. The call gets a token of its
    /// own for it (see [`credentials`]), in `CANOPY_CALL_TOKEN`, with `CANOPY_ACTOR` and
    /// `CANOPY_DISPATCH_DEPTH` beside it for scripts to read. `None`: what its processes ask
    /// acts as whoever's token they use (a node of a run a person started).
    pub cause: Option<canopy_model::events::Cause>,
    /// Variables the host sets on every process the call runs, after the plugin's own (so the
    /// plugin cannot choose them): what kind of automation runs it, and its inputs.
    pub env: Vec<(String, String)>,
    /// A file every process the call starts without input of its own reads as its stdin (a
    /// webhook's body, for its `command` handler).
    pub stdin: Option<PathBuf>,
    /// Set for a sync hook: the input of the action it decides on, as JSON text of an object
    /// (the plugin answers with a decision in its outcome).
    pub decision_input: Option<String>,
    /// A graph node's: the graph's `hooks` map, when it keys an event an agent's runtime hooks
    /// ask (`tool.pre_call`, `agent.pre_complete`): its sync hooks decide in the node's launch.
    pub graph_hooks: Option<Arc<serde_json::Map<String, Value>>>,
}

/// How a piece of automation work ended, in the terms every record of it uses (hook runs,
/// cron receipts, webhook deliveries, node runs): the one mapping from an executor call's
/// result to an ending. Each record maps these to its own statuses with an exhaustive match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Completed,
    /// The work failed, with the reason.
    Failed(String),
    /// The call was stopped at its deadline, with what it said.
    TimedOut(String),
    /// A stop signal (a planned stop forcing it, a firing replacing it) killed its processes:
    /// what the outcome says is what it did until then, with its reason when it failed.
    Interrupted(Option<String>),
    /// The work reported blocked, with the blocker.
    Blocked(String),
    /// The agent platform the work ran reported a usage limit, and the work did not complete:
    /// it is to run again once the limit resets.
    LimitBlocked(canopy_model::limits::LimitHit),
}

impl Ending {
    /// The ending of an `execute` call's result: an interruption first (what the work said
    /// after it is not its outcome), then a failure at the deadline, then a usage limit the
    /// platform reported, then the outcome.
    pub fn of(result: &Result<CallReport, PluginError>) -> Self {
        if let Ok(report) = result
            && let Some(limit) = &report.limit
            && !report.interrupted
            && !report.timed_out
            && matches!(
                report.outcome.status,
                Status::Failed { .. } | Status::Blocked { .. }
            )
        {
            return Self::LimitBlocked(limit.clone());
        }
        match result {
            Ok(report) => match &report.outcome.status {
                Status::Completed if report.interrupted => Self::Interrupted(None),
                Status::Failed { reason } if report.interrupted => {
                    Self::Interrupted(Some(reason.clone()))
                }
                Status::Blocked { blocker } | Status::TimedOut { reason: blocker }
                    if report.interrupted =>
                {
                    Self::Interrupted(Some(blocker.clone()))
                }
                Status::Completed => Self::Completed,
                Status::Failed { reason } if report.timed_out => Self::TimedOut(reason.clone()),
                Status::Failed { reason } => Self::Failed(reason.clone()),
                Status::Blocked { blocker } => Self::Blocked(blocker.clone()),
                Status::TimedOut { reason } => Self::TimedOut(reason.clone()),
            },
            Err(err @ PluginError::Call(CallError::Timeout { .. })) => {
                Self::TimedOut(err.to_string())
            }
            Err(err) => Self::Failed(err.to_string()),
        }
    }
}

/// The executor host.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<CallState>,
    cache: ComponentCache,
    plugins_dir: PathBuf,
    store: Store,
    call_env: CallEnv,
    runtime: engine::PluginRuntime,
    default_timeout: Duration,
    plugins: RwLock<BTreeMap<String, Arc<LoadedPlugin>>>,
    /// Installed plugins the daemon could not load at start, and why (until reinstalled).
    skipped: std::sync::Mutex<BTreeMap<String, String>>,
    install_lock: tokio::sync::Mutex<()>,
    /// Fired by [`PluginHost::force_stop`].
    force: process::StopSwitch,
    /// The tokens of the calls running now (see [`credentials`]).
    credentials: credentials::CallCredentials,
    /// The live launches with runtime hooks (see [`launch`]).
    launches: launch::Launches,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost").finish_non_exhaustive()
    }
}

/// How long `describe` and `validate` may take.
const QUICK_CALL: Duration = Duration::from_secs(10);

/// The longest deadline a call may ask for: 7 days.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 60 * 60);

impl PluginHost {
    /// Creates the engine, loads every installed plugin (from the compiled cache when it can) and
    /// installs or upgrades the built-ins.
    pub async fn start(
        data: &DataDir,
        store: Store,
        limits: &CallLimits,
        services: Arc<dyn HostServices>,
    ) -> Result<Self> {
        let memory_cap = usize::try_from(limits.memory_mib.saturating_mul(1024 * 1024))
            .context("limits.plugin_memory_mib is too large")?;
        let max_calls = limits.max_concurrent_calls;
        let engine = engine::new_engine(memory_cap, max_calls)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(anyhow::Error::from)
            .context("cannot link WASI")?;
        fs_guard::add_to_linker(&mut linker)?;
        bindings::add_to_linker(&mut linker)
            .map_err(anyhow::Error::from)
            .context("cannot link the canopy host interface")?;
        let host = Self {
            inner: Arc::new(Inner {
                cache: ComponentCache::new(&data.cache_dir(), &engine, store.clone()),
                engine,
                linker,
                plugins_dir: data.plugins_dir(),
                store,
                call_env: CallEnv {
                    memory_cap,
                    services,
                    tmp_dir: data.tmp_dir(),
                    admission: Admission::new(max_calls),
                },
                runtime: engine::PluginRuntime::new()?,
                default_timeout: limits.default_timeout,
                plugins: RwLock::new(BTreeMap::new()),
                skipped: std::sync::Mutex::new(BTreeMap::new()),
                install_lock: tokio::sync::Mutex::new(()),
                force: process::StopSwitch::default(),
                credentials: credentials::CallCredentials::default(),
                launches: launch::Launches::default(),
            }),
        };
        host.load_installed().await?;
        host.install_builtins().await?;
        host.sweep_cache().await?;
        Ok(host)
    }

    fn plugins(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<LoadedPlugin>>> {
        self.inner
            .plugins
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn plugins_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<LoadedPlugin>>> {
        self.inner
            .plugins
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wasm_path(&self, sha256: &str) -> PathBuf {
        self.inner.plugins_dir.join(format!("{sha256}.wasm"))
    }

    /// Compiles a component being installed (or loads it from the cache, when the very same
    /// one is cached already) and pre-links it; the compiled component is returned to be
    /// cached once the install is done ([`Self::keep_compiled`]), so a refused install leaves
    /// no artifact behind.
    async fn compile(
        &self,
        sha256: &str,
        bytes: Vec<u8>,
    ) -> Result<
        (
            bindings::ExecutorPre,
            LoadInfo,
            Option<wasmtime::component::Component>,
        ),
        PluginError,
    > {
        let inner = self.inner.clone();
        let sha = sha256.to_string();
        let (component, load, fresh) = tokio::task::spawn_blocking(move || {
            inner.cache.load_uncached(&inner.engine, &sha, bytes)
        })
        .await
        .context("the compile task panicked")?
        .map_err(|err| PluginError::Refused(format!("{err:#}")))?;
        let pre = self.link(&component)?;
        Ok((pre, load, fresh.then_some(component)))
    }

    /// Writes a freshly compiled component's artifact to the cache (off the async runtime).
    async fn keep_compiled(&self, component: wasmtime::component::Component, sha256: &str) {
        let inner = self.inner.clone();
        let sha = sha256.to_string();
        let written = tokio::task::spawn_blocking(move || inner.cache.keep(&component, &sha)).await;
        if let Ok(Err(err)) | Err(err) = written.map_err(anyhow::Error::from) {
            tracing::warn!(sha256, err = %format!("{err:#}"), "cannot cache the compiled component");
        }
    }

    /// Pre-links a compiled component against the contract version it was built for.
    fn link(
        &self,
        component: &wasmtime::component::Component,
    ) -> Result<bindings::ExecutorPre, PluginError> {
        let version =
            check_contract(&self.inner.engine, component).map_err(PluginError::Refused)?;
        let pre = self
            .inner
            .linker
            .instantiate_pre(component)
            .map_err(|err| {
                PluginError::Refused(format!(
                    "the component imports something Canopy does not provide: {err:#}"
                ))
            })?;
        bindings::ExecutorPre::new(version, pre).map_err(|err| {
            PluginError::Refused(format!(
                "the component does not have the shape of a Canopy executor: {err:#}"
            ))
        })
    }

    /// Compiles (or loads from cache) and pre-links a component.
    async fn prepare(
        &self,
        sha256: &str,
        bytes: Option<Vec<u8>>,
    ) -> Result<(bindings::ExecutorPre, LoadInfo), PluginError> {
        let inner = self.inner.clone();
        let sha = sha256.to_string();
        let wasm_path = self.wasm_path(sha256);
        let (component, load) = tokio::task::spawn_blocking(move || {
            inner.cache.load(&inner.engine, &sha, || match bytes {
                Some(bytes) => Ok(bytes),
                None => std::fs::read(&wasm_path)
                    .with_context(|| format!("cannot read {}", wasm_path.display())),
            })
        })
        .await
        .context("the compile task panicked")?
        // The cache's own error says "cannot compile the component" already.
        .map_err(|err| PluginError::Refused(format!("{err:#}")))?;
        Ok((self.link(&component)?, load))
    }

    /// Removes the cached artifacts no installed plugin uses (left by a refused install or a
    /// crash before this build kept them only once installed, or by another engine build).
    async fn sweep_cache(&self) -> Result<()> {
        let installed: std::collections::HashSet<String> = self
            .inner
            .store
            .read(|rd| rd.plugins())
            .await?
            .into_iter()
            .map(|record| record.sha256)
            .collect();
        let inner = self.inner.clone();
        let removed = tokio::task::spawn_blocking(move || inner.cache.sweep(&installed))
            .await
            .context("the cache sweep panicked")?;
        if removed > 0 {
            tracing::info!(removed, "removed cached artifacts no installed plugin uses");
        }
        Ok(())
    }

    /// The component kept in the database under `sha256`, written to `path` (this data dir's
    /// copy), when it is there and its digest matches; `None` otherwise.
    async fn fetch_component(&self, sha256: &str, path: &std::path::Path) -> Option<Vec<u8>> {
        let digest = sha256.to_string();
        let kept = self
            .inner
            .store
            .read(move |rd| rd.plugin_component(&digest))
            .await
            .ok()
            .flatten()?;
        if sha256_hex(&kept) != sha256 {
            tracing::error!(
                sha256,
                "the component kept in the database does not match its digest; not used"
            );
            return None;
        }
        write_component(path, &kept);
        Some(kept)
    }

    async fn load_installed(&self) -> Result<()> {
        let records = self.inner.store.read(|rd| rd.plugins()).await?;
        for record in records {
            self.load_record(record).await;
        }
        Ok(())
    }

    /// Brings the plugins in memory in line with the database's rows, which another daemon
    /// sharing it may have changed (an install, a removal, enabling or disabling one): a plugin
    /// whose component changed is loaded again; one whose row is gone is dropped. Returns how
    /// many changed.
    pub async fn sync_with_store(&self) -> Result<usize> {
        let records = self.inner.store.read(|rd| rd.plugins()).await?;
        let current = self.plugins().clone();
        let mut changed = 0;
        for record in &records {
            match current.get(&record.name) {
                Some(loaded) if loaded.record == *record => {}
                Some(loaded) if loaded.record.sha256 == record.sha256 => {
                    // Its grants or its state changed, not its component.
                    let again = LoadedPlugin {
                        record: record.clone(),
                        pre: loaded.pre.clone(),
                        load: loaded.load,
                        templates: templates_of(&record.manifest),
                    };
                    self.plugins_mut()
                        .insert(record.name.clone(), Arc::new(again));
                    changed += 1;
                }
                // Skipped here already (its component unreadable): tried again at a restart.
                None if self.skipped_map().contains_key(&record.name) => {}
                _ => {
                    self.load_record(record.clone()).await;
                    changed += 1;
                }
            }
        }
        for name in current.keys() {
            if !records.iter().any(|r| &r.name == name) {
                self.plugins_mut().remove(name);
                changed += 1;
            }
        }
        if changed > 0 {
            tracing::info!(
                changed,
                "plugins changed by another daemon on the database are in force here"
            );
        }
        Ok(changed)
    }

    /// Loads one installed plugin's component (from the data dir, else from the database) and
    /// puts it in force; one that cannot be loaded is noted as skipped, with why.
    async fn load_record(&self, record: PluginRecord) {
        let path = self.wasm_path(&record.sha256);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // A built-in another daemon on the database recorded: this binary carries it.
            Err(err)
                if err.kind() == std::io::ErrorKind::NotFound
                    && record.builtin
                    && let Some(bytes) = Self::builtin_component(&record.sha256) =>
            {
                write_component(&path, bytes);
                bytes.to_vec()
            }
            // Installed by another daemon on the database: its component is kept there.
            Err(err)
                if err.kind() == std::io::ErrorKind::NotFound
                    && let Some(bytes) = self.fetch_component(&record.sha256, &path).await =>
            {
                tracing::info!(plugin = %record.name, path = %path.display(), "installed plugin's component written from the database (another daemon installed it)");
                bytes
            }
            Err(err) => {
                tracing::error!(plugin = %record.name, path = %path.display(), %err, "installed plugin's component is missing; skipping it");
                self.skip(
                    &record.name,
                    format!(
                        "its component {} cannot be read ({err}); reinstall it",
                        path.display()
                    ),
                );
                return;
            }
        };
        if sha256_hex(&bytes) != record.sha256 {
            tracing::error!(plugin = %record.name, "installed plugin's component changed on disk; its grant no longer applies, skipping it (reinstall it)");
            self.skip(
                &record.name,
                format!("its component {} changed on disk since it was installed, so its grant no longer applies; reinstall it (`canopy plugin install FILE --replace`)", path.display()),
            );
            return;
        }
        match self.prepare(&record.sha256, Some(bytes)).await {
            Ok((pre, load)) => {
                tracing::info!(plugin = %record.name, version = %record.version, source = ?load.source, micros = load.micros, "plugin loaded");
                self.skipped_map().remove(&record.name);
                let templates = templates_of(&record.manifest);
                self.plugins_mut().insert(
                    record.name.clone(),
                    Arc::new(LoadedPlugin {
                        record,
                        pre,
                        load,
                        templates,
                    }),
                );
            }
            Err(err) => {
                tracing::error!(plugin = %record.name, %err, "cannot load installed plugin; skipping it");
                self.skip(&record.name, format!("{err}; reinstall it"));
            }
        }
    }

    /// The installed plugins the daemon could not load at start, by name, with why.
    fn skipped_map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.inner
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes an installed plugin the daemon could not load, and why.
    fn skip(&self, name: &str, why: String) {
        self.skipped_map().insert(name.to_string(), why);
    }

    /// Installed plugins the daemon could not load at start (name, why), until reinstalled.
    pub fn skipped(&self) -> Vec<(String, String)> {
        self.skipped_map()
            .iter()
            .map(|(name, why)| (name.clone(), why.clone()))
            .collect()
    }

    /// Every installed plugin.
    pub fn list(&self) -> Vec<PluginInfo> {
        self.plugins().values().map(|p| p.info()).collect()
    }

    /// One plugin by name.
    pub fn get(&self, name: &str) -> Result<PluginInfo, PluginError> {
        self.loaded(name).map(|p| p.info())
    }

    fn loaded(&self, name: &str) -> Result<Arc<LoadedPlugin>, PluginError> {
        let plugins = self.plugins();
        plugins
            .get(name)
            .cloned()
            .ok_or_else(|| PluginError::NotFound {
                name: name.to_string(),
                installed: plugins.keys().cloned().collect(),
                skipped: self.skipped_map().get(name).cloned(),
            })
    }

    /// Removes a plugin; a built-in is disabled instead (it cannot be deleted).
    pub async fn remove(&self, name: &str) -> Result<PluginInfo, PluginError> {
        let _serialised = self.inner.install_lock.lock().await;
        let plugin = self.loaded(name)?;
        if plugin.record.builtin {
            return self.write_enabled(&plugin, false).await;
        }
        let row = name.to_string();
        self.inner
            .store
            .write(move |tx| tx.delete_plugin(&row))
            .await?;
        self.plugins_mut().remove(name);
        self.forget_component(&plugin.record.sha256).await;
        let mut record = plugin.record.clone();
        record.enabled = false;
        Ok(PluginInfo {
            record,
            load: plugin.load,
            contract: plugin.pre.version().as_str().to_string(),
        })
    }

    /// Enables or disables a plugin. Enabling refuses when another enabled plugin serves one of
    /// its modes. Serialised with installs and removals, so the check and the write see the same
    /// set of plugins.
    pub async fn set_enabled(&self, name: &str, enabled: bool) -> Result<PluginInfo, PluginError> {
        let _serialised = self.inner.install_lock.lock().await;
        let plugin = self.loaded(name)?;
        if enabled {
            let plugins = self.plugins();
            for other in plugins
                .values()
                .filter(|p| p.record.name != name && p.record.enabled)
            {
                if let Some(mode) = plugin
                    .record
                    .manifest
                    .modes
                    .iter()
                    .find(|m| other.record.manifest.modes.contains(m))
                {
                    return Err(PluginError::Conflict(format!(
                        "cannot enable `{name}`: mode `{mode}` is served by `{}`; remove or disable it first",
                        other.record.name
                    )));
                }
            }
        }
        self.write_enabled(&plugin, enabled).await
    }

    /// Stores a plugin's enabled flag, then shows it to calls. The caller holds the install lock.
    async fn write_enabled(
        &self,
        plugin: &LoadedPlugin,
        enabled: bool,
    ) -> Result<PluginInfo, PluginError> {
        let name = plugin.record.name.clone();
        let row = name.clone();
        self.inner
            .store
            .write(move |tx| tx.set_plugin_enabled(&row, enabled))
            .await?;
        let mut record = plugin.record.clone();
        record.enabled = enabled;
        let updated = Arc::new(LoadedPlugin {
            record,
            pre: plugin.pre.clone(),
            load: plugin.load,
            templates: plugin.templates.clone(),
        });
        self.plugins_mut().insert(name, updated.clone());
        Ok(updated.info())
    }

    /// Every mode served by an enabled plugin.
    pub fn modes(&self) -> Vec<String> {
        let mut modes: Vec<String> = self
            .plugins()
            .values()
            .filter(|p| p.record.enabled)
            .flat_map(|p| p.record.manifest.modes.clone())
            .collect();
        modes.sort();
        modes
    }

    fn for_mode(&self, mode: &str) -> Result<Arc<LoadedPlugin>, PluginError> {
        let plugins = self.plugins();
        plugins
            .values()
            .find(|p| p.record.enabled && p.record.manifest.modes.iter().any(|m| m == mode))
            .cloned()
            .ok_or_else(|| {
                match plugins
                    .values()
                    .find(|p| p.record.manifest.modes.iter().any(|m| m == mode))
                {
                    Some(disabled) => PluginError::Disabled {
                        mode: mode.to_string(),
                        plugin: disabled.record.name.clone(),
                    },
                    None => PluginError::UnknownMode {
                        mode: mode.to_string(),
                        installed: self.modes_of(&plugins),
                    },
                }
            })
    }

    fn modes_of(&self, plugins: &BTreeMap<String, Arc<LoadedPlugin>>) -> Vec<String> {
        let mut modes: Vec<String> = plugins
            .values()
            .filter(|p| p.record.enabled)
            .flat_map(|p| p.record.manifest.modes.clone())
            .collect();
        modes.sort();
        modes
    }

    /// The plugin serving `mode`, as recorded with a run.
    pub fn plugin_ref(&self, mode: &str) -> Result<PluginRef, PluginError> {
        self.for_mode(mode).map(|p| plugin_ref(&p.record))
    }

    /// Whether `mode` can answer as a sync hook; the error says why not (no plugin serves it,
    /// or its plugin does not say it decides), naming the modes that can.
    pub fn check_decides(&self, mode: &str) -> Result<(), String> {
        let plugin = self.for_mode(mode).map_err(|err| err.to_string())?;
        if plugin.record.manifest.decides.iter().any(|m| m == mode) {
            return Ok(());
        }
        let deciding: Vec<String> = self
            .plugins()
            .values()
            .filter(|p| p.record.enabled)
            .flat_map(|p| p.record.manifest.decides.clone())
            .collect();
        Err(format!(
            "mode `{mode}` (plugin {} {}) cannot decide: a sync hook must name a mode whose plugin answers with allow, deny or patch (here: {})",
            plugin.record.name,
            plugin.record.version,
            if deciding.is_empty() {
                "none".to_string()
            } else {
                deciding.join(", ")
            }
        ))
    }

    async fn quick_call(
        &self,
        plugin: &Arc<LoadedPlugin>,
        call: Call,
    ) -> Result<Reply, PluginError> {
        let setup = CallSetup {
            plugin: plugin.clone(),
            grants: Grants::none(plugin.record.name.clone()),
            workdir: None,
            timeout: QUICK_CALL,
            detach: false,
            env: self.inner.call_env.clone(),
            commands: Arc::default(),
            host_env: Arc::from(Vec::new()),
            stdin: None,
            platform_args: Arc::from(Vec::new()),
        };
        self.on_plugin_threads(setup.run(call)).await
    }

    /// Runs a call on the plugin runtime (see [`engine::PluginRuntime`]).
    async fn on_plugin_threads(
        &self,
        call: impl std::future::Future<Output = Result<Reply, CallError>> + Send + 'static,
    ) -> Result<Reply, PluginError> {
        match self.inner.runtime.run(call).await {
            Ok(reply) => Ok(reply?),
            Err(err) => Err(PluginError::Internal(anyhow::anyhow!(
                "a plugin call's task ended abnormally: {err}"
            ))),
        }
    }

    /// Validates a config at edit time: the host's keys, then the executor's part against the
    /// plugin's schema, markers only where the plugin renders them and only supported ones, then
    /// the plugin's own `validate` (template fields rendered with `(none)`, no reserved keys).
    pub async fn validate(
        &self,
        work: &WorkConfig,
        supported_markers: &[&str],
    ) -> Result<(), PluginError> {
        let mode = work.mode.as_str();
        let plugin = self.for_mode(mode)?;
        work.host().check().map_err(PluginError::InvalidConfig)?;
        let config = work.config();
        work::check_no_nul(config).map_err(PluginError::InvalidConfig)?;
        work::check_schema(mode, &plugin.record.manifest.config_schema, config)
            .map_err(PluginError::InvalidConfig)?;
        self.validate_runtime_hooks(work).await?;
        markers::check_config(config, &plugin.templates, supported_markers)
            .map_err(|err| PluginError::InvalidConfig(err.to_string()))?;
        let mut rendered = config.clone();
        let _ = markers::render_config(&mut rendered, &plugin.templates, &MarkerValues::new());
        let call = Call::Validate {
            mode: mode.to_string(),
            config: Value::Object(rendered).to_string(),
        };
        match self.quick_call(&plugin, call).await {
            Ok(_) => Ok(()),
            Err(PluginError::Call(CallError::Plugin { message, .. })) => {
                Err(PluginError::InvalidConfig(message))
            }
            Err(other) => Err(other),
        }
    }

    /// Validates an agent config's runtime hooks (its profiles' included): each hook as a hook
    /// of its phase's event, a deciding mode on the phases that decide, and the platform able
    /// to run them. The error names the hook by its place (`runtime_hooks.before_tool.0.hooks.1`).
    async fn validate_runtime_hooks(&self, work: &WorkConfig) -> Result<(), PluginError> {
        let Some((_, _, hooks)) = self
            .runtime_hooks_of(&work.mode, work.host(), Some(work.config()))
            .map_err(PluginError::InvalidConfig)?
        else {
            return Ok(());
        };
        for (phase, groups) in &hooks.phases {
            let mut markers: Vec<&str> = canopy_model::events::find(phase.event())
                .map(|def| def.markers.to_vec())
                .unwrap_or_default();
            markers.extend(canopy_model::events::ENVELOPE_MARKERS);
            markers.push("data");
            for (index, group) in groups.iter().enumerate() {
                for (at, hook) in group.hooks.iter().enumerate() {
                    let place = format!("{phase} group {index}, hook {at} (from {})", group.from);
                    let invalid = |err: String| {
                        PluginError::InvalidConfig(format!("runtime hook {place}: {err}"))
                    };
                    let hook_work = work::split(hook).map_err(invalid)?;
                    if hook_work.host().has_runtime_hooks() {
                        return Err(invalid(
                            "a runtime hook carries no runtime hooks of its own".to_string(),
                        ));
                    }
                    if phase.decides() {
                        self.check_decides(&hook_work.mode).map_err(invalid)?;
                    } else {
                        hook_work.host().check_not_sync().map_err(invalid)?;
                    }
                    Box::pin(self.validate(&hook_work, &markers))
                        .await
                        .map_err(|err| invalid(err.to_string()))?;
                }
            }
        }
        Ok(())
    }

    /// The config as the executor of the work's mode would receive it for these marker values
    /// (template fields rendered, `(none)` for missing markers, no reserved keys).
    pub fn render(&self, work: &WorkConfig, values: &MarkerValues) -> Result<Value, PluginError> {
        let plugin = self.for_mode(&work.mode)?;
        let mut rendered = work.config().clone();
        let _ = markers::render_config(&mut rendered, &plugin.templates, values);
        Ok(Value::Object(rendered))
    }

    /// The timeout a config asks for (`timeout_seconds` / `timeout_minutes`), or the default;
    /// never more than [`MAX_TIMEOUT`] (a config stored before that limit existed included).
    pub fn timeout_for(&self, host: &HostKeys) -> Duration {
        host.timeout()
            .unwrap_or(self.inner.default_timeout)
            .min(MAX_TIMEOUT)
    }

    /// Makes one `execute` call: reads the host's keys (deadline, `detach`), renders the
    /// executor's config, runs the plugin of the mode sandboxed.
    pub async fn execute(&self, request: CallRequest) -> Result<CallReport, PluginError> {
        self.execute_stoppable(request, None).await
    }

    /// The runtime hooks of `profiles` composed in that order, as an agent listing them gets
    /// them (before its own); the error names an unknown profile.
    pub fn profile_stack(
        &self,
        profiles: &[String],
    ) -> Result<canopy_model::runtime_hooks::RuntimeHooks, String> {
        launch::stack_of(profiles, self.inner.call_env.services.as_ref())
    }

    /// The live launches with runtime hooks, for their callbacks.
    pub fn launches(&self) -> &launch::Launches {
        &self.inner.launches
    }

    /// The runtime hooks an agent config declares (its profiles' first), checked against its
    /// platform; `None` when it declares none. The error names the field, the profile or the
    /// phase the platform cannot run.
    pub fn runtime_hooks_of(
        &self,
        mode: &str,
        host: &HostKeys,
        config: Option<&serde_json::Map<String, Value>>,
    ) -> Result<Option<(String, Platform, canopy_model::runtime_hooks::RuntimeHooks)>, String> {
        if !host.has_runtime_hooks() {
            return Ok(None);
        }
        if mode != "agent" {
            return Err(format!(
                "fields `runtime_hooks` and `profiles` belong to agent configs (`platform` + `prompt`); the {mode} mode runs none"
            ));
        }
        let services = &self.inner.call_env.services;
        let hooks = launch::resolve(host, services.as_ref())?;
        if hooks.is_empty() {
            return Ok(None);
        }
        let name = config
            .and_then(|config| config.get("platform"))
            .and_then(Value::as_str)
            .ok_or("an agent config with runtime hooks names its `platform`")?;
        let platform = services.agent_platform(name)?;
        launch::check_platform(name, &platform, &hooks)?;
        Ok(Some((name.to_string(), platform, hooks)))
    }

    /// Opens the launch of an agent call with runtime hooks (see [`launch`]).
    fn open_launch(
        &self,
        mode: &str,
        host: &HostKeys,
        config: Option<&serde_json::Map<String, Value>>,
        site: launch::LaunchSite<'_>,
    ) -> Result<Option<launch::OpenLaunch>, String> {
        let graph_hooks = site.graph_hooks;
        let services = &self.inner.call_env.services;
        // The decisions daemon-wide sync hooks (and the node's graph's) take on an agent's
        // actions apply to every launch whose platform can call back, runtime hooks of its own
        // or not.
        let daemon_decides: Vec<Phase> = [Phase::BeforeTool, Phase::BeforeComplete]
            .into_iter()
            .filter(|phase| {
                services.decides_on(phase.event())
                    || graph_hooks
                        .as_ref()
                        .is_some_and(|hooks| hooks.contains_key(phase.event()))
            })
            .collect();
        let (name, platform, hooks) = match self.runtime_hooks_of(mode, host, config)? {
            Some(declared) => declared,
            None if mode != "agent" || daemon_decides.is_empty() => return Ok(None),
            None => {
                let Some(name) = config
                    .and_then(|config| config.get("platform"))
                    .and_then(Value::as_str)
                else {
                    return Ok(None);
                };
                // An unknown platform fails the call where the agent asks for it.
                let Ok(platform) = services.agent_platform(name) else {
                    return Ok(None);
                };
                if !launch::takes_runtime_hooks(&platform) {
                    tracing::warn!(platform = name, events = ?daemon_decides.iter().map(|p| p.event()).collect::<Vec<_>>(), "daemon hooks decide on agent actions, but this agent platform takes no runtime hooks: they cannot guard it");
                    return Ok(None);
                }
                (
                    name.to_string(),
                    platform,
                    canopy_model::runtime_hooks::RuntimeHooks::default(),
                )
            }
        };
        let mut phases: Vec<Phase> = hooks.declared().collect();
        for phase in daemon_decides {
            if !phases.contains(&phase) {
                phases.push(phase);
            }
        }
        let api_url = self.inner.call_env.services.api_url().ok_or(
            "runtime hooks call the daemon's API back, and this host serves none (run the agent under `canopy daemon`)",
        )?;
        launch::open(
            &self.inner.launches,
            &self.inner.call_env.tmp_dir,
            &api_url,
            &name,
            &platform,
            hooks,
            &phases,
            site,
        )
        .map(Some)
    }

    /// Kills the processes of every call in flight, and keeps new calls from starting any: a
    /// planned stop forcing what its drain budget did not see end. Each call then returns
    /// what its commands printed so far, with [`CallReport::interrupted`] set.
    pub fn force_stop(&self) {
        self.inner.force.fire();
    }

    /// [`PluginHost::execute`], whose commands are also killed when `stop` fires.
    pub async fn execute_stoppable(
        &self,
        request: CallRequest,
        stop: Option<process::StopSignal>,
    ) -> Result<CallReport, PluginError> {
        self.execute_at(request, stop, None).await
    }

    /// [`PluginHost::execute_stoppable`], whose commands are not spawned before `not_before`:
    /// the call is set up (instance, rendered config) ahead, and its process starts on the
    /// mark (a cron firing on its scheduled second).
    pub async fn execute_at(
        &self,
        request: CallRequest,
        stop: Option<process::StopSignal>,
        not_before: Option<tokio::time::Instant>,
    ) -> Result<CallReport, PluginError> {
        let plugin = self.for_mode(&request.work.mode)?;
        let workdir = request.workdir;
        let WorkConfig {
            mode,
            mut config,
            host,
        } = request.work;
        let timeout = request
            .timeout
            .unwrap_or_else(|| self.timeout_for(&host))
            .min(MAX_TIMEOUT);
        let detach = host.detach().map_err(PluginError::InvalidConfig)?;
        // A config stored before a check existed is checked again: a marker inside quotes in a
        // shell field fails the call instead of running.
        markers::check_rendering(&config, &plugin.templates)
            .map_err(|err| PluginError::InvalidConfig(err.to_string()))?;
        let mut values = request.markers;
        values
            .entry("workdir".to_string())
            .or_insert_with(|| workdir.path().to_string_lossy().into_owned());
        let marker_env = markers::render_config(&mut config, &plugin.templates, &values);
        let rendered = Value::Object(config);
        let marker_list = marker_list(&request.supported_markers, &values);
        let deadline_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let invocation = bindings::canopy::hooks::types::Invocation {
            mode: mode.clone(),
            config: rendered.to_string(),
            markers: marker_list,
            workdir: workdir.path().to_string_lossy().into_owned(),
            provenance: call::provenance_to_wit(&request.provenance),
            deadline_ms,
            resume_session: request.resume_session,
            decision_input: request.decision_input,
        };
        let started = Instant::now();
        let stops = std::iter::once(self.inner.force.signal())
            .chain(stop)
            .collect();
        let commands = Arc::new(call::CommandRecord::new(stops, not_before));
        // Live until this call returns: what its processes ask of the API acts as its cause.
        let credential = request
            .cause
            .as_ref()
            .map(|cause| (self.inner.credentials.mint(cause.clone()), cause));
        let cause_env = credential.iter().flat_map(|(credential, cause)| {
            [
                (
                    call_env::CALL_TOKEN.to_string(),
                    credential.token().to_string(),
                ),
                (call_env::ACTOR.to_string(), cause.actor.to_string()),
                (
                    call_env::DISPATCH_DEPTH.to_string(),
                    cause.depth.to_string(),
                ),
            ]
        });
        // Live until this call returns: the runtime hooks of an agent call answer while it runs.
        let launch = self
            .open_launch(
                &mode,
                &host,
                rendered.as_object(),
                launch::LaunchSite {
                    workdir: workdir.path(),
                    provenance: &request.provenance,
                    cause: request.cause.as_ref(),
                    graph_hooks: request.graph_hooks.as_ref(),
                },
            )
            .map_err(PluginError::InvalidConfig)?;
        let launch_env = launch.iter().flat_map(|launch| launch.env.clone());
        let setup = CallSetup {
            plugin: plugin.clone(),
            grants: Grants::new(plugin.record.name.clone(), plugin.record.grants()),
            workdir: Some(workdir.to_path_buf()),
            timeout,
            detach,
            env: self.inner.call_env.clone(),
            commands: commands.clone(),
            host_env: request
                .env
                .into_iter()
                .chain(cause_env)
                .chain(launch_env)
                .chain(marker_env)
                .collect(),
            stdin: request.stdin,
            platform_args: launch
                .as_ref()
                .map(|launch| Arc::from(launch.args.clone()))
                .unwrap_or_else(|| Arc::from(Vec::new())),
        };
        let call = setup.run(Call::Execute(Box::new(invocation)));
        let reply = self.on_plugin_threads(call).await;
        // The call's own secrets never reach its record, whatever its processes printed.
        let own_token: Vec<&str> = credential
            .iter()
            .map(|(c, _)| c.token())
            .chain(launch.iter().map(|launch| launch.secret()))
            .collect();
        let report = || -> Result<CallReport, PluginError> {
            let (outcome, said) = match reply? {
                Reply::Outcome(outcome, said) => (
                    call::masked_outcome(call::outcome_from_wit(outcome), &own_token),
                    call::masked_said(said, &own_token),
                ),
                Reply::Manifest(_) | Reply::Valid => {
                    return Err(PluginError::Internal(anyhow::anyhow!(
                        "execute returned no outcome"
                    )));
                }
            };
            Ok(CallReport {
                plugin: plugin_ref(&plugin.record),
                mode,
                rendered_config: rendered,
                deadline_ms,
                timed_out: matches!(outcome.status, Status::Failed { .. })
                    && commands
                        .timed_out
                        .load(std::sync::atomic::Ordering::Relaxed),
                interrupted: commands.was_interrupted(),
                exit_code: *commands
                    .last_exit_code
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                limit: commands.limit_hit(),
                outcome,
                said,
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
        };
        let result = report();
        // The phases Canopy fires itself as a launch ends, while the launch is still live (its
        // hooks are chosen as the event is recorded).
        if let Some(open) = &launch
            && open
                .launch()
                .hooks
                .declared()
                .any(|phase| !phase.from_runtime())
        {
            let ended = launch::LaunchEnd::of(&result);
            self.inner
                .call_env
                .services
                .launch_ended(open.launch().clone(), ended)
                .await;
        }
        result
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The tokens of the calls running now, which the API accepts in place of its own.
    pub fn credentials(&self) -> &credentials::CallCredentials {
        &self.inner.credentials
    }

    pub(crate) fn tmp_dir(&self) -> &Path {
        &self.inner.call_env.tmp_dir
    }
}

/// The markers a call hands the plugin: every one its kind of work offers, with its value or
/// `(none)`.
fn marker_list(supported: &[&str], values: &MarkerValues) -> Vec<(String, String)> {
    supported
        .iter()
        .map(|name| {
            let value = values
                .get(*name)
                .cloned()
                .unwrap_or_else(|| markers::NONE.to_string());
            ((*name).to_string(), value)
        })
        .collect()
}

fn plugin_ref(record: &PluginRecord) -> PluginRef {
    PluginRef {
        name: record.name.clone(),
        version: record.version.clone(),
        sha256: record.sha256.clone(),
    }
}

fn templates_of(manifest: &Manifest) -> Vec<(String, Escape)> {
    manifest
        .templates
        .iter()
        .map(|t| (t.field.clone(), t.escape))
        .collect()
}

/// Lowercase hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Writes a component this daemon has (from the database, or a built-in in its binary) to its
/// data dir's copy at `path`, whole or not at all; a failure is only logged (the component is
/// in memory, and loaded from there).
fn write_component(path: &std::path::Path, bytes: &[u8]) {
    let partial = path.with_extension("wasm.partial");
    if let Err(err) = std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, path))
    {
        tracing::warn!(path = %path.display(), %err, "cannot write the plugin's component to the data dir");
    }
}
