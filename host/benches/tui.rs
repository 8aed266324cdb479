//! TUI latency: run it with `cargo bench --bench tui`.
//!
//! A real daemon (release build) and `canopy tui` in an 80×24 tmux pane showing graph `bench`,
//! whose one node reports `blocked` at once. N times (`CANOPY_BENCH_N`, default 50): run the
//! graph (it pauses, blocked) and reset it. For each change, the latency is from the event's
//! time (the feed envelope's `timestamp` of `graph.run.blocked` / `graph.run.reset`, written in
//! the same transaction as the change) to the moment `capture-pane` first shows the new status
//! (`status: paused` / `status: idle`), polled back to back. The TUI learns of it through the
//! live feed only: nothing polls on its side.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{CANOPY, Daemon, git_repo, real, spec_body};

/// How long one change may take to show before the bench gives up.
const LIMIT: Duration = Duration::from_secs(10);

struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-S", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("tmux runs");
        assert!(output.status.success(), "tmux {args:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "tui"])
    }

    /// Polls the pane back to back until it shows `text`; the wall-clock time it was first seen.
    fn seen(&self, text: &str) -> jiff::Timestamp {
        let deadline = Instant::now() + LIMIT;
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return jiff::Timestamp::now();
            }
            assert!(
                Instant::now() < deadline,
                "the pane never showed {text:?}:\n{screen}"
            );
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-S", &self.socket, "kill-server"])
            .output();
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn report(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "  {what:<28} n={:<4} p50 {:>6.1} ms   p90 {:>6.1} ms   max {:>6.1} ms",
        ms.len(),
        quantile(&ms, 0.5),
        quantile(&ms, 0.9),
        ms.last().copied().unwrap_or_default()
    );
}

/// The timestamp of the newest `event` in the feed.
fn event_time(daemon: &Daemon, event: &str) -> (i64, jiff::Timestamp) {
    let (_, feed) = daemon.get(&format!("/api/feed?event={event}&last=1"));
    let envelope = &feed["events"][0];
    (
        envelope["id"].as_i64().unwrap(),
        envelope["timestamp"].as_str().unwrap().parse().unwrap(),
    )
}

fn main() {
    let n: usize = std::env::var("CANOPY_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let daemon = Daemon::start();
    let repo = git_repo();
    let (status, spec) = daemon.send(
        "POST",
        "/api/specs",
        &json!({ "name": "Item", "body": spec_body("Item"), "workdir": real(repo.path()) }),
    );
    assert_eq!(status, 201, "{spec}");
    daemon.create_graph(json!({
        "name": "bench", "workdir": repo.path(),
        "nodes": [{ "name": "gate", "command": r#"printf '{"status":"blocked","blocker":"a human"}' > "$CANOPY_RESULT_FILE""# }],
        "specs": [spec["id"]]
    }));

    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux {
        socket: dir.path().join("tmux").display().to_string(),
    };
    let command = format!(
        "{CANOPY} --data-dir {} tui; sleep 600",
        daemon.data_dir.display()
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-x",
        "80",
        "-y",
        "24",
        "-s",
        "tui",
        &command,
    ]);
    tmux.seen("feed: live");
    // Focus the graph: filter the sidebar to it, step onto it.
    tmux.run(&["send-keys", "-t", "tui", "/", "bench", "Enter", "Down"]);
    tmux.seen("status: idle");

    // What one look at the pane costs (the resolution of the figures below).
    let started = Instant::now();
    for _ in 0..20 {
        tmux.screen();
    }
    let capture_ms = started.elapsed().as_secs_f64() * 1e3 / 20.0;

    println!(
        "canopy tui: a graph's status change, feed event to the tmux pane (80x24), {n} runs and {n} resets\n"
    );
    let mut blocked = Vec::with_capacity(n);
    let mut reset = Vec::with_capacity(n);
    let mut last_id = 0;
    for _ in 0..n {
        daemon.control_ok("bench", json!({ "action": "run" }));
        let seen = tmux.seen("status: paused");
        let (id, at) = wait_event(&daemon, "graph.run.blocked", last_id);
        last_id = id;
        blocked.push(seen.duration_since(at).as_secs_f64() * 1e3);

        daemon.control_ok("bench", json!({ "action": "reset" }));
        let seen = tmux.seen("status: idle");
        let (id, at) = wait_event(&daemon, "graph.run.reset", last_id);
        last_id = id;
        reset.push(seen.duration_since(at).as_secs_f64() * 1e3);
    }
    report("run -> paused (blocked)", blocked.clone());
    report("reset -> idle", reset.clone());
    let mut all = blocked;
    all.extend(reset);
    report("every change", all.clone());
    let within = all.iter().filter(|ms| **ms <= 250.0).count();
    println!(
        "\n  {within} of {} changes showed within 250 ms; one capture-pane takes {capture_ms:.1} ms (the resolution)",
        all.len()
    );
}

/// The newest `event` after cursor `after` (it is recorded before the control call answers,
/// or, for a block, before the pane can show it).
fn wait_event(daemon: &Daemon, event: &str, after: i64) -> (i64, jiff::Timestamp) {
    support::wait_for(&format!("{event} in the feed"), LIMIT, || {
        let (id, at) = event_time(daemon, event);
        (id > after).then_some((id, at))
    })
}
