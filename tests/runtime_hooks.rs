//! Runtime hooks: hooks inside the agents Canopy launches. A stand-in for Claude Code
//! (`tests/fixtures/fake_claude.py`) reads the settings Canopy materialised for its launch and
//! calls their hooks back as Claude Code does; Canopy decides, and the stand-in honours it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::path::Path;
use support::{Daemon, git_repo, script};

fn fake_claude() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/fake_claude.py")
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The hook runs of `event`, oldest first, once `count` have ended.
fn ended_runs(daemon: &Daemon, event: &str, count: usize) -> Vec<Value> {
    daemon.ended_hook_runs_where(&format!("event={event}"), count)
}

/// `[platforms.fake-claude]`: the stand-in, taking Claude Code's settings.
fn fake_platform() -> String {
    format!(
        r#"
[platforms.fake-claude]
command = ["python3", "{fake}", "{{prompt}}"]
runtime_hooks = "claude"
settings_args = ["--settings", "{{settings}}"]
"#,
        fake = fake_claude()
    )
}

#[test]
fn an_agents_tool_calls_are_denied_patched_and_recorded_by_its_runtime_hooks() {
    let tools = tempfile::tempdir().unwrap();
    let post_log = tools.path().join("post.log");
    // The profile's policy: no force pushes (a command decides as an agent runtime's command
    // hook does: exit 2 denies, with stderr as the reason).
    let no_force = script(
        tools.path(),
        "no-force.sh",
        r#"input=$(cat)
case "$input" in *'push --force'*) echo 'no force pushes' >&2; exit 2 ;; esac"#,
    );
    // The node's own: a command that writes `original.txt` is rewritten to write elsewhere.
    let rewrite = script(
        tools.path(),
        "rewrite.sh",
        r#"input=$(cat)
case "$input" in *original.txt*) echo '{"decision": "patch", "patch": {"tool_input": {"command": "echo patched > patched.txt"}}}' ;; esac"#,
    );
    let config = format!(
        r#"
{platform}
[profiles.guarded.runtime_hooks]
before_tool = [ {{ matcher = "Bash|Write", hooks = [ {{ command = "{no_force}" }} ] }} ]
"#,
        platform = fake_platform(),
        no_force = no_force.display(),
    );
    let daemon = Daemon::start_with_config(&config);
    // The profile, as the CLI shows it.
    let listed = daemon.ok(&["profile", "list"]);
    assert!(
        listed.contains("guarded") && listed.contains("before_tool (1)"),
        "{listed}"
    );
    let shown = daemon.ok(&["profile", "show", "guarded"]);
    assert!(
        shown.contains("before_tool (tool.pre_call, decides)")
            && shown.contains("profile guarded")
            && shown.contains("Bash|Write")
            && shown.contains("no-force.sh"),
        "{shown}"
    );
    let wrong = daemon.fails(&["profile", "show", "gaurded"]);
    assert!(
        wrong.contains("unknown profile `gaurded`; did you mean `guarded`?"),
        "{wrong}"
    );
    let repo = git_repo();
    std::fs::write(repo.path().join(".git/info/exclude"), "*.txt\n").unwrap();

    let steps = json!([
        { "tool": "Bash", "input": { "command": "git push --force origin main > pushed.txt" } },
        { "tool": "Bash", "input": { "command": "echo mine > original.txt" } },
        { "tool": "Bash", "input": { "command": "echo plain > plain.txt" } },
    ]);
    let spec = daemon.add_spec("guarded agent work");
    daemon.create_graph(json!({
        "name": "guarded", "workdir": repo.path(), "specs": [spec],
        "nodes": [{
            "name": "agent", "platform": "fake-claude", "prompt": steps.to_string(),
            "profiles": ["guarded"],
            "runtime_hooks": {
                "before_tool": [ { "matcher": "Bash", "hooks": [ { "command": rewrite } ] } ],
                "after_tool": [ { "hooks": [ { "command": format!("echo \"$CANOPY_HOOK_TOOL_NAME ran in $CANOPY_HOOK_GRAPH_NAME\" >> {}", post_log.display()) } ] } ],
                "on_start": [ { "hooks": [ { "command": format!("echo \"started: $CANOPY_HOOK_SOURCE\" >> {}", post_log.display()) } ] } ],
            },
        }],
    }));
    // The catalog lists the node's runtime hooks as its launches get them, the profile's first.
    let (_, catalog) = daemon.get("/api/hooks/catalog?graph=guarded&event=tool.pre_call");
    let listed: Vec<(&str, &str, &str)> = catalog["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap(),
                h["source"].as_str().unwrap(),
                h["mode"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("runtime.before_tool.0.0@guarded", "config", "sync"),
            ("runtime.before_tool.1.0", "graph", "sync")
        ],
        "{catalog:#}"
    );
    // Filtered by where it was declared: the profile's is the config's.
    let (_, from_config) =
        daemon.get("/api/hooks/catalog?graph=guarded&event=tool.pre_call&source=config");
    let names: Vec<&str> = from_config["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["runtime.before_tool.0.0@guarded"],
        "{from_config:#}"
    );
    let shown = daemon.ok(&["hooks", "list", "--graph", "guarded", "--event", "tool.*"]);
    assert!(
        shown.contains("runtime.before_tool.0.0@guarded") && shown.contains("node=agent"),
        "{shown}"
    );

    daemon.control_ok("guarded", json!({ "action": "run" }));
    let view = daemon.settled("guarded");
    assert_eq!(view["status"], "completed", "{view:#}");

    // The denied command never ran; the rewritten one ran as rewritten; the plain one ran.
    let dir = repo.path();
    assert!(!dir.join("pushed.txt").exists(), "a denied command ran");
    assert!(
        !dir.join("original.txt").exists(),
        "the input was not rewritten"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("patched.txt")).unwrap(),
        "patched\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("plain.txt")).unwrap(),
        "plain\n"
    );

    // The agent was told why, naming the hook.
    let (_, node_runs) = daemon.get("/api/graphs/guarded/node-runs");
    assert!(
        node_runs.to_string().contains(
            "DENIED Bash: no force pushes (Canopy hook `runtime.before_tool.0.0@guarded`)"
        ),
        "{node_runs:#}"
    );
    // The agent printed its launch's secret: the record has it masked.
    let said = node_runs.to_string();
    assert!(!said.contains("canopy-launch-"), "{node_runs:#}");
    assert!(said.contains("token: "), "{node_runs:#}");

    // Each decision is a hook run: the profile's first, then the node's own.
    let decided = ended_runs(&daemon, "tool.pre_call", 6);
    let seen: Vec<(String, String)> = decided
        .iter()
        .map(|r| {
            (
                r["hook_name"].as_str().unwrap_or_default().to_string(),
                r["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let expected = [
        ("runtime.before_tool.0.0@guarded", "denied"),
        ("runtime.before_tool.1.0", "skipped"),
        ("runtime.before_tool.0.0@guarded", "applied"),
        ("runtime.before_tool.1.0", "applied"),
        ("runtime.before_tool.0.0@guarded", "applied"),
        ("runtime.before_tool.1.0", "applied"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
        .collect();
    assert_eq!(seen, expected, "{decided:#?}");
    assert!(
        decided[3]["patch_applied"]["tool_input"]["command"] == "echo patched > patched.txt",
        "{:#}",
        decided[3]
    );
    assert!(
        decided[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no force pushes")),
        "{:#}",
        decided[0]
    );

    // The calls that ran are events in the feed, and the after_tool hook ran on each.
    let (_, feed) = daemon.get("/api/feed?event=tool.post_call&last=10");
    let commands: Vec<&str> = feed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["tool_input"]["command"].as_str().unwrap())
        .collect();
    assert_eq!(
        commands,
        ["echo patched > patched.txt", "echo plain > plain.txt"],
        "{feed:#}"
    );
    ended_runs(&daemon, "tool.post_call", 2);
    // on_start came through the relay (Claude Code's SessionStart takes only command hooks).
    ended_runs(&daemon, "agent.started", 1);
    let logged = std::fs::read_to_string(&post_log).unwrap();
    // Hooks on different events run on their own; their lines may interleave.
    let mut lines: Vec<&str> = logged.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "Bash ran in guarded",
            "Bash ran in guarded",
            "started: startup"
        ],
        "{logged}"
    );

    // The launch's settings were for that launch only: gone once it ended.
    let settings = std::fs::read_to_string(dir.join("settings-path.txt")).unwrap();
    assert!(
        !Path::new(settings.trim()).exists(),
        "{settings} is still there"
    );

    // A callback without a live launch's secret is refused, the daemon's own token included.
    let forged = json!({ "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": { "command": "true" } });
    let (status, _) = daemon.send("POST", "/api/runtime/PreToolUse", &forged);
    assert_eq!(status, 401);
    let refused = reqwest::blocking::Client::new()
        .post(format!("{}/api/runtime/PreToolUse", daemon.url))
        .bearer_auth("canopy-launch-0000")
        .json(&forged)
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
}

#[test]
fn runtime_hooks_a_platform_cannot_run_are_refused_naming_the_phase_and_the_platform() {
    let daemon = Daemon::start_with_config("[profiles.base.runtime_hooks]\n");
    let repo = git_repo();
    let create = |node: Value| {
        daemon.send(
            "POST",
            "/api/graphs",
            &json!({ "name": "g", "workdir": repo.path(), "nodes": [node] }),
        )
    };
    let hooks =
        json!({ "before_tool": [ { "matcher": "Bash", "hooks": [ { "command": "true" } ] } ] });
    let refused = |node: Value, wanted: &str| {
        let (status, answer) = create(node);
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(wanted), "{message}\nwanted: {wanted}");
    };
    refused(
        json!({ "name": "a", "platform": "demo", "prompt": "p", "runtime_hooks": hooks }),
        "platform `demo` takes no runtime hooks, so phase `before_tool` cannot run in it",
    );
    refused(
        json!({ "name": "a", "platform": "claude", "prompt": "p", "profiles": ["bse"] }),
        "unknown profile `bse`; did you mean `base`?",
    );
    refused(
        json!({ "name": "a", "platform": "claude", "prompt": "p", "runtime_hooks": { "befor_tool": [] } }),
        "unknown phase `befor_tool`; did you mean `before_tool`?",
    );
    refused(
        json!({ "name": "a", "command": "true", "runtime_hooks": hooks }),
        "belong to agent configs",
    );
    // A hook that cannot decide is refused on a phase that decides.
    refused(
        json!({ "name": "a", "platform": "claude", "prompt": "p", "runtime_hooks": {
            "before_tool": [ { "hooks": [ { "platform": "claude", "prompt": "judge" } ] } ] } }),
        "cannot decide",
    );
    let (status, answer) = create(json!({
        "name": "a", "platform": "claude", "prompt": "p", "profiles": ["base"], "runtime_hooks": hooks,
    }));
    assert_eq!(status, 201, "{answer}");

    // The relay outside a launch says where it belongs; with a dead launch's secret, that the
    // daemon refused it.
    let relay = |env: &[(&str, &str)]| {
        let mut command = std::process::Command::new(support::CANOPY);
        command
            .arg("runtime-hook")
            .env_remove("CANOPY_RUNTIME_URL")
            .env_remove("CANOPY_RUNTIME_TOKEN")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(br#"{"hook_event_name": "SessionStart", "source": "startup"}"#)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let alone = relay(&[]);
    assert!(alone.contains("CANOPY_RUNTIME_URL is not set"), "{alone}");
    let dead = relay(&[
        ("CANOPY_RUNTIME_URL", daemon.url.as_str()),
        ("CANOPY_RUNTIME_TOKEN", "canopy-launch-ended"),
    ]);
    assert!(
        dead.contains("the daemon refused the SessionStart callback (401"),
        "{dead}"
    );
}

#[test]
fn the_guard_executor_denies_by_pattern_path_and_allow_list_without_code() {
    let config = format!(
        r#"
{platform}
[profiles.policy.runtime_hooks]
before_tool = [ {{ hooks = [ {{ mode = "guard", deny = [ {{ tool = "Bash", pattern = "rm -rf|git push --force", reason = "nothing destructive" }} ], within = ["src"], allow_commands = ["echo", "git status"] }} ] }} ]
"#,
        platform = fake_platform(),
    );
    let daemon = Daemon::start_with_config(&config);
    let repo = git_repo();
    std::fs::write(repo.path().join(".git/info/exclude"), "*.txt\n").unwrap();
    let workdir = repo.path().canonicalize().unwrap();
    let steps = json!([
        { "tool": "Bash", "input": { "command": "rm -rf build" } },
        { "tool": "Bash", "input": { "command": "echo hi > hi.txt" } },
        { "tool": "Bash", "input": { "command": "cargo publish" } },
        { "tool": "Bash", "input": { "command": "echo allowed" } },
        { "tool": "Write", "input": { "file_path": workdir.join("src/lib.rs"), "content": "" } },
        { "tool": "Write", "input": { "file_path": workdir.join("src/../../escape.rs"), "content": "" } },
        { "tool": "Read", "input": { "file_path": "/etc/hostname" } },
    ]);
    let spec = daemon.add_spec("guarded by policy");
    daemon.create_graph(json!({
        "name": "policy", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "agent", "platform": "fake-claude", "prompt": steps.to_string(), "profiles": ["policy"] }],
    }));
    daemon.control_ok("policy", json!({ "action": "run" }));
    let view = daemon.settled("policy");
    assert_eq!(view["status"], "completed", "{view:#}");
    let (_, node_runs) = daemon.get("/api/graphs/policy/node-runs");
    let said = node_runs.to_string();
    for expected in [
        "DENIED Bash: nothing destructive",
        "DENIED Bash: the command chains or redirects (`>`)",
        "DENIED Bash: `cargo publish` is not an allowed command (echo, git status)",
        "RAN Bash: {\\\"command\\\": \\\"echo allowed\\\"}",
        "RAN Write",
        "is outside the paths this agent may write (src)",
        "RAN Read",
    ] {
        assert!(said.contains(expected), "{expected}\nnot in {node_runs:#}");
    }
    assert!(!repo.path().join("hi.txt").exists());

    // A pattern that is not a regex is refused when the graph is saved, naming the field.
    let (status, answer) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "bad", "workdir": repo.path(), "nodes": [{
            "name": "a", "platform": "claude", "prompt": "p",
            "runtime_hooks": { "before_tool": [ { "hooks": [ { "mode": "guard", "deny": [ { "tool": "Bash", "pattern": "(" } ] } ] } ] },
        }] }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("field `deny.0.pattern`: `(` is not a regex"),
        "{message}"
    );
}

#[test]
fn a_daemon_wide_sync_hook_guards_every_agent_launch_without_runtime_hooks_of_its_own() {
    let config = format!(
        r#"
{platform}
[[hooks]]
name = "no-force-anywhere"
event = "tool.pre_call"
mode = "sync"
action = {{ mode = "guard", deny = [ {{ tool = "Bash", pattern = "push --force", reason = "no force pushes on this machine" }} ] }}
"#,
        platform = fake_platform(),
    );
    let daemon = Daemon::start_with_config(&config);
    let repo = git_repo();
    std::fs::write(repo.path().join(".git/info/exclude"), "*.txt\n").unwrap();
    let steps = json!([
        { "tool": "Bash", "input": { "command": "git push --force > pushed.txt" } },
        { "tool": "Bash", "input": { "command": "echo fine > fine.txt" } },
    ]);
    let spec = daemon.add_spec("an agent with no hooks of its own");
    daemon.create_graph(json!({
        "name": "plain", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "agent", "platform": "fake-claude", "prompt": steps.to_string() }],
    }));
    daemon.control_ok("plain", json!({ "action": "run" }));
    let view = daemon.settled("plain");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert!(
        !repo.path().join("pushed.txt").exists(),
        "a denied command ran"
    );
    assert!(repo.path().join("fine.txt").exists());
    let (_, node_runs) = daemon.get("/api/graphs/plain/node-runs");
    assert!(
        node_runs.to_string().contains(
            "DENIED Bash: no force pushes on this machine (Canopy hook `no-force-anywhere`)"
        ),
        "{node_runs:#}"
    );
    let decided = ended_runs(&daemon, "tool.pre_call", 2);
    let outcomes: Vec<&str> = decided
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(outcomes, ["denied", "applied"], "{decided:#?}");
}

#[test]
fn on_complete_and_on_failure_run_as_a_launch_ends_on_any_platform() {
    let tools = tempfile::tempdir().unwrap();
    let log = tools.path().join("ends.log");
    // A platform that takes no runtime hooks, whose agent fails.
    let daemon = Daemon::start_with_config(
        "[platforms.broken]\ncommand = [\"sh\", \"-c\", \"echo 'out of ideas' >&2; exit 3\", \"broken\", \"{prompt}\"]\n",
    );
    let repo = git_repo();
    std::fs::write(repo.path().join(".git/info/exclude"), "DEMO.md\n").unwrap();
    let ends = json!({
        "on_complete": [ { "hooks": [ { "command": format!("echo \"completed $CANOPY_HOOK_NODE: $CANOPY_HOOK_SUMMARY\" >> {}", log.display()) } ] } ],
        "on_failure": [ { "hooks": [ { "command": format!("echo \"$CANOPY_HOOK_FAILURE: $CANOPY_HOOK_REASON\" >> {}", log.display()) } ] } ],
    });
    let spec = daemon.add_spec("ends");
    daemon.create_graph(json!({
        "name": "ends", "workdir": repo.path(), "specs": [spec],
        "nodes": [
            { "name": "works", "platform": "demo", "prompt": "hello", "runtime_hooks": ends },
            { "name": "breaks", "platform": "broken", "prompt": "p", "runtime_hooks": ends },
        ],
    }));
    daemon.control_ok("ends", json!({ "action": "run" }));
    let view = daemon.settled("ends");
    assert_eq!(view["status"], "failed", "{view:#}");

    let completed = ended_runs(&daemon, "agent.completed", 1);
    let failed = ended_runs(&daemon, "agent.failed", 1);
    assert_eq!((completed.len(), failed.len()), (1, 1));
    assert_eq!(completed[0]["hook_name"], "runtime.on_complete.0.0");
    assert_eq!(failed[0]["status"], "completed", "{failed:#?}");
    let log = std::fs::read_to_string(&log).unwrap();
    // The two hooks run on their own, so their lines come in either order.
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].starts_with("completed ") && lines[0].contains("demo agent: wrote DEMO.md"),
        "{log}"
    );
    assert!(
        lines[1].starts_with("failed: ") && lines[1].contains("out of ideas"),
        "{log}"
    );
    // Each end is an event in the feed, with its launch.
    let (_, feed) = daemon.get("/api/feed?event=agent.failed");
    let event = &feed["events"][0];
    assert_eq!(event["payload"]["platform"], "broken", "{feed:#}");
    assert_eq!(event["payload"]["failure"], "failed", "{feed:#}");
}

#[test]
fn a_codex_launch_gets_its_hooks_as_a_config_layer_of_its_own_trusted_for_that_run() {
    let fake = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/fake_codex.py")
        .canonicalize()
        .unwrap();
    let tools = tempfile::tempdir().unwrap();
    let rewrite = script(
        tools.path(),
        "rewrite.sh",
        r#"input=$(cat)
case "$input" in *original.txt*) echo '{"decision": "patch", "patch": {"tool_input": {"command": "echo patched > patched.txt"}}}' ;; esac"#,
    );
    let daemon = Daemon::start_with_config(&format!(
        r#"
[platforms.fake-codex]
command = ["python3", "{fake}", "exec", "--json", "{{settings_args}}", "{{prompt}}"]
runtime_hooks = "codex"
"#,
        fake = fake.display()
    ));
    let repo = git_repo();
    std::fs::write(repo.path().join(".git/info/exclude"), "*.txt\n").unwrap();
    let steps = json!([
        { "tool": "Bash", "input": { "command": "git push --force origin main > pushed.txt" } },
        { "tool": "Bash", "input": { "command": "echo mine > original.txt" } },
        // A tool whose response is larger than the API's JSON limit (a big file read).
        { "tool": "Bash", "input": { "command": "head -c 3000000 /dev/zero | tr '\\0' a" } },
    ]);
    let spec = daemon.add_spec("codex work");
    daemon.create_graph(json!({
        "name": "codex", "workdir": repo.path(), "specs": [spec],
        "nodes": [{
            "name": "agent", "platform": "fake-codex", "prompt": steps.to_string(),
            "runtime_hooks": {
                "before_tool": [ { "matcher": "Bash", "hooks": [
                    { "mode": "guard", "deny": [ { "tool": "Bash", "pattern": "push --force", "reason": "no force pushes" } ] },
                    { "command": rewrite },
                ] } ],
                "after_tool": [ { "hooks": [ { "command": "true" } ] } ],
            },
        }],
    }));
    daemon.control_ok("codex", json!({ "action": "run" }));
    let view = daemon.settled("codex");
    assert_eq!(view["status"], "completed", "{view:#}");
    let dir = repo.path();
    assert!(!dir.join("pushed.txt").exists(), "a denied command ran");
    assert!(
        !dir.join("original.txt").exists(),
        "the input was not rewritten"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("patched.txt")).unwrap(),
        "patched\n"
    );
    let (_, node_runs) = daemon.get("/api/graphs/codex/node-runs");
    let said = node_runs.to_string();
    assert!(
        said.contains("DENIED Bash: no force pushes (Canopy hook `runtime.before_tool.0.0`)"),
        "{node_runs:#}"
    );
    assert!(!said.contains("SKIPPED untrusted hooks"), "{node_runs:#}");
    // Both tool calls that ran were reported, the 3 MB response included.
    let posts = ended_runs(&daemon, "tool.post_call", 2);
    assert_eq!(posts.len(), 2, "{posts:#?}");
    let (_, feed) = daemon.get("/api/feed?event=tool.post_call");
    assert_eq!(feed["events"].as_array().unwrap().len(), 2, "{feed:#}");

    // A phase Codex has no hook event for is refused when the graph is saved.
    let (status, answer) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "g2", "workdir": repo.path(), "nodes": [{
            "name": "a", "platform": "fake-codex", "prompt": "p",
            "runtime_hooks": { "on_notification": [ { "hooks": [ { "command": "true" } ] } ] } }] }),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has no hook event for phase `on_notification`"),
        "{answer}"
    );

    // The relay fails closed where Codex would let a failed hook through: a daemon that cannot
    // answer blocks the tool call (exit 2, the reason on stderr).
    let out = std::process::Command::new(support::CANOPY)
        .args(["runtime-hook", "--fail-closed"])
        .env("CANOPY_RUNTIME_URL", "http://127.0.0.1:9")
        .env("CANOPY_RUNTIME_TOKEN", "canopy-launch-00")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(br#"{"hook_event_name": "PreToolUse", "tool_name": "Bash"}"#)?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("blocked: Canopy's runtime hooks could not decide"),
        "{stderr}"
    );
}

#[test]
fn a_graphs_own_sync_hooks_on_tool_calls_decide_in_its_agents_launches() {
    let daemon = Daemon::start_with_config(&fake_platform());
    let repo = git_repo();
    std::fs::write(repo.path().join(".git/info/exclude"), "*.txt\n").unwrap();
    let steps = json!([
        { "tool": "Bash", "input": { "command": "git push --force origin main > pushed.txt" } },
        { "tool": "Bash", "input": { "command": "echo fine > fine.txt" } },
    ]);
    let spec = daemon.add_spec("graph policy");
    // The node declares no runtime hooks: the graph's policy alone makes its launch call back.
    daemon.create_graph(json!({
        "name": "policy", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "agent", "platform": "fake-claude", "prompt": steps.to_string() }],
        "hooks": { "tool.pre_call": [ { "mode": "guard",
            "deny": [ { "tool": "Bash", "pattern": "push --force", "reason": "not in this graph" } ] } ] },
    }));
    daemon.control_ok("policy", json!({ "action": "run" }));
    let view = daemon.settled("policy");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert!(
        !repo.path().join("pushed.txt").exists(),
        "a denied command ran"
    );
    assert!(repo.path().join("fine.txt").exists());
    let (_, node_runs) = daemon.get("/api/graphs/policy/node-runs");
    assert!(
        node_runs
            .to_string()
            .contains("DENIED Bash: not in this graph (Canopy hook `policy.tool.pre_call[0]`)"),
        "{node_runs:#}"
    );
    let runs = ended_runs(&daemon, "tool.pre_call", 2);
    assert!(
        runs.iter()
            .all(|r| r["source"] == "graph" && r["hook_name"] == "policy.tool.pre_call[0]"),
        "{runs:#?}"
    );
    assert_eq!(runs[0]["outcome"], "denied", "{runs:#?}");
}
