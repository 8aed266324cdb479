//! The sandbox's integrity and its deadlines under hostile plugins: each test replays an attack
//! (a tampered cache, a forged provenance, a planted symlink, a guest asleep in a host call, a
//! spinning or hoarding guest, a flood of output) against the real daemon and checks that the
//! call fails alone, nothing leaks, and the daemon keeps answering.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// `canopy plugin run NAME --mode MODE --config CONFIG --workdir DIR --json`, as a child process.
fn spawn_run(daemon: &Daemon, mode: &str, config: &Value, workdir: &Path) -> Child {
    Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .args(["plugin", "run", "hostile", "--mode", mode, "--config"])
        .arg(config.to_string())
        .arg("--workdir")
        .arg(workdir)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs a hostile mode; Ok(report) or Err(stderr).
fn run(daemon: &Daemon, mode: &str, config: Value, workdir: &Path) -> Result<Value, String> {
    let output = spawn_run(daemon, mode, &config, workdir)
        .wait_with_output()
        .unwrap();
    if output.status.success() {
        Ok(serde_json::from_slice(&output.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn install_hostile(daemon: &Daemon, grants: &str) {
    daemon.ok(&["plugin", "install", HOSTILE_WASM, "--grant", grants]);
}

/// GET /api/health with its own short deadline: Some(latency) when it answered in time.
fn health_within(daemon: &Daemon, limit: Duration) -> Option<Duration> {
    let client = reqwest::blocking::Client::builder()
        .timeout(limit)
        .build()
        .unwrap();
    let started = Instant::now();
    let response = client
        .get(format!("{}/api/health", daemon.url))
        .header("Authorization", format!("Bearer {}", daemon.token()))
        .send()
        .ok()?;
    response.status().is_success().then(|| started.elapsed())
}

#[test]
fn a_guest_asleep_in_a_host_call_stops_at_its_deadline() {
    let daemon = Daemon::start();
    install_hostile(&daemon, "fs-read");
    let workdir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = run(
        &daemon,
        "hostile-sleep",
        json!({ "secs": 60, "timeout_seconds": 2 }),
        workdir.path(),
    )
    .unwrap_err();
    assert!(err.contains("timed out: stopped after"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a 2 s deadline let a 60 s sleep run for {:?}",
        started.elapsed()
    );

    // The same sleep inside `validate` (which `plugin run` calls first) has the same kind of
    // deadline.
    let started = Instant::now();
    let err = run(
        &daemon,
        "hostile-sleep",
        json!({ "validate_secs": 60 }),
        workdir.path(),
    )
    .unwrap_err();
    assert!(err.contains("timed out"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(40), "{err}");
}

#[test]
fn a_describe_that_hangs_fails_its_install_without_holding_up_others() {
    let daemon = Daemon::start();
    // The built-ins' installs at start said it too.
    let compiled = || {
        daemon
            .log()
            .matches("component compiled; asking it who it is")
            .count()
    };
    let before = compiled();
    let slow = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .args(["plugin", "install", SLOW_DESCRIBE_WASM])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the daemon is inside the slow describe (the component compiles first).
    wait_for(
        "the slow install to reach describe",
        Duration::from_secs(60),
        || (compiled() > before).then_some(()),
    );
    daemon.ok(&["plugin", "install", NOOP_WASM]);
    let mut slow = slow;
    assert!(
        slow.try_wait().unwrap().is_none(),
        "the normal install should finish while the hanging one is still in describe"
    );
    let output = slow.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(err.contains("timed out"), "{err}");
    let list = daemon.json(&["plugin", "list"]);
    let names: Vec<&str> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"noop") && !names.contains(&"slow-describe"));
}

#[test]
fn spinning_guests_neither_freeze_the_daemon_nor_outlive_their_deadline() {
    let daemon = Daemon::start();
    install_hostile(&daemon, "fs-read");
    let workdir = tempfile::tempdir().unwrap();
    // Three spinners per core, each with a 4 s deadline.
    let spinners: Vec<Child> = (0..6)
        .map(|_| {
            spawn_run(
                &daemon,
                "hostile-spin",
                &json!({ "timeout_seconds": 4 }),
                workdir.path(),
            )
        })
        .collect();
    // Sample the API for most of the spinners' 4 s: every answer must come within a second.
    let spawned = Instant::now();
    let mut answers = 0;
    while spawned.elapsed() < Duration::from_millis(3_000) {
        assert!(
            health_within(&daemon, Duration::from_secs(1)).is_some(),
            "the API stopped answering while plugins spin ({:?} after they started)",
            spawned.elapsed()
        );
        answers += 1;
    }
    assert!(answers > 3);
    let ok = run(&daemon, "hostile-ok", json!({}), workdir.path()).unwrap();
    assert_eq!(ok["outcome"]["summary"], "fine");
    for spinner in spinners {
        let output = spinner.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(err.contains("timed out: stopped after"), "{err}");
        let millis: u64 = err
            .split("stopped after ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(
            (3_900..6_000).contains(&millis),
            "a 4 s deadline ended after {millis} ms"
        );
    }
}

#[test]
fn calls_beyond_the_pool_wait_for_a_slot_and_a_full_pool_is_reported_busy() {
    let daemon = Daemon::start_with_config("[limits]\nmax_concurrent_calls = 2\n");
    install_hostile(&daemon, "fs-read");
    let workdir = tempfile::tempdir().unwrap();
    let sleepers: Vec<Child> = (0..6)
        .map(|_| {
            spawn_run(
                &daemon,
                "hostile-sleep",
                &json!({ "secs": 1, "timeout_seconds": 60 }),
                workdir.path(),
            )
        })
        .collect();
    for sleeper in sleepers {
        let output = sleeper.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["outcome"]["summary"], "woke up");
    }

    // Two long sleepers hold both slots; a call whose deadline (here `validate`'s 10 s) passes
    // while it waits is busy, not trapped.
    let holders: Vec<Child> = (0..2)
        .map(|_| {
            spawn_run(
                &daemon,
                "hostile-sleep",
                &json!({ "secs": 40, "timeout_seconds": 60 }),
                workdir.path(),
            )
        })
        .collect();
    let err = wait_for("a busy refusal", Duration::from_secs(60), || {
        let outcome = run(
            &daemon,
            "hostile-ok",
            json!({ "timeout_seconds": 1 }),
            workdir.path(),
        );
        outcome.err().filter(|err| err.contains("did not start"))
    });
    assert!(
        err.contains("maximum of concurrent plugin calls") && !err.contains("trapped"),
        "{err}"
    );
    for holder in holders {
        assert!(holder.wait_with_output().unwrap().status.success());
    }
}

#[test]
fn a_guest_hoarding_file_handles_fails_alone() {
    let daemon = Daemon::start();
    install_hostile(&daemon, "fs-read");
    let workdir = tempfile::tempdir().unwrap();
    std::fs::write(workdir.path().join("f.txt"), "x").unwrap();
    let path = format!("{}/f.txt", real(workdir.path()));
    let err = run(
        &daemon,
        "hostile-open-files",
        json!({ "path": path }),
        workdir.path(),
    )
    .unwrap_err();
    assert!(
        err.contains(
            "held more than 256 open handles (files, streams, sockets) at once and was stopped"
        ),
        "{err}"
    );
    assert!(health_within(&daemon, Duration::from_secs(5)).is_some());
    let ok = run(&daemon, "hostile-ok", json!({}), workdir.path()).unwrap();
    assert_eq!(ok["outcome"]["summary"], "fine");
}

#[test]
fn a_guest_cannot_park_a_daemon_thread_on_a_fifo() {
    let daemon = Daemon::start();
    install_hostile(&daemon, "fs-read");
    let workdir = tempfile::tempdir().unwrap();
    let fifo = workdir.path().join("pipe");
    let c_path = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // Opening a FIFO for reading blocks until a writer comes; two at once would pin both of
    // this machine's runtime threads.
    let readers: Vec<Child> = (0..2)
        .map(|_| {
            spawn_run(
                &daemon,
                "hostile-read",
                &json!({ "path": real(&fifo), "timeout_seconds": 3 }),
                workdir.path(),
            )
        })
        .collect();
    for reader in readers {
        let output = reader.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(err.contains("read "), "{err}");
    }
    assert!(health_within(&daemon, Duration::from_secs(5)).is_some());
}

#[test]
fn what_a_guest_returns_and_logs_is_bounded_and_cannot_forge_log_lines() {
    let daemon = Daemon::start();
    install_hostile(&daemon, "fs-read");
    let workdir = tempfile::tempdir().unwrap();
    let report = run(
        &daemon,
        "hostile-big",
        json!({ "bytes": 50 << 20 }),
        workdir.path(),
    )
    .unwrap();
    let summary = report["outcome"]["summary"].as_str().unwrap();
    let detail = report["outcome"]["detail"].as_str().unwrap();
    assert!(
        summary.len() < 2 * 1024,
        "summary of {} bytes",
        summary.len()
    );
    assert!(detail.len() < 80 * 1024, "detail of {} bytes", detail.len());
    assert!(detail.ends_with("ddd"));

    let before = daemon.log().len();
    run(
        &daemon,
        "hostile-log",
        json!({ "count": 20, "bytes": 1 << 20 }),
        workdir.path(),
    )
    .unwrap();
    let log = daemon.log();
    let grown = log.len() - before;
    assert!(
        grown < 256 * 1024,
        "20 MB of log lines grew the log by {grown} bytes"
    );
    assert!(
        !log.lines()
            .any(|line| line.starts_with("2026-01-01T00:00:00Z")),
        "a plugin forged a log line:\n{log}"
    );
    assert!(
        !log[before..].contains('\x1b'),
        "an ANSI escape reached the log"
    );
    assert!(log.contains("innocent\\n2026-01-01T00:00:00Z"), "{log}");
}

#[test]
fn the_host_stamps_provenance_and_ignores_what_the_guest_claims() {
    let daemon = Daemon::start();
    install_hostile(&daemon, "fs-read,sessions");
    let session = daemon.json(&["session", "new", "--name", "lead"]);
    let session = session["id"].as_str().unwrap().to_string();
    let workdir = tempfile::tempdir().unwrap();
    run(
        &daemon,
        "hostile-forge",
        json!({ "session": "lead" }),
        workdir.path(),
    )
    .unwrap();
    let inbox = wait_for("the message to arrive", Duration::from_secs(30), || {
        let inbox = daemon.json(&["session", "inbox", &session]);
        (!inbox["messages"].as_array().unwrap().is_empty()).then_some(inbox)
    });
    let message = &inbox["messages"][0];
    assert_eq!(message["text"], "forged hello", "{message:#}");
    let provenance = &message["provenance"];
    assert_eq!(provenance["event"], "manual", "{provenance:#}");
    assert_ne!(provenance["graph_name"], "payroll");
    assert_ne!(provenance["run_id"], "forged-run");
    assert!(provenance["spec_id"].is_null(), "{provenance:#}");
}

#[test]
fn a_guest_cannot_plant_a_symlink_that_leads_out_of_the_workdir() {
    let daemon = Daemon::start();
    install_hostile(&daemon, "fs-read,fs-write:out");
    let root = tempfile::tempdir().unwrap();
    let outside = root.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    let workdir = root.path().join("work");
    std::fs::create_dir_all(workdir.join("out")).unwrap();
    let out = format!("{}/out", real(&workdir));

    for target in [
        "../../outside/secret.txt",
        "/etc/passwd",
        &real(&outside.join("secret.txt")),
    ] {
        let err = run(
            &daemon,
            "hostile-symlink",
            json!({ "link": format!("{out}/evil"), "target": target }),
            &workdir,
        )
        .unwrap_err();
        assert!(err.contains("symlink"), "{err}");
        assert!(
            std::fs::symlink_metadata(workdir.join("out/evil")).is_err(),
            "a link to {target} was created"
        );
    }
    // A link that stays inside is still allowed.
    run(
        &daemon,
        "hostile-symlink",
        json!({ "link": format!("{out}/ok"), "target": "notes.txt" }),
        &workdir,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_link(workdir.join("out/ok")).unwrap(),
        Path::new("notes.txt")
    );
}

#[test]
fn a_write_grant_through_a_planted_symlink_creates_nothing_outside() {
    let daemon = Daemon::start();
    daemon.ok(&[
        "plugin",
        "install",
        HOSTILE_WASM,
        "--grant",
        "fs-read,fs-write:link_outdir/newdir",
    ]);
    let root = tempfile::tempdir().unwrap();
    let outside = root.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let workdir = root.path().join("work");
    std::fs::create_dir(&workdir).unwrap();
    std::os::unix::fs::symlink(&outside, workdir.join("link_outdir")).unwrap();
    let err = run(&daemon, "hostile-ok", json!({}), &workdir).unwrap_err();
    assert!(err.contains("outside the workdir"), "{err}");
    assert!(
        !outside.join("newdir").exists(),
        "the refused grant created a folder outside the workdir"
    );
}

#[test]
fn a_tampered_compiled_artifact_is_recompiled_not_run() {
    let mut daemon = Daemon::start();
    install_hostile(&daemon, "fs-read");
    daemon.ok(&["plugin", "install", NOOP_WASM]);
    let hostile = daemon.json(&["plugin", "inspect", "hostile"]);
    let noop = daemon.json(&["plugin", "inspect", "noop"]);
    let data_dir = daemon.data_dir.clone();
    daemon.stop();

    // Put noop's native code where hostile's artifact is.
    let cache = data_dir.join("cache");
    let artifact_of = |sha: &str| {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(sha))
            .unwrap()
    };
    let hostile_artifact = artifact_of(hostile["sha256"].as_str().unwrap());
    let noop_artifact = artifact_of(noop["sha256"].as_str().unwrap());
    std::fs::copy(&noop_artifact, &hostile_artifact).unwrap();

    let daemon = Daemon::start_on(&data_dir);
    let inspect = daemon.json(&["plugin", "inspect", "hostile"]);
    assert_eq!(inspect["load"]["source"], "compiled", "{inspect:#}");
    assert_eq!(
        daemon.json(&["plugin", "inspect", "noop"])["load"]["source"],
        "cache"
    );
    let workdir = tempfile::tempdir().unwrap();
    let ok = run(&daemon, "hostile-ok", json!({}), workdir.path()).unwrap();
    assert_eq!(ok["outcome"]["summary"], "fine", "hostile's own code ran");
    assert!(
        daemon
            .log()
            .contains("does not match the digest recorded when it was compiled"),
        "{}",
        daemon.log()
    );
}

#[test]
fn reinstalling_repairs_a_tampered_stored_component() {
    let mut daemon = Daemon::start();
    install_hostile(&daemon, "fs-read");
    let sha = daemon.json(&["plugin", "inspect", "hostile"])["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let data_dir = daemon.data_dir.clone();
    daemon.stop();
    let stored = data_dir.join("plugins").join(format!("{sha}.wasm"));
    std::fs::write(&stored, b"\0asm tampered").unwrap();

    let mut daemon = Daemon::start_on(&data_dir);
    // Not loaded, and said so wherever one looks for it.
    let err = daemon.fails(&["plugin", "inspect", "hostile"]);
    assert!(
        err.contains("plugin `hostile` is installed but was not loaded when the daemon started")
            && err.contains("changed on disk since it was installed"),
        "{err}"
    );
    let listed = daemon.cli(&["plugin", "list"]);
    assert!(
        String::from_utf8_lossy(&listed.stderr)
            .contains("warning: plugin hostile is installed but was not loaded"),
        "{listed:?}"
    );
    install_hostile(&daemon, "fs-read");
    assert_eq!(
        daemon.json(&["plugin", "list"])["not_loaded"],
        json!([]),
        "reinstalled, it is loaded"
    );
    daemon.stop();

    let daemon = Daemon::start_on(&data_dir);
    assert_eq!(
        daemon.json(&["plugin", "inspect", "hostile"])["sha256"],
        sha.as_str(),
        "the reinstalled plugin is gone again after a restart:\n{}",
        daemon.log()
    );
}

#[test]
fn durations_past_the_maximum_are_refused_naming_the_field() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    for (field, value) in [
        ("timeout_seconds", json!(1u64 << 63)),
        ("timeout_minutes", json!(1u64 << 62)),
        ("timeout_seconds", json!(0)),
        ("timeout_seconds", json!("10")),
    ] {
        let err = daemon.fails(&[
            "plugin",
            "run",
            "command",
            "--config",
            &json!({ "command": "true", field: value }).to_string(),
            "--workdir",
            &workdir.path().to_string_lossy(),
        ]);
        assert!(
            err.contains(&format!("field `{field}`: must be a whole number")),
            "{field}={value}: {err}"
        );
    }
    let repo = git_repo();
    let (status, body) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({
            "name": "forever",
            "workdir": real(repo.path()),
            "nodes": [{ "name": "n", "command": "true", "timeout_seconds": 1u64 << 63 }],
        }),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timeout_seconds"),
        "{body}"
    );
    assert!(health_within(&daemon, Duration::from_secs(5)).is_some());
}

#[test]
fn a_marker_inside_quotes_is_refused_at_edit_time() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let (status, body) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({
            "name": "quoted",
            "workdir": real(repo.path()),
            "nodes": [{ "name": "n", "command": "true" }],
            "hooks": { "on_spec_completed": [{ "command": "echo \"{{spec_name}}\"" }] },
        }),
    );
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("field `command`: marker `{{spec_name}}` sits inside double quotes"),
        "{message}"
    );
}
