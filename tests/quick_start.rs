//! The README's quick start, run exactly as written, from a fresh HOME: it must end green.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output};

/// The shell block between the README's quick-start markers.
fn quick_start() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("the README");
    let (_, rest) = readme
        .split_once("<!-- quick-start")
        .expect("the README has a quick-start block");
    let (block, _) = rest
        .split_once("<!-- /quick-start -->")
        .expect("the quick-start block ends");
    let (_, code) = block.split_once("```sh\n").expect("a sh code block");
    let (code, _) = code.split_once("```").expect("the code block ends");
    code.to_string()
}

#[test]
fn the_readme_quick_start_ends_green_from_a_fresh_home() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    // What a machine has that the quick start does not set up: git knows who commits. And a
    // daemon on this machine may hold the default port: this one takes any free port.
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = Quick Start\n\temail = quick@start.invalid\n",
    )
    .unwrap();
    let data = home.join(".local/share/canopy");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("canopy.toml"), "listen = \"127.0.0.1:0\"\n").unwrap();

    let bin = Path::new(support::CANOPY).parent().unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let shell = |script: &str| {
        Command::new("sh")
            .args(["-e", "-c", script])
            .current_dir(home)
            .env_clear()
            .env("HOME", home)
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let ran = shell(&quick_start());
    let stopped = shell("canopy daemon stop");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(ran.status.success(), "the quick start failed:\n{said}");
    assert!(stopped.status.success(), "{stopped:?}");
    assert!(said.contains("canopy daemon started"), "{said}");
    assert!(said.contains("status:   completed"), "{said}");
    // The demo agent wrote its file from the spec.
    let written = std::fs::read_to_string(home.join("demo/DEMO.md")).unwrap_or_default();
    assert!(
        written.contains("Implement this spec:\n<spec>")
            && written.contains("Print a friendly greeting"),
        "{written}"
    );
    // The hook ran and its run is listed.
    assert!(said.contains("on_spec_completed"), "{said}");
    assert!(said.contains("done: greeting"), "{said}");
    // The graph committed what the demo agent wrote.
    let log = Command::new("git")
        .args([
            "-C",
            &home.join("demo").to_string_lossy(),
            "log",
            "--format=%s",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout), "greeting\nstart\n");
}

#[test]
fn daemon_start_says_why_a_daemon_would_not_start_and_does_not_start_two() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_string_lossy().to_string();
    let canopy = |args: &[&str]| {
        Command::new(support::CANOPY)
            .args(["--data-dir", &dir])
            .args(args)
            .output()
            .unwrap()
    };
    std::fs::write(
        data.path().join("canopy.toml"),
        "listen = \"127.0.0.1:0\"\n[limits]\nplugin_memory_mb = 1\n",
    )
    .unwrap();
    let refused = canopy(&["daemon", "start"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        said.contains("the daemon exited") && said.contains("plugin_memory_mb"),
        "{said}"
    );
    // `status` says why the last start failed: the refusal is in the daemon's log.
    let status = canopy(&["status"]);
    let told = format!(
        "{}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(!status.status.success());
    assert!(
        told.contains("the daemon refused to start") && told.contains("plugin_memory_mb"),
        "{told}"
    );

    std::fs::write(
        data.path().join("canopy.toml"),
        "listen = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let started = canopy(&["daemon", "start"]);
    assert!(started.status.success(), "{started:?}");
    let again = canopy(&["daemon", "start"]);
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("a canopy daemon is already running"),
        "{again:?}"
    );
    assert!(canopy(&["status"]).status.success());
    // Its log goes to daemon.log, not also to the stderr file nobody rotates.
    let log = std::fs::read_to_string(data.path().join("daemon.log")).unwrap();
    assert!(log.contains("canopy daemon listening"), "{log}");
    let stderr = std::fs::read_to_string(data.path().join("daemon.stderr")).unwrap();
    assert!(!stderr.contains("canopy daemon listening"), "{stderr}");
    // A restart drains and stops the daemon, then starts a new one (the token stays).
    let token = std::fs::read_to_string(data.path().join("daemon.token")).unwrap();
    let pid = |status: Output| -> u64 {
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        status["pid"].as_u64().unwrap()
    };
    let before = pid(canopy(&["status", "--json"]));
    let restarted = canopy(&["daemon", "restart"]);
    let said = String::from_utf8_lossy(&restarted.stdout);
    assert!(restarted.status.success(), "{restarted:?}");
    assert!(
        said.contains("canopy daemon stopped") && said.contains("canopy daemon started"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(data.path().join("daemon.token")).unwrap(),
        token
    );
    assert_ne!(
        pid(canopy(&["status", "--json"])),
        before,
        "the same daemon runs"
    );
    assert!(canopy(&["daemon", "stop"]).status.success());
}
