//! One call into a plugin: a fresh [`Store`] from the plugin's pre-linked instance, a memory
//! cap, an epoch deadline, WASI preopens from the grant, and the `host` interface checked
//! against the grant. Whatever the plugin does -- trap, panic, loop, hoard memory -- fails this
//! call only.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{ResourceTable, ResourceTableError};
use wasmtime::{PoolConcurrencyLimitError, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::canopy::hooks::{host, types};
use super::bounds::{self, LogBudget};
use super::capabilities::{Grants, inside_workdir};
use super::engine::Admission;
use super::process::{self, ProcessSpec};
use super::{HostServices, LoadedPlugin};
use canopy_model::capabilities::Capability;
use canopy_model::work::{Origin, Provenance};

/// Resources (open files, streams, pollables, sockets) one call may hold at once. Far below the
/// daemon's file-descriptor limit, so a plugin that hoards handles fails its own call only.
pub(crate) const MAX_HANDLES: usize = 256;

/// How long past its deadline a call may run to report a timed-out command of its own.
const REPORT_GRACE: Duration = Duration::from_millis(250);

/// Bytes of a plugin's own stderr (a panic message lands there) and of its own stdout kept.
const PLUGIN_STDERR: usize = 16 * 1024;

/// What to call on a plugin.
pub(crate) enum Call {
    Describe,
    Validate { mode: String, config: String },
    Execute(Box<types::Invocation>),
}

/// What the plugin answered.
pub(crate) enum Reply {
    Manifest(types::Manifest),
    Valid,
    /// An outcome, with what the plugin itself printed while it ran.
    Outcome(types::Outcome, Said),
}

/// What the plugin printed during the call, from its memory pipes.
fn said_of(state: &CallState) -> Said {
    let text = |pipe: &MemoryOutputPipe| {
        String::from_utf8_lossy(&pipe.contents())
            .trim_end()
            .to_string()
    };
    Said {
        stdout: text(&state.stdout),
        stderr: text(&state.stderr),
    }
}

/// `said` with every known secret, and each of `also`, masked.
pub(crate) fn masked_said(said: Said, also: &[&str]) -> Said {
    Said {
        stdout: crate::secrets::mask_owned(said.stdout, also),
        stderr: crate::secrets::mask_owned(said.stderr, also),
    }
}

pub(crate) fn origin_to_wit(origin: &Origin) -> types::Origin {
    match origin {
        Origin::Node => types::Origin::Node,
        Origin::Hook(name) => types::Origin::Hook(name.clone()),
        Origin::Cron(name) => types::Origin::Cron(name.clone()),
        Origin::Webhook(name) => types::Origin::Webhook(name.clone()),
        Origin::Manual => types::Origin::Manual,
    }
}

fn origin_from_wit(origin: types::Origin) -> Origin {
    match origin {
        types::Origin::Node => Origin::Node,
        types::Origin::Hook(name) => Origin::Hook(name),
        types::Origin::Cron(name) => Origin::Cron(name),
        types::Origin::Webhook(name) => Origin::Webhook(name),
        types::Origin::Manual => Origin::Manual,
    }
}

pub(crate) fn provenance_to_wit(provenance: &Provenance) -> types::Provenance {
    let some = |text: &String| (!text.is_empty()).then(|| text.clone());
    types::Provenance {
        origin: origin_to_wit(&provenance.origin),
        graph: some(&provenance.graph_id).map(|id| types::GraphRef {
            id,
            name: provenance.graph_name.clone(),
        }),
        run_id: some(&provenance.run_id),
        event: provenance.event.clone(),
        hook_index: provenance.hook_index,
        spec_id: provenance.spec_id.clone(),
    }
}

pub(crate) fn provenance_from_wit(wit: types::Provenance) -> Provenance {
    let (graph_id, graph_name) = wit.graph.map(|g| (g.id, g.name)).unwrap_or_default();
    Provenance {
        origin: origin_from_wit(wit.origin),
        graph_id,
        graph_name,
        run_id: wit.run_id.unwrap_or_default(),
        event: wit.event,
        hook_index: wit.hook_index,
        spec_id: wit.spec_id,
    }
}

pub use canopy_model::work::{Decision, Outcome, Said, Status};

/// The outcome with every known secret, and each of `also`, masked (see
/// [`crate::secrets`]): what the plugin says is recorded and emitted.
pub(crate) fn masked_outcome(outcome: Outcome, also: &[&str]) -> Outcome {
    let mask = |text: String| crate::secrets::mask_owned(text, also);
    Outcome {
        status: match outcome.status {
            Status::Completed => Status::Completed,
            Status::Failed { reason } => Status::Failed {
                reason: mask(reason),
            },
            Status::Blocked { blocker } => Status::Blocked {
                blocker: mask(blocker),
            },
            Status::TimedOut { reason } => Status::TimedOut {
                reason: mask(reason),
            },
        },
        summary: outcome.summary.map(mask),
        detail: mask(outcome.detail),
        harness_session: outcome.harness_session,
        decision: outcome.decision.map(|decision| match decision {
            Decision::Deny { reason } => Decision::Deny {
                reason: mask(reason),
            },
            other => other,
        }),
    }
}

pub(crate) fn outcome_from_wit(wit: types::Outcome) -> Outcome {
    Outcome {
        status: match wit.status {
            types::Status::Completed => Status::Completed,
            types::Status::Failed(reason) => Status::Failed { reason },
            types::Status::Blocked(blocker) => Status::Blocked { blocker },
            types::Status::TimedOut(reason) => Status::TimedOut { reason },
        },
        summary: wit.summary,
        detail: wit.detail,
        harness_session: wit.harness_session,
        decision: wit.decision.map(|decision| match decision {
            types::Decision::Allow => Decision::Allow,
            types::Decision::Deny(reason) => Decision::Deny { reason },
            types::Decision::Patch(patch) => Decision::Patch { patch },
        }),
    }
}

/// Why a call did not produce an outcome. Messages name the plugin and its version.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    /// The plugin ran past its deadline and was stopped.
    #[error("plugin `{plugin}` timed out: stopped after {millis} ms")]
    Timeout { plugin: String, millis: u64 },
    /// The plugin tried to use more memory than its cap.
    #[error("plugin `{plugin}` exceeded its memory cap of {mib} MiB and was stopped")]
    MemoryCap { plugin: String, mib: u64 },
    /// The plugin trapped (a panic, an unreachable, an out-of-bounds access).
    #[error("plugin `{plugin}` trapped: {message}")]
    Trap { plugin: String, message: String },
    /// The plugin returned an error of its own.
    #[error("plugin `{plugin}`: {message}")]
    Plugin { plugin: String, message: String },
    /// The call could not be set up (bad workdir, preopen refused).
    #[error("plugin `{plugin}` cannot run: {message}")]
    Setup { plugin: String, message: String },
    /// Every call slot stayed taken until the call's deadline; the plugin never ran.
    #[error(
        "plugin `{plugin}` did not start: the daemon was running its maximum of concurrent plugin calls for {millis} ms, the call's whole deadline"
    )]
    Busy { plugin: String, millis: u64 },
}

/// Caps a call's linear memory; remembers whether the cap was hit so the error can say so.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    max: usize,
    exceeded: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.exceeded = true;
            return Err(wasmtime::Error::msg("memory cap exceeded"));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The element of a platform's command that the launch's hook arguments replace.
const SETTINGS_ARGS: &str = "{settings_args}";

/// The data of one call's store.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryCap,
    stderr: MemoryOutputPipe,
    stdout: MemoryOutputPipe,
    plugin: Arc<str>,
    grants: Grants,
    workdir: Option<PathBuf>,
    deadline: Instant,
    services: Arc<dyn HostServices>,
    tmp_dir: PathBuf,
    /// Where the work being served came from, stamped by the host (`execute` only).
    provenance: Option<Provenance>,
    /// Leave what the call's commands start running after they exit.
    detach: bool,
    log_budget: LogBudget,
    /// See [`CallSetup::commands`].
    commands: Arc<CommandRecord>,
    /// See [`CallSetup::host_env`].
    host_env: Arc<[(String, String)]>,
    /// See [`CallSetup::stdin`].
    stdin: Option<PathBuf>,
    /// See [`CallSetup::platform_args`].
    platform_args: Arc<[String]>,
    /// The program of the agent platform the call asked for, and how it reports a usage limit.
    platform_limit: Option<(String, canopy_model::limits::LimitRule)>,
    /// Keeps the epoch advancing while this store lives (its deadline counts in ticks).
    _ticking: super::engine::Ticking,
}

impl CallState {
    /// The call's own token, when it has one (see [`super::credentials`]).
    fn call_token(&self) -> Option<&str> {
        self.host_env
            .iter()
            .find(|(name, _)| name == canopy_model::call_env::CALL_TOKEN)
            .map(|(_, value)| value.as_str())
    }

    /// The plugin's name and version, for logs.
    pub(crate) fn plugin_label(&self) -> &str {
        &self.plugin
    }

    /// Whether the guest may create a symlink to `target` (see [`super::fs_guard`]).
    pub(crate) fn symlink_target_allowed(&self, target: &str) -> bool {
        super::fs_guard::target_allowed(self.workdir.as_deref(), target)
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// What every call of one host shares: the daemon's services, scratch space, caps and the
/// admission gate in front of the instance pool.
#[derive(Clone)]
pub(crate) struct CallEnv {
    pub memory_cap: usize,
    pub services: Arc<dyn HostServices>,
    pub tmp_dir: PathBuf,
    pub admission: Admission,
}

/// What the host saw of the commands one call ran.
#[derive(Debug, Default)]
pub(crate) struct CommandRecord {
    /// A command was stopped at its timeout.
    pub timed_out: std::sync::atomic::AtomicBool,
    /// A command was killed by a stop signal (or not started because one had fired).
    pub interrupted: std::sync::atomic::AtomicBool,
    /// The exit code of the last command that exited with one.
    pub last_exit_code: std::sync::Mutex<Option<i32>>,
    /// A process of the agent platform reported a usage limit (the last one that did).
    pub limit_hit: std::sync::Mutex<Option<canopy_model::limits::LimitHit>>,
    /// The signals that stop the call's commands.
    pub stops: Vec<super::process::StopSignal>,
    /// No command is spawned before this instant.
    pub not_before: Option<tokio::time::Instant>,
}

impl CommandRecord {
    pub fn new(
        stops: Vec<super::process::StopSignal>,
        not_before: Option<tokio::time::Instant>,
    ) -> Self {
        Self {
            stops,
            not_before,
            ..Self::default()
        }
    }

    fn exited(&self, exit: &super::process::ProcessExit) {
        use std::sync::atomic::Ordering::Relaxed;
        if exit.timed_out {
            self.timed_out.store(true, Relaxed);
        }
        if exit.interrupted {
            self.interrupted.store(true, Relaxed);
        }
        if exit.code.is_some() {
            *self
                .last_exit_code
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = exit.code;
        }
    }

    /// The usage limit a process of the call reported, if one did.
    pub fn limit_hit(&self) -> Option<canopy_model::limits::LimitHit> {
        self.limit_hit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn was_interrupted(&self) -> bool {
        self.interrupted.load(std::sync::atomic::Ordering::Relaxed)
            || self.stops.iter().any(super::process::StopSignal::fired)
    }
}

/// Everything needed to set up one call.
pub(crate) struct CallSetup {
    pub plugin: Arc<LoadedPlugin>,
    pub grants: Grants,
    /// Canonical workdir, or none for `describe` / `validate`.
    pub workdir: Option<PathBuf>,
    pub timeout: Duration,
    /// Leave what the call's commands start running after they exit (`detach = true`).
    pub detach: bool,
    pub env: CallEnv,
    /// The host's own record of the commands the call ran, whatever the plugin then reports.
    pub commands: Arc<CommandRecord>,
    /// Variables set on every process the call runs, after the plugin's own.
    pub host_env: Arc<[(String, String)]>,
    /// Stdin of every process the call runs that the plugin gives none (see
    /// [`super::CallRequest::stdin`]).
    pub stdin: Option<PathBuf>,
    /// Arguments added to the agent platform's command the plugin asks for (a launch's
    /// runtime hook configuration, see [`super::launch`]).
    pub platform_args: Arc<[String]>,
}

impl CallSetup {
    fn plugin_label(&self) -> String {
        let record = &self.plugin.record;
        // A component whose describe() has not answered yet has no version.
        if record.version.is_empty() {
            record.name.clone()
        } else {
            format!("{} {}", record.name, record.version)
        }
    }

    /// Opens for the guest what the plugin's grants give it in the call's workdir (nothing for
    /// `describe` / `validate`, which have none).
    fn preopen(&self, wasi: &mut WasiCtxBuilder, label: &str) -> Result<(), CallError> {
        let Some(workdir) = &self.workdir else {
            return Ok(());
        };
        let setup_failed = |message: String| CallError::Setup {
            plugin: label.to_string(),
            message,
        };
        for preopen in self.grants.preopens(workdir).map_err(setup_failed)? {
            let perms = if preopen.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            let guest = preopen.path.to_string_lossy().into_owned();
            wasi.preopened_dir(&preopen.path, guest, perms)
                .map_err(|err| {
                    setup_failed(format!("cannot open {}: {err}", preopen.path.display()))
                })?;
        }
        Ok(())
    }

    /// A fresh store for one attempt at the call. `deadline` is the call's own deadline: the
    /// guest traps once it passes (and yields to the runtime on every epoch tick until then, so
    /// a spinning guest never holds a runtime worker).
    fn store(
        &self,
        deadline: Instant,
        provenance: Option<Provenance>,
    ) -> Result<Store<CallState>, CallError> {
        let label = self.plugin_label();
        let mut wasi = WasiCtx::builder();
        // Plugin file operations are small and local: doing them on this thread avoids a hop to
        // the blocking pool per operation (a 4x difference for a plugin that appends to a file).
        wasi.allow_blocking_current_thread(true);
        let stderr = MemoryOutputPipe::new(PLUGIN_STDERR);
        wasi.stderr(stderr.clone());
        let stdout = MemoryOutputPipe::new(PLUGIN_STDERR);
        wasi.stdout(stdout.clone());
        self.preopen(&mut wasi, &label)?;
        if let Some(policy) = self.grants.network() {
            // TCP and UDP stay off in wasmtime-wasi until allowed; every address the guest
            // binds, connects, sends to or receives from then goes through the grant. Host
            // names of the grant are resolved once per call, at its first socket use.
            let access = Arc::new(tokio::sync::OnceCell::new());
            let warned = Arc::new(std::sync::atomic::AtomicBool::new(false));
            wasi.allow_tcp(true)
                .allow_udp(true)
                .allow_ip_name_lookup(true)
                .socket_addr_check(move |addr, usage| {
                    let (policy, access, warned) = (policy.clone(), access.clone(), warned.clone());
                    Box::pin(async move {
                        let access = access.get_or_init(|| policy.resolve()).await;
                        use super::capabilities::NetUse;
                        use wasmtime_wasi::sockets::SocketAddrUse as Use;
                        let usage = match usage {
                            Use::TcpBind | Use::UdpBind => NetUse::Bind,
                            Use::TcpListen | Use::TcpAccept => NetUse::Serve,
                            Use::TcpConnect | Use::UdpSend | Use::UdpReceive => NetUse::Reach,
                        };
                        let permitted = access.permits(addr, usage);
                        if !permitted && !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                            tracing::warn!(plugin = access.plugin(), %addr, ?usage, "socket address not permitted by the plugin's network grant (further refusals in this call are not logged)");
                        }
                        permitted
                    })
                });
        }
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HANDLES);
        let state = CallState {
            wasi: wasi.build(),
            table,
            memory: MemoryCap {
                max: self.env.memory_cap,
                exceeded: false,
            },
            stderr,
            stdout,
            plugin: Arc::from(label.as_str()),
            grants: self.grants.clone(),
            workdir: self.workdir.clone(),
            deadline,
            services: self.env.services.clone(),
            tmp_dir: self.env.tmp_dir.clone(),
            provenance,
            detach: self.detach,
            log_budget: LogBudget::default(),
            commands: self.commands.clone(),
            host_env: self.host_env.clone(),
            stdin: self.stdin.clone(),
            platform_args: self.platform_args.clone(),
            platform_limit: None,
            _ticking: super::engine::Ticking::start(),
        };
        let mut store = Store::new(self.plugin.pre.engine(), state);
        store.limiter(|state| &mut state.memory);
        // Leave the plugin a moment past its own deadline to report a timed-out command.
        let trap_at = deadline + REPORT_GRACE;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= trap_at {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        Ok(store)
    }

    /// Admits the call, instantiates the plugin and makes `call` on it, mapping every way it can
    /// break. The whole call -- waiting for a slot, instantiating, guest code and every host
    /// call it makes (a WASI sleep, a stream read, a process) -- ends by the deadline: past it,
    /// the call's future and its store are dropped, which kills whatever it was running.
    pub async fn run(self, call: Call) -> Result<Reply, CallError> {
        let label = self.plugin_label();
        let started = Instant::now();
        let deadline = started + self.timeout;
        let hard_stop = tokio::time::Instant::from_std(deadline + REPORT_GRACE);
        let provenance = match &call {
            Call::Execute(invocation) => Some(provenance_from_wit(invocation.provenance.clone())),
            Call::Describe | Call::Validate { .. } => None,
        };
        let Some(_permit) = self.env.admission.enter(deadline).await else {
            return Err(CallError::Busy {
                plugin: label,
                millis: millis_since(started),
            });
        };
        loop {
            let mut store = self.store(deadline, provenance.clone())?;
            let pre = &self.plugin.pre;
            let attempt = pre.call(&mut store, &call);
            let result = tokio::time::timeout_at(hard_stop, attempt).await;
            let state = store.data();
            if state.log_budget.dropped() > 0 {
                tracing::warn!(plugin = %label, dropped = state.log_budget.dropped(), "plugin log lines dropped: over the rate limit");
            }
            return match result {
                Err(_elapsed) => Err(self.timed_out(&label, started)),
                Ok(Ok(Ok(Reply::Outcome(outcome, _)))) => {
                    Ok(bounds::reply(Reply::Outcome(outcome, said_of(state))))
                }
                Ok(Ok(Ok(value))) => Ok(bounds::reply(value)),
                Ok(Ok(Err(message))) => Err(CallError::Plugin {
                    plugin: label,
                    message: bounds::message(message),
                }),
                Ok(Err(err)) if err.is::<PoolConcurrencyLimitError>() => {
                    // Another limit of the instance pool than the one admission counts (a
                    // plugin with many core instances): wait for a call to end, then retry.
                    tracing::debug!(plugin = %label, "instance pool full; waiting for a call to end");
                    if self.env.admission.wait_for_release(deadline).await {
                        continue;
                    }
                    Err(CallError::Busy {
                        plugin: label,
                        millis: millis_since(started),
                    })
                }
                Ok(Err(err)) => Err(self.broke(&label, started, state, &err)),
            };
        }
    }

    /// The floor every call stands on, for `plugin bench`'s bare-wasmtime line: a store whose
    /// WASI context has the directories the plugin's grants open (what any host must open for
    /// it), the pre-linked instance, `execute`. None of the host's per-call work: no admission,
    /// no deadline, no rendering, no token, no network policy.
    pub(crate) async fn bare_execute(&self, call: &Call) -> Result<(), CallError> {
        let label = self.plugin_label();
        let mut wasi = WasiCtx::builder();
        self.preopen(&mut wasi, &label)?;
        let state = CallState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            memory: MemoryCap {
                max: self.env.memory_cap,
                exceeded: false,
            },
            stderr: MemoryOutputPipe::new(PLUGIN_STDERR),
            stdout: MemoryOutputPipe::new(PLUGIN_STDERR),
            plugin: Arc::from(label.as_str()),
            grants: self.grants.clone(),
            workdir: self.workdir.clone(),
            deadline: Instant::now() + self.timeout,
            services: self.env.services.clone(),
            tmp_dir: self.env.tmp_dir.clone(),
            provenance: None,
            detach: false,
            log_budget: LogBudget::default(),
            commands: self.commands.clone(),
            host_env: self.host_env.clone(),
            stdin: None,
            platform_args: self.platform_args.clone(),
            platform_limit: None,
            _ticking: super::engine::Ticking::start(),
        };
        let mut store = Store::new(self.plugin.pre.engine(), state);
        store.limiter(|state| &mut state.memory);
        store.set_epoch_deadline(u64::MAX / 2);
        let broke = |err: wasmtime::Error| CallError::Trap {
            plugin: label.clone(),
            message: format!("{err:#}"),
        };
        self.plugin
            .pre
            .call(&mut store, call)
            .await
            .map_err(broke)?
            .map_err(|message| CallError::Plugin {
                plugin: label.clone(),
                message: bounds::message(message),
            })?;
        Ok(())
    }

    fn timed_out(&self, label: &str, started: Instant) -> CallError {
        let millis = millis_since(started);
        tracing::warn!(plugin = %label, millis, limit_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX), "plugin call stopped at its deadline");
        CallError::Timeout {
            plugin: label.to_string(),
            millis,
        }
    }

    /// The error for a call that trapped: out of memory, out of time, or a guest fault (with
    /// the plugin's own stderr, where a panic message lands).
    fn broke(
        &self,
        label: &str,
        started: Instant,
        state: &CallState,
        err: &wasmtime::Error,
    ) -> CallError {
        if state.memory.exceeded {
            return CallError::MemoryCap {
                plugin: label.to_string(),
                mib: (self.env.memory_cap / (1024 * 1024)) as u64,
            };
        }
        if let Some(Trap::Interrupt) = err.downcast_ref::<Trap>() {
            return self.timed_out(label, started);
        }
        if let Some(ResourceTableError::Full) = err.downcast_ref::<ResourceTableError>() {
            return CallError::Trap {
                plugin: label.to_string(),
                message: format!(
                    "it held more than {MAX_HANDLES} open handles (files, streams, sockets) at once and was stopped"
                ),
            };
        }
        let trap = err
            .downcast_ref::<Trap>()
            .map_or_else(|| format!("{err:#}"), ToString::to_string);
        let stderr = String::from_utf8_lossy(&state.stderr.contents())
            .trim()
            .to_string();
        let message = if stderr.is_empty() {
            trap
        } else {
            format!("{trap}; plugin stderr: {stderr}")
        };
        CallError::Trap {
            plugin: label.to_string(),
            message: bounds::message(message),
        }
    }
}

fn millis_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl CallState {
    /// The provenance the host stamped on this call (none for `describe` / `validate`).
    pub(crate) fn provenance(&self) -> Option<&Provenance> {
        self.provenance.as_ref()
    }
}

impl types::Host for CallState {}

impl host::Host for CallState {
    async fn log(&mut self, level: types::Level, message: String) {
        if !self.log_budget.admit() {
            return;
        }
        let message = bounds::log_line(&message);
        let plugin = &*self.plugin;
        match level {
            types::Level::Trace => tracing::trace!(plugin, "{message}"),
            types::Level::Debug => tracing::debug!(plugin, "{message}"),
            types::Level::Info => tracing::info!(plugin, "{message}"),
            types::Level::Warn => tracing::warn!(plugin, "{message}"),
            types::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }

    async fn run_command(&mut self, cmd: types::Command) -> Result<types::Exit, String> {
        // A program named by a `process:<program>` grant is looked up on the daemon's own PATH:
        // a PATH the plugin passes cannot swap in another program of that name.
        use super::capabilities::ProgramGrant;
        let (program, arg0) = match self.grants.program(&cmd.program)? {
            ProgramGrant::Any => (cmd.program.clone(), None),
            ProgramGrant::Listed if crate::procs::env::is_path(&cmd.program) => {
                (cmd.program.clone(), None)
            }
            ProgramGrant::Listed => {
                let found = crate::procs::which(&cmd.program).ok_or_else(|| {
                    format!(
                        "cannot run `{}`: not found on the daemon's PATH (`process:{}` is granted)",
                        cmd.program, cmd.program
                    )
                })?;
                (
                    found.to_string_lossy().into_owned(),
                    Some(cmd.program.clone()),
                )
            }
        };
        let workdir = self
            .workdir
            .clone()
            .ok_or_else(|| "run-command is not available outside `execute`".to_string())?;
        let cwd = match &cmd.cwd {
            Some(cwd) => inside_workdir(&workdir, cwd).map_err(|err| format!("cwd: {err}"))?,
            None => workdir,
        };
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let timeout = Duration::from_millis(cmd.timeout_ms).min(remaining);
        let result_file = cmd.capture_result.then(|| {
            self.tmp_dir
                .join(format!("result-{}.json", canopy_store::new_id()))
        });
        let spec = ProcessSpec {
            program,
            arg0,
            args: cmd.args,
            cwd,
            env: cmd
                .env
                .into_iter()
                .filter(|(name, _)| !self.host_env.iter().any(|(host, _)| host == name))
                .chain(self.host_env.iter().cloned())
                .collect(),
            stdin_file: if cmd.stdin.is_none() {
                self.stdin.clone()
            } else {
                None
            },
            stdin: cmd.stdin,
            timeout,
            result_file,
            detach: self.detach,
            stops: self.commands.stops.clone(),
            not_before: self.commands.not_before,
        };
        tracing::debug!(plugin = &*self.plugin, program = %cmd.program, "run-command");
        let exit = process::run(spec)
            .await
            .map_err(|err| format!("cannot run `{}`: {err}", cmd.program))?;
        self.commands.exited(&exit);
        // What a process printed reaches records and the feed: no known secret goes with it.
        let own = self.call_token();
        let also: Vec<&str> = own.into_iter().collect();
        let stdout = crate::secrets::mask_owned(exit.stdout, &also);
        let stderr = crate::secrets::mask_owned(exit.stderr, &also);
        if let Some((program, rule)) = &self.platform_limit
            && *program == cmd.program
            && let Some(hit) = rule.check_now(exit.code, &[&stdout, &stderr])
        {
            tracing::info!(plugin = &*self.plugin, program = %cmd.program, resets_at = %hit.resets_at, "the agent platform reported a usage limit");
            *self
                .commands
                .limit_hit
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hit);
        }
        Ok(types::Exit {
            code: exit.code,
            timed_out: exit.timed_out,
            stdout,
            stderr,
            result: exit.result.map(|r| crate::secrets::mask_owned(r, &also)),
            duration_ms: u64::try_from(exit.duration.as_millis()).unwrap_or(u64::MAX),
        })
    }

    async fn enqueue_message(
        &mut self,
        target: types::SessionTarget,
        text: String,
        provenance: types::Provenance,
    ) -> Result<String, String> {
        self.grants.require(&Capability::Sessions)?;
        // The host says where the work came from; what the guest claims is ignored, so a
        // plugin cannot pass its message off as another graph's.
        let Some(stamped) = self.provenance.clone() else {
            return Err("enqueue-message is only available inside `execute`".to_string());
        };
        let claimed = provenance_from_wit(provenance);
        if claimed != stamped {
            tracing::warn!(plugin = &*self.plugin, claimed_graph = %bounds::log_line(&claimed.graph_name), claimed_run = %bounds::log_line(&claimed.run_id), "plugin claimed another provenance for a message; using the invocation's");
        }
        let target = match target {
            types::SessionTarget::Id(id) => canopy_model::work::MessageTarget::Id(id),
            types::SessionTarget::Name(name) => canopy_model::work::MessageTarget::Name(name),
        };
        self.services
            .enqueue_message(&self.plugin, target, &text, &stamped)
            .await
    }

    async fn agent_platform(&mut self, name: String) -> Result<types::Platform, String> {
        let platform = self.services.agent_platform(&name)?;
        self.platform_limit = platform
            .limit
            .clone()
            .zip(platform.command.first().cloned())
            .map(|(rule, program)| (program, rule));
        // The launch's hook arguments go where the command places them, else at its end.
        let placed = platform.command.iter().any(|arg| arg == SETTINGS_ARGS);
        let mut command = Vec::with_capacity(platform.command.len() + self.platform_args.len());
        for arg in platform.command {
            if arg == SETTINGS_ARGS {
                command.extend(self.platform_args.iter().cloned());
            } else {
                command.push(arg);
            }
        }
        if !placed {
            command.extend(self.platform_args.iter().cloned());
        }
        Ok(types::Platform {
            command,
            model_args: platform.model_args,
            effort_args: platform.effort_args,
            resume_args: platform.resume_args,
        })
    }
}
