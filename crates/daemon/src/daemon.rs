//! `canopy daemon`: one per data dir. Opens the database, starts the executor host, serves the
//! HTTP API on loopback and writes its address into the data dir for the CLI.

use std::fs::File;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use crate::api::{self, AppState};
use canopy_core::bus::Bus;
use canopy_core::config::database::Database;
use canopy_core::config::{self, Config};
use canopy_core::engine::Engine;
use canopy_core::sessions::{self, Delivery};
use canopy_datadir::DataDir;
use canopy_executors::plugins::platforms::Platform;
use canopy_executors::plugins::{HostServices, PluginHost};
use canopy_model::work::{MessageTarget, Provenance};
use canopy_store::Store;

/// How long the API waits for a request's line and headers once their first byte arrived
/// (see [`crate::listener`]).
const API_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long an idle API connection may wait for its next request. The CLI's clients drop
/// their idle connections sooner ([`canopy_client::IDLE_TIMEOUT`]).
const API_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What the daemon provides to plugins behind the `host` interface.
struct DaemonServices {
    outbox: sessions::Outbox,
    /// The agent platforms in force (a config reload replaces them).
    platforms: crate::reload::Platforms,
    /// Where the platforms were read from, and when: errors name them, since an edit of the
    /// file after that has no effect until a reload.
    config: ConfigSource,
    /// The API's address, where a launched agent's runtime hooks call back.
    api_url: String,
    /// The bus, once it exists (after the plugin host): its daemon hooks say which agent
    /// decisions every launch is asked about.
    bus: std::sync::OnceLock<Bus>,
}

/// The `canopy.toml` a daemon read at start.
struct ConfigSource {
    path: std::path::PathBuf,
    read_at: std::time::SystemTime,
    existed: bool,
}

impl ConfigSource {
    /// Why `[platforms.{name}]` is not known, and what to do.
    fn missing_platform(&self, name: &str) -> String {
        let when = humantime::format_rfc3339_seconds(self.read_at);
        let found = if self.existed {
            format!("had no [platforms.{name}] section")
        } else {
            "did not exist".to_string()
        };
        format!(
            "The daemon read {} when it started ({when}), and the file {found} then: add [platforms.{name}] there, and run `canopy config reload` if you added it since (a reload puts an edit in force)",
            self.path.display()
        )
    }
}

impl HostServices for DaemonServices {
    fn enqueue_message<'a>(
        &'a self,
        plugin: &'a str,
        target: MessageTarget,
        text: &'a str,
        provenance: &'a Provenance,
    ) -> canopy_executors::plugins::ServiceFuture<'a, Result<String, String>> {
        Box::pin(self.outbox.enqueue(plugin, target, text, provenance))
    }

    fn agent_platform(&self, name: &str) -> Result<Platform, String> {
        let platforms = self
            .platforms
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let platforms = &platforms.platforms;
        platforms.get(name).cloned().ok_or_else(|| {
            format!(
                "unknown agent platform `{name}`; configured platforms: {}. {}",
                platforms.keys().cloned().collect::<Vec<_>>().join(", "),
                self.config.missing_platform(name)
            )
        })
    }

    fn profile(&self, name: &str) -> Result<serde_json::Value, String> {
        let settings = self
            .platforms
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        settings.profiles.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = settings.profiles.keys().map(String::as_str).collect();
            format!(
                "unknown profile `{name}`{}; configured profiles: {}. Profiles are [profiles.NAME] sections of {}",
                canopy_model::text::did_you_mean(name, known.iter().copied()),
                if known.is_empty() { "none".to_string() } else { known.join(", ") },
                self.config.path.display()
            )
        })
    }

    fn api_url(&self) -> Option<String> {
        Some(self.api_url.clone())
    }

    fn decides_on(&self, event: &str) -> bool {
        self.bus.get().is_some_and(|bus| bus.asks(event))
    }

    fn launch_ended(
        &self,
        launch: std::sync::Arc<canopy_executors::plugins::launch::Launch>,
        ended: canopy_executors::plugins::launch::LaunchEnd,
    ) -> canopy_executors::plugins::ServiceFuture<'_, ()> {
        Box::pin(async move {
            if let Some(bus) = self.bus.get() {
                canopy_core::runtime_hooks::launch_ended(bus, &launch, ended).await;
            }
        })
    }
}

/// Holds the data dir's daemon lock for the daemon's lifetime.
struct DaemonLock {
    _file: File,
}

fn lock(data: &DataDir) -> Result<DaemonLock> {
    let path = data.lock_file();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => bail!(already_running(data, None)),
        Err(std::fs::TryLockError::Error(err)) => {
            return Err(err).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    file.set_len(0)?;
    writeln!(file, "{}", std::process::id())?;
    Ok(DaemonLock { _file: file })
}

/// Why a second daemon on one data dir is refused: the one running there, its pid and address.
fn already_running(data: &DataDir, pid: Option<u32>) -> String {
    let running = std::fs::read_to_string(data.address_file()).unwrap_or_default();
    format!(
        "another canopy daemon{} is already running on data dir {}{}; one data dir has one daemon: stop it first (`canopy daemon stop`) or use another --data-dir",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        data.root().display(),
        if running.trim().is_empty() {
            String::new()
        } else {
            format!(", listening on {}", running.trim())
        }
    )
}

/// The daemon holding a data dir's lock.
#[derive(Debug, Clone, Copy)]
pub struct Holder {
    /// Its pid, as it wrote it into the lock file (None while it is writing it).
    pub pid: Option<u32>,
}

/// The daemon running on this data dir, if one is: whoever holds its lock. Never creates
/// anything; holds a shared lock for an instant when none is running.
pub fn holder(data: &DataDir) -> Option<Holder> {
    let path = data.lock_file();
    let file = File::open(&path).ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            None
        }
        Err(std::fs::TryLockError::WouldBlock) => Some(Holder {
            pid: std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| text.trim().parse().ok()),
        }),
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// Binds the API's address (`--listen`, else `listen` in canopy.toml, else the default). A port
/// already taken is refused saying so, and how to pick another.
async fn bind(data: &DataDir, listen: &str) -> Result<tokio::net::TcpListener> {
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("--listen `{listen}` is not an address like 127.0.0.1:7461"))?;
    if !addr.ip().is_loopback() {
        bail!("--listen `{listen}`: the API serves loopback only (127.0.0.1 or [::1])");
    }
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => Ok(listener),
        Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
            // A daemon of this data dir was refused before (see `run`): someone else has it.
            let who = "another program (or the canopy daemon of another data dir) listens there";
            let other = SocketAddr::new(addr.ip(), addr.port().wrapping_add(1).max(1024));
            bail!(
                "cannot listen on {addr}: the port is taken; {who}. Pick another port: `canopy daemon --listen {}` takes any free one (the CLI finds it through the data dir), or `--listen {other}`, or set `listen` in {}",
                SocketAddr::new(addr.ip(), 0),
                data.config_file().display()
            )
        }
        Err(err) => Err(err).with_context(|| format!("cannot listen on {addr}")),
    }
}

/// Runs the daemon until SIGINT / SIGTERM or `POST /api/shutdown`.
/// `database`: `--database`, a PostgreSQL connection string (see
/// [`canopy_core::config::database`]).
pub async fn run(data: DataDir, listen: Option<String>, database: Option<String>) -> Result<()> {
    let refused = match serve(&data, listen, database).await {
        Ok(()) => return Ok(()),
        Err(err) => err,
    };
    // A daemon that would not start says why in its log too, where `canopy status` looks for
    // the last errors (not when it was refused for another one already running: that one's log
    // is in use, and nothing is wrong).
    if holder(&data).is_none() && data.root().is_dir() {
        crate::logfile::append_refusal(&data.log_file(), &format!("{refused:#}"));
    }
    Err(refused)
}

async fn serve(data: &DataDir, listen: Option<String>, database: Option<String>) -> Result<()> {
    let data = data.clone();
    // Before anything is written to the data dir: read the configuration and take the port, so
    // that a daemon refused here (a taken port) leaves the data dir and its state as they were
    // (but for the line in its log that says why, see `run`).
    // When, and whether, the file was there to read: errors about platforms say so.
    let (config_read_at, config_existed) =
        (std::time::SystemTime::now(), data.config_file().is_file());
    let config = Config::load(&data.config_file())?;
    let database = config
        .database
        .resolve(database.as_deref(), |name| std::env::var(name).ok())?;
    let listen = listen
        .or(config.listen.clone())
        .unwrap_or_else(|| config::DEFAULT_LISTEN.to_string());
    // One daemon per data dir: said first, whatever port this one was asked to take.
    if let Some(running) = holder(&data) {
        bail!(already_running(&data, running.pid));
    }
    let listener = bind(&data, &listen).await?;
    let webhook_listener = crate::webhook_listener::bind(&config).await?;
    canopy_executors::procs::umask::private_umask();
    // Before the data dir is made private: a token others could have read is not reused.
    let found_token = canopy_datadir::token::inspect(&data.token_file());
    let data = data.create()?;
    let _lock = lock(&data)?;
    if let Err(err) = crate::logfile::attach(
        &data.log_file(),
        config.log.max_file_kib.saturating_mul(1024),
    ) {
        tracing::warn!(error = %format!("{err:#}"), "the log goes to stderr only");
    }
    // After the lock: a second daemon refused on this data dir must not replace the token.
    let token = Arc::new(api::ApiToken::new(
        start_token(&data, found_token)?,
        data.token_file(),
    ));
    // Before any plugin runs: adopt orphans, and kill what a daemon that died here left running.
    canopy_executors::procs::start(data.root(), &config.process).await?;
    // The node this daemon is: what it claims in the database is recorded under that name.
    let identity = config
        .identity()
        .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
    let lease = config.database.lease();
    let store = match database {
        Database::Sqlite => Store::open_as(&data.database(), &identity.node)?,
        Database::Postgres { url, shown } => {
            tracing::info!(database = %shown, node = %identity.node, "the state is kept in PostgreSQL");
            let node = identity.node.clone();
            // The client blocks on a runtime of its own: off this one.
            tokio::task::spawn_blocking(move || Store::open_postgres(&url, &node))
                .await
                .context("opening the database panicked")??
        }
    };
    let platforms: crate::reload::Platforms = Arc::new(std::sync::RwLock::new(
        crate::reload::AgentSettings::of(&config),
    ));
    let outbox = sessions::Outbox::default();
    let services = Arc::new(DaemonServices {
        outbox: outbox.clone(),
        platforms: platforms.clone(),
        config: ConfigSource {
            path: data.config_file(),
            read_at: config_read_at,
            existed: config_existed,
        },
        api_url: format!("http://{}", listener.local_addr()?),
        bus: std::sync::OnceLock::new(),
    });
    let plugins = PluginHost::start(
        &data,
        store.clone(),
        &config.limits.calls(),
        services.clone(),
    )
    .await?;
    let interrupted_hooks = store
        .write(|tx| {
            tx.interrupt_unfinished_hook_runs("the daemon stopped before this hook run finished")
        })
        .await?;
    if interrupted_hooks > 0 {
        tracing::warn!(
            hook_runs = interrupted_hooks,
            "hook runs unfinished when the daemon last stopped are marked interrupted"
        );
    }
    let daemon_hooks = config
        .daemon_hooks()
        .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
    for problem in canopy_core::hooks::daemon::check_actions(&plugins, &daemon_hooks).await {
        tracing::warn!(%problem, "a daemon hook's action does not validate; its runs will fail until it does");
    }
    let bus = Bus::new(
        store.clone(),
        plugins.clone(),
        daemon_hooks,
        data.root().to_path_buf(),
    );
    // Set once: the services outlive no bus, and nothing asks before the first agent call.
    let _ = services.bus.set(bus.clone());
    let engine = Engine::new(store.clone(), plugins.clone(), bus.clone());
    engine.set_lease(lease);
    let reloader = Arc::new(crate::reload::Reloader::new(
        data.config_file(),
        bus.clone(),
        plugins.clone(),
        platforms,
        config.clone(),
    ));
    tokio::spawn(reload_on_hangup(reloader.clone()));
    let interrupted = engine.recover().await?;
    if interrupted > 0 {
        tracing::warn!(
            runs = interrupted,
            "runs in progress when the daemon last stopped are marked interrupted"
        );
    }

    let bound = listener.local_addr()?;
    let url = format!("http://{bound}");
    write_address(&data, &url)?;
    tracing::info!(%url, data_dir = %data.root().display(), pid = std::process::id(), version = env!("CARGO_PKG_VERSION"), "canopy daemon listening");
    let roles = identity.roles.clone();
    let api_url = url.clone();
    store
        .write(move |tx| {
            tx.register_node(&canopy_store::nodes::NewNode {
                roles: &roles,
                version: env!("CARGO_PKG_VERSION"),
                api_url: Some(&api_url),
                lease,
            })
        })
        .await?;
    let relay = bus.relay_other_nodes();
    let info = Arc::new(api::DaemonInfo::new(url, data.log_file()));

    let engine_store = store.clone();
    // One drain for all the work a planned stop waits for (see `canopy_core::drain`).
    let drain = bus.drain().clone();
    let crons = canopy_core::crons::Crons::new(
        bus.clone(),
        data.root().to_path_buf(),
        config.feed.keep_days,
        config
            .crons()
            .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?,
    );
    for problem in
        canopy_core::crons::check_actions(&plugins, &config.crons().unwrap_or_default()).await
    {
        tracing::warn!(%problem, "a cron's action does not validate; its firings will fail until it does");
    }
    crons.start().await?;
    reloader.schedule_crons(crons.clone());
    let heartbeat = tokio::spawn(heartbeat(
        engine.clone(),
        store.clone(),
        crons.clone(),
        plugins.clone(),
        lease,
    ));
    // Project hooks, and a watcher per project checkout.
    let project_watchers = canopy_core::projects::start(&config, &plugins, &bus, &drain).await?;
    reloader.watch_projects(project_watchers.clone());
    // Webhook ingress: deliveries accepted before the last stop run now; its own listener.
    let webhooks = canopy_core::webhooks::Ingress::new(
        canopy_core::webhooks::Parts {
            store: store.clone(),
            bus: bus.clone(),
            plugins: plugins.clone(),
            backlog: std::sync::Arc::new(engine.clone()),
            drain: drain.clone(),
            data_dir: data.root().to_path_buf(),
            stopping: info.stopping.subscribe(),
        },
        &config,
    )?;
    webhooks.start().await?;
    reloader.serve_webhooks(webhooks.clone());
    if let Some(listener) = webhook_listener {
        crate::webhook_listener::spawn(webhooks.clone(), listener, info.stopped())?;
    }
    let delivery = Delivery::new(bus.clone());
    outbox.bind(bus.clone());
    let scheduler = tokio::spawn(scheduler(delivery.clone()));
    canopy_core::retention::spawn(store.clone(), canopy_core::retention::Policy::of(&config));
    let app = api::router(
        AppState {
            delivery,
            bus,
            reloader,
            store,
            plugins: plugins.clone(),
            engine: engine.clone(),
            drain: drain.clone(),
            webhooks,
            crons: crons.clone(),
            data_dir: data.root().to_path_buf(),
            daemon: info.clone(),
            token: token.clone(),
        },
        api::Access::new(bound.port(), token, plugins.credentials().clone()),
    );
    let limits = crate::listener::Limits {
        name: "API",
        settings: "a quarter of the daemon's open-file limit, up to 1024: raise `ulimit -n`",
        max_connections: usize::try_from(canopy_core::config::default_max_connections())
            .unwrap_or(1024),
        // Every client of the loopback API is the same address: no cap per peer; at the cap
        // the connection reading its headers longest makes room.
        max_per_peer: None,
        header_timeout: API_HEADER_TIMEOUT,
        idle_timeout: API_IDLE_TIMEOUT,
    };
    crate::listener::serve(
        listener,
        app,
        limits,
        planned_stop(info, drain.clone(), plugins.clone(), crons.clone()),
    )
    .await;
    scheduler.abort();
    heartbeat.abort();
    if let Some(relay) = relay {
        relay.abort();
    }
    project_watchers.stop().await;
    let stopped = engine.shutdown().await?;
    engine_store
        .write(|tx| {
            tx.interrupt_unfinished_hook_runs("the daemon shut down before this hook run finished")
        })
        .await?;
    if stopped > 0 {
        tracing::info!(runs = stopped, "in-flight runs recorded as interrupted");
    }
    engine_store.write(|tx| tx.node_stopped()).await?;
    let unfinished = crons.record_unfinished().await?;
    if unfinished > 0 {
        tracing::warn!(
            receipts = unfinished,
            "cron firings that did not end within the force grace are recorded interrupted_by_restart"
        );
    }
    // Last: every write of the stop has been answered.
    match engine_store.empty_log().await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!("the database's WAL stays: a read outlasted the stop's checkpoint")
        }
        Err(err) => tracing::warn!(error = %err, "cannot copy the database's WAL back at the stop"),
    }
    let _ = std::fs::remove_file(data.address_file());
    tracing::info!("canopy daemon stopped");
    Ok(())
}

/// This node's heartbeat, every third of its lease: renews the leases on the runs it drives
/// (so no other node takes them over while it lives), then takes over the runs of nodes
/// whose leases ran out, and records what lost nodes left unfinished (hook runs, cron
/// firings) interrupted. On a shared database it also puts in force the plugins another
/// daemon installed, removed, enabled or disabled. A missed beat is logged and tried again at
/// the next.
async fn heartbeat(
    engine: Engine,
    store: Store,
    crons: canopy_core::crons::Crons,
    plugins: PluginHost,
    lease: std::time::Duration,
) {
    let mut beat = tokio::time::interval(lease / 3);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        beat.tick().await;
        if let Err(err) = store.write(move |tx| tx.heartbeat(lease)).await {
            tracing::error!(error = %err, "cannot renew this node's heartbeat and leases");
            continue;
        }
        if let Err(err) = engine.take_over_expired().await {
            tracing::error!(error = %err, "cannot take over the runs of a node whose lease ran out");
        }
        match store
            .write(|tx| tx.interrupt_hook_runs_of_lost_nodes())
            .await
        {
            Ok(0) => {}
            Ok(count) => tracing::warn!(
                hook_runs = count,
                "hook runs a lost node left unfinished are marked interrupted"
            ),
            Err(err) => {
                tracing::error!(error = %err, "cannot mark the hook runs of a lost node interrupted")
            }
        }
        match crons.recover_lost_nodes().await {
            Ok(0) => {}
            Ok(count) => tracing::warn!(
                receipts = count,
                "cron firings a lost node left running are recorded interrupted_unknown; they are not replayed"
            ),
            Err(err) => {
                tracing::error!(error = %err, "cannot record the cron firings of a lost node interrupted")
            }
        }
        if store.postgres().is_some()
            && let Err(err) = plugins.sync_with_store().await
        {
            tracing::warn!(error = %format!("{err:#}"), "cannot bring the plugins in line with the database");
        }
    }
}

/// The scheduler: delivers pending session messages every tick, whether or not a client is
/// attached.
async fn scheduler(delivery: Delivery) {
    let mut interval = tokio::time::interval(sessions::TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        delivery.tick().await;
    }
}

fn write_address(data: &DataDir, url: &str) -> Result<()> {
    let path = data.address_file();
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("{url}\n"))
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The API token this start uses: the one in the data dir, kept across restarts when it can be
/// trusted (see [`canopy_datadir::token`]), else a new one.
fn start_token(data: &DataDir, found: canopy_datadir::token::Found) -> Result<String> {
    use canopy_datadir::token::Found;
    match found {
        Found::Usable(token) => return Ok(token),
        Found::Missing => {}
        Found::Unusable(why) => tracing::warn!(
            file = %data.token_file().display(),
            why,
            "the API token file cannot be trusted; a new token replaces it"
        ),
    }
    canopy_datadir::token::write_new(&data.token_file())
}

/// Re-reads `canopy.toml` at every SIGHUP (as `canopy config reload` does).
async fn reload_on_hangup(reloader: Arc<crate::reload::Reloader>) {
    let mut hangups = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => signal,
        Err(err) => {
            tracing::error!(%err, "cannot listen for SIGHUP; `canopy config reload` still works");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        tracing::info!("SIGHUP received, reloading the configuration");
        if let Err(problems) = reloader.reload().await {
            tracing::error!(
                path = %reloader.path().display(),
                problems = %problems.join("; "),
                "the configuration does not validate; the one in force stays"
            );
        }
    }
}

async fn shutdown_signal(info: &api::DaemonInfo) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
        () = terminate => tracing::info!("SIGTERM received, shutting down"),
        () = info.shutdown.notified() => tracing::info!("shutting down as asked over the API"),
    }
    info.stopping.send_replace(true);
}

/// A planned stop (SIGTERM, SIGINT, `POST /api/shutdown`): resolves once the daemon may stop
/// serving. Admission closes at once (a cron firing from now on is recorded `refused`);
/// admitted work -- cron firings, node runs, hook runs, webhook handlers -- gets the drain
/// budget to end (30 s, or the `timeout_secs` the stop asked for); what is left is then forced
/// (its processes killed) and has [`drain::FORCE_GRACE`] to record its end.
async fn planned_stop(
    info: Arc<api::DaemonInfo>,
    drain: canopy_core::drain::Drain,
    plugins: PluginHost,
    crons: canopy_core::crons::Crons,
) {
    shutdown_signal(&info).await;
    drain.close();
    let budget = info.drain_budget();
    let running = drain.running();
    if running > 0 {
        tracing::info!(
            running,
            budget_secs = budget.as_secs(),
            "draining: admission is closed; waiting for admitted work to end"
        );
    }
    if !drain.wait_idle(budget).await {
        tracing::warn!(
            running = drain.running(),
            "the drain budget passed; forcing what is left (its processes are killed)"
        );
        plugins.force_stop();
        if !drain.wait_idle(canopy_core::drain::FORCE_GRACE).await {
            tracing::warn!(
                running = drain.running(),
                "work still runs after the force grace; it is recorded interrupted"
            );
        }
    }
    crons.stop_schedulers();
}
