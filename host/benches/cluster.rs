//! Several daemons on one PostgreSQL database: run it with `cargo bench --bench cluster`.
//!
//! Starts a throwaway PostgreSQL server and real daemons (release build) on it, and measures
//! 1. engine throughput with one daemon and with two: four graphs of 250 specs each (a no-op
//!    wasm node per spec) run at once, all four on one daemon, then two on each of two
//!    daemons, in turns; specs/s from the first run's start to the last run's end, by the runs'
//!    own records, and the feed rows appended per second meanwhile;
//! 2. lease takeover: a daemon driving a run is killed (SIGKILL), and the time until the other
//!    has taken the run over (its graph paused, interrupted) is measured, with a 2 s lease.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Daemon, wait_for};

const GRAPHS: usize = 4;
const SPECS_PER_GRAPH: usize = 250;
const ROUNDS: usize = 3;
const LEASE_SECS: u64 = 2;

/// A daemon named `name` on the database `url`, on the data dir `data_dir` (made if missing).
fn node(name: &str, url: &str, data_dir: &std::path::Path) -> Daemon {
    std::fs::create_dir_all(data_dir).unwrap();
    let config = format!("node = \"{name}\"\n[database]\nlease_secs = {LEASE_SECS}\n");
    std::fs::write(data_dir.join("canopy.toml"), config).unwrap();
    Daemon::start_on_with_env(data_dir, &[("CANOPY_DATABASE_URL", url)])
}

fn feed_head(daemon: &Daemon) -> i64 {
    let (_, feed) = daemon.get("/api/feed?last=1");
    feed["events"][0]["id"].as_i64().unwrap_or(0)
}

fn time_of(run: &Value, field: &str) -> std::time::SystemTime {
    humantime::parse_rfc3339(run[field].as_str().unwrap()).unwrap()
}

/// Runs every graph at once, graph `i` on `drivers[i % drivers.len()]`; returns specs/s by
/// the runs' own records and the feed rows appended per second.
fn round(drivers: &[&Daemon], graphs: &[String]) -> (f64, f64) {
    let head = feed_head(drivers[0]);
    for (i, graph) in graphs.iter().enumerate() {
        let daemon = drivers[i % drivers.len()];
        let (status, view) = daemon.control(graph, json!({ "action": "run" }));
        assert_eq!(status, 200, "{view}");
    }
    let runs: Vec<Value> = graphs
        .iter()
        .map(|graph| {
            wait_for("a run to complete", Duration::from_secs(600), || {
                let (_, runs) = drivers[0].get(&format!("/api/runs?graph={graph}&last=1"));
                (runs["runs"][0]["status"] != "running").then(|| runs["runs"][0].clone())
            })
        })
        .collect();
    for run in &runs {
        assert_eq!(run["status"], "completed", "{run}");
    }
    let started = runs.iter().map(|r| time_of(r, "started_at")).min().unwrap();
    let finished = runs
        .iter()
        .map(|r| time_of(r, "finished_at"))
        .max()
        .unwrap();
    let secs = finished.duration_since(started).unwrap().as_secs_f64();
    let appended = feed_head(drivers[0]) - head;
    (
        (GRAPHS * SPECS_PER_GRAPH) as f64 / secs,
        appended as f64 / secs,
    )
}

fn main() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    // The data dirs outlive every daemon on them (b is killed and started again).
    let dirs = tempfile::tempdir().unwrap();
    let a = node("a", &url, &dirs.path().join("a"));
    a.ok(&["plugin", "install", support::NOOP_WASM]);
    let workdir = tempfile::tempdir().unwrap();
    let mut graphs = Vec::new();
    for g in 0..GRAPHS {
        let mut ids = Vec::new();
        for i in 0..SPECS_PER_GRAPH {
            let name = format!("g{g} spec {i}");
            let (status, spec) = a.send(
                "POST",
                "/api/specs",
                &json!({ "name": name, "body": support::spec_body(&name) }),
            );
            assert_eq!(status, 201);
            ids.push(spec["id"].as_str().unwrap().to_string());
        }
        let name = format!("bench-{g}");
        a.create_graph(json!({ "name": name, "workdir": workdir.path(), "nodes": [{ "name": "noop", "mode": "noop" }], "specs": ids }));
        graphs.push(name);
    }
    let b_dir = dirs.path().join("b");
    let mut b = node("b", &url, &b_dir);
    wait_for("b to load the noop plugin", Duration::from_secs(30), || {
        b.json(&["plugin", "list"])["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "noop")
            .then_some(())
    });

    println!(
        "canopy cluster benchmark: {GRAPHS} graphs x {SPECS_PER_GRAPH} specs (one no-op wasm node each), run at once, on one PostgreSQL database\n"
    );
    let mut one = Vec::new();
    let mut two = Vec::new();
    for r in 1..=ROUNDS {
        let (specs, feed) = round(&[&a], &graphs);
        println!("round {r}, one daemon:  {specs:.0} specs/s, {feed:.0} feed rows appended/s");
        one.push(specs);
        let (specs, feed) = round(&[&a, &b], &graphs);
        println!("round {r}, two daemons: {specs:.0} specs/s, {feed:.0} feed rows appended/s");
        two.push(specs);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (one, two) = (median(one), median(two));
    println!(
        "median: one daemon {one:.0} specs/s, two daemons {two:.0} specs/s: {:.2}x\n",
        two / one
    );

    // Lease takeover after kill -9.
    let marks = tempfile::tempdir().unwrap();
    for r in 1..=ROUNDS {
        let started = marks.path().join(format!("started-{r}"));
        let name = format!("slow-{r}");
        let spec = a.add_spec(&name);
        a.create_graph(json!({
            "name": name,
            "workdir": workdir.path(),
            "specs": [spec],
            "nodes": [{ "name": "wait", "command": format!("touch {}; sleep 30", started.display()) }]
        }));
        b.control_ok(&name, json!({ "action": "run" }));
        wait_for("the node to start", Duration::from_secs(30), || {
            started.exists().then_some(())
        });
        let killed = Instant::now();
        b.kill();
        wait_for("a to take the run over", Duration::from_secs(60), || {
            let (_, view) = a.get(&format!("/api/graphs/{name}"));
            (view["status"] == "paused").then_some(())
        });
        let took = killed.elapsed();
        println!(
            "takeover {r}: {:.2} s after kill -9 ({:.2} leases of {LEASE_SECS} s)",
            took.as_secs_f64(),
            took.as_secs_f64() / LEASE_SECS as f64
        );
        // B again, under its name (it kills what the killed one left running).
        b = node("b", &url, &b_dir);
    }
}
