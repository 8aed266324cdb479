//! A throwaway PostgreSQL server for tests: one per test process, started on first use from
//! the machine's PostgreSQL binaries (`initdb`, `postgres` on the PATH or under
//! `/usr/lib/postgresql/*/bin`), in a temporary directory, reached over a Unix socket there,
//! and killed with the process. Each caller gets a database of its own.
//!
//! `CANOPY_TEST_POSTGRES` (a connection string to a server where its user may create
//! databases) is used instead when it is set.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long the server may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// The server this process shares: its admin connection string and how to name a database
/// on it.
struct Server {
    /// `host=... user=...`, without a database.
    base: String,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// A fresh, empty database on this process's server; returns its connection string.
pub fn scratch_database() -> Result<String> {
    let server = SERVER
        .get_or_init(|| start().map_err(|err| format!("{err:#}")))
        .as_ref()
        .map_err(|err| anyhow::anyhow!("no PostgreSQL server for the tests: {err}"))?;
    let name = format!("canopy_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin =
        postgres::Client::connect(&format!("{} dbname=postgres", server.base), postgres::NoTls)
            .context("cannot connect to the test server")?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .context("cannot create a test database")?;
    Ok(format!("{} dbname={name}", server.base))
}

fn start() -> Result<Server> {
    if let Ok(url) = std::env::var("CANOPY_TEST_POSTGRES") {
        let config: postgres::Config = url
            .parse()
            .map_err(|_| anyhow::anyhow!("CANOPY_TEST_POSTGRES is not a connection string"))?;
        let mut base = String::new();
        for host in config.get_hosts() {
            match host {
                postgres::config::Host::Tcp(host) => base.push_str(&format!("host={host} ")),
                postgres::config::Host::Unix(path) => {
                    base.push_str(&format!("host={} ", path.display()));
                }
            }
        }
        if let Some(port) = config.get_ports().first() {
            base.push_str(&format!("port={port} "));
        }
        if let Some(user) = config.get_user() {
            base.push_str(&format!("user={user} "));
        }
        if let Some(password) = config.get_password() {
            base.push_str(&format!("password={} ", String::from_utf8_lossy(password)));
        }
        return Ok(Server { base });
    }
    let bin = binaries()?;
    remove_stale_servers();
    let dir = tempfile::Builder::new()
        .prefix("canopy-pg-")
        .tempdir()
        .context("cannot make the test server's directory")?
        .keep();
    let data = dir.join("data");
    // PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user the
    // distribution's package made.
    let owner = if is_root() {
        Some(user_ids("postgres")?)
    } else {
        None
    };
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .context("cannot hand the test server's directory to the postgres user")?;
    }
    let run = |program: &Path| {
        let mut command = Command::new(program);
        if let Some((uid, gid)) = owner {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid);
        }
        command
    };
    let initdb = run(&bin.join("initdb"))
        .args(["-D"])
        .arg(&data)
        .args([
            "-U",
            "canopy",
            "-A",
            "trust",
            "--locale=C",
            "-E",
            "UTF8",
            "--no-sync",
        ])
        .stdout(Stdio::null())
        .output()
        .context("cannot run initdb")?;
    if !initdb.status.success() {
        bail!(
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr).trim()
        );
    }
    let log = std::fs::File::create(dir.join("server.log"))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir.join("server.log"), Some(uid), Some(gid))?;
    }
    let mut server = run(&bin.join("postgres"));
    server
        .arg("-D")
        .arg(&data)
        .arg("-k")
        .arg(&dir)
        .args([
            "-c",
            "listen_addresses=",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
        ])
        .args(["-c", "full_page_writes=off", "-c", "max_connections=300"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    spawn_for_the_process(server)?;
    let base = format!("host={} user=canopy", dir.display());
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        match postgres::Client::connect(&format!("{base} dbname=postgres"), postgres::NoTls) {
            Ok(_) => return Ok(Server { base }),
            Err(err) if Instant::now() >= deadline => {
                let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                bail!("the test server did not start within {START_DEADLINE:?}: {err}\n{log}");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Removes the directories of test servers whose process has ended (the directory outlives
/// the test process that made it). One younger than a minute may still be starting; one whose
/// server still runs belongs to a test process still running.
fn remove_stale_servers() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("canopy-pg-"));
        let young = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_none_or(|age| age < Duration::from_secs(60));
        if !ours || young || server_running(&path.join("data")) {
            continue;
        }
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// True while the server of `data` runs: its `postmaster.pid` names a live process.
fn server_running(data: &Path) -> bool {
    let Ok(pid_file) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let Some(pid) = pid_file
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
    else {
        return false;
    };
    // SAFETY: signal 0 only asks whether the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Starts the server from a thread that lives as long as the process, the server set to be
/// killed when that thread ends: the test process's exit stops it, however it exits.
fn spawn_for_the_process(mut server: Command) -> Result<()> {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own state.
    unsafe {
        server.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (started, spawned) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("canopy-test-postgres".into())
        .spawn(move || {
            let child = server.spawn();
            let ok = child.is_ok();
            let _ = started.send(child.map(|_| ()));
            if ok {
                loop {
                    std::thread::park();
                }
            }
        })
        .context("cannot start the test server's thread")?;
    spawned
        .recv()
        .context("the test server's thread stopped")?
        .context("cannot start postgres")
}

/// The directory of the newest PostgreSQL's binaries.
fn binaries() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        anyhow::anyhow!(
            "PostgreSQL's server binaries (initdb, postgres) are not installed: \
             `apt-get install postgresql`, or set CANOPY_TEST_POSTGRES to a server's connection string"
        )
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of a user, from `id`.
fn user_ids(user: &str) -> Result<(u32, u32)> {
    let id = |flag: &str| -> Result<u32> {
        let out = Command::new("id")
            .args([flag, user])
            .output()
            .context("cannot run id")?;
        if !out.status.success() {
            bail!(
                "running as root, the test server needs the `{user}` user (made by the postgresql package): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
    };
    Ok((id("-u")?, id("-g")?))
}
