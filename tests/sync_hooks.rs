//! Sync hooks end to end: hooks that decide before an action. A node's dispatch is asked of
//! the daemon's `mode = "sync"` hooks and the graph's own `node.pre_dispatch` hooks, which
//! allow, deny (the spec is blocked with the reason) or patch it, in priority order; a
//! failing hook denies only when it is required; a patch outside the event's patch type is
//! rejected; every outcome is in the hook-run history.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::{Daemon, git_repo, script};

/// The hook runs recorded for `event`, in the order they ran.
fn runs_of(daemon: &Daemon, event: &str) -> Vec<Value> {
    let (status, answer) = daemon.get(&format!("/api/hook-runs?event={event}&last=100"));
    assert_eq!(status, 200, "{answer}");
    let mut runs = answer["runs"].as_array().cloned().unwrap_or_default();
    runs.reverse();
    runs
}

fn run_graph(daemon: &Daemon, name: &str, workdir: &Path, command: &str, hooks: Value) -> Value {
    let spec = daemon.add_spec(&format!("spec of {name}"));
    daemon.create_graph(json!({
        "name": name, "workdir": workdir, "specs": [spec],
        "nodes": [{ "name": "build", "command": command }],
        "hooks": hooks,
    }));
    daemon.control_ok(name, json!({ "action": "run" }));
    daemon.settled(name)
}

#[test]
fn sync_hooks_patch_a_dispatch_in_priority_order_and_each_outcome_is_recorded() {
    let tools = tempfile::tempdir().unwrap();
    let seen = tools.path().join("seen.json");
    // Priority 10 runs first and patches the command; the allowing hook after it sees the
    // patched input on stdin; a failing hook that is not required lets the node run; a patch
    // of a field the node does not have is rejected.
    let patch = script(
        tools.path(),
        "patch.sh",
        r#"echo '{"decision": "patch", "patch": {"command": "echo patched > out.txt"}}'"#,
    );
    let allow = script(
        tools.path(),
        "allow.sh",
        &format!("cat > {}; exit 0", seen.display()),
    );
    let broken = script(
        tools.path(),
        "broken.sh",
        "echo 'policy server down' >&2; exit 7",
    );
    let stray = script(
        tools.path(),
        "stray.sh",
        r#"echo '{"decision": "patch", "patch": {"prompt": "be brief"}}'"#,
    );
    let typo = script(
        tools.path(),
        "typo.sh",
        r#"echo '{"decision": "patch", "patch": {"command": 42}}'"#,
    );
    let hook = |name: &str, priority: i64, path: &Path| {
        format!(
            "[[hooks]]\nname = \"{name}\"\nevent = \"node.pre_dispatch\"\nmode = \"sync\"\npriority = {priority}\nmatch = {{ graph_name = \"web\" }}\naction = {{ command = \"{}\" }}\n",
            path.display()
        )
    };
    let config = [
        hook("allow", 0, &allow),
        hook("patch", 10, &patch),
        hook("broken", -1, &broken),
        hook("stray", -2, &stray),
        hook("typo", -3, &typo),
    ]
    .join("\n");
    let daemon = Daemon::start_with_config(&config);
    let repo = git_repo();

    let view = run_graph(
        &daemon,
        "web",
        repo.path(),
        "echo original > out.txt",
        json!({}),
    );
    assert_eq!(view["status"], "completed", "{view:#}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("out.txt")).unwrap(),
        "patched\n",
        "the node ran the patched command"
    );
    let told: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(told["command"], "echo patched > out.txt", "{told:#}");
    assert_eq!(told["node"], "build");
    assert_eq!(told["graph_name"], "web");

    let runs = runs_of(&daemon, "node.pre_dispatch");
    let summary: Vec<(&str, &str, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["hook_name"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
                r["dispatch"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("patch", "applied", "sync"),
            ("allow", "applied", "sync"),
            ("broken", "failed", "sync"),
            ("stray", "rejected", "sync"),
            ("typo", "rejected", "sync"),
        ],
        "{runs:#?}"
    );
    assert_eq!(
        runs[0]["patch_applied"],
        json!({ "command": "echo patched > out.txt" })
    );
    assert_eq!(runs[1]["patch_applied"], Value::Null);
    let failed = runs[2]["error"].as_str().unwrap();
    assert!(
        failed.contains("policy server down")
            && failed.ends_with("(not required: the action goes on)"),
        "{failed}"
    );
    let rejected = runs[3]["error"].as_str().unwrap();
    assert!(
        rejected.contains("field `prompt`: the action has none to change"),
        "{rejected}"
    );
    // A patch that does not fit the event's published patch schema is rejected naming the field.
    let mistyped = runs[4]["error"].as_str().unwrap();
    assert!(
        mistyped.contains("patch rejected, not applied: field `command`: 42 is not of type"),
        "{mistyped}"
    );
    // The feed announces the hooks that changed or failed something, not the one that only
    // allowed (its hook run is its record).
    let (_, feed) = daemon.get("/api/feed?event=hook.run.*&last=100");
    let mut announced: Vec<&str> = feed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["hook_name"].as_str().unwrap())
        .collect();
    announced.sort_unstable();
    assert_eq!(announced, ["broken", "patch", "stray", "typo"], "{feed:#}");
    // The seed's view of the same runs.
    let (_, seed) = daemon.get("/api/workspaces/web/hooks/runs?session=x&last=0");
    assert_eq!(seed["runs"], json!([]), "last=0 returns no rows: {seed}");
}

#[test]
fn a_graph_hook_that_denies_blocks_the_spec_and_skips_the_hooks_after_it() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let view = run_graph(
        &daemon,
        "guarded",
        repo.path(),
        "touch ran.txt",
        json!({
            "node.pre_dispatch": [
                { "command": "echo 'no force pushes here' >&2; exit 2", "priority": 5 },
                { "command": "touch hook-ran.txt" },
            ],
        }),
    );
    assert_eq!(view["status"], "paused", "{view:#}");
    let blocker = view["blocker"].as_str().unwrap_or_default();
    assert!(
        blocker.contains(
            "sync hook `guarded.node.pre_dispatch[0]` denied the dispatch: no force pushes here"
        ),
        "{blocker}"
    );
    assert!(!repo.path().join("ran.txt").exists(), "the node never ran");
    assert!(
        !repo.path().join("hook-ran.txt").exists(),
        "the second hook never ran"
    );
    let runs = runs_of(&daemon, "node.pre_dispatch");
    let outcomes: Vec<&str> = runs
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["denied", "skipped"], "{runs:#?}");
    assert_eq!(runs[0]["source"], "graph");
    assert_eq!(runs[0]["error"], "no force pushes here");
    assert_eq!(runs[1]["status"], "skipped");

    // `hooks test` asks the same hooks about an input of one's own, and records nothing.
    let shown = daemon.ok(&[
        "hooks",
        "test",
        "guarded",
        "node.pre_dispatch",
        "--input",
        r#"{"node": "build", "command": "git push --force"}"#,
    ]);
    assert!(
        shown.contains(
            "node.pre_dispatch: denied by `guarded.node.pre_dispatch[0]`: no force pushes here"
        ),
        "{shown}"
    );
    assert!(shown.contains("skipped"), "{shown}");
    let answer = daemon.json(&[
        "hooks",
        "test",
        "guarded",
        "node.pre_dispatch",
        "--input",
        r#"{"node": "build"}"#,
    ]);
    assert_eq!(answer["decision"], "deny", "{answer:#}");
    assert_eq!(answer["input"]["graph_name"], "guarded");
    assert_eq!(
        runs_of(&daemon, "node.pre_dispatch").len(),
        2,
        "a test records nothing"
    );
    let wrong = daemon.fails(&["hooks", "test", "guarded", "node.pre_dispach"]);
    assert!(
        wrong.contains("is not asked of sync hooks; did you mean `node.pre_dispatch`?"),
        "{wrong}"
    );
}

#[test]
fn a_required_hook_that_fails_denies_and_one_that_is_not_lets_it_run() {
    let config = r#"
[[hooks]]
name = "must-answer"
event = "node.pre_dispatch"
mode = "sync"
required = true
timeout_ms = 300
match = { graph_name = "strict" }
action = { command = "sleep 5" }
"#;
    let daemon = Daemon::start_with_config(config);
    let repo = git_repo();
    let strict = run_graph(&daemon, "strict", repo.path(), "touch ran.txt", json!({}));
    assert_eq!(strict["status"], "paused", "{strict:#}");
    let blocker = strict["blocker"].as_str().unwrap_or_default();
    assert!(
        blocker.contains("required hook `must-answer` failed"),
        "{blocker}"
    );
    assert!(!repo.path().join("ran.txt").exists());
    let runs = runs_of(&daemon, "node.pre_dispatch");
    assert_eq!(runs[0]["status"], "timed_out", "{runs:#?}");
    assert_eq!(runs[0]["outcome"], "failed");
    assert_eq!(runs[0]["required"], true);
    assert!(
        runs[0]["error"]
            .as_str()
            .unwrap()
            .ends_with("(required: the action is denied)"),
        "{runs:#?}"
    );
    // Another graph is not matched: it runs without asking.
    let free = run_graph(&daemon, "free", repo.path(), "touch ran.txt", json!({}));
    assert_eq!(free["status"], "completed", "{free:#}");
    assert!(repo.path().join("ran.txt").exists());
}

#[test]
fn sync_hooks_are_refused_where_they_cannot_decide() {
    // canopy.toml: a sync hook on an event nothing asks, an async one on a question, and the
    // sync-only keys on an async hook.
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("canopy.toml");
    std::fs::write(
        &config,
        r#"
[[hooks]]
name = "late"
event = "graph.run.completed"
mode = "sync"
action = { command = "true" }

[[hooks]]
name = "deaf"
event = "node.pre_dispatch"
action = { command = "true" }

[[hooks]]
name = "pushy"
event = "spec.created"
priority = 3
action = { command = "true" }

[[hooks]]
name = "odd"
event = "node.pre_dispatch"
mode = "blocking"
action = { command = "true" }
"#,
    )
    .unwrap();
    let daemon = Daemon::start();
    let out = daemon.cli(&["config", "validate", config.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    for expected in [
        "hooks[0].event: a sync hook decides before an action, and `graph.run.completed` names none; the events asked of sync hooks are",
        "hooks[1].mode: node.pre_dispatch is asked before its action, of sync hooks only; add mode = \"sync\"",
        "hooks[2].priority: only a sync hook (mode = \"sync\") takes `priority`",
        "hooks[3].mode: `blocking` is not a hook mode; it is sync",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }

    // A graph's sync hook must name a mode that decides; an async key refuses sync-only keys.
    let repo = git_repo();
    let spec = daemon.add_spec("a spec");
    let (status, answer) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({
            "name": "g", "workdir": repo.path(), "specs": [spec],
            "nodes": [{ "name": "n", "command": "true" }],
            "hooks": { "node.pre_dispatch": [{ "mode": "interactive", "prompt": "ok?", "target_session_name": "s" }] },
        }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("hooks.node.pre_dispatch[0]: mode `interactive` (plugin interactive")
            && message.contains("cannot decide"),
        "{message}"
    );
    let (status, answer) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({
            "name": "g", "workdir": repo.path(), "specs": [spec],
            "nodes": [{ "name": "n", "command": "true" }],
            "hooks": { "on_completed": [{ "command": "true", "required": true }] },
        }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("hooks.on_completed[0]: field `required` belongs to sync hooks"),
        "{message}"
    );
}

#[test]
fn the_taxonomy_and_catalog_show_sync_hooks() {
    let config = r#"
[[hooks]]
name = "gate"
event = "node.pre_dispatch"
mode = "sync"
priority = 7
required = true
action = { command = "true" }

[[hooks]]
name = "after"
event = "graph.run.completed"
action = { command = "true" }
"#;
    let daemon = Daemon::start_with_config(config);
    let (_, events) = daemon.get("/api/hooks/events?sync_only=true");
    let names: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "graph.run.pre_start",
            "node.pre_dispatch",
            "session.message.pre_deliver",
            "plugin.pre_install",
            "cron.pre_fire",
            "webhook.pre_handle",
            "agent.pre_complete",
            "tool.pre_call"
        ],
        "{events:#}"
    );
    let dispatch = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "node.pre_dispatch")
        .unwrap();
    assert_eq!(dispatch["sync_eligible"], true);
    let patchable: Vec<&String> = dispatch["patch_schema"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(patchable, ["command", "model", "prompt"], "{dispatch:#}");

    let (_, catalog) = daemon.get("/api/hooks/catalog?mode=sync");
    let hooks = catalog["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{catalog:#}");
    assert_eq!(hooks[0]["name"], "gate");
    assert_eq!(hooks[0]["mode"], "sync");
    assert_eq!(hooks[0]["priority"], 7);
    assert_eq!(hooks[0]["required"], true);
    assert_eq!(hooks[0]["timeout_ms"], 1000);
    let table = daemon.ok(&["hooks", "list"]);
    assert!(table.contains("sync p=7 required"), "{table}");
    let (_, catalog) = daemon.get("/api/hooks/catalog?mode=async");
    let after = &catalog["hooks"].as_array().unwrap()[0];
    assert_eq!(after["name"], "after");
    assert!(
        after["timeout_ms"].as_u64().is_some_and(|ms| ms > 0),
        "an async hook's catalog entry shows its real default: {after:#}"
    );
}

#[test]
fn a_run_start_is_denied_with_409_or_moved_to_a_patched_workdir() {
    let tools = tempfile::tempdir().unwrap();
    let other = git_repo();
    let move_it = script(
        tools.path(),
        "move.sh",
        &format!(
            r#"echo '{{"decision": "patch", "patch": {{"workdir": "{}"}}}}'"#,
            other.path().display()
        ),
    );
    let config = format!(
        "[[hooks]]\nname = \"elsewhere\"\nevent = \"graph.run.pre_start\"\nmode = \"sync\"\nmatch = {{ graph_name = \"moved\" }}\naction = {{ command = \"{}\" }}\n",
        move_it.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let repo = git_repo();

    // The graph's own hook denies: 409 naming it and its reason, and nothing starts.
    let spec = daemon.add_spec("a spec");
    daemon.create_graph(json!({
        "name": "frozen", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "touch ran.txt" }],
        "hooks": { "graph.run.pre_start": [{ "command": "echo 'release freeze until Monday' >&2; exit 2" }] },
    }));
    let (status, answer) = daemon.control("frozen", json!({ "action": "run" }));
    assert_eq!(status, 409, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "sync hook `frozen.graph.run.pre_start[0]` denied the run of graph `frozen`: release freeze until Monday"
    );
    let (_, runs) = daemon.get("/api/runs?graph=frozen");
    assert_eq!(runs["runs"], json!([]), "no run was recorded: {runs}");
    let cli = daemon.fails(&["graph", "run", "frozen"]);
    assert!(cli.contains("release freeze until Monday"), "{cli}");

    // A daemon hook patches the workdir: the run happens in the other repo.
    let view = run_graph(&daemon, "moved", repo.path(), "touch ran.txt", json!({}));
    assert_eq!(view["status"], "completed", "{view:#}");
    assert!(
        other.path().join("ran.txt").exists(),
        "the run used the patched workdir"
    );
    assert!(!repo.path().join("ran.txt").exists());
    let runs = runs_of(&daemon, "graph.run.pre_start");
    let last = runs.last().unwrap();
    assert_eq!(last["hook_name"], "elsewhere");
    assert_eq!(last["outcome"], "applied");
    assert_eq!(
        last["patch_applied"]["workdir"],
        other.path().to_str().unwrap()
    );
}

#[test]
fn a_policy_refuses_a_plugin_install_that_grants_network() {
    let tools = tempfile::tempdir().unwrap();
    let policy = script(
        tools.path(),
        "policy.sh",
        r#"if grep -q '"network"' ; then echo 'plugins get no network here' >&2; exit 2; fi"#,
    );
    let config = format!(
        "[[hooks]]\nname = \"no-network\"\nevent = \"plugin.pre_install\"\nmode = \"sync\"\nrequired = true\naction = {{ command = \"{}\" }}\n",
        policy.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let refused = daemon.fails(&[
        "plugin",
        "install",
        support::HOSTILE_WASM,
        "--grant",
        "fs-read,network",
    ]);
    assert!(
        refused.contains(
            "sync hook `no-network` denied the install of plugin `hostile`: plugins get no network here"
        ),
        "{refused}"
    );
    let list = daemon.json(&["plugin", "list"]);
    assert!(
        !list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "hostile"),
        "nothing was installed: {list:#}"
    );
    daemon.ok(&[
        "plugin",
        "install",
        support::HOSTILE_WASM,
        "--grant",
        "fs-read",
    ]);
    let runs = runs_of(&daemon, "plugin.pre_install");
    let outcomes: Vec<&str> = runs
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["denied", "applied"], "{runs:#?}");
}

/// The example policies' walk, whatever language they are in: `mode` (installed) refuses a bad
/// regex when a graph is saved, naming the field; as a sync hook it denies a node that would
/// `git push --force` (the spec blocked with its reason) and allows the next graph's node.
/// Returns the two hook runs, denied then applied.
fn a_policy_denies_force_pushes(daemon: &Daemon, mode: &str, repo: &Path) -> Vec<Value> {
    let policy = json!({
        "node.pre_dispatch": [
            { "mode": mode, "deny": "push --force", "reason": "no force pushes" },
        ],
    });
    let spec = daemon.add_spec("a spec");
    let (status, answer) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({
            "name": "bad", "workdir": repo, "specs": [spec],
            "nodes": [{ "name": "n", "command": "true" }],
            "hooks": { "node.pre_dispatch": [{ "mode": mode, "deny": "(" }] },
        }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("field `deny`: `(` is not a valid regular expression"),
        "{message}"
    );

    let pushed = run_graph(
        daemon,
        "push",
        repo,
        "echo git push --force origin main",
        policy.clone(),
    );
    assert_eq!(pushed["status"], "paused", "{pushed:#}");
    let blocker = pushed["blocker"].as_str().unwrap_or_default();
    assert!(
        blocker
            .contains("sync hook `push.node.pre_dispatch[0]` denied the dispatch: no force pushes"),
        "{blocker}"
    );
    let tested = run_graph(daemon, "test", repo, "touch tested.txt", policy);
    assert_eq!(tested["status"], "completed", "{tested:#}");
    assert!(repo.join("tested.txt").exists());
    let runs = runs_of(daemon, "node.pre_dispatch");
    let outcomes: Vec<&str> = runs
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["denied", "applied"], "{runs:#?}");
    runs
}

/// Builds `plugins/examples/python-executor` with componentize-py (from PyPI; `.ci/run`
/// installs it in target/test-venv) into `out`; returns the component's path.
fn build_python_policy(out: &Path) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let component = out.join("python-policy.wasm");
    let built = std::process::Command::new(support::python())
        .current_dir(&root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args([
            "-c",
            "import sys; from componentize_py import script; sys.argv[0] = 'componentize-py'; sys.exit(script())",
            "-d",
            "wit/since_v0.2.0",
            "-w",
            "executor",
            "componentize",
            "-p",
            "plugins/examples/python-executor",
            "app",
            "-o",
        ])
        .arg(&component)
        .output()
        .expect("python3 runs");
    assert!(
        built.status.success(),
        "componentize-py could not build the Python example (`.ci/run` installs componentize-py==0.25.1 in target/test-venv): {}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    component
}

#[test]
fn a_python_executor_decides_as_a_sync_hook() {
    let out = tempfile::tempdir().unwrap();
    let component = build_python_policy(out.path());
    let daemon = Daemon::start();
    let installed = daemon.ok(&["plugin", "install", component.to_str().unwrap()]);
    assert!(
        installed.starts_with("installed plugin python-policy 0.1.0"),
        "{installed}"
    );
    let list = daemon.json(&["plugin", "list"]);
    let python = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "python-policy")
        .cloned()
        .unwrap();
    assert_eq!(python["contract"], "0.2.0");

    let repo = git_repo();
    let runs = a_policy_denies_force_pushes(&daemon, "command-policy", repo.path());
    assert_eq!(runs[0]["executor_kind"], "command-policy");
    // What the Python code printed is kept with its run.
    let output = runs[0]["output"].as_str().unwrap_or_default();
    assert!(
        output
            .contains("[plugin stdout]\nchecking node build: 'echo git push --force origin main'"),
        "{output}"
    );
}

/// Builds `plugins/examples/js-executor` with the componentize-js its `package.json` pins
/// (`npm ci` there first; `.ci/run` does it) into `out`; returns the component's path.
fn build_js_policy(out: &Path) -> std::path::PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/examples/js-executor");
    let component = out.join("js-policy.wasm");
    // The package's own build script, with the output moved out of the source tree (the last
    // `--out` wins).
    let built = std::process::Command::new("npm")
        .env("PATH", support::tool_path())
        .current_dir(&example)
        .args(["run", "--silent", "build", "--", "--out"])
        .arg(&component)
        .output()
        .expect("npm runs");
    assert!(
        built.status.success() && component.exists(),
        "componentize-js could not build the JavaScript example (it needs Node.js 20.19 or later, and `npm ci` in plugins/examples/js-executor; .ci/run does both): {}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    component
}

#[test]
fn a_javascript_executor_decides_and_writes_its_audit_file_through_wasi() {
    let out = tempfile::tempdir().unwrap();
    let component = build_js_policy(out.path());
    let daemon = Daemon::start();
    // Its one grant is the folder it writes its audit log to; without it the install is refused.
    let refused = daemon.fails(&["plugin", "install", component.to_str().unwrap()]);
    assert!(refused.contains("fs-write:.policy-audit"), "{refused}");
    let installed = daemon.ok(&[
        "plugin",
        "install",
        component.to_str().unwrap(),
        "--grant",
        "fs-write:.policy-audit",
    ]);
    assert!(
        installed.starts_with("installed plugin js-policy 0.1.0"),
        "{installed}"
    );

    let repo = git_repo();
    // The audit folder is the user's to ignore, or the next run would find the tree dirty.
    std::fs::write(repo.path().join(".git/info/exclude"), ".policy-audit/\n").unwrap();
    a_policy_denies_force_pushes(&daemon, "js-command-policy", repo.path());
    // The file it wrote with wasi:filesystem, in the folder its grant opened.
    let audit = std::fs::read_to_string(repo.path().join(".policy-audit/decisions.log"))
        .expect("the JS plugin wrote its audit log");
    assert_eq!(audit, "denied build: no force pushes\nallowed build\n");
}

#[test]
fn a_cron_firing_and_a_session_message_are_asked_before_they_happen() {
    let tools = tempfile::tempdir().unwrap();
    let out = tools.path().join("out.txt");
    // `cron.pre_fire`: the nightly cron is denied, the hourly one gets its command patched.
    let gate = script(
        tools.path(),
        "gate.sh",
        &format!(
            r#"input=$(cat)
case "$input" in
  *'"cron":"nightly"'*) echo 'not tonight' >&2; exit 2 ;;
  *'"cron":"hourly"'*) echo '{{"decision": "patch", "patch": {{"command": "echo patched >> {out}"}}}}' ;;
esac"#,
            out = out.display()
        ),
    );
    // `session.message.pre_deliver`: secrets are denied, everything else is signed.
    let screen = script(
        tools.path(),
        "screen.sh",
        r#"input=$(cat)
case "$input" in
  *password*) echo 'a message may not carry a password' >&2; exit 2 ;;
  *) printf '{"decision": "patch", "patch": {"text": "%s (screened)"}}' "$CANOPY_HOOK_TEXT" ;;
esac"#,
    );
    let config = format!(
        r#"
[[crons]]
name = "nightly"
schedule = "@yearly"
action = {{ command = "echo nightly >> {out}" }}

[[crons]]
name = "hourly"
schedule = "@yearly"
action = {{ command = "echo hourly >> {out}" }}

[[hooks]]
name = "gate"
event = "cron.pre_fire"
mode = "sync"
action = {{ command = "{gate}" }}

[[hooks]]
name = "screen"
event = "session.message.pre_deliver"
mode = "sync"
action = {{ command = "{screen}" }}
"#,
        out = out.display(),
        gate = gate.display(),
        screen = screen.display(),
    );
    let daemon = Daemon::start_with_config(&config);

    // A cron is no graph's: its hooks are asked without one, before any firing.
    let asked = daemon.ok(&[
        "hooks",
        "test",
        "cron.pre_fire",
        "--input",
        r#"{"cron": "nightly", "mode": "command", "command": "true"}"#,
    ]);
    assert!(
        asked.starts_with("cron.pre_fire: denied by `gate`: not tonight"),
        "{asked}"
    );
    let graphless = daemon.fails(&["hooks", "test", "on_completed"]);
    assert!(
        graphless.contains("on_completed is a graph's hook event: name the graph"),
        "{graphless}"
    );

    let denied = daemon.cli(&["cron", "run", "nightly", "--wait"]);
    let said = String::from_utf8_lossy(&denied.stdout);
    assert!(!denied.status.success(), "{said}");
    let (_, receipts) = daemon.get("/api/crons/nightly/runs?last=1");
    let receipt = &receipts["runs"][0];
    assert_eq!(receipt["status"], "denied", "{receipt}");
    assert_eq!(
        receipt["error"],
        "sync hook `gate` denied the firing: not tonight"
    );
    daemon.ok(&["cron", "run", "hourly", "--wait"]);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "patched\n",
        "the nightly action never ran, the hourly one ran patched"
    );

    daemon.ok(&["session", "new", "--name", "lead"]);
    daemon.ok(&["session", "send", "lead", "the password is hunter2"]);
    daemon.ok(&["session", "send", "lead", "review the login form"]);
    let delivered = support::wait_for(
        "the screened message to be delivered",
        std::time::Duration::from_secs(20),
        || {
            let inbox = daemon.json(&["session", "inbox", "lead"]);
            inbox["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["status"] == "delivered")
                .cloned()
        },
    );
    assert_eq!(delivered["text"], "review the login form (screened)");
    let recall = daemon.json(&["session", "recall"]);
    let kept = recall["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["text"] == "the password is hunter2")
        .cloned()
        .unwrap_or_else(|| panic!("the denied message is kept for recall: {recall:#}"));
    assert_eq!(
        kept["error"],
        "sync hook `screen` denied the delivery: a message may not carry a password"
    );
    let outcomes: Vec<String> = runs_of(&daemon, "session.message.pre_deliver")
        .iter()
        .map(|r| r["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, ["denied", "applied"]);
}

#[test]
fn a_webhook_delivery_is_denied_with_403_or_handled_with_a_patched_body() {
    let tools = tempfile::tempdir().unwrap();
    let seen = tools.path().join("seen.txt");
    let gate = script(
        tools.path(),
        "gate.sh",
        r#"input=$(cat)
case "$input" in
  *drop-table*) echo 'suspicious payload' >&2; exit 2 ;;
  *) echo '{"decision": "patch", "patch": {"body": "cleaned"}}' ;;
esac"#,
    );
    let config = format!(
        r#"
[webhooks]
bind_port = 0

[webhooks.entries.deploy]
type = "command"
token = "webhook-token-5e1f0a9c"
command = "cat > {seen}"

[[hooks]]
name = "waf"
event = "webhook.pre_handle"
mode = "sync"
action = {{ command = "{gate}" }}
"#,
        seen = seen.display(),
        gate = gate.display(),
    );
    let daemon = Daemon::start_with_config(&config);
    let base = daemon.webhooks_url();
    let client = reqwest::blocking::Client::new();
    let send = |body: &str| {
        let response = client
            .post(format!("{base}/hooks/global/deploy?wait=true"))
            .bearer_auth("webhook-token-5e1f0a9c")
            .body(body.to_string())
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().unwrap_or(Value::Null))
    };
    let (status, answer) = send("drop-table users");
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["status"], "denied", "{answer}");
    assert!(!seen.exists(), "the denied delivery's handler never ran");
    let (_, delivery) = daemon.get(&format!(
        "/api/webhooks/deliveries/{}",
        answer["delivery_id"].as_str().unwrap()
    ));
    assert_eq!(delivery["status"], "denied", "{delivery}");
    assert_eq!(
        delivery["error"],
        "sync hook `waf` denied the delivery: suspicious payload"
    );

    let (status, answer) = send("deploy main");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "cleaned",
        "the handler got the patched body"
    );
    let outcomes: Vec<String> = runs_of(&daemon, "webhook.pre_handle")
        .iter()
        .map(|r| r["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, ["denied", "applied"]);

    // A sender cannot make the policy fail (and so be skipped, fail-open) with a body whose
    // JSON escaping would not fit the hook's environment (Linux allows 128 KiB a variable):
    // the question carries a bounded body, and the hook still answers.
    let hostile = "\u{1}".repeat(100 * 1024);
    let (status, answer) = send(&hostile);
    assert_eq!(status, 200, "{answer}");
    let last = runs_of(&daemon, "webhook.pre_handle").pop().unwrap();
    assert_eq!(last["outcome"], "applied", "{last:#}");
}

#[test]
fn past_the_dispatch_depth_a_sync_hook_is_dropped_and_a_required_one_denies() {
    // A cron's action acts one dispatch level down: the run it starts, and the dispatch of that
    // run's node, are at depth 1, past a limit of 0.
    let repo = git_repo();
    let config = format!(
        r#"
[limits]
max_dispatch_depth = 0

[[crons]]
name = "kick"
schedule = "@yearly"
action = {{ command = "{canopy} graph run deep" }}

[[hooks]]
name = "gate"
event = "node.pre_dispatch"
mode = "sync"
required = true
action = {{ command = "true" }}
"#,
        canopy = support::CANOPY,
    );
    let daemon = Daemon::start_with_config(&config);
    let spec = daemon.add_spec("a spec");
    daemon.create_graph(json!({
        "name": "deep", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "touch ran.txt" }],
    }));
    daemon.ok(&["cron", "run", "kick", "--wait"]);
    let view = support::wait_for(
        "the run the cron started to settle",
        std::time::Duration::from_secs(30),
        || {
            let (_, view) = daemon.get("/api/graphs/deep");
            (view["status"] == "paused").then_some(view)
        },
    );
    let blocker = view["blocker"].as_str().unwrap_or_default();
    assert!(
        blocker.contains("required hook `gate` not run: the action was caused at dispatch depth 1, past the limit of 0"),
        "{blocker}"
    );
    assert!(!repo.path().join("ran.txt").exists());
    let runs = runs_of(&daemon, "node.pre_dispatch");
    assert_eq!(runs[0]["outcome"], "dropped", "{runs:#?}");
    assert_eq!(runs[0]["status"], "dropped");
    assert_eq!(runs[0]["dispatch_depth"], 1);
}
