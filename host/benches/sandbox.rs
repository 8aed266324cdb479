//! Sandbox benchmark: run it with `cargo bench --bench sandbox`.
//!
//! Starts the real daemon (release build) on a temp data dir and measures what hostile plugins
//! do to everyone else:
//! 1. `GET /api/health` latency on an idle daemon;
//! 2. the same while 20 plugin calls spin in an infinite loop (10 s deadline each), and when each
//!    of those calls ended, counted from the moment they were sent;
//! 3. 48 concurrent calls of a large component, if one is given in `CANOPY_BENCH_LARGE_WASM`
//!    (a componentize-py executor, say: 14 core instances each), with the mode in
//!    `CANOPY_BENCH_LARGE_MODE`; otherwise 48 concurrent calls of the hostile test plugin.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Daemon;

const SPINNERS: usize = 20;
const SPIN_DEADLINE_SECS: u64 = 10;
const CONCURRENT: usize = 48;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn summary(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{label:<44} n={:<5} p50={:>9.2?} p99={:>9.2?} max={:>9.2?}",
        samples.len(),
        percentile(&samples, 0.50),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
}

fn health_once(client: &reqwest::blocking::Client, daemon: &Daemon) -> Duration {
    let started = Instant::now();
    let response = client
        .get(format!("{}/api/health", daemon.url))
        .bearer_auth(daemon.token())
        .send()
        .unwrap();
    assert!(response.status().is_success());
    let _ = response.bytes().unwrap();
    started.elapsed()
}

/// One `plugin run` over HTTP against the daemon at `url`; returns (ok, answer). Takes owned
/// values so it can run on a thread of its own.
fn call_at(
    url: String,
    token: String,
    plugin: String,
    mode: String,
    config: Value,
) -> (bool, Value) {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let response = client
        .post(format!("{url}/api/plugins/{plugin}/run"))
        .bearer_auth(token)
        .json(&json!({ "mode": mode, "config": config, "workdir": std::env::temp_dir() }))
        .send()
        .unwrap();
    let ok = response.status().is_success();
    (ok, response.json().unwrap_or(Value::Null))
}

/// `call_at` on a thread of its own; the thread returns (ok, answer, time since `sent`).
fn spawn_call(
    daemon: &Daemon,
    plugin: &str,
    mode: &str,
    config: Value,
    sent: Instant,
) -> std::thread::JoinHandle<(bool, Value, Duration)> {
    let (url, token) = (daemon.url.clone(), daemon.token().to_string());
    let (plugin, mode) = (plugin.to_string(), mode.to_string());
    std::thread::spawn(move || {
        let (ok, answer) = call_at(url, token, plugin, mode, config);
        (ok, answer, sent.elapsed())
    })
}

fn main() {
    let daemon = Daemon::start();
    daemon.ok(&[
        "plugin",
        "install",
        support::HOSTILE_WASM,
        "--grant",
        "fs-read",
    ]);
    let client = reqwest::blocking::Client::new();
    for _ in 0..50 {
        health_once(&client, &daemon);
    }

    let idle: Vec<Duration> = (0..500).map(|_| health_once(&client, &daemon)).collect();
    summary("GET /api/health, idle", idle);

    // 20 spinning calls, each on its own client thread.
    let sent = Instant::now();
    let spinners: Vec<_> = (0..SPINNERS)
        .map(|_| {
            let config = json!({ "timeout_seconds": SPIN_DEADLINE_SECS });
            spawn_call(&daemon, "hostile", "hostile-spin", config, sent)
        })
        .collect();
    // Sample the API while they spin (leave the first 200 ms for the calls to arrive).
    std::thread::sleep(Duration::from_millis(200));
    let mut busy = Vec::new();
    while sent.elapsed() < Duration::from_secs(SPIN_DEADLINE_SECS - 1) {
        busy.push(health_once(&client, &daemon));
        std::thread::sleep(Duration::from_millis(10));
    }
    summary(&format!("GET /api/health, {SPINNERS} calls spinning"), busy);
    let mut ends = Vec::new();
    for spinner in spinners {
        let (_, answer, ended) = spinner.join().unwrap();
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("timed out"), "{answer}");
        ends.push(ended);
    }
    summary(
        &format!("{SPINNERS} spinning calls ({SPIN_DEADLINE_SECS} s deadline) ended after"),
        ends,
    );
    // And the next ordinary call is served at once.
    let started = Instant::now();
    let (ok, answer) = call_at(
        daemon.url.clone(),
        daemon.token().to_string(),
        "hostile".into(),
        "hostile-ok".into(),
        json!({}),
    );
    assert!(ok, "{answer}");
    println!(
        "{:<44} {:?}",
        "an ordinary call right after",
        started.elapsed()
    );

    let (plugin, mode) = match std::env::var("CANOPY_BENCH_LARGE_WASM") {
        Ok(path) => {
            daemon.ok(&["plugin", "install", &path]);
            let list = daemon.json(&["plugin", "list"]);
            let installed = list["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["builtin"] == false && p["name"] != "hostile")
                .unwrap()
                .clone();
            let name = installed["name"].as_str().unwrap().to_string();
            let mode = std::env::var("CANOPY_BENCH_LARGE_MODE")
                .unwrap_or_else(|_| installed["manifest"]["modes"][0].as_str().unwrap().into());
            (name, mode)
        }
        Err(_) => ("hostile".to_string(), "hostile-ok".to_string()),
    };
    let sent = Instant::now();
    let calls: Vec<_> = (0..CONCURRENT)
        .map(|_| spawn_call(&daemon, &plugin, &mode, json!({}), sent))
        .collect();
    let mut durations = Vec::new();
    let mut failed = 0;
    for handle in calls {
        let (ok, answer, took) = handle.join().unwrap();
        if !ok {
            failed += 1;
            eprintln!("call failed: {answer}");
        }
        durations.push(took);
    }
    summary(
        &format!("{CONCURRENT} concurrent `{plugin}` calls, done after"),
        durations,
    );
    println!(
        "{CONCURRENT} concurrent calls: {} completed, {failed} failed",
        CONCURRENT - failed
    );
}
