//! Runtime hook benchmark: run it with `cargo bench --bench runtime_hooks`.
//!
//! Decision latency as an agent runtime sees it: a `before_tool` callback (Claude Code's
//! `PreToolUse` http hook, the JSON it posts) sent to the real daemon (release build) for a live
//! launch, decided by the built-in `guard` executor (deny `rm -rf|git push --force` in a Bash
//! command), the decision recorded, and the answer back, over one kept-alive connection as a
//! runtime's HTTP client keeps it. Side by side, the same check as a hook script the runtime
//! would run per call instead: `sh` + `jq`, and `python3` (each skipped when not installed).
//!
//! The launch is a graph node on a stand-in platform that only waits: the bench reads the
//! launch's callback address and secret from the environment it was given.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Daemon, git_repo, wait_for};

const CALLS: usize = 2_000;
const WARM_UP: usize = 200;
const SCRIPT_CALLS: usize = 200;

/// The check, as the hook scripts a runtime runs per call would write it.
const JQ_CHECK: &str = r#"jq -e '.tool_name == "Bash" and (.tool_input.command | test("rm -rf|git push --force"))' >/dev/null && { echo 'nothing destructive' >&2; exit 2; }; exit 0"#;
const PY_CHECK: &str = r#"import json, re, sys
d = json.load(sys.stdin)
if d["tool_name"] == "Bash" and re.search("rm -rf|git push --force", d["tool_input"].get("command", "")):
    print("nothing destructive", file=sys.stderr); sys.exit(2)"#;

/// The `index`-th call's input: one in ten is denied.
fn call(index: usize) -> Value {
    let command = if index.is_multiple_of(10) {
        "git push --force origin main"
    } else {
        "cargo test --workspace"
    };
    json!({
        "session_id": "bench", "transcript_path": "/dev/null", "cwd": "/tmp",
        "hook_event_name": "PreToolUse", "permission_mode": "default",
        "tool_name": "Bash", "tool_input": { "command": command }, "tool_use_id": format!("toolu_{index}"),
    })
}

fn report(label: &str, mut micros: Vec<f64>) {
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() as f64 * q) as usize).min(micros.len() - 1)];
    let mean = micros.iter().sum::<f64>() / micros.len() as f64;
    println!(
        "{label:<44} {:>6} calls  p50 {:>8.0} µs  p99 {:>8.0} µs  mean {:>8.0} µs",
        micros.len(),
        at(0.50),
        at(0.99),
        mean
    );
}

/// Times `program args` once per call, the call's JSON on stdin; checks its exit code.
fn per_call_script(label: &str, needs: &str, program: &str, args: &[&str]) {
    if Command::new(needs).arg("--version").output().is_err() {
        println!("{label:<44} skipped: {needs} is not installed");
        return;
    }
    let mut micros = Vec::with_capacity(SCRIPT_CALLS);
    for index in 0..SCRIPT_CALLS {
        let input = call(index).to_string();
        let started = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let status = child.wait().unwrap();
        micros.push(started.elapsed().as_secs_f64() * 1e6);
        assert_eq!(
            status.code(),
            Some(if index.is_multiple_of(10) { 2 } else { 0 }),
            "{label}"
        );
    }
    report(label, micros);
}

fn main() {
    let out = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[platforms.waiter]
command = ["sh", "-c", "env | grep ^CANOPY_RUNTIME_ > {dir}/launch.env; while [ ! -e {dir}/stop ]; do sleep 0.05; done", "waiter", "{{prompt}}"]
runtime_hooks = "claude"
settings_args = ["--settings", "{{settings}}"]

[profiles.guarded.runtime_hooks]
before_tool = [ {{ matcher = "Bash", hooks = [ {{ mode = "guard", deny = [ {{ tool = "Bash", pattern = "rm -rf|git push --force", reason = "nothing destructive" }} ] }} ] }} ]
"#,
        dir = out.path().display()
    );
    let daemon = Daemon::start_with_config(&config);
    let repo = git_repo();
    let spec = daemon.add_spec("a launch to call back");
    daemon.create_graph(json!({
        "name": "bench", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "agent", "platform": "waiter", "prompt": "wait", "profiles": ["guarded"] }],
    }));
    daemon.control_ok("bench", json!({ "action": "run" }));
    let env = wait_for("the launch's environment", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(out.path().join("launch.env")).ok()?;
        (text.lines().count() >= 2).then_some(text)
    });
    let var = |name: &str| {
        env.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_string()
    };
    let (url, token) = (var("CANOPY_RUNTIME_URL"), var("CANOPY_RUNTIME_TOKEN"));
    let client = reqwest::blocking::Client::new();
    let callback = format!("{url}/api/runtime/PreToolUse");
    let mut micros = Vec::with_capacity(CALLS);
    for index in 0..WARM_UP + CALLS {
        let body = call(index).to_string();
        let started = Instant::now();
        let answer: Value = client
            .post(&callback)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap()
            .json()
            .unwrap();
        let elapsed = started.elapsed();
        let denied = answer["hookSpecificOutput"]["permissionDecision"] == "deny";
        assert_eq!(denied, index.is_multiple_of(10), "{answer}");
        if index >= WARM_UP {
            micros.push(elapsed.as_secs_f64() * 1e6);
        }
    }
    println!(
        "\nbefore_tool decisions, one Bash rule (1 in 10 denied), each answer as the runtime receives it:"
    );
    report("canopy: http callback -> guard (wasm) -> answer", micros);
    per_call_script(
        "hook script per call: sh + jq",
        "jq",
        "sh",
        &["-c", JQ_CHECK],
    );
    per_call_script(
        "hook script per call: python3",
        "python3",
        "python3",
        &["-c", PY_CHECK],
    );
    std::fs::write(out.path().join("stop"), "").unwrap();
    let view = daemon.settled("bench");
    assert_eq!(view["status"], "completed", "{view:#}");
    // Every decision was recorded: one hook run each.
    let (_, runs) = daemon.get(&format!(
        "/api/hook-runs?event=tool.pre_call&last={}",
        WARM_UP + CALLS
    ));
    assert_eq!(
        runs["runs"].as_array().map(Vec::len),
        Some(WARM_UP + CALLS),
        "hook runs recorded"
    );
}
