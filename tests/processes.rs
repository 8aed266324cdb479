//! The processes plugins run, end to end: what they inherit from the daemon, that nothing they
//! start outlives its call (or a daemon that was killed), which programs a grant allows, and
//! where a network grant reaches.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// `plugin run`: Ok(report) or, when the call itself failed, Err(stderr).
fn run(
    daemon: &Daemon,
    name: &str,
    mode: Option<&str>,
    config: &Value,
    workdir: &Path,
) -> Result<Value, String> {
    plugin_run(daemon, name, mode, config, &[], workdir)
}

/// Runs a `command` config; the report.
fn command(daemon: &Daemon, config: Value, workdir: &Path) -> Value {
    run(daemon, "command", None, &config, workdir).unwrap()
}

/// `hostile-exec` of `program args`: the program's stdout.
fn exec(daemon: &Daemon, program: &str, args: &[&str], workdir: &Path) -> Result<String, String> {
    let config = json!({ "program": program, "args": args });
    run(daemon, "hostile", Some("hostile-exec"), &config, workdir)
        .map(|report| report["outcome"]["detail"].as_str().unwrap().to_string())
}

fn install_hostile(daemon: &Daemon, grants: &str) {
    daemon.ok(&[
        "plugin",
        "install",
        HOSTILE_WASM,
        "--grant",
        grants,
        "--replace",
    ]);
}

/// The pid a command wrote to `file`, once it is there.
fn pid_in(file: &Path) -> i32 {
    wait_for(
        &format!("a pid in {}", file.display()),
        Duration::from_secs(30),
        || std::fs::read_to_string(file).ok()?.trim().parse().ok(),
    )
}

/// The state letter of `pid` (`Z` for a zombie), or none when there is no such process.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn alive(pid: i32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
}

/// Waits until `pid` is gone: neither running nor a zombie.
fn wait_gone(pid: i32, what: &str) {
    wait_for(what, Duration::from_secs(10), || {
        state(pid).is_none().then_some(())
    });
}

fn kill(pid: i32) {
    // SAFETY: kill(2) on a pid this test started or read from a pid file; no memory involved.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

// ----- 5. A clean environment --------------------------------------------------------------

#[test]
fn a_process_gets_a_clean_environment_and_only_the_variables_passed_on_purpose() {
    let secrets = [
        ("CANOPY_TEST_SECRET", "s3cret-value"),
        ("CANOPY_TEST_PASSED", "passed-value"),
    ];
    let workdir = tempfile::tempdir().unwrap();

    let plain = Daemon::start_with_env("", &secrets);
    install_hostile(&plain, "fs-read,process");
    let env = exec(&plain, "env", &[], workdir.path()).unwrap();
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    assert!(
        env.lines().any(|l| l.starts_with("CANOPY_CALL_ID=")),
        "{env}"
    );
    for (name, value) in secrets {
        assert!(
            !env.contains(name) && !env.contains(value),
            "the daemon's {name} reached the process:\n{env}"
        );
    }
    // The built-in `command` executor still finds `sh`'s programs on PATH.
    let report = command(
        &plain,
        json!({ "command": "printf '%s' \"${CANOPY_TEST_SECRET:-absent}\" > secret.txt; ls / > /dev/null" }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("secret.txt")).unwrap(),
        "absent"
    );

    let passing =
        Daemon::start_with_env("[process]\npass_env = [\"CANOPY_TEST_PASSED\"]\n", &secrets);
    install_hostile(&passing, "fs-read,process");
    // What it printed is recorded masked (a passed value is a secret of the process's)...
    let env = exec(&passing, "env", &[], workdir.path()).unwrap();
    assert!(
        env.lines().any(|l| l == "CANOPY_TEST_PASSED=[masked]"),
        "{env}"
    );
    // ... but the process had it.
    let report = command(
        &passing,
        json!({ "command": "env > env.txt" }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    let env = std::fs::read_to_string(workdir.path().join("env.txt")).unwrap();
    assert!(
        env.lines().any(|l| l == "CANOPY_TEST_PASSED=passed-value"),
        "{env}"
    );
    assert!(!env.contains("s3cret-value"), "{env}");
}

#[test]
fn an_invalid_pass_env_name_stops_the_daemon_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("canopy.toml"),
        "[process]\npass_env = [\"NOT-A-NAME\"]\n",
    )
    .unwrap();
    let output = Command::new(CANOPY)
        .args(["daemon", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("process.pass_env") && stderr.contains("`NOT-A-NAME`"),
        "{stderr}"
    );
}

// ----- 6. Nothing outlives its call ---------------------------------------------------------

#[test]
fn a_background_child_of_a_command_that_exited_normally_is_killed() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let report = command(
        &daemon,
        json!({ "command": "sleep 300 > /dev/null 2>&1 & echo $! > bg.pid" }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    let pid = pid_in(&workdir.path().join("bg.pid"));
    wait_gone(pid, "the background sleep to be killed and reaped");
}

#[test]
fn processes_that_left_the_group_of_a_command_that_exited_normally_are_killed() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    // One escapee whose parent is gone by the end of the call (re-parented to the daemon),
    // and one under a parent that left the group too and is still alive.
    let report = command(
        &daemon,
        json!({
            "command": "setsid sleep 300 > /dev/null 2>&1 & echo $! > orphan.pid; setsid sh -c 'sleep 300 & echo $! > nested.pid; wait' > /dev/null 2>&1 & while [ ! -s nested.pid ]; do sleep 0.01; done"
        }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    for file in ["orphan.pid", "nested.pid"] {
        let pid = pid_in(&workdir.path().join(file));
        wait_gone(
            pid,
            &format!("the escapee in {file} to be killed and reaped"),
        );
    }
}

#[test]
fn what_a_call_left_is_killed_while_another_call_runs_and_the_other_is_left_alone() {
    // The sweep after a call leaves out the subtrees of calls still running: this checks it
    // still finds the finished call's escapee, and touches nothing of the running one.
    let daemon = Daemon::start();
    let long_dir = tempfile::tempdir().unwrap();
    let short_dir = tempfile::tempdir().unwrap();
    let long = std::thread::scope(|scope| {
        let long = scope.spawn(|| {
            command(
                &daemon,
                json!({ "command": "sleep 60 & echo $! > child.pid; wait; exit 0" }),
                long_dir.path(),
            )
        });
        let long_child = pid_in(&long_dir.path().join("child.pid"));
        let report = command(
            &daemon,
            json!({ "command": "setsid sleep 300 > /dev/null 2>&1 & echo $! > escapee.pid" }),
            short_dir.path(),
        );
        assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
        let escapee = pid_in(&short_dir.path().join("escapee.pid"));
        wait_gone(
            escapee,
            "the finished call's escapee to be killed and reaped",
        );
        assert!(
            alive(long_child),
            "the running call's child was killed by another call's sweep"
        );
        kill(long_child);
        long.join().unwrap()
    });
    assert_eq!(long["outcome"]["status"], "completed", "{long:#}");
}

#[test]
fn a_grandchild_that_left_the_group_with_setsid_is_killed_at_the_deadline() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let report = command(
        &daemon,
        json!({
            "command": "setsid sleep 300 > /dev/null 2>&1 & echo $! > escapee.pid; sleep 30",
            "timeout_seconds": 1
        }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "timed_out", "{report:#}");
    let pid = pid_in(&workdir.path().join("escapee.pid"));
    wait_gone(pid, "the setsid grandchild to be killed and reaped");
}

#[test]
fn a_grandchild_killed_at_the_deadline_does_not_stay_a_zombie() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let report = command(
        &daemon,
        json!({ "command": "sleep 300 & echo $! > child.pid; wait", "timeout_seconds": 1 }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "timed_out", "{report:#}");
    let pid = pid_in(&workdir.path().join("child.pid"));
    wait_gone(pid, "the killed grandchild to be reaped");
}

#[test]
fn a_detached_command_is_left_running_and_detach_must_be_a_boolean() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let report = command(
        &daemon,
        json!({ "command": "sleep 300 > /dev/null 2>&1 & echo $! > bg.pid", "detach": true }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    assert!(
        report["rendered_config"].get("detach").is_none(),
        "the executor saw the host's field: {report:#}"
    );
    let pid = pid_in(&workdir.path().join("bg.pid"));
    // The call has returned: anything not detached would have been killed before that.
    assert!(alive(pid), "the detached sleep {pid} was killed");
    kill(pid);

    let err = run(
        &daemon,
        "command",
        None,
        &json!({ "command": "true", "detach": "yes" }),
        workdir.path(),
    )
    .unwrap_err();
    assert!(
        err.contains("field `detach` must be true or false"),
        "{err}"
    );
}

// ----- 17. Nothing outlives a daemon that was killed ----------------------------------------

#[test]
fn processes_left_by_a_killed_daemon_are_killed_at_the_next_start() {
    let mut daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let pid_file = workdir.path().join("sleep.pid");
    let config = json!({ "command": "sleep 300 & echo $! > sleep.pid; wait" }).to_string();
    let mut cli: Child = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .args(["plugin", "run", "command", "--config", &config, "--workdir"])
        .arg(workdir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = pid_in(&pid_file);
    assert_eq!(
        recorded_calls(&daemon.data_dir),
        1,
        "the running call's group is recorded"
    );

    daemon.kill();
    wait_for("the CLI to give up", Duration::from_secs(30), || {
        cli.try_wait().unwrap()
    });
    assert!(
        alive(pid),
        "the sleep died with the daemon; nothing to recover"
    );

    let restarted = Daemon::start_on(&daemon.data_dir);
    // Re-parented to init by the crash: gone or a zombie init has yet to reap.
    wait_for(
        "the orphaned sleep to be killed",
        Duration::from_secs(10),
        || (!alive(pid)).then_some(()),
    );
    assert!(
        restarted
            .log()
            .contains("killed 2 processes left running by 1 calls"),
        "{}",
        restarted.log()
    );
    assert_eq!(recorded_calls(&daemon.data_dir), 0);
}

/// The calls recorded in the data dir's `procs/slots` (a filled slot of 256 bytes each).
fn recorded_calls(data_dir: &Path) -> usize {
    let slots = std::fs::read(data_dir.join("procs/slots")).unwrap_or_default();
    slots
        .chunks(256)
        .filter(|slot| !slot.trim_ascii().is_empty())
        .count()
}

#[test]
fn a_planted_process_record_does_not_get_an_unrelated_process_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let procs = data_dir.join("procs");
    std::fs::create_dir_all(&procs).unwrap();
    let mut bystander = Command::new("sleep").arg("300").spawn().unwrap();
    let pid = i32::try_from(bystander.id()).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    // Its real pid, group and start time, this boot: only the marker is missing.
    let call = "0123456789abcdef0123456789abcdef";
    let mut record =
        json!({ "call": call, "boot_id": boot_id.trim(), "pgid": pid, "start": start })
            .to_string()
            .into_bytes();
    record.resize(256, b' ');
    std::fs::write(procs.join("slots"), record).unwrap();

    // Recovery runs before the daemon listens.
    let daemon = Daemon::start_on(&data_dir);
    let log = daemon.log();
    assert!(
        log.contains("killed 0 processes left running by 1 calls"),
        "{log}"
    );
    assert!(
        alive(pid),
        "the daemon killed a process that was not its own"
    );
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

// ----- 7. A grant for one program -----------------------------------------------------------

#[test]
fn a_program_grant_runs_only_that_program() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    install_hostile(&daemon, "fs-read,process:git");
    let version = exec(&daemon, "git", &["--version"], workdir.path()).unwrap();
    assert!(version.starts_with("git version"), "{version}");
    for refused in ["env", "/usr/bin/git", "./git"] {
        let err = exec(&daemon, refused, &[], workdir.path()).unwrap_err();
        assert!(
            err.contains(&format!("may not run `{refused}`")) && err.contains("`process:git`"),
            "{err}"
        );
    }
}

// ----- 8. Network grants --------------------------------------------------------------------

/// A loopback listener answering every connection with `pong`; counts connections.
fn pong_listener() -> (u16, Arc<AtomicUsize>) {
    pong_listener_on("127.0.0.1")
}

/// A listener on `host` that answers a line with `pong`; its port and how many it accepted.
fn pong_listener_on(host: &str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((host, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            let _ = stream.write_all(b"pong\n");
        }
    });
    (port, accepted)
}

fn connect(daemon: &Daemon, port: u16, workdir: &Path) -> Result<String, String> {
    let config = json!({ "addr": format!("127.0.0.1:{port}") });
    run(daemon, "hostile", Some("hostile-connect"), &config, workdir)
        .map(|report| report["outcome"]["summary"].as_str().unwrap().to_string())
}

#[test]
fn network_grants_reach_what_they_name_and_loopback_only_when_named() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let (port, accepted) = pong_listener();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();

    install_hostile(&daemon, "fs-read,network");
    let err = connect(&daemon, port, workdir.path()).unwrap_err();
    assert!(
        err.contains(&format!("connect 127.0.0.1:{port}"))
            && err.to_lowercase().contains("permission denied"),
        "{err}"
    );
    assert!(
        daemon
            .log()
            .contains("not permitted by the plugin's network grant"),
        "{}",
        daemon.log()
    );

    install_hostile(&daemon, &format!("fs-read,network:127.0.0.1:{other_port}"));
    let err = connect(&daemon, port, workdir.path()).unwrap_err();
    assert!(err.to_lowercase().contains("permission denied"), "{err}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "a refused grant connected"
    );

    for grant in [
        format!("network:127.0.0.1:{port}"),
        format!("network:localhost:{port}"),
        "network:127.0.0.1:*".to_string(),
        "network:loopback".to_string(),
    ] {
        install_hostile(&daemon, &format!("fs-read,{grant}"));
        assert_eq!(
            connect(&daemon, port, workdir.path()).as_deref(),
            Ok("pong"),
            "{grant}"
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 4);

    let refused = daemon.fails(&[
        "plugin",
        "install",
        HOSTILE_WASM,
        "--grant",
        "network:127.0.0.1",
        "--replace",
    ]);
    assert!(refused.contains("network:127.0.0.1"), "{refused}");
}

/// A non-loopback IPv4 address of this machine's interfaces, if it has one.
fn own_address() -> Option<std::net::Ipv4Addr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates the list it writes to `list`; freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut next = list;
    while !next.is_null() && found.is_none() {
        // SAFETY: a node of the list getifaddrs returned.
        let entry = unsafe { &*next };
        // SAFETY: ifa_addr, when set, is a sockaddr whose family names its type.
        if !entry.ifa_addr.is_null()
            && i32::from(unsafe { (*entry.ifa_addr).sa_family }) == libc::AF_INET
        {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let v4 = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(v4.sin_addr.s_addr.to_ne_bytes());
            if !ip.is_loopback() {
                found = Some(ip);
            }
        }
        next = entry.ifa_next;
    }
    // SAFETY: freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

#[test]
fn plain_network_reaches_neither_this_machines_other_addresses_nor_link_local_or_private_ones() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let connect_to = |addr: String| {
        run(
            &daemon,
            "hostile",
            Some("hostile-connect"),
            &json!({ "addr": addr }),
            workdir.path(),
        )
        .map(|report| report["outcome"]["summary"].as_str().unwrap().to_string())
    };
    install_hostile(&daemon, "fs-read,network");
    // The cloud metadata address, link-local and private ranges: refused before any packet.
    for addr in [
        "169.254.169.254:80",
        "10.0.0.1:80",
        "192.168.1.1:80",
        "[fe80::1]:80",
    ] {
        let err = connect_to(addr.to_string()).unwrap_err();
        assert!(
            err.to_lowercase().contains("permission denied"),
            "{addr}: {err}"
        );
    }
    // This machine's own address, with a service listening on every interface.
    let Some(ip) = own_address() else {
        eprintln!("no non-loopback address on this machine: the own-address check is not run");
        return;
    };
    let (port, accepted) = pong_listener_on("0.0.0.0");
    let err = connect_to(format!("{ip}:{port}")).unwrap_err();
    assert!(
        err.to_lowercase().contains("permission denied"),
        "{ip}: {err}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "plain network reached {ip}"
    );
    // Named, it is reached.
    install_hostile(&daemon, &format!("fs-read,network:{ip}:{port}"));
    assert_eq!(connect_to(format!("{ip}:{port}")).as_deref(), Ok("pong"));
}

#[test]
fn files_a_command_creates_in_the_workdir_get_the_users_umask_not_the_daemons() {
    // The daemon keeps its own files private with umask 077; a command it runs must not
    // inherit that and leave the user's files unreadable to the group.
    // SAFETY: umask(2) only reads and sets this test process's mask; it is set back at once.
    let user_mask = unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        mask
    };
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let report = command(
        &daemon,
        json!({ "command": "touch made.txt" }),
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(workdir.path().join("made.txt"))
            .unwrap()
            .permissions(),
    ) & 0o777;
    assert_eq!(mode, 0o666 & !user_mask, "made.txt has mode {mode:o}");

    // The user's umask is the spawned process's only: what the daemon writes after it, a
    // plugin installed into the data dir, stays private.
    daemon.ok(&["plugin", "install", support::NOOP_WASM]);
    let plugins = daemon.data_dir.join("plugins");
    let mut checked = 0;
    for entry in std::fs::read_dir(&plugins).unwrap() {
        let path = entry.unwrap().path();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        ) & 0o777;
        assert_eq!(mode, 0o600, "{} has mode {mode:o}", path.display());
        checked += 1;
    }
    assert!(checked >= 2, "no installed plugin in {}", plugins.display());
}
