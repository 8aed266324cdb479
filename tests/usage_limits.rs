//! Usage limits: an agent CLI that reports its usage limit does not fail its spec. The spec is
//! `limit_blocked`, the graph pauses with the reset time as its blocker, `on_blocked` fires
//! once, and the run goes on by itself at the reset, in the session the agent had.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::{Daemon, git_repo, script, wait_for};

/// `[platforms.standin]`: an agent CLI that, the first time it is given the prompt `limited`,
/// prints its session, reports a usage limit resetting `reset_in` seconds later as Claude Code
/// does (`Claude AI usage limit reached|<unix time>`), leaves a half-written file behind and
/// exits 1. Every other call is logged (prompt and resumed session) and succeeds.
fn limited_platform(dir: &Path, reset_in: u32) -> String {
    let calls = dir.join("calls.txt");
    let hit = dir.join("limit-hit");
    let agent = script(
        dir,
        "standin-agent.sh",
        &format!(
            r#"prompt="$1"; resume=none; if [ "$2" = "--resume" ]; then resume="$3"; fi
if [ "$prompt" = limited ] && [ ! -e '{hit}' ]; then
  touch '{hit}'
  echo partial > partial.txt
  printf '{{"type":"system","session_id":"sess-limited"}}\n'
  echo "Claude AI usage limit reached|$(( $(date +%s) + {reset_in} ))" >&2
  exit 1
fi
echo "$prompt resume=$resume" >> '{calls}'
printf '{{"type":"result","session_id":"sess-%s","result":"did %s"}}\n' "$prompt" "$prompt""#,
            hit = hit.display(),
            calls = calls.display(),
        ),
    );
    format!(
        r#"
[platforms.standin]
command = ["{agent}", "{{prompt}}"]
resume_args = ["--resume", "{{session}}"]
limit = {{ pattern = "usage limit reached", exit_code = 1 }}
"#,
        agent = agent.display()
    )
}

fn calls(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("calls.txt")).unwrap_or_default()
}

/// A graph with one agent node over a queue: `limited` (hits the limit once), then `after`,
/// in one group so the second resumes the first's session. Its `on_blocked` hook logs.
fn start(daemon: &Daemon, repo: &Path, tools: &Path) {
    let limited = daemon.add_spec("limited");
    let after = daemon.add_spec("after");
    let queue = daemon.json(&["queue", "create", "work"]);
    let q = queue["id"].as_str().unwrap().to_string();
    daemon.ok(&["queue", "add", &q, &limited, "--group", "g"]);
    daemon.ok(&["queue", "add", &q, &after, "--group", "g"]);
    let blocked_log = tools.join("blocked.log");
    daemon.create_graph(json!({
        "name": "limits", "workdir": repo,
        "nodes": [{ "name": "agent", "platform": "standin", "prompt": "{{spec_name}}" }],
        "hooks": { "on_blocked": [ { "command": format!("echo \"$CANOPY_HOOK_BLOCKER\" | head -n 1 >> {}", blocked_log.display()) } ] },
    }));
    daemon.control_ok("limits", json!({ "action": "run", "queue_id": q }));
}

/// `graph get` once the graph is paused.
fn paused(daemon: &Daemon) -> Value {
    wait_for("the graph to pause", Duration::from_secs(60), || {
        let (_, view) = daemon.get("/api/graphs/limits");
        (view["status"] == "paused").then_some(view)
    })
}

#[test]
fn a_spec_whose_agent_hits_its_usage_limit_waits_for_the_reset_and_goes_on_in_its_session() {
    let tools = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with_config(&limited_platform(tools.path(), 3));
    let repo = git_repo();
    start(&daemon, repo.path(), tools.path());

    // Paused, not failed: the spec is limit_blocked and the blocker says when it goes on.
    let view = paused(&daemon);
    let blocker = view["blocker"].as_str().unwrap();
    assert!(
        blocker.contains("waits for its agent's usage limit to reset")
            && blocker.contains("usage limit reached: Claude AI usage limit reached|")
            && blocker.contains("resumes by itself at")
            && blocker.contains("the reset time it printed")
            && blocker.contains("canopy graph continue limits"),
        "{blocker}"
    );
    let resumes_at = view["current_run"]["resumes_at"].as_str().unwrap();
    assert!(resumes_at.parse::<jiff::Timestamp>().unwrap() > jiff::Timestamp::now());
    let progress = view["progress"].as_array().unwrap();
    assert_eq!(progress[0]["result"], "limit_blocked", "{view:#}");
    let node_run = &view["current_run"]["node_runs"][0];
    assert_eq!(node_run["status"], "limit_blocked", "{view:#}");
    // What the CLI shows, without --json.
    let shown = daemon.ok(&["graph", "get", "limits"]);
    assert!(
        shown.contains("limit_blocked") && shown.contains("resumes by itself at"),
        "{shown}"
    );

    // It goes on by itself: the limited spec runs again in the session it had, and completes;
    // the dirty-tree guard then looks at the tree before the next spec, as after any other.
    let view = wait_for(
        "the guard to pause before the next spec",
        Duration::from_secs(60),
        || {
            let (_, view) = daemon.get("/api/graphs/limits");
            let blocker = view["blocker"].as_str().unwrap_or_default();
            (view["status"] == "paused" && blocker.starts_with("dirty tree")).then_some(view)
        },
    );
    assert!(
        view["blocker"].as_str().unwrap().contains("partial.txt"),
        "{view:#}"
    );
    assert_eq!(calls(tools.path()), "limited resume=sess-limited\n");
    std::fs::remove_file(repo.path().join("partial.txt")).unwrap();
    daemon.control_ok("limits", json!({ "action": "continue" }));
    let view = wait_for("the run to complete", Duration::from_secs(60), || {
        let (_, view) = daemon.get("/api/graphs/limits");
        (view["status"] == "completed").then_some(view)
    });
    // The next spec of the group resumed the limited one's session.
    assert_eq!(
        calls(tools.path()),
        "limited resume=sess-limited\nafter resume=sess-limited\n"
    );
    let results: Vec<&str> = view["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["completed", "completed"], "{view:#}");

    // on_blocked fired once for the limit (and once for the dirty tree), no more.
    let runs = daemon.ended_hook_runs("graph", 2);
    let blocked: Vec<&Value> = runs.iter().filter(|r| r["event"] == "on_blocked").collect();
    assert_eq!(blocked.len(), 2, "{runs:#?}");
    let log = std::fs::read_to_string(tools.path().join("blocked.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains("waits for its agent's usage limit"),
        "{log}"
    );
    assert!(lines[1].starts_with("dirty tree"), "{log}");
}

#[test]
fn a_run_waiting_for_a_reset_goes_on_after_a_daemon_restart() {
    let tools = tempfile::tempdir().unwrap();
    let config = limited_platform(tools.path(), 4);
    let mut daemon = Daemon::start_with_config(&config);
    let data_dir = daemon.data_dir.clone();
    let repo = git_repo();
    // The half-written file is not the point here.
    std::fs::write(repo.path().join(".git/info/exclude"), "partial.txt\n").unwrap();
    start(&daemon, repo.path(), tools.path());
    paused(&daemon);
    daemon.stop();

    // The first daemon's temp dir lives on with it (stopped).
    let restarted = Daemon::start_on(&data_dir);
    let view = wait_for("the run to complete", Duration::from_secs(60), || {
        let (_, view) = restarted.get("/api/graphs/limits");
        (view["status"] == "completed").then_some(view)
    });
    assert_eq!(
        calls(tools.path()),
        "limited resume=sess-limited\nafter resume=sess-limited\n",
        "{view:#}"
    );
}
