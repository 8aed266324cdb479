//! What a user sees of runs and of the daemon itself: `run list / show / output`, progress while
//! `graph run --wait` waits (and its wait for the run's hooks), `status`, `daemon stop`, the log
//! file with `logs`, and a second daemon refused on a taken port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs::File;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// A pseudo-terminal: its slave end goes to a child as stderr; what the child writes there is
/// read from the master by a thread.
struct Pty {
    slave: Option<File>,
    output: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Pty {
    fn new() -> Self {
        use std::os::fd::FromRawFd as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        // SAFETY: plain libc calls on a descriptor we own; the name buffer is large enough and
        // NUL-terminated by ptsname_r.
        let (master, name) = unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(master >= 0, "posix_openpt failed");
            assert_eq!(libc::grantpt(master), 0);
            assert_eq!(libc::unlockpt(master), 0);
            let mut name = [0 as libc::c_char; 256];
            assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
            let name = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_string_lossy()
                .into_owned();
            (File::from_raw_fd(master), name)
        };
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(name)
            .unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let sink = output.clone();
        let reader = std::thread::spawn(move || {
            let mut master = master;
            let mut buffer = [0u8; 4096];
            // Ends with EIO once no process holds the slave open.
            while let Ok(read) = master.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buffer[..read]);
            }
        });
        Self {
            slave: Some(slave),
            output,
            reader: Some(reader),
        }
    }

    /// The slave end, for one child (our copy is closed with it).
    fn stdio(&mut self) -> Stdio {
        Stdio::from(self.slave.take().unwrap())
    }

    /// What was written so far, line ends as sent (`\r\n` on a terminal).
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits until every writer has closed the terminal; returns all it got.
    fn finish(mut self) -> String {
        drop(self.slave.take());
        let reader = self.reader.take().unwrap();
        wait_for(
            "the terminal's writers to close it",
            Duration::from_secs(30),
            || reader.is_finished().then_some(()),
        );
        reader.join().unwrap();
        self.text()
    }
}

/// `canopy --data-dir D <args>` with stderr on a terminal; returns (success, stdout, terminal).
fn cli_on_tty(daemon: &Daemon, args: &[&str]) -> (bool, String, String) {
    let mut pty = Pty::new();
    let output = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(pty.stdio())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        pty.finish(),
    )
}

/// Runs the CLI; returns (success, stdout, stderr).
fn cli(daemon: &Daemon, args: &[&str]) -> (bool, String, String) {
    let output = daemon.cli(args);
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The data rows of a table (its lines after the header).
fn rows(table: &str) -> Vec<&str> {
    table.lines().skip(1).collect()
}

fn short(id: &str) -> &str {
    &id[..12]
}

/// A graph over two bound specs, Alpha and Beta: `build` prints three lines; `check` fails for
/// Beta, saying why on stderr.
fn two_spec_graph(daemon: &Daemon, repo: &Path, hooks: Value) -> (String, String) {
    let alpha = daemon.add_spec("Alpha");
    let beta = daemon.add_spec("Beta");
    daemon.create_graph(json!({
        "name": "web",
        "workdir": repo,
        "specs": [alpha, beta],
        "nodes": [
            { "name": "build", "command": "echo line 1; echo line 2; echo built {{spec_name}}" },
            { "name": "check", "command": "if [ {{spec_name}} = Beta ]; then echo broken build >&2; exit 3; fi; echo checked" }
        ],
        "hooks": hooks,
    }));
    (alpha, beta)
}

#[test]
fn run_list_show_and_output_tell_what_each_run_and_node_run_did() {
    let daemon = Daemon::start();
    let repo = git_repo();
    assert_eq!(daemon.ok(&["run", "list"]).trim(), "no runs yet");
    let (alpha, beta) = two_spec_graph(&daemon, repo.path(), json!({}));
    let (ok, _, _) = cli(&daemon, &["graph", "run", "web", "--wait", "--quiet"]);
    assert!(!ok, "a run with a failed spec waits with a failure exit");
    let (ok, _, _) = cli(&daemon, &["graph", "run", "web", "--wait", "--quiet"]);
    assert!(!ok);

    // run list: newest first, with the graph's name, status, start and duration.
    let runs = daemon.json(&["run", "list"]);
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["graph_name"], "web");
    let run_id = runs[0]["id"].as_str().unwrap().to_string();
    let list = daemon.ok(&["run", "list"]);
    assert!(
        list.starts_with("RUN") && list.contains("STARTED (UTC)"),
        "{list}"
    );
    let first = rows(&list)[0];
    assert!(
        first.starts_with(short(&run_id)) && first.contains("web") && first.contains("failed"),
        "{list}"
    );
    let list = daemon.ok(&["run", "list", "--graph", "web", "--last", "1"]);
    assert_eq!(rows(&list).len(), 1, "{list}");
    assert!(
        daemon
            .fails(&["run", "list", "--graph", "nope"])
            .contains("nope"),
        "an unknown graph is named"
    );

    // run show, by a unique prefix: the specs and every node run with status, duration, reason.
    let view = daemon.json(&["run", "show", &run_id[..8]]);
    let node_runs = view["node_runs"].as_array().unwrap().clone();
    assert_eq!(node_runs.len(), 4, "{view}");
    assert_eq!(view["in_flight"], false);
    let failed = node_runs.iter().find(|n| n["status"] == "failed").unwrap();
    assert_eq!(failed["spec_id"], beta.as_str());
    let reason = failed["reason"].as_str().unwrap();
    let show = daemon.ok(&["run", "show", &run_id[..8]]);
    assert!(show.contains(&format!("run:       {run_id}")), "{show}");
    assert!(
        show.contains("graph:     web") && show.contains("status:    failed"),
        "{show}"
    );
    for node_run in &node_runs {
        let line = show
            .lines()
            .find(|l| l.starts_with(short(node_run["id"].as_str().unwrap())))
            .unwrap_or_else(|| panic!("no line for node run {node_run}:\n{show}"));
        assert!(
            line.contains(node_run["status"].as_str().unwrap()),
            "{line}"
        );
        assert!(
            line.contains("ms") || line.contains('s'),
            "no duration: {line}"
        );
    }
    let failed_line = show
        .lines()
        .find(|l| l.starts_with(short(failed["id"].as_str().unwrap())))
        .unwrap();
    assert!(
        failed_line.contains("Beta")
            && failed_line.contains("check")
            && failed_line.contains(reason.lines().next().unwrap()),
        "the reason is on the failed node run's line: {failed_line}\n{show}"
    );
    assert!(
        show.contains("node runs (oldest first):") && show.contains("run output NODE_RUN"),
        "{show}"
    );
    assert!(
        daemon
            .fails(&["run", "show", "fff"])
            .contains("no run matches `fff`")
    );

    // run output: a node run's stored output, whole, by a unique prefix.
    let build_alpha = node_runs
        .iter()
        .find(|n| n["node"] == "build" && n["spec_id"] == alpha.as_str())
        .unwrap();
    let output = daemon.ok(&["run", "output", &build_alpha["id"].as_str().unwrap()[..10]]);
    assert_eq!(output, "line 1\nline 2\nbuilt Alpha\n");
    let output = daemon.ok(&["run", "output", failed["id"].as_str().unwrap()]);
    assert!(output.contains("broken build"), "{output}");
    let json = daemon.json(&["run", "output", failed["id"].as_str().unwrap()]);
    assert_eq!(json["node"], "check");
    assert!(
        daemon
            .fails(&["run", "output", "fff"])
            .contains("no node run matches `fff`")
    );
}

#[test]
fn graph_run_wait_streams_progress_and_waits_for_the_runs_hooks() {
    // A daemon hook on the run's failure too: its line names it.
    let daemon = Daemon::start_with_config(
        r#"
[[hooks]]
name = "announce-failed"
event = "graph.run.failed"
action = { command = "true" }
"#,
    );
    let repo = git_repo();
    let out = tempfile::tempdir().unwrap();
    let marker = out.path().join("hook-done");
    two_spec_graph(
        &daemon,
        repo.path(),
        json!({ "on_failed": [{ "command": format!("sleep 1; touch {}", marker.display()) }] }),
    );
    let (ok, stdout, stderr) = cli(&daemon, &["graph", "run", "web", "--wait"]);
    assert!(!ok);
    assert!(stdout.contains("status:   failed"), "{stdout}");
    // The run's own hook ended before --wait returned.
    assert!(
        marker.exists(),
        "--wait returned before on_failed ran:\n{stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "not a terminal: plain lines\n{stderr}"
    );
    let expected = [
        "     Started run ",
        "    Starting spec Alpha (",
        "     Running node build (Alpha)",
        "    Finished node build (Alpha) in ",
        "    Finished node check (Alpha) in ",
        "   Completed spec Alpha",
        "    Starting spec Beta (",
        "      Failed node check (Beta) in ",
        "      Failed run ",
        "     Running hook on_failed[0] (command)",
        "    Finished hook on_failed[0] (command) in ",
    ];
    let mut rest = stderr.as_str();
    for line in expected {
        let at = rest
            .find(line)
            .unwrap_or_else(|| panic!("no `{line}` (in this order) in:\n{stderr}"));
        rest = &rest[at + line.len()..];
    }
    let failed_line = stderr
        .lines()
        .find(|l| l.contains("Failed node check (Beta)"))
        .unwrap();
    assert!(failed_line.contains(": "), "the reason: {failed_line}");
    // The daemon hook is named as `hooks runs` names it.
    assert!(
        stderr.contains("Finished hook announce-failed (command) in "),
        "{stderr}"
    );

    // --quiet: nothing on stderr.
    daemon.ok(&["graph", "reset", "web"]);
    let (ok, _, stderr) = cli(&daemon, &["graph", "run", "web", "--wait", "--quiet"]);
    assert!(!ok);
    assert_eq!(stderr, "");

    // A terminal gets the verbs bold and coloured.
    daemon.ok(&["graph", "reset", "web"]);
    let (ok, _, terminal) = cli_on_tty(&daemon, &["graph", "run", "web", "--wait"]);
    assert!(!ok);
    assert!(
        terminal.contains("\x1b[1;32m     Started\x1b[0m run ")
            && terminal.contains("\x1b[1;31m      Failed\x1b[0m node check (Beta)"),
        "{terminal:?}"
    );
}

#[test]
fn graph_run_wait_shows_a_blocker_and_says_when_hooks_outlast_their_bound() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let alpha = daemon.add_spec("Alpha");
    daemon.create_graph(json!({
        "name": "slow-hooks",
        "workdir": repo.path(),
        "specs": [alpha],
        "nodes": [{ "name": "work", "command": "echo done" }],
        "hooks": { "on_completed": [{ "command": "sleep 30" }] },
    }));
    let started = Instant::now();
    let (ok, _, stderr) = cli(
        &daemon,
        &[
            "graph",
            "run",
            "slow-hooks",
            "--wait",
            "--quiet",
            "--hooks-timeout",
            "1s",
        ],
    );
    assert!(ok, "the run completed:\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        stderr.contains("Warning 1 hook of run ")
            && stderr.contains("still running after 1.0s: on_completed[0] (command)")
            && stderr.contains("canopy hooks runs --graph slow-hooks"),
        "{stderr}"
    );

    let beta = daemon.add_spec("Beta");
    daemon.create_graph(json!({
        "name": "blocking",
        "workdir": repo.path(),
        "specs": [beta],
        "nodes": [{ "name": "review", "command": r#"printf '{"status":"blocked","blocker":"needs a human"}' > "$CANOPY_RESULT_FILE""# }],
    }));
    let (ok, stdout, stderr) = cli(&daemon, &["graph", "run", "blocking", "--wait"]);
    assert!(!ok);
    assert!(stdout.contains("status:   paused"), "{stdout}");
    assert!(
        stderr.contains("     Blocked node review (Beta): needs a human")
            && stderr.contains("      Paused run ")
            && stderr.contains(": needs a human"),
        "{stderr}"
    );

    // A continue reports only what comes after it.
    let (ok, _, stderr) = cli(&daemon, &["graph", "continue", "blocking", "--wait"]);
    assert!(!ok, "still blocked");
    assert!(stderr.contains("  Continuing run "), "{stderr}");
    assert_eq!(
        stderr.matches("Blocked node review").count(),
        1,
        "the first block is not reported again:\n{stderr}"
    );
}

#[test]
fn status_tells_the_daemons_state_and_daemon_stop_stops_it_gracefully() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let status = daemon.ok(&["status"]);
    let json = daemon.json(&["status"]);
    assert_eq!(json["running"], true);
    let pid = json["pid"].as_u64().unwrap();
    let data_dir = real(&daemon.data_dir);
    for expected in [
        format!("daemon:       running, pid {pid}, up "),
        format!("address:      {}", daemon.url),
        format!("version:      {}", env!("CARGO_PKG_VERSION")),
        format!("data dir:     {data_dir}"),
        format!("log:          {data_dir}/daemon.log"),
        "active runs:  none".to_string(),
        "no recent warnings or errors".to_string(),
    ] {
        assert!(status.contains(&expected), "no `{expected}` in:\n{status}");
    }
    assert!(
        json["plugins"]["installed"].as_u64().unwrap() >= 4,
        "{json}"
    );
    assert!(status.contains(" installed, "), "{status}");

    // A failing hook is a warning in the log, and status shows it; a run in flight is active.
    let alpha = daemon.add_spec("Alpha");
    let beta = daemon.add_spec("Beta");
    daemon.create_graph(json!({
        "name": "long",
        "workdir": repo.path(),
        "specs": [alpha, beta],
        "nodes": [{ "name": "work", "command": "if [ {{spec_name}} = Beta ]; then sleep 60; fi" }],
        "hooks": { "on_spec_completed": [{ "command": "echo hook went wrong >&2; exit 7" }] },
    }));
    daemon.ok(&["graph", "run", "long"]);
    let status = wait_for(
        "status to show the failed hook and the active run",
        Duration::from_secs(30),
        || {
            let status = daemon.ok(&["status"]);
            (status.contains("hook did not complete") && status.contains("active runs:  1"))
                .then_some(status)
        },
    );
    assert!(status.contains("WARN"), "{status}");
    assert!(
        status
            .lines()
            .any(|l| l.contains("long") && l.contains("running")),
        "{status}"
    );

    // daemon stop: the graceful path of SIGTERM, and the command returns once it is gone.
    let stop = daemon.ok(&["daemon", "stop"]);
    assert_eq!(stop.trim(), format!("canopy daemon stopped (pid {pid})"));
    let (ok, stdout, _) = cli(&daemon, &["status"]);
    assert!(!ok);
    assert!(
        stdout.contains("no canopy daemon is running for data dir")
            && stdout.contains("hook did not complete"),
        "{stdout}"
    );
    assert!(!daemon.data_dir.join("daemon.addr").exists());
    // Its data is in canopy.db alone: the write-ahead log was copied back and emptied.
    let wal = daemon.data_dir.join("canopy.db-wal");
    let left = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(
        left,
        0,
        "a stopped daemon left {left} bytes in {}",
        wal.display()
    );
    assert_eq!(
        daemon.ok(&["daemon", "stop"]).trim(),
        format!(
            "no canopy daemon is running for data dir {}",
            daemon.data_dir.display()
        )
    );
    let log = std::fs::read_to_string(daemon.data_dir.join("daemon.log")).unwrap();
    assert!(log.contains("shutting down as asked over the API"), "{log}");

    // The run in flight was recorded as interrupted, as on SIGTERM.
    let again = Daemon::start_on(&daemon.data_dir);
    let graph = again.json(&["graph", "get", "long"]);
    assert_eq!(graph["status"], "paused", "{graph}");
    assert!(
        graph["blocker"]
            .as_str()
            .unwrap()
            .contains("the daemon shut down while this run was in progress"),
        "{graph}"
    );
}

/// The lines of a log file.
fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_daemon_log_file_is_plain_rotated_and_printed_by_logs_with_follow() {
    let daemon = Daemon::start_with_config("[log]\nmax_file_kib = 8\n");
    let log = daemon.data_dir.join("daemon.log");
    assert!(
        log_lines(&log)
            .iter()
            .any(|l| l.contains("canopy daemon listening")),
        "the file log"
    );
    assert!(
        daemon.log().contains("canopy daemon listening"),
        "stderr still gets the log"
    );

    // logs --lines N: the last N lines. The daemon may log a line of its own between the
    // command and the read below (its first retention pass, say): the two printed are the
    // last two of the file as it was then, consecutive in the file as it is now.
    let tail = daemon.ok(&["logs", "--lines", "2"]);
    let printed: Vec<&str> = tail.lines().collect();
    assert_eq!(printed.len(), 2, "{tail}");
    let all = log_lines(&log);
    assert!(
        all.windows(2)
            .any(|w| w[0] == printed[0] && w[1] == printed[1]),
        "{tail:?} are not two consecutive lines of the log: {all:#?}"
    );

    // logs --follow prints what comes next, across rotations.
    let mut follower = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .args(["logs", "--follow", "--lines", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let followed = Arc::new(Mutex::new(String::new()));
    let sink = followed.clone();
    let mut stdout = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(read) = stdout.read(&mut buffer) {
            if read == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    });
    daemon.ok(&["plugin", "install", HOSTILE_WASM, "--grant", "fs-read"]);
    let workdir = tempfile::tempdir().unwrap();
    daemon.ok(&[
        "plugin",
        "run",
        "hostile",
        "--mode",
        "hostile-log",
        "--config",
        r#"{"count": 20, "bytes": 1000}"#,
        "--workdir",
        workdir.path().to_str().unwrap(),
    ]);
    let line = "x".repeat(1000);
    wait_for(
        "logs --follow to print the plugin's 20 lines",
        Duration::from_secs(30),
        || (followed.lock().unwrap().matches(&line).count() >= 20).then_some(()),
    );
    let _ = follower.kill();
    let _ = follower.wait();
    reader.join().unwrap();

    // Rotated at 8 KiB, keeping two old files.
    let rotated: Vec<_> = [".1", ".2", ".3"]
        .iter()
        .map(|suffix| daemon.data_dir.join(format!("daemon.log{suffix}")))
        .collect();
    assert!(rotated[0].exists() && rotated[1].exists(), "two old files");
    assert!(!rotated[2].exists(), "no third old file");
    for file in [&log, &rotated[0], &rotated[1]] {
        let size = std::fs::metadata(file).unwrap().len();
        assert!(size <= 8 * 1024, "{} has {size} bytes", file.display());
    }
    // logs reaches into the rotated files for lines the current one does not hold.
    let many = daemon.ok(&["logs", "--lines", "15"]);
    assert_eq!(many.lines().count(), 15, "{many}");
}

#[test]
fn the_log_file_never_gets_colour_even_when_stderr_is_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let mut pty = Pty::new();
    let mut child = Command::new(CANOPY)
        .args(["daemon", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .env("CANOPY_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(pty.stdio())
        .spawn()
        .unwrap();
    wait_for("the daemon to listen", Duration::from_secs(60), || {
        data_dir.join("daemon.addr").exists().then_some(())
    });
    let output = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["daemon", "stop", "--timeout", "30"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = wait_for("the daemon to exit", Duration::from_secs(30), || {
        child.try_wait().unwrap()
    });
    assert!(status.success());
    let terminal = pty.finish();
    assert!(
        terminal.contains("canopy daemon listening") && terminal.contains('\x1b'),
        "the terminal gets colour: {terminal:?}"
    );
    let file = std::fs::read_to_string(data_dir.join("daemon.log")).unwrap();
    assert!(
        file.contains("canopy daemon listening") && file.contains("canopy daemon stopped"),
        "{file}"
    );
    assert!(!file.contains('\x1b'), "colour in the file: {file:?}");
}

/// Starts `canopy daemon --listen ADDR --data-dir DIR` and expects it to fail; returns stderr.
fn daemon_refused(listen: &str, data_dir: &Path) -> String {
    let mut child = Command::new(CANOPY)
        .args(["daemon", "--listen", listen, "--data-dir"])
        .arg(data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for(
        "the second daemon to give up",
        Duration::from_secs(30),
        || child.try_wait().unwrap(),
    );
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "the second daemon started:\n{stderr}");
    stderr
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_second_daemon_on_a_taken_port_fails_before_touching_its_data_dir() {
    let first = Daemon::start();
    let taken = first.host().to_string();

    // A fresh data dir is not even created.
    let tmp = tempfile::tempdir().unwrap();
    let fresh = tmp.path().join("fresh");
    let err = daemon_refused(&taken, &fresh);
    assert!(
        err.contains(&format!("cannot listen on {taken}: the port is taken"))
            && err.contains("--listen 127.0.0.1:0"),
        "{err}"
    );
    assert!(!fresh.exists(), "the refused daemon created its data dir");

    // A data dir a killed daemon left with a run in flight: nothing in it changes (the run is
    // not marked interrupted, its token stays, no log is written).
    let mut crashed = Daemon::start();
    let repo = git_repo();
    let alpha = crashed.add_spec("Alpha");
    crashed.create_graph(json!({
        "name": "g", "workdir": repo.path(), "specs": [alpha],
        "nodes": [{ "name": "n", "command": "sleep 60" }],
    }));
    crashed.ok(&["graph", "run", "g"]);
    crashed.kill();
    let dir = crashed.data_dir.clone();
    let before = listing(&dir);
    let token = std::fs::read_to_string(dir.join("daemon.token")).unwrap();
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap();
    let err = daemon_refused(&taken, &dir);
    assert!(err.contains("the port is taken"), "{err}");
    assert_eq!(listing(&dir), before);
    assert_eq!(
        std::fs::read_to_string(dir.join("daemon.token")).unwrap(),
        token
    );
    // The log keeps what it had, and one line more: why this daemon did not start, where
    // `canopy status` finds it.
    let after = std::fs::read_to_string(dir.join("daemon.log")).unwrap();
    let added = after
        .strip_prefix(log.as_str())
        .expect("the log was only appended to");
    assert_eq!(added.lines().count(), 1, "{added}");
    assert!(
        added.contains("ERROR canopy_daemon: the daemon refused to start: cannot listen on"),
        "{added}"
    );
    let store = support::store_of(&dir);
    let status = store
        .read_blocking(|rd| Ok::<_, canopy_store::StoreError>(rd.runs(None, 1)?.remove(0).status))
        .unwrap();
    drop(store);
    assert_eq!(
        status.as_str(),
        "running",
        "the refused daemon recovered the run"
    );
    // A daemon that does start there kills what the crashed one left running (`sleep 60`).
    drop(Daemon::start_on(&dir));

    // The port and the data dir of a running daemon: it is named.
    let err = daemon_refused(&taken, &first.data_dir);
    assert!(
        err.contains("another canopy daemon") && err.contains("is already running on data dir"),
        "{err}"
    );
    assert_eq!(first.json(&["status"])["url"], first.url.as_str());

    // The data dir of a running daemon, and a port some other program holds: the data dir's
    // daemon is what is named (its pid and address), not blamed for the port.
    let other = Daemon::start();
    let err = daemon_refused(other.host(), &first.data_dir);
    let pid = first.pid().unwrap_or_default();
    assert!(
        err.contains(&format!(
            "another canopy daemon (pid {pid}) is already running on data dir"
        )) && err.contains(&format!("listening on {}", first.url))
            && !err.contains("the port is taken"),
        "{err}"
    );
}

#[test]
fn run_and_daemon_commands_answer_json() {
    let daemon = Daemon::start();
    let (status, body) = daemon.get("/api/runs/ffff");
    assert_eq!(status, 404, "{body}");
    let (status, body) = daemon.get("/api/node-runs/ffff");
    assert_eq!(status, 404, "{body}");
    let (status, body) = daemon.get("/api/status");
    assert_eq!(status, 200);
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert!(body["active_runs"].as_array().unwrap().is_empty());
    let (status, body) = daemon.get("/api/runs/ffff?bogus=1");
    assert_eq!(status, 400, "{body}");
    let value: Value = daemon.json(&["run", "list"]);
    assert!(value["runs"].as_array().unwrap().is_empty());
}

#[test]
fn daemon_stop_ends_a_following_inbox_stream_instead_of_waiting_on_it() {
    let daemon = Daemon::start();
    daemon.ok(&["session", "new", "--name", "lead"]);
    // A client following an inbox: the answer's headers are in, the stream stays open.
    let response = reqwest::blocking::Client::new()
        .get(format!(
            "{}/api/sessions/lead/inbox?follow=true",
            daemon.url
        ))
        .bearer_auth(daemon.token())
        .send()
        .unwrap();
    assert!(response.status().is_success());
    let reader = std::thread::spawn(move || response.text().map(|body| body.len()));

    let (ok, stdout, stderr) = cli(&daemon, &["daemon", "stop", "--timeout", "15"]);
    assert!(
        ok,
        "daemon stop waited on the open stream:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("canopy daemon stopped"), "{stdout}");
    // The follower saw its stream end rather than hang.
    assert!(reader.join().unwrap().is_ok());
}

#[test]
fn install_service_prints_or_writes_a_user_unit_that_runs_this_daemon() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config");
    // A data dir with a space and a `%`: one literal word to systemd.
    let data_dir = home.path().join("data 100%");
    let canopy = |args: &[&str]| {
        let output = Command::new(support::CANOPY)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(args)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", &config)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let unit = canopy(&["daemon", "install-service", "--print"]);
    let exe = std::fs::canonicalize(support::CANOPY).unwrap();
    let exec = format!(
        "ExecStart=\"{}\" \"daemon\" \"--data-dir\" \"{}/data 100%%\"\n",
        exe.display(),
        home.path().display()
    );
    assert!(unit.contains(&exec), "{unit}");
    for line in [
        "Restart=on-failure\n",
        "KillMode=mixed\n",
        "TimeoutStopSec=60\n",
        "WantedBy=default.target\n",
        "Environment=\"PATH=",
    ] {
        assert!(unit.contains(line), "{line}: {unit}");
    }
    let file = config.join("systemd/user/canopy.service");
    assert!(!file.exists(), "--print wrote the unit");
    // Where systemd's own checker is installed, it finds nothing to say about the unit (a key
    // it cannot parse is a warning there, a missing binary an error).
    if let Ok(verified) = Command::new("systemd-analyze")
        .arg("verify")
        .arg(write_file(home.path(), "canopy.service", &unit))
        .output()
    {
        assert!(
            verified.status.success() && verified.stderr.is_empty(),
            "{verified:?}"
        );
    }

    let said = canopy(&["daemon", "install-service"]);
    assert!(
        said.starts_with(&format!("wrote {}", file.display())),
        "{said}"
    );
    assert!(
        said.contains("systemctl --user enable --now canopy"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), unit);
    let again = canopy(&["daemon", "install-service", "--listen", "127.0.0.1:7999"]);
    assert!(again.starts_with("updated "), "{again}");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("\"--listen\" \"127.0.0.1:7999\""),
        "the update did not take"
    );
}

fn write_file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}
