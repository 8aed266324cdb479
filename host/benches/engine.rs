//! Engine benchmark: run it with `cargo bench --bench engine`.
//!
//! Starts the real daemon (release build) on a temp data dir and measures
//! 1. engine throughput: 1,000 specs through a one-node graph whose node is a no-op wasm
//!    executor, from the `run` request to the run's completion, every node run durably recorded
//!    (read back from the database afterwards);
//! 2. what sync hooks on `node.pre_dispatch` add to a dispatch: none, one no-op wasm hook,
//!    ten (the last one patching);
//! 3. `graph get` over HTTP with one client, on a small graph and on the 1,000-spec graph.
//!
//! `CANOPY_TEST_BACKEND=postgres cargo bench --bench engine` runs the same daemon on a
//! PostgreSQL database (a throwaway server the bench starts), for the two backends side by side.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Daemon, wait_for};

const SPECS: usize = 1_000;

fn get_throughput(daemon: &Daemon, path: &str, window: Duration) -> (usize, f64) {
    let client = reqwest::blocking::Client::new();
    let url = format!("{}{path}", daemon.url);
    let started = Instant::now();
    let mut count = 0;
    while started.elapsed() < window {
        let response = client.get(&url).bearer_auth(daemon.token()).send().unwrap();
        assert!(response.status().is_success());
        let _ = response.bytes().unwrap();
        count += 1;
    }
    (count, count as f64 / started.elapsed().as_secs_f64())
}

/// Specs per run in the sync-hook rounds.
const GATED_SPECS: usize = 300;
/// Runs of each graph in the sync-hook rounds.
const ROUNDS: usize = 8;

/// One run of `graph`; its engine time per spec in µs, by the run's own record.
fn micros_per_spec(daemon: &Daemon, graph: &str, specs: usize) -> f64 {
    let (status, view) = daemon.send(
        "POST",
        &format!("/api/graphs/{graph}/control"),
        &json!({ "action": "run" }),
    );
    assert_eq!(status, 200, "{view}");
    let run = wait_for("the run to complete", Duration::from_secs(300), || {
        let (_, runs) = daemon.get(&format!("/api/runs?graph={graph}&last=1"));
        (runs["runs"][0]["status"] != "running").then(|| runs["runs"][0].clone())
    });
    assert_eq!(run["status"], "completed", "{run}");
    let at = |field: &str| humantime::parse_rfc3339(run[field].as_str().unwrap()).unwrap();
    let secs = at("finished_at")
        .duration_since(at("started_at"))
        .unwrap()
        .as_secs_f64();
    secs * 1e6 / specs as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// What sync hooks on `node.pre_dispatch` add to a node's dispatch: the same graph with none,
/// with one no-op wasm sync hook (it allows), and with ten (nine allow, the last patches the
/// node's prompt), run in turns so drift in the machine falls on all three alike.
fn sync_hooks(daemon: &Daemon, workdir: &std::path::Path, ids: &[String]) {
    let node = json!([{ "name": "noop", "mode": "noop", "prompt": "as configured" }]);
    let allow = json!({ "mode": "noop" });
    let mut ten: Vec<serde_json::Value> = vec![allow.clone(); 9];
    ten.push(json!({ "mode": "noop", "patch": { "prompt": "patched" } }));
    for (name, hooks) in [
        ("gate-0", json!({})),
        ("gate-1", json!({ "node.pre_dispatch": [allow] })),
        ("gate-10", json!({ "node.pre_dispatch": ten })),
    ] {
        let (status, answer) = daemon.send(
            "POST",
            "/api/graphs",
            &json!({ "name": name, "workdir": workdir, "nodes": node, "specs": ids, "hooks": hooks }),
        );
        assert_eq!(status, 201, "{answer}");
    }
    let (mut none, mut one, mut ten) = (Vec::new(), Vec::new(), Vec::new());
    // Each round runs the three in turn, the next round in the opposite order, so a drift of
    // the machine or a database that grows run by run falls on all three alike.
    for round in 0..ROUNDS {
        let mut order = [("gate-0", 0), ("gate-1", 1), ("gate-10", 2)];
        if round % 2 == 1 {
            order.reverse();
        }
        for (graph, which) in order {
            let micros = micros_per_spec(daemon, graph, ids.len());
            [&mut none, &mut one, &mut ten][which].push(micros);
        }
    }
    let (none, one, ten) = (median(none), median(one), median(ten));
    let (_, runs) = daemon.get("/api/hook-runs?event=node.pre_dispatch&graph=gate-10&last=1");
    assert_eq!(runs["runs"][0]["outcome"], "applied", "{runs}");
    assert_eq!(
        runs["runs"][0]["patch_applied"]["prompt"], "patched",
        "{runs}"
    );
    println!(
        "\nsync hooks on node.pre_dispatch ({} specs a run, median of {ROUNDS} runs each, in ABC CBA order, by the runs' own records):",
        ids.len()
    );
    println!("  no sync hook:                     {none:.0} µs per spec");
    println!(
        "  one no-op wasm sync hook:         {one:.0} µs per spec: +{:.0} µs per dispatch",
        one - none
    );
    println!(
        "  ten (nine allow, one patches):    {ten:.0} µs per spec: +{:.0} µs per dispatch for the decision",
        ten - none
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let daemon = Daemon::start();
    daemon.ok(&["plugin", "install", support::NOOP_WASM]);
    let workdir = tempfile::tempdir().unwrap();

    let mut ids = Vec::with_capacity(SPECS);
    for i in 0..SPECS {
        let (status, spec) = daemon.send(
            "POST",
            "/api/specs",
            &json!({ "name": format!("spec {i}"), "body": support::spec_body(&format!("spec {i}")) }),
        );
        assert_eq!(status, 201);
        ids.push(spec["id"].as_str().unwrap().to_string());
    }
    let (status, _) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "bench", "workdir": workdir.path(), "nodes": [{ "name": "noop", "mode": "noop" }], "specs": ids }),
    );
    assert_eq!(status, 201);

    println!("canopy engine benchmark ({SPECS} specs, one no-op wasm node each)\n");
    for round in 1..=3 {
        let started = Instant::now();
        let (status, view) = daemon.send(
            "POST",
            "/api/graphs/bench/control",
            &json!({ "action": "run" }),
        );
        assert_eq!(status, 200, "{view}");
        let run_id = view["current_run"]["id"].as_str().unwrap().to_string();
        let run = wait_for("the run to complete", Duration::from_secs(300), || {
            let (_, runs) = daemon.get("/api/runs?graph=bench&last=1");
            (runs["runs"][0]["status"] != "running").then(|| runs["runs"][0].clone())
        });
        let elapsed = started.elapsed();
        assert_eq!(run["status"], "completed", "{run}");
        // The run's own record of its start and end: the engine's time without the request
        // that started it or the polling that saw it end (up to 20 ms of a ~250 ms round).
        let at = |field: &str| humantime::parse_rfc3339(run[field].as_str().unwrap()).unwrap();
        let recorded_secs = at("finished_at")
            .duration_since(at("started_at"))
            .unwrap()
            .as_secs_f64();
        // Read back from the database through the API: SQLite's file or PostgreSQL alike.
        let (status, shown) = daemon.get(&format!("/api/runs/{run_id}?brief=true"));
        assert_eq!(status, 200, "{shown}");
        let recorded = shown["node_runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["status"] == "completed")
            .count();
        assert_eq!(recorded, SPECS, "every node run is recorded");
        println!(
            "run {round}: {SPECS} specs in {:.3} s = {:.0} specs/s ({:.0} µs per spec), {recorded} node runs recorded; \
             by the run's own started_at/finished_at {:.3} s = {:.0} specs/s",
            elapsed.as_secs_f64(),
            SPECS as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / SPECS as f64,
            recorded_secs,
            SPECS as f64 / recorded_secs
        );
    }

    sync_hooks(&daemon, workdir.path(), &ids[..GATED_SPECS]);

    let (status, _) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "small", "workdir": workdir.path(), "nodes": [{ "name": "noop", "mode": "noop" }], "specs": &ids[..3] }),
    );
    assert_eq!(status, 201);
    daemon.ok(&["graph", "run", "small", "--wait"]);
    println!();
    let (count, rate) = get_throughput(&daemon, "/api/graphs/small", Duration::from_secs(3));
    println!(
        "graph get (3-spec graph, after a run), one client: {rate:.0} requests/s ({count} in 3 s)"
    );
    let (count, rate) = get_throughput(&daemon, "/api/graphs/bench", Duration::from_secs(3));
    println!(
        "graph get ({SPECS}-spec graph, after a run, default page of 50 specs), one client: {rate:.0} requests/s ({count} in 3 s)"
    );
    let (count, rate) =
        get_throughput(&daemon, "/api/graphs/bench?limit=3", Duration::from_secs(3));
    println!(
        "graph get ({SPECS}-spec graph, after a run, a page of 3 specs as the small graph shows), one client: {rate:.0} requests/s ({count} in 3 s)"
    );
}
