//! `canopy status`, `canopy daemon start` / `stop`, `canopy logs`: the daemon's life from the
//! outside.

use canopy_model::requests::daemon::ShutdownRequest;
use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use super::{Client, print_json, typed};
use canopy_daemon::logfile;
use canopy_datadir::DataDir;
use canopy_model::records::daemon::{DaemonStatus, Rotated, Stopping};

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Start the daemon in the background and wait until it answers. Its log is `daemon.log`
    /// in the data dir; `canopy daemon stop` stops it. When one already runs, says so.
    #[command(
        after_help = "Examples:\n  canopy daemon start\n  canopy daemon start --listen 127.0.0.1:0    # any free port"
    )]
    Start {
        /// Address to listen on (loopback only) [default: 127.0.0.1:7461, or `listen` in canopy.toml]
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Stop the running daemon as `daemon stop` does (work in flight drains), then start it
    /// again in the background as `daemon start` does: the configuration read anew (the token
    /// stays).
    #[command(after_help = "Example:\n  canopy daemon restart --timeout 60")]
    Restart {
        /// Seconds work in flight may run on before it is forced (at most 3600).
        #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(0..=3600))]
        timeout: u64,
        /// Address to listen on (loopback only) [default: 127.0.0.1:7461, or `listen` in canopy.toml]
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Replace the daemon's API token (`daemon.token` in the data dir) with a new one. The token
    /// otherwise stays the same across restarts; a running daemon refuses the old one at once.
    /// The CLI reads the new one by itself; give it anew to HTTP clients (MCP) configured with it.
    #[command(
        name = "rotate-token",
        after_help = "Example:\n  canopy daemon rotate-token"
    )]
    RotateToken,
    /// Write a service definition that runs the daemon under your service manager: a systemd
    /// user unit on Linux (`~/.config/systemd/user/canopy.service`), a launchd agent on macOS.
    /// It runs this binary on this data dir, restarts it when it fails, and gives a stop the
    /// 60 s its drain needs. Prints the commands that enable it.
    #[command(
        name = "install-service",
        after_help = "Examples:\n  canopy daemon install-service --print    # only show it\n  canopy daemon install-service && systemctl --user daemon-reload && systemctl --user enable --now canopy"
    )]
    InstallService {
        /// Print the service definition instead of writing it.
        #[arg(long)]
        print: bool,
        /// Address the service's daemon listens on (loopback only) [default: 127.0.0.1:7461, or `listen` in canopy.toml]
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Stop the running daemon as planned and wait until it has exited: admission closes at
    /// once, work in flight (cron firings, node runs, hooks, webhook handlers) gets --timeout
    /// seconds to end, what is left is forced (its processes killed) and recorded with its
    /// partial output: a cron receipt interrupted_by_restart, a node run, hook run or webhook
    /// delivery interrupted.
    #[command(after_help = "Example:\n  canopy daemon stop --timeout 60")]
    Stop {
        /// Seconds work in flight may run on before it is forced (at most 3600).
        #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(0..=3600))]
        timeout: u64,
    },
}

/// How often `daemon stop` says it is still waiting for a drain.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How often `daemon stop` looks whether the daemon is gone, and `logs --follow` for new lines.
const POLL: Duration = Duration::from_millis(50);

/// Warnings and errors `status` shows when no daemon runs.
const RECENT_PROBLEMS: usize = 5;

pub async fn run(data: &DataDir, command: DaemonCommand) -> Result<ExitCode> {
    match command {
        DaemonCommand::Start { listen } => start(data, listen).await,
        DaemonCommand::Restart { timeout, listen } => {
            stop(data, timeout).await?;
            start(data, listen).await
        }
        DaemonCommand::Stop { timeout } => stop(data, timeout).await,
        DaemonCommand::RotateToken => rotate_token(data).await,
        DaemonCommand::InstallService { print, listen } => {
            crate::service::install(data, listen.as_deref(), print)
        }
    }
}

/// `daemon rotate-token`: through the running daemon (which takes the new token at once), or,
/// with none running, by writing a new token file that its next start uses.
async fn rotate_token(data: &DataDir) -> Result<ExitCode> {
    if canopy_daemon::daemon::holder(data).is_some() {
        let answer: Value = Client::connect(data)?
            .post("/api/rotate-token", &json!({}))
            .await?;
        let rotated: Rotated = typed(&answer, "the rotation")?;
        println!(
            "a new API token is in force, in {}; the old one is refused from now on. The CLI reads the new one by itself; give it anew to HTTP clients configured with the old one (MCP)",
            rotated.token_file
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !data.root().is_dir() {
        bail!(
            "data dir {} does not exist: a daemon's first start writes its token",
            data.root().display()
        );
    }
    canopy_datadir::token::write_new(&data.token_file())?;
    println!(
        "no daemon is running; wrote a new API token to {}, which its next start uses",
        data.token_file().display()
    );
    Ok(ExitCode::SUCCESS)
}

/// How long `daemon start` waits for the daemon to answer (a first start installs the
/// built-in plugins, compiling each).
const START_TIMEOUT: Duration = Duration::from_secs(120);

async fn start(data: &DataDir, listen: Option<String>) -> Result<ExitCode> {
    if let Some(holder) = canopy_daemon::daemon::holder(data) {
        println!(
            "a canopy daemon is already running for data dir {}{}",
            data.root().display(),
            holder
                .pid
                .map(|pid| format!(" (pid {pid})"))
                .unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().context("cannot find the canopy binary to start")?;
    // Its stderr goes to a file in the data dir (made private, as the daemon makes it): what it
    // says before its log is open, a refused configuration above all, is shown from there.
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(data.root())
            .with_context(|| format!("cannot create the data dir {}", data.root().display()))?;
    }
    let stderr_path = data.root().join("daemon.stderr");
    let stderr = {
        use std::os::unix::fs::OpenOptionsExt as _;
        // Not through a symlink planted in its place.
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&stderr_path)
            .with_context(|| format!("cannot write {}", stderr_path.display()))?
    };
    let mut command = std::process::Command::new(&exe);
    // Its log goes to daemon.log only: the stderr file keeps what it says before the log is
    // open (a refusal), and would otherwise grow with every line, unrotated.
    command
        .arg("daemon")
        .arg("--log-file-only")
        .arg("--data-dir")
        .arg(data.root());
    if let Some(listen) = &listen {
        command.arg("--listen").arg(listen);
    }
    let mut child = {
        use std::os::unix::process::CommandExt as _;
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            // Its own process group: a Ctrl-C in this terminal later does not reach it.
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?
    };
    let started = Instant::now();
    let mut said = started;
    loop {
        if let Some(status) = child.try_wait()? {
            let told = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            bail!(
                "the daemon exited ({status}) before it answered:\n{}",
                told.trim_end()
            );
        }
        if let Ok(client) = Client::connect(data)
            && client.get::<Value>("/api/health").await.is_ok()
        {
            let address = std::fs::read_to_string(data.address_file()).unwrap_or_default();
            println!(
                "canopy daemon started (pid {}) on {}; its log: {}; stop it with `canopy daemon stop`",
                child.id(),
                address.trim(),
                data.log_file().display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if started.elapsed() >= START_TIMEOUT {
            bail!(
                "the daemon (pid {}) did not answer within {}s; `canopy logs` shows what it is doing",
                child.id(),
                START_TIMEOUT.as_secs()
            );
        }
        if said.elapsed() >= PROGRESS_EVERY {
            said = Instant::now();
            eprintln!(
                "starting: {}s (a first start compiles the built-in plugins)",
                started.elapsed().as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How long past the drain budget `daemon stop` waits: the force grace and exit bookkeeping.
const STOP_MARGIN: Duration = Duration::from_secs(20);

async fn stop(data: &DataDir, budget_secs: u64) -> Result<ExitCode> {
    if canopy_daemon::daemon::holder(data).is_none() {
        println!(
            "no canopy daemon is running for data dir {}",
            data.root().display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let answer: Value = Client::connect(data)?
        .post(
            "/api/shutdown",
            &ShutdownRequest {
                timeout_secs: Some(budget_secs),
            },
        )
        .await?;
    let stopping: Stopping = typed(&answer, "the daemon's stop")?;
    let (pid, running) = (stopping.pid, stopping.running);
    if running > 0 {
        eprintln!(
            "draining: {running} piece{} of work in flight {} up to {budget_secs}s to end",
            if running == 1 { "" } else { "s" },
            if running == 1 { "has" } else { "have" }
        );
    }
    let timeout = Duration::from_secs(budget_secs) + STOP_MARGIN;
    let started = Instant::now();
    let deadline = started + timeout;
    let mut said = started;
    // The daemon holds its data dir's lock until its process has exited.
    while canopy_daemon::daemon::holder(data).is_some() {
        // A drain can take its whole budget: say it is still going every few seconds.
        if running > 0 && said.elapsed() >= PROGRESS_EVERY {
            said = Instant::now();
            eprintln!(
                "still draining: {}s of up to {budget_secs}s",
                started.elapsed().as_secs()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "the canopy daemon (pid {pid}) is still shutting down after {}s; `canopy logs` shows what it is doing. Wait, or `kill -KILL {pid}`: runs in flight are then marked interrupted at its next start",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
    println!("canopy daemon stopped (pid {pid})");
    Ok(ExitCode::SUCCESS)
}

/// `canopy status`. Exit code 1 when no daemon runs (after saying so).
/// `canopy nodes`: the daemons on the database, alive or not, and the runs each drives.
pub async fn nodes(client: &Client, json: bool) -> Result<ExitCode> {
    let answer: Value = client.get("/api/nodes").await?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let nodes: canopy_model::records::daemon::Nodes = typed(&answer, "the daemon's node list")?;
    let rows: Vec<Vec<String>> = nodes
        .nodes
        .iter()
        .map(|node| {
            let name = if node.name == nodes.this {
                format!("{} (this daemon)", node.name)
            } else {
                node.name.clone()
            };
            let roles = if node.roles.is_empty() {
                "-".to_string()
            } else {
                node.roles.join(",")
            };
            let heartbeat = match node.state {
                canopy_model::records::daemon::NodeState::Stopped => "-".to_string(),
                _ => format!("{}s ago", node.heartbeat_age_secs),
            };
            let leases = if node.leases.is_empty() {
                "-".to_string()
            } else {
                node.leases
                    .iter()
                    .map(|lease| lease.graph.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                name,
                node.state.to_string(),
                roles,
                heartbeat,
                node.api_url.clone().unwrap_or_else(|| "-".to_string()),
                node.version.clone(),
                leases,
            ]
        })
        .collect();
    print!(
        "{}",
        crate::table::render(
            &[
                "NODE",
                "STATE",
                "ROLES",
                "HEARTBEAT",
                "API",
                "VERSION",
                "DRIVES"
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn status(data: &DataDir, json: bool) -> Result<ExitCode> {
    let log_file = data.log_file();
    if canopy_daemon::daemon::holder(data).is_none() {
        let problems = logfile::recent_problems(&log_file, RECENT_PROBLEMS);
        if json {
            print_json(&json!({
                "running": false,
                "data_dir": data.root(),
                "log_file": log_file,
                "recent_problems": problems,
            }))?;
        } else {
            println!(
                "no canopy daemon is running for data dir {}; start one with `canopy daemon start --data-dir {}`",
                data.root().display(),
                data.root().display()
            );
            print_problems(&problems, &log_file);
        }
        return Ok(ExitCode::FAILURE);
    }
    let mut status: Value = Client::connect(data)?.get("/api/status").await?;
    if json {
        status["running"] = json!(true);
        print_json(&status)?;
        return Ok(ExitCode::SUCCESS);
    }
    let status: DaemonStatus = typed(&status, "the daemon's status")?;
    println!(
        "daemon:       running, pid {}, up {}",
        status.pid,
        uptime(status.uptime_seconds)
    );
    println!("address:      {}", status.url);
    println!("version:      {}", status.version);
    println!("data dir:     {}", status.data_dir);
    println!("log:          {}", status.log_file);
    println!(
        "plugins:      {} installed, {} enabled",
        status.plugins.installed, status.plugins.enabled
    );
    let storage = &status.storage;
    match &storage.postgres {
        Some(database) => println!(
            "database:     PostgreSQL {database}, {} ([retention] in canopy.toml)",
            bytes(storage.file_bytes)
        ),
        None => println!(
            "database:     {} ({} free, returned as it is pruned; [retention] in canopy.toml)",
            bytes(storage.file_bytes),
            bytes(storage.free_bytes)
        ),
    }
    println!(
        "  rows:       feed {}, hook runs {}, runs {} ({} node runs), deliveries {}, cron receipts {}",
        storage.feed_rows,
        storage.hook_runs,
        storage.runs,
        storage.node_runs,
        storage.deliveries,
        storage.cron_receipts
    );
    let runs = &status.active_runs;
    if runs.is_empty() {
        println!("active runs:  none");
    } else {
        println!("active runs:  {}", runs.len());
        for run in runs {
            println!(
                "  {}  {}  {}  (started {})",
                super::short(&run.id),
                run.graph_name,
                run.status,
                super::output::utc_cell(run.started_at)
            );
        }
    }
    print_problems(&status.recent_problems, Path::new(&status.log_file));
    Ok(ExitCode::SUCCESS)
}

fn print_problems(problems: &[String], log_file: &Path) {
    if problems.is_empty() {
        println!("no recent warnings or errors in {}", log_file.display());
    } else {
        println!(
            "last warnings and errors in {} (`canopy logs` for more):",
            log_file.display()
        );
        for line in problems {
            println!("  {line}");
        }
    }
}

/// `512 B`, `3.4 MiB`, `1.2 GiB`.
fn bytes(count: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let value = count as f64;
    match count {
        0..1024 => format!("{count} B"),
        1024..1_048_576 => format!("{:.1} KiB", value / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", value / 1_048_576.0),
        _ => format!("{:.2} GiB", value / 1_073_741_824.0),
    }
}

/// `2d 03h`, `4h 05m`, `6m 07s`, `8s`.
fn uptime(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s:02}s"),
        (0, _, _) => format!("{h}h {m:02}m"),
        _ => format!("{d}d {h:02}h"),
    }
}

/// `canopy logs`: the last `lines` lines of daemon.log (reaching into the rotated files), then
/// with `follow` what the daemon writes next, across rotations, until interrupted.
pub async fn logs(data: &DataDir, follow: bool, lines: usize, json: bool) -> Result<ExitCode> {
    let path = data.log_file();
    let (tail, mut current) = logfile::last_lines(&path, lines);
    if current.is_none() && !follow {
        bail!(
            "no log file at {}: the daemon writes it from its start (`canopy daemon --data-dir {}`)",
            path.display(),
            data.root().display()
        );
    }
    if json {
        print_json(&json!({ "log_file": path, "lines": tail }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    for line in &tail {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    drop(out);
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut partial = String::new();
    loop {
        if let Some(file) = current.as_mut() {
            drain(file, &mut partial, &path)?;
        }
        // Rotated (a new file at the path) or truncated: start over on the file now there.
        let replaced = match (current.as_ref(), std::fs::metadata(&path)) {
            (None, Ok(_)) => true,
            (Some(file), Ok(now)) => {
                use std::os::unix::fs::MetadataExt as _;
                let open = file.metadata().ok();
                open.is_none_or(|open| open.ino() != now.ino() || open.dev() != now.dev())
                    || now.len() < position(file)
            }
            (_, Err(_)) => false,
        };
        if replaced {
            // What was written to the old file just before it was rotated, then the files
            // rotated since (several rotations may fall between two looks), then the new one.
            let mut newer: Vec<std::path::PathBuf> = Vec::new();
            if let Some(file) = current.as_mut() {
                drain(file, &mut partial, &path)?;
                newer = rotated_since(&path, file);
            }
            for older in newer {
                if let Ok(mut file) = std::fs::File::open(&older) {
                    drain(&mut file, &mut partial, &older)?;
                }
            }
            if !partial.is_empty() {
                println!("{partial}");
                partial.clear();
            }
            current = std::fs::File::open(&path).ok();
            continue;
        }
        tokio::time::sleep(POLL * 4).await;
    }
}

/// The rotated files newer than `file` (which was the current log), oldest first: none when
/// `file` is still at `path` (truncated, not rotated); all of them when `file` is no longer among
/// them (rotated away).
fn rotated_since(path: &Path, file: &std::fs::File) -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(open) = file.metadata() else {
        return Vec::new();
    };
    let same = |candidate: &Path| {
        std::fs::metadata(candidate)
            .is_ok_and(|meta| meta.ino() == open.ino() && meta.dev() == open.dev())
    };
    if same(path) {
        return Vec::new();
    }
    let mut chain: Vec<std::path::PathBuf> = (1..=logfile::KEPT)
        .rev()
        .map(|index| logfile::rotated(path, index))
        .collect();
    match chain.iter().position(|candidate| same(candidate)) {
        Some(index) => chain.split_off(index + 1),
        None => chain,
    }
}

/// Prints the whole lines added to `file` since the last call; keeps a partial last line in
/// `partial` for the next.
fn drain(file: &mut std::fs::File, partial: &mut String, path: &Path) -> Result<()> {
    let mut reader = std::io::BufReader::new(file);
    let mut out = std::io::stdout().lock();
    loop {
        let read = reader
            .read_line(partial)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if read == 0 || !partial.ends_with('\n') {
            break;
        }
        out.write_all(partial.as_bytes())?;
        partial.clear();
    }
    out.flush()?;
    Ok(())
}

fn position(file: &std::fs::File) -> u64 {
    use std::io::Seek as _;
    let mut file = file;
    file.stream_position().unwrap_or(0)
}
