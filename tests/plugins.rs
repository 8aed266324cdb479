//! The executor host end to end: the real `canopy` binary, real components built from
//! `plugins/` and `tests/plugins/`, real processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::{
    APPEND_FILE_WASM, CONTRACT_V0_1_WASM, Daemon, HOSTILE_WASM, IMPOSTOR_WASM, git_repo,
    plugin_run, real, script,
};

/// `plugin run --json` on `name` with a config and markers, in `workdir`; returns the report.
fn run_json(
    daemon: &Daemon,
    name: &str,
    mode: Option<&str>,
    config: Value,
    markers: &[(&str, &str)],
    workdir: &Path,
) -> Value {
    plugin_run(daemon, name, mode, &config, markers, workdir)
        .unwrap_or_else(|stderr| panic!("plugin run {name} printed no report: {stderr}"))
}

/// `plugin run` expected to fail as a call; returns stderr.
fn run_error(daemon: &Daemon, name: &str, mode: &str, config: Value, workdir: &Path) -> String {
    match plugin_run(daemon, name, Some(mode), &config, &[], workdir) {
        Ok(report) => panic!("plugin run {name} --mode {mode} unexpectedly ran: {report}"),
        Err(stderr) => stderr,
    }
}

fn install_hostile(daemon: &Daemon) {
    daemon.ok(&["plugin", "install", HOSTILE_WASM, "--grant", "fs-read"]);
}

#[test]
fn builtins_are_installed_on_first_start_with_their_requested_grants() {
    let daemon = Daemon::start();
    let list = daemon.json(&["plugin", "list"]);
    let plugins = list["plugins"].as_array().unwrap();
    type Row = (String, Vec<String>, Vec<String>, bool, bool);
    let summary: Vec<Row> = plugins
        .iter()
        .map(|p| {
            let strings = |v: &Value| {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
            };
            (
                p["name"].as_str().unwrap().to_string(),
                strings(&p["manifest"]["modes"]),
                strings(&p["granted"]),
                p["builtin"].as_bool().unwrap(),
                p["enabled"].as_bool().unwrap(),
            )
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        summary,
        vec![
            ("agent".into(), s(&["agent"]), s(&["process"]), true, true),
            (
                "command".into(),
                s(&["command"]),
                s(&["process"]),
                true,
                true
            ),
            (
                "docs-maintenance".into(),
                s(&["docs-maintenance"]),
                s(&["fs-read", "fs-write:docs", "process"]),
                true,
                true
            ),
            ("guard".into(), s(&["guard"]), s(&[]), true, true),
            (
                "interactive".into(),
                s(&["interactive"]),
                s(&["sessions"]),
                true,
                true
            ),
        ]
    );
}

#[test]
fn command_mode_quotes_hostile_marker_values_and_exports_them_as_env() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let hostile = "x; touch pwned; $(touch pwned2) `touch pwned3` 'q' \"dq\"";
    let report = run_json(
        &daemon,
        "command",
        None,
        json!({ "command": "printf '%s' {{spec_name}} > argv.txt; printf '%s' \"$CANOPY_HOOK_SPEC_NAME\" > env.txt; printf '%s' \"$CANOPY_HOOK_WORKDIR|$CANOPY_HOOK_BLOCKER\" > more.txt" }),
        &[("spec_name", hostile)],
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("argv.txt")).unwrap(),
        hostile
    );
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("env.txt")).unwrap(),
        hostile
    );
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("more.txt")).unwrap(),
        format!("{}|(none)", real(workdir.path()))
    );
    for planted in ["pwned", "pwned2", "pwned3"] {
        assert!(
            !workdir.path().join(planted).exists(),
            "the marker value ran as shell syntax ({planted})"
        );
    }
    let rendered = report["rendered_config"]["command"].as_str().unwrap();
    assert!(
        !rendered.contains("{{"),
        "a marker literal reached the plugin: {rendered}"
    );
}

#[test]
fn command_mode_fails_with_exit_code_and_stderr_tail_and_reads_the_result_file() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let failed = run_json(
        &daemon,
        "command",
        None,
        json!({ "command": "echo half-done; echo 'disk full' >&2; exit 7" }),
        &[],
        workdir.path(),
    );
    assert_eq!(failed["outcome"]["status"], "failed");
    assert_eq!(
        failed["outcome"]["reason"],
        "exited with exit code 7: disk full"
    );
    // A command that says nothing on stderr: the code alone, no dangling colon.
    let silent = run_json(
        &daemon,
        "command",
        None,
        json!({ "command": "exit 3" }),
        &[],
        workdir.path(),
    );
    assert_eq!(silent["outcome"]["reason"], "exited with exit code 3");

    let blocked = run_json(
        &daemon,
        "command",
        None,
        json!({ "command": r#"printf '{"status":"blocked","blocker":"needs an API key"}' > "$CANOPY_RESULT_FILE""# }),
        &[],
        workdir.path(),
    );
    assert_eq!(blocked["outcome"]["status"], "blocked");
    assert_eq!(blocked["outcome"]["blocker"], "needs an API key");

    let summarised = run_json(
        &daemon,
        "command",
        None,
        json!({ "command": r#"printf '{"summary":"added the login form"}' > "$CANOPY_RESULT_FILE""# }),
        &[],
        workdir.path(),
    );
    assert_eq!(summarised["outcome"]["status"], "completed");
    assert_eq!(summarised["outcome"]["summary"], "added the login form");
}

#[test]
fn command_mode_is_killed_at_its_timeout() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let report = run_json(
        &daemon,
        "command",
        None,
        json!({ "command": "sleep 30", "timeout_seconds": 1 }),
        &[],
        workdir.path(),
    );
    // Contract 0.2.0 says so with a status of its own, not only in the reason.
    assert_eq!(report["outcome"]["status"], "timed_out", "{report:#}");
    assert!(
        report["outcome"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("timed out after"),
        "{report:#}"
    );
    assert!(report["duration_ms"].as_u64().unwrap() < 10_000);
}

#[test]
fn command_mode_runs_plain_words_without_a_shell_and_anything_else_as_sh_does() {
    let daemon = Daemon::start();
    let workdir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    // Prints the name of the process that started it, and its arguments.
    let parent = script(bin.path(), "parent", r#"echo "$(cat /proc/$PPID/comm) $*""#);
    let parent = parent.to_str().unwrap();
    let run = |command: String| {
        let report = run_json(
            &daemon,
            "command",
            None,
            json!({ "command": command }),
            &[],
            workdir.path(),
        );
        report["outcome"].clone()
    };

    // Plain words: the daemon starts the program itself, with the words as its arguments.
    let direct = run(format!("{parent} one  two"));
    assert_eq!(direct["status"], "completed", "{direct}");
    let summary = direct["summary"].as_str().unwrap();
    assert!(summary.ends_with(" one two"), "{summary}");
    assert!(!summary.starts_with("sh "), "ran under a shell: {summary}");

    // Shell syntax runs under sh, as it always did.
    let shell = run(format!("{parent} \"quoted words\""));
    assert_eq!(shell["summary"], "sh quoted words", "{shell}");

    // A program that does not exist fails as the shell says it (exit 127), direct or not.
    for command in [
        "no-such-program-xyz --flag",
        "no-such-program-xyz > /dev/null",
    ] {
        let missing = run(command.to_string());
        assert_eq!(missing["status"], "failed", "{missing}");
        let reason = missing["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("exited with exit code 127") && reason.contains("not found"),
            "{command}: {reason}"
        );
    }
}

fn standin_agent_config(dir: &Path) -> String {
    let agent = script(
        dir,
        "standin-agent.sh",
        &format!(
            r#"printf '%s\n' "$@" > '{}'
printf '{{"type":"result","is_error":false,"session_id":"sess-42","result":"reviewed %s"}}\n' "$CANOPY_HOOK_SPEC_NAME""#,
            dir.join("argv.txt").display()
        ),
    );
    format!(
        "[platforms.standin]\ncommand = [\"{}\", \"--print\", \"{{prompt}}\"]\nmodel_args = [\"--model\", \"{{model}}\"]\nresume_args = [\"--resume\", \"{{session}}\"]\n",
        agent.display()
    )
}

#[test]
fn agent_mode_runs_the_configured_platform_and_captures_its_session() {
    let tools = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with_config(&standin_agent_config(tools.path()));
    let workdir = tempfile::tempdir().unwrap();
    let argv_file = tools.path().join("argv.txt");
    let report = run_json(
        &daemon,
        "agent",
        None,
        json!({ "platform": "standin", "prompt": "Review {{spec_name}} in {{workdir}}", "model": "small" }),
        &[("spec_name", "Login form")],
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    assert_eq!(report["outcome"]["harness_session"], "sess-42");
    assert_eq!(report["outcome"]["summary"], "reviewed Login form");
    let argv = std::fs::read_to_string(&argv_file).unwrap();
    assert_eq!(
        argv,
        format!(
            "--print\nReview Login form in {}\n--model\nsmall\n",
            real(workdir.path())
        )
    );

    let unknown = run_error(
        &daemon,
        "agent",
        "agent",
        json!({ "platform": "gpt-cli", "prompt": "x" }),
        workdir.path(),
    );
    assert!(
        unknown.contains(
            "unknown agent platform `gpt-cli`; configured platforms: claude, codex, demo, standin"
        ),
        "{unknown}"
    );
}

#[test]
fn interactive_mode_stores_the_message_durably_with_its_provenance() {
    let daemon = Daemon::start();
    daemon.ok(&["session", "new", "--name", "reviewer"]);
    let workdir = tempfile::tempdir().unwrap();
    let report = run_json(
        &daemon,
        "interactive",
        None,
        json!({ "prompt": "graph {{graph_name}} is done; blocker {{blocker}}", "target_session_name": "reviewer" }),
        &[("graph_name", "nightly")],
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    let store = support::store_of(&daemon.data_dir);
    let message = store
        .read_blocking(|rd| rd.messages(None))
        .unwrap()
        .remove(0);
    drop(store);
    // Stored pending; the scheduler may already have delivered it to the session's inbox.
    assert!(
        matches!(message.status.as_str(), "pending" | "delivered"),
        "{:?}",
        message.status
    );
    assert_eq!(
        message.target,
        canopy_model::work::MessageTarget::Name("reviewer".to_string())
    );
    assert_eq!(message.text, "graph nightly is done; blocker (none)");
    assert_eq!(message.origin, "hook");
    assert_eq!(message.provenance.event, "manual");

    let both = run_error(
        &daemon,
        "interactive",
        "interactive",
        json!({ "prompt": "x", "target_session_id": "a", "target_session_name": "b" }),
        workdir.path(),
    );
    assert!(
        both.contains("set exactly one of `target_session_id` and `target_session_name`, not both"),
        "{both}"
    );
}

#[test]
fn docs_maintenance_appends_a_dated_changelog_and_refuses_changes_outside_the_docs() {
    let tools = tempfile::tempdir().unwrap();
    let sneaky = script(
        tools.path(),
        "sneaky-agent.sh",
        "echo '// touched' >> src/lib.rs; echo 'more docs' >> docs/guide.md; echo '{\"result\":\"updated docs\"}'",
    );
    let config = format!(
        "[platforms.sneaky]\ncommand = [\"{}\", \"{{prompt}}\"]\n",
        sneaky.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let repo = git_repo();
    let completed = "Login form — users can sign in\nPassword reset — reset by email";

    let report = run_json(
        &daemon,
        "docs-maintenance",
        None,
        json!({}),
        &[("completed_specs", completed), ("graph_name", "web")],
        repo.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    let changelog = std::fs::read_to_string(repo.path().join("docs/CHANGELOG.md")).unwrap();
    let today = report["outcome"]["detail"]
        .as_str()
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    assert!(
        today.starts_with("## 20") && today.ends_with(" — web"),
        "{today}"
    );
    assert_eq!(
        changelog,
        format!(
            "# Changelog\n\n{today}\n\n- Login form — users can sign in\n- Password reset — reset by email\n"
        )
    );

    let failed = run_json(
        &daemon,
        "docs-maintenance",
        None,
        json!({ "platform": "sneaky" }),
        &[("completed_specs", completed)],
        repo.path(),
    );
    assert_eq!(failed["outcome"]["status"], "failed", "{failed:#}");
    assert_eq!(
        failed["outcome"]["reason"],
        "docs maintenance changed files outside docs_paths (docs, README.md): src/lib.rs"
    );
}

#[test]
fn the_sdk_example_installs_and_appends_rendered_markers() {
    let daemon = Daemon::start();
    let refused = daemon.fails(&["plugin", "install", APPEND_FILE_WASM]);
    assert!(
        refused.contains("plugin `append-file` requests capabilities that were not granted: fs-write:.; install it with --grant fs-write:."),
        "{refused}"
    );
    let installed = daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);
    assert!(
        installed.starts_with("installed plugin append-file 0.1.0"),
        "{installed}"
    );
    // The same file again, with the same grant: it is there already; no --replace needed.
    daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);

    let workdir = tempfile::tempdir().unwrap();
    let report = run_json(
        &daemon,
        "append-file",
        None,
        json!({ "file": "log.txt", "line": "{{graph_name}} finished {{spec_name}} ({{blocker}})" }),
        &[("graph_name", "g"), ("spec_name", "s")],
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    run_json(
        &daemon,
        "append-file",
        None,
        json!({ "file": "log.txt" }),
        &[("spec_id", "abc")],
        workdir.path(),
    );
    let log = std::fs::read_to_string(workdir.path().join("log.txt")).unwrap();
    let mut expected = "g finished s ((none))\n".to_string();
    for marker in [
        "graph_name",
        "workdir",
        "completed_specs",
        "spec_name",
        "spec_id",
        "blocker",
        "node",
        "spec_body",
    ] {
        let value = match marker {
            "spec_id" => "abc".to_string(),
            "workdir" => real(workdir.path()),
            _ => "(none)".to_string(),
        };
        expected.push_str(&format!("{marker}={value}\n"));
    }
    assert_eq!(log, expected);
}

#[test]
fn a_plugin_built_against_contract_0_1_0_keeps_running() {
    let daemon = Daemon::start();
    daemon.ok(&[
        "plugin",
        "install",
        CONTRACT_V0_1_WASM,
        "--grant",
        "process",
    ]);
    let listed = daemon.json(&["plugin", "list"]);
    let contract_of = |name: &str| {
        listed["plugins"]
            .as_array()
            .and_then(|plugins| plugins.iter().find(|p| p["name"] == name))
            .map(|p| p["contract"].clone())
            .unwrap_or_else(|| panic!("no plugin {name} in {listed:#}"))
    };
    assert_eq!(contract_of("legacy"), "0.1.0");
    assert_eq!(contract_of("command"), "0.2.0");

    let workdir = tempfile::tempdir().unwrap();
    // Its calls get 0.1.0's values: a graph-shaped provenance, empty outside a graph run.
    let report = run_json(&daemon, "legacy", None, json!({}), &[], workdir.path());
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    assert_eq!(
        report["outcome"]["summary"], "contract 0.1.0: graph= run= event=manual",
        "{report:#}"
    );
    // Its host calls reach the host through the 0.1.0 interface.
    let report = run_json(
        &daemon,
        "legacy",
        None,
        json!({ "command": "printf 'made in '; pwd" }),
        &[],
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    assert_eq!(
        report["outcome"]["detail"],
        format!("made in {}\n", real(workdir.path())),
        "{report:#}"
    );
    let failed = run_json(
        &daemon,
        "legacy",
        None,
        json!({ "command": "echo no >&2; exit 3" }),
        &[],
        workdir.path(),
    );
    assert_eq!(failed["outcome"]["status"], "failed", "{failed:#}");
    assert_eq!(
        failed["outcome"]["reason"], "exited with Some(3): no",
        "{failed:#}"
    );
}

#[test]
fn plugin_run_reads_the_hosts_keys_and_hands_the_plugin_the_rest() {
    let daemon = Daemon::start();
    daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);
    install_hostile(&daemon);
    let workdir = tempfile::tempdir().unwrap();
    let inspect = daemon.ok(&["plugin", "inspect", "append-file"]);
    assert!(
        inspect.contains("Canopy's own keys (any mode; read by the daemon, never passed on): mode, spec_ids, timeout_seconds, timeout_minutes, timeout_ms, detach, priority, required"),
        "{inspect}"
    );

    // append-file's strict parser never sees `timeout_seconds`; the call gets it as its deadline.
    let report = run_json(
        &daemon,
        "append-file",
        None,
        json!({ "file": "log.txt", "line": "hi", "timeout_seconds": 3, "detach": false }),
        &[],
        workdir.path(),
    );
    assert_eq!(report["outcome"]["status"], "completed", "{report:#}");
    assert_eq!(report["deadline_ms"], 3000);
    assert_eq!(
        report["rendered_config"],
        json!({ "file": "log.txt", "line": "hi" })
    );
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("log.txt")).unwrap(),
        "hi\n"
    );

    // What the plugin itself received, in `execute` and in `validate`.
    let report = run_json(
        &daemon,
        "hostile",
        Some("hostile-config"),
        json!({ "text": "kept", "mode": "hostile-ok", "timeout_minutes": 2, "detach": true }),
        &[],
        workdir.path(),
    );
    assert_eq!(report["outcome"]["summary"], "120000", "{report:#}");
    let received: Value =
        serde_json::from_str(report["outcome"]["detail"].as_str().unwrap()).unwrap();
    assert_eq!(received, json!({ "text": "kept" }));
    let err = run_error(
        &daemon,
        "hostile",
        "hostile-config",
        json!({ "refuse": true, "timeout_seconds": 4 }),
        workdir.path(),
    );
    let received = err
        .split_once("validate received keys: ")
        .and_then(|(_, rest)| rest.lines().next());
    assert_eq!(received, Some("refuse"), "{err}");
    let err = run_error(
        &daemon,
        "hostile",
        "hostile-config",
        json!({ "spec_ids": ["3f2a"] }),
        workdir.path(),
    );
    assert!(
        err.contains(
            "`--config`: field `spec_ids` belongs to hooks of on_spec_completed and on_failed only"
        ),
        "{err}"
    );
}

#[test]
fn install_refuses_what_is_not_a_canopy_component() {
    let daemon = Daemon::start();
    let dir = tempfile::tempdir().unwrap();

    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "hello").unwrap();
    assert!(
        daemon
            .fails(&["plugin", "install", text.to_str().unwrap()])
            .contains("not a WebAssembly file")
    );

    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let err = daemon.fails(&["plugin", "install", core.to_str().unwrap()]);
    assert!(
        err.contains("core WebAssembly module, not a component"),
        "{err}"
    );

    // The example rebuilt against a contract version this host does not know.
    let mut bytes = std::fs::read(APPEND_FILE_WASM).unwrap();
    let (from, to) = (
        b"canopy:hooks/plugin@0.2.0".as_slice(),
        b"canopy:hooks/plugin@0.9.0".as_slice(),
    );
    let mut patched = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            patched += 1;
        }
        i += 1;
    }
    assert!(patched > 0);
    let future = dir.path().join("future.wasm");
    std::fs::write(&future, bytes).unwrap();
    let err = daemon.fails(&[
        "plugin",
        "install",
        future.to_str().unwrap(),
        "--grant",
        "fs-write:.",
    ]);
    assert!(err.contains("built against canopy:hooks@0.9.0, which this Canopy does not support (it supports canopy:hooks@0.1.0, canopy:hooks@0.2.0)"), "{err}");

    // The example rebuilt to import a WASI package the host does not provide: refused before
    // anything compiles it, naming the import.
    let mut bytes = std::fs::read(APPEND_FILE_WASM).unwrap();
    assert!(replace_all(&mut bytes, b"wasi:cli/", b"wasi:xyz/") > 0);
    let alien = dir.path().join("alien.wasm");
    std::fs::write(&alien, bytes).unwrap();
    let err = daemon.fails(&[
        "plugin",
        "install",
        alien.to_str().unwrap(),
        "--grant",
        "fs-write:.",
    ]);
    assert!(
        err.contains("the component imports `wasi:xyz/")
            && err.contains("which Canopy does not provide to plugins")
            && err.contains("build it without `wasi:xyz`"),
        "{err}"
    );

    // A component refused for a grant it lacks is compiled to ask who it is, but cached only
    // once installed: nothing is left in the cache.
    let cached = || {
        std::fs::read_dir(daemon.data_dir.join("cache"))
            .map(|entries| entries.count())
            .unwrap_or(0)
    };
    let before = cached();
    let err = daemon.fails(&["plugin", "install", APPEND_FILE_WASM]);
    assert!(err.contains("not granted"), "{err}");
    assert_eq!(
        cached(),
        before,
        "a refused install left an artifact in cache/"
    );

    let list = daemon.json(&["plugin", "list"]);
    assert_eq!(
        list["plugins"].as_array().unwrap().len(),
        5,
        "a refused install left something behind (the five built-ins are all there is)"
    );
}

/// Replaces every `from` in `bytes` by `to` (of the same length); returns how many.
fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) -> usize {
    let mut replaced = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            replaced += 1;
        }
        i += 1;
    }
    replaced
}

#[test]
fn cached_artifacts_no_installed_plugin_uses_go_at_start() {
    let mut daemon = Daemon::start();
    let cache = daemon.data_dir.join("cache");
    let kept: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!kept.is_empty(), "the built-ins' artifacts are cached");
    daemon.stop();
    // What a refused install or a crash of an older build could leave.
    for junk in [
        "0123456789abcdef-old.cwasm",
        "fedcba9876543210-x.cwasm.partial",
    ] {
        std::fs::write(cache.join(junk), b"junk").unwrap();
    }
    let data_dir = daemon.data_dir.clone();
    let _restarted = Daemon::start_on(&data_dir);
    let mut left: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut kept = kept;
    kept.sort();
    assert_eq!(left, kept, "only the installed plugins' artifacts stay");
}

#[test]
fn a_mode_served_by_another_plugin_needs_replace_and_builtins_are_disabled_not_deleted() {
    let daemon = Daemon::start();
    let err = daemon.fails(&["plugin", "install", IMPOSTOR_WASM]);
    assert!(
        err.contains("plugin `impostor` serves modes that are already served: `command` (served by `command`); pass --replace to take them over"),
        "{err}"
    );
    daemon.ok(&["plugin", "install", IMPOSTOR_WASM, "--replace"]);
    let command = daemon.json(&["plugin", "inspect", "command"]);
    assert_eq!(command["enabled"], false);

    let workdir = tempfile::tempdir().unwrap();
    let report = run_json(
        &daemon,
        "impostor",
        None,
        json!({ "command": "touch ran" }),
        &[],
        workdir.path(),
    );
    assert_eq!(
        report["outcome"]["summary"],
        "impostor would have run: touch ran"
    );

    let enable = daemon.fails(&["plugin", "enable", "command"]);
    assert!(
        enable.contains("mode `command` is served by `impostor`"),
        "{enable}"
    );
    assert_eq!(
        daemon.ok(&["plugin", "remove", "impostor"]).trim(),
        "removed plugin impostor"
    );
    daemon.ok(&["plugin", "enable", "command"]);
    let removed = daemon.ok(&["plugin", "remove", "command"]);
    assert!(
        removed.contains("disabled built-in plugin command"),
        "{removed}"
    );
    assert_eq!(
        daemon.json(&["plugin", "inspect", "command"])["enabled"],
        false
    );
}

#[test]
fn a_host_call_without_its_capability_is_refused_naming_it() {
    let daemon = Daemon::start();
    install_hostile(&daemon);
    let workdir = tempfile::tempdir().unwrap();
    let err = run_error(
        &daemon,
        "hostile",
        "hostile-spawn",
        json!({}),
        workdir.path(),
    );
    assert!(
        err.contains("plugin `hostile` lacks the `process` capability"),
        "{err}"
    );
    let err = run_error(
        &daemon,
        "hostile",
        "hostile-enqueue",
        json!({}),
        workdir.path(),
    );
    assert!(
        err.contains("plugin `hostile` lacks the `sessions` capability"),
        "{err}"
    );
}

#[test]
fn the_sandbox_keeps_a_plugin_inside_its_workdir() {
    let daemon = Daemon::start();
    install_hostile(&daemon);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let workdir = tempfile::tempdir().unwrap();
    let inner = workdir.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(inner.join("notes.txt"), "hello").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), inner.join("link.txt")).unwrap();
    let inner_real = real(&inner);

    let read = run_json(
        &daemon,
        "hostile",
        Some("hostile-read"),
        json!({ "path": format!("{inner_real}/notes.txt") }),
        &[],
        &inner,
    );
    assert_eq!(
        read["outcome"]["detail"], "hello",
        "the control read inside the workdir must work"
    );

    let escapes = [
        "/etc/passwd".to_string(),
        format!(
            "{inner_real}/../../{}/secret.txt",
            outside.path().file_name().unwrap().to_string_lossy()
        ),
        format!("{inner_real}/link.txt"),
        real(&outside.path().join("secret.txt")),
    ];
    for path in escapes {
        let err = run_error(
            &daemon,
            "hostile",
            "hostile-read",
            json!({ "path": path }),
            &inner,
        );
        assert!(
            err.contains(&format!("read {path}:")),
            "reading {path} should fail: {err}"
        );
        assert!(!err.contains("top secret"));
    }
    let err = run_error(
        &daemon,
        "hostile",
        "hostile-write",
        json!({ "path": format!("{inner_real}/new.txt") }),
        &inner,
    );
    assert!(err.contains("write "), "{err}");
    assert!(
        !inner.join("new.txt").exists(),
        "a read-only grant allowed a write"
    );
}

#[test]
fn a_runaway_plugin_fails_its_own_call_and_the_next_call_works() {
    let daemon = Daemon::start();
    install_hostile(&daemon);
    let workdir = tempfile::tempdir().unwrap();

    let spin = run_error(
        &daemon,
        "hostile",
        "hostile-spin",
        json!({ "timeout_seconds": 1 }),
        workdir.path(),
    );
    assert!(
        spin.contains("plugin `hostile 0.1.0` timed out: stopped after"),
        "{spin}"
    );

    let bomb = run_error(
        &daemon,
        "hostile",
        "hostile-bomb",
        json!({}),
        workdir.path(),
    );
    assert!(
        bomb.contains("plugin `hostile 0.1.0` exceeded its memory cap of 256 MiB and was stopped"),
        "{bomb}"
    );

    let trap = run_error(
        &daemon,
        "hostile",
        "hostile-trap",
        json!({}),
        workdir.path(),
    );
    assert!(trap.contains("plugin `hostile 0.1.0` trapped"), "{trap}");
    assert!(
        trap.contains("hostile plugin panics on purpose"),
        "the panic message is kept: {trap}"
    );

    let ok = run_json(
        &daemon,
        "hostile",
        Some("hostile-ok"),
        json!({}),
        &[],
        workdir.path(),
    );
    assert_eq!(ok["outcome"]["summary"], "fine");
}

#[test]
fn compiled_plugins_are_loaded_from_the_cache_on_the_next_start() {
    let mut daemon = Daemon::start();
    let first = daemon.json(&["plugin", "inspect", "command"]);
    assert_eq!(first["load"]["source"], "compiled");
    let data_dir = daemon.data_dir.clone();
    daemon.stop();
    let again = Daemon::start_on(&data_dir);
    let second = again.json(&["plugin", "inspect", "command"]);
    assert_eq!(second["load"]["source"], "cache");
    assert_eq!(second["sha256"], first["sha256"]);
    drop(again);
    drop(daemon);
}

#[test]
fn one_daemon_per_data_dir_and_a_cli_without_daemon_says_how_to_start_one() {
    let daemon = Daemon::start();
    let second = std::process::Command::new(support::CANOPY)
        .args(["daemon", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&daemon.data_dir)
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("another canopy daemon (pid ")
            && err.contains("is already running on data dir"),
        "{err}"
    );

    let empty = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(support::CANOPY)
        .args(["plugin", "list"])
        .env("CANOPY_HOME", empty.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains(&format!(
            "no canopy daemon is running for data dir {}",
            empty.path().display()
        )),
        "{err}"
    );
    assert!(
        err.contains("start one with `canopy daemon start --data-dir"),
        "{err}"
    );

    // --data-dir is accepted after the subcommand too.
    let output = std::process::Command::new(support::CANOPY)
        .args(["plugin", "list", "--json", "--data-dir"])
        .arg(&daemon.data_dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_api_answers_json_errors_with_fitting_statuses() {
    let daemon = Daemon::start();
    let (status, body) = daemon.get("/api/plugins/nope");
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("no plugin named `nope`; installed: agent, command")
    );

    let (status, body) = daemon.send(
        "POST",
        "/api/plugins/command/run",
        &json!({ "config": { "command": "true" } }),
    );
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("workdir"),
        "{body}"
    );

    let workdir = tempfile::tempdir().unwrap();
    let (status, body) = daemon.send(
        "POST",
        "/api/plugins/command/run",
        &json!({ "config": { "command": "echo {{spec_nme}}" }, "workdir": workdir.path() }),
    );
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_config");
    assert!(
        body["error"]["message"].as_str().unwrap().starts_with(
            "field `command`: unknown marker `{{spec_nme}}`; supported markers: {{graph_name}}"
        ),
        "{body}"
    );
}

#[test]
fn bench_reports_every_figure() {
    let daemon = Daemon::start();
    daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);
    let report = daemon.json(&["plugin", "bench", "append-file", "--iterations", "20"]);
    for figure in [
        "compile",
        "cache_load",
        "call",
        "bare_call",
        "spawn_true",
        "spawn_sh_true",
    ] {
        assert!(
            report[figure]["median_us"].as_f64().unwrap() > 0.0,
            "{figure}: {report:#}"
        );
    }
    assert_eq!(report["call"]["samples"], 20);
    assert_eq!(report["bare_call"]["samples"], 20);
    // The ratio printed is the two medians' (a debug build under load says nothing of speed).
    let ratio = report["call_over_bare"].as_f64().unwrap();
    let medians = report["call"]["median_us"].as_f64().unwrap()
        / report["bare_call"]["median_us"].as_f64().unwrap();
    assert!((ratio - medians).abs() < 1e-9, "{report:#}");
    assert_eq!(report["last_status"], "completed");
    let text = daemon.ok(&["plugin", "bench", "append-file", "--iterations", "5"]);
    assert!(text.contains("fresh instantiate + execute"), "{text}");
    assert!(text.contains("the same on bare wasmtime"), "{text}");
    assert!(text.contains("x the bare wasmtime call"), "{text}");
}

#[test]
fn a_builtin_from_an_older_build_is_reinstalled_and_keeps_its_disabled_state() {
    let mut daemon = Daemon::start();
    let current = daemon.json(&["plugin", "inspect", "interactive"]);
    daemon.ok(&["plugin", "remove", "interactive"]);
    daemon.stop();
    // Make the stored built-in look like it came from an older canopy.
    let store = support::store_of(&daemon.data_dir);
    store
        .write_blocking(|tx| {
            let mut record = tx
                .plugin("interactive")?
                .expect("the interactive plugin is recorded");
            record.sha256 = "feedface".to_string();
            record.version = "0.0.1".to_string();
            tx.put_plugin(&record)
        })
        .unwrap();
    drop(store);

    let again = Daemon::start_on(&daemon.data_dir);
    let upgraded = again.json(&["plugin", "inspect", "interactive"]);
    assert_eq!(upgraded["sha256"], current["sha256"]);
    assert_eq!(upgraded["version"], current["version"]);
    assert_eq!(
        upgraded["enabled"], false,
        "the operator disabled it; an upgrade must not re-enable it"
    );
    assert!(
        again.log().contains("built-in plugin installed"),
        "{}",
        again.log()
    );
}
