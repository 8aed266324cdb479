//! What a user sees when something is wrong, and the help around it, through the real CLI:
//! errors name the flag or the field of the user's file (with the closest known field for a
//! typo), never serde's internals; refusals name what is allowed; empty lists say they are
//! empty; every command's help has an example; `completions` and `-V` behave.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::*;

/// Writes `value` as a JSON file in `dir`; returns its path as a string.
fn json_file(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

/// Runs `canopy <args>` with no daemon behind it (help, completions, version).
fn canopy(args: &[&str]) -> std::process::Output {
    Command::new(CANOPY)
        .args(args)
        .env("CANOPY_HOME", "/nonexistent/canopy-data")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// No message a user reads may carry serde's or axum's wording about target types.
fn assert_no_serde_internals(message: &str) {
    for internal in [
        "Failed to deserialize",
        "target type",
        "at line 1 column",
        "invalid JSON body",
    ] {
        assert!(
            !message.contains(internal),
            "`{internal}` leaked into: {message}"
        );
    }
}

#[test]
fn errors_name_the_flag_and_the_field_the_user_typed() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let files = tempfile::tempdir().unwrap();
    let spec = daemon.add_spec("Login form");
    daemon.create_graph(json!({
        "name": "web",
        "workdir": repo.path(),
        "nodes": [{ "name": "test", "command": "true" }],
        "specs": [spec],
    }));

    // The flag, not the API field it is sent as.
    let err = daemon.fails(&["graph", "run", "web", "--queue", "sprint-9"]);
    assert!(err.contains("`--queue`"), "{err}");
    assert!(err.contains("sprint-9"), "{err}");
    assert!(!err.contains("queue_id"), "{err}");

    // A repeated argument is named by its position.
    let err = daemon.fails(&["queue", "create", "sprint-1", &spec, "zzzz"]);
    assert!(err.contains("`SPEC` #2"), "{err}");
    assert!(!err.contains("specs[1]"), "{err}");

    // A misspelt node field: an unknown field, with the closest known one, in the user's file.
    let file = json_file(
        files.path(),
        "typo.json",
        &json!({ "name": "api", "workdir": repo.path(), "nodes": [{ "name": "build", "comand": "make" }] }),
    );
    let err = daemon.fails(&["graph", "create", &file]);
    assert!(
        err.contains(&format!(
            "{file}: nodes[0] (`build`): unknown field `comand`; did you mean `command`?"
        )),
        "{err}"
    );

    // A misspelt field of an executor's config: the candidates are its schema's fields.
    let file = json_file(
        files.path(),
        "timeout.json",
        &json!({ "name": "api", "workdir": repo.path(), "nodes": [{ "name": "build", "command": "make", "timout_seconds": 5 }] }),
    );
    let err = daemon.fails(&["graph", "create", &file]);
    assert!(
        err.contains("unknown field `timout_seconds`; did you mean `timeout_seconds`?"),
        "{err}"
    );
    assert!(!err.contains("invalid config"), "{err}");

    // The same in a hook, through `graph edit`.
    let file = json_file(
        files.path(),
        "hook.json",
        &json!({ "hooks": { "on_completed": [{ "mode": "docs-maintenance", "doc_paths": ["docs"] }] } }),
    );
    let err = daemon.fails(&["graph", "edit", "web", &file]);
    assert!(
        err.contains(
            "hooks.on_completed[0] (docs-maintenance mode): unknown field `doc_paths`; did you mean `docs_paths`?"
        ),
        "{err}"
    );

    // A misspelt event.
    let file = json_file(
        files.path(),
        "event.json",
        &json!({ "hooks": { "on_complete": [{ "command": "true" }] } }),
    );
    let err = daemon.fails(&["graph", "edit", "web", &file]);
    assert!(
        err.contains("unknown event `on_complete`; did you mean `on_completed`?"),
        "{err}"
    );

    // Fields of the graph itself: named, with what they must be, and no serde internals.
    let file = json_file(
        files.path(),
        "graph.json",
        &json!({ "name": "api", "workdir": repo.path(), "nodse": [] }),
    );
    let err = daemon.fails(&["graph", "create", &file]);
    assert!(
        err.contains(&format!(
            "{file}: unknown field `nodse`; did you mean `nodes`?"
        )),
        "{err}"
    );
    assert_no_serde_internals(&err);
    let file = json_file(
        files.path(),
        "dirty.json",
        &json!({ "allow_dirty_start": "yes" }),
    );
    let err = daemon.fails(&["graph", "edit", "web", &file]);
    assert!(
        err.contains("field `allow_dirty_start` must be a boolean, got string \"yes\""),
        "{err}"
    );
    assert_no_serde_internals(&err);

    // The API says the same to any client, without the CLI's help.
    let (status, answer) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "api", "workdir": repo.path(), "nodes": [], "specs": "all" }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "field `specs` must be a sequence, got string \"all\""
    );

    // An empty id says what is wrong instead of reaching for a route.
    let err = daemon.fails(&["spec", "show", ""]);
    assert!(err.contains("invalid value '' for '<SPEC>'"), "{err}");
    assert!(err.contains("it is empty"), "{err}");
    assert!(!err.contains("route"), "{err}");

    // A continue mode that does not exist is refused naming the modes, whatever the graph's state.
    let err = daemon.fails(&["graph", "continue", "web", "--mode", "bogus"]);
    assert!(
        err.contains("invalid value 'bogus' for '--mode <MODE>'"),
        "{err}"
    );
    assert!(
        err.contains("run_from_node") && err.contains("skip_next_spec"),
        "{err}"
    );
    let err = daemon.fails(&["graph", "continue", "web", "--mode", "run_from_node"]);
    assert!(err.contains("--node <NODE>"), "{err}");

    // An unknown hook event in `hooks test` is named as the argument, with the closest event.
    let err = daemon.fails(&["hooks", "test", "web", "on_complete"]);
    assert!(
        err.contains("`EVENT`: unknown event `on_complete`; did you mean `on_completed`?"),
        "{err}"
    );
    let err = daemon.fails(&["hooks", "runs", "--since", "yesterday"]);
    assert!(err.contains("`--since`"), "{err}");
}

#[test]
fn a_disabled_plugin_is_named_once_and_graphs_using_it_are_listed() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let spec = daemon.add_spec("Login form");
    daemon.create_graph(json!({
        "name": "web",
        "workdir": repo.path(),
        "nodes": [{ "name": "test", "command": "true" }],
        "specs": [spec],
        "hooks": { "on_failed": [{ "mode": "docs-maintenance" }] },
    }));
    daemon.create_graph(json!({
        "name": "api",
        "workdir": repo.path(),
        "nodes": [{ "name": "test", "command": "true" }],
    }));
    daemon.ok(&["graph", "run", "web", "--wait"]);

    // Removing (for a built-in: disabling) a plugin a graph uses warns, listing where.
    let output = daemon.cli(&["plugin", "remove", "docs-maintenance"]);
    assert!(output.status.success());
    let out = text(&output.stdout);
    let err = text(&output.stderr);
    assert!(
        out.contains("disabled built-in plugin docs-maintenance"),
        "{out}"
    );
    assert!(
        err.contains("warning: graph web still uses mode `docs-maintenance`"),
        "{err}"
    );
    assert!(
        err.contains("web: hooks.on_failed[0] (docs-maintenance mode)"),
        "{err}"
    );
    assert!(!err.contains("api"), "{err}");

    // `hooks test` says the plugin is disabled, once: not an unknown mode, not "would fire".
    let output = daemon.cli(&["hooks", "test", "web", "on_failed"]);
    let out = text(&output.stdout);
    assert!(!output.status.success(), "{out}");
    assert_eq!(out.matches("disabled").count(), 1, "{out}");
    assert!(
        out.contains("would not fire: mode `docs-maintenance` is served by plugin `docs-maintenance`, which is disabled; `canopy plugin enable docs-maintenance` enables it"),
        "{out}"
    );
    assert!(!out.contains("unknown mode"), "{out}");
    assert!(!out.contains("would fire"), "{out}");

    // Removing a plugin no graph uses warns about nothing.
    daemon.ok(&["plugin", "enable", "docs-maintenance"]);
    // Enabled again, the hook would fire; a config of Canopy's keys alone renders to `{}`, said.
    let output = daemon.cli(&["hooks", "test", "web", "on_failed"]);
    let out = text(&output.stdout);
    assert!(
        out.contains("rendered: {} (no fields of the executor's own to render)"),
        "{out}"
    );
    daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);
    let output = daemon.cli(&["plugin", "remove", "append-file"]);
    assert!(output.status.success());
    assert_eq!(text(&output.stderr), "");
}

#[test]
fn graph_create_warns_when_the_workdir_is_not_a_git_repository() {
    let daemon = Daemon::start();
    let plain = tempfile::tempdir().unwrap();
    let repo = git_repo();
    let files = tempfile::tempdir().unwrap();
    let graph = |name: &str, workdir: &Path| {
        json_file(
            files.path(),
            &format!("{name}.json"),
            &json!({ "name": name, "workdir": workdir, "nodes": [{ "name": "test", "command": "true" }] }),
        )
    };

    let output = daemon.cli(&["graph", "create", &graph("plain", plain.path())]);
    assert!(output.status.success());
    let err = text(&output.stderr);
    assert!(
        err.contains(&format!(
            "warning: workdir {} is not a git repository",
            real(plain.path())
        )),
        "{err}"
    );
    assert!(err.contains("dirty-tree guard"), "{err}");
    assert!(
        text(&output.stdout).contains("created graph plain"),
        "{output:?}"
    );

    let answer = daemon.json(&["graph", "create", &graph("guarded", repo.path())]);
    assert_eq!(answer["warnings"], json!([]), "{answer}");

    // An edit that moves a graph out of git says so too.
    let edit = json_file(
        files.path(),
        "move.json",
        &json!({ "workdir": plain.path() }),
    );
    let (status, answer) = daemon.send(
        "PATCH",
        "/api/graphs/guarded",
        &serde_json::from_str(&std::fs::read_to_string(&edit).unwrap()).unwrap(),
    );
    assert_eq!(status, 200, "{answer}");
    let warnings = answer["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{answer}");
}

#[test]
fn empty_lists_say_so_and_tables_name_their_time_zone() {
    let daemon = Daemon::start();
    let expectations = [
        (&["spec", "list"][..], "no specs"),
        (&["graph", "list"][..], "no graphs"),
        (&["queue", "list"][..], "no queues"),
        (&["hooks", "runs"][..], "no hook runs yet"),
        (&["hooks", "list"][..], "no hooks configured"),
        (&["session", "list"][..], "no live sessions"),
        (&["session", "recall"][..], "no messages to recall"),
        (&["session", "notifications"][..], "no notifications"),
    ];
    for (args, expected) in expectations {
        let out = daemon.ok(args);
        assert!(out.starts_with(expected), "canopy {args:?}: {out}");
        assert!(!out.contains("NAME  "), "no bare headers: {out}");
    }
    let out = daemon.ok(&["queue", "create", "sprint-1"]);
    assert!(out.contains("no members"), "{out}");

    let repo = git_repo();
    let spec = daemon.add_spec("Login form");
    daemon.create_graph(json!({
        "name": "web",
        "workdir": repo.path(),
        "nodes": [{ "name": "test", "command": "true" }],
        "specs": [spec],
        "hooks": { "on_completed": [{ "command": "true" }] },
    }));
    let out = daemon.ok(&["graph", "info", "web"]);
    assert!(out.contains("no node runs yet"), "{out}");
    daemon.ok(&["graph", "run", "web", "--wait"]);
    let out = daemon.ok(&["graph", "info", "web"]);
    assert!(out.contains("STARTED (UTC)"), "{out}");
    assert!(out.contains(" UTC"), "the run line says UTC: {out}");
    wait_for(
        "the on_completed hook run",
        std::time::Duration::from_secs(30),
        || {
            let out = daemon.ok(&["hooks", "runs", "--graph", "web"]);
            out.starts_with("FIRED").then_some(out)
        },
    );
    let out = daemon.ok(&["hooks", "runs", "--graph", "web"]);
    assert!(out.starts_with("FIRED (UTC)"), "{out}");
    let out = daemon.ok(&["hooks", "runs", "--graph", "web", "--status", "failed"]);
    assert!(out.starts_with("no hook runs match"), "{out}");
}

#[test]
fn help_has_examples_and_descriptions_and_completions_and_version_behave() {
    // Every positional argument is described, and every command's help has an example.
    for args in [
        &["spec", "show", "--help"][..],
        &["graph", "run", "--help"][..],
        &["graph", "continue", "--help"][..],
        &["queue", "group", "--help"][..],
        &["hooks", "test", "--help"][..],
        &["session", "inbox", "--help"][..],
        &["plugin", "run", "--help"][..],
        &["graph", "--help"][..],
        &["--help"][..],
    ] {
        let output = canopy(args);
        assert!(output.status.success(), "canopy {args:?}");
        let help = text(&output.stdout);
        if args == ["--help"] {
            // Says what Canopy is (not the description of the crate the CLI lives in).
            assert!(
                help.starts_with("Canopy: a daemon and CLI that runs agent work as graphs"),
                "{help}"
            );
        }
        assert!(help.contains("Example"), "canopy {args:?}:\n{help}");
        // clap prints a positional's description after it on its line, or (long help) on the
        // next line; without one, the line holds only `<NAME>` and the next is not about it.
        let lines: Vec<&str> = help.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let trimmed = line.trim();
            if !(trimmed.starts_with('<') || trimmed.starts_with("[<")) {
                continue;
            }
            let next = lines.get(index + 1).map_or("", |l| l.trim());
            let described = trimmed.split_whitespace().count() > 1
                || !(next.is_empty() || next.starts_with('<') || next.starts_with('-'));
            assert!(
                described,
                "canopy {args:?}: positional without a description: {line}"
            );
        }
    }
    let help = text(&canopy(&["spec", "show", "--help"]).stdout);
    assert!(
        help.contains("<SPEC>  The spec's id or a unique id prefix"),
        "{help}"
    );

    // -V belongs to the top-level command alone.
    let output = canopy(&["-V"]);
    assert!(output.status.success());
    assert!(text(&output.stdout).starts_with("canopy "), "{output:?}");
    let output = canopy(&["graph", "-V"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("unexpected argument '-V'"),
        "{output:?}"
    );
    assert!(!text(&canopy(&["graph", "--help"]).stdout).contains("--version"));

    // Completions, without a daemon.
    for (shell, marker) in [
        ("bash", "_canopy()"),
        ("zsh", "#compdef canopy"),
        ("fish", "complete -c canopy"),
    ] {
        let output = canopy(&["completions", shell]);
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = text(&output.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("continue"), "{shell} completes subcommands");
    }
    let output = canopy(&["completions", "tcsh"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("possible values"),
        "{output:?}"
    );
}

#[test]
fn names_with_control_characters_are_refused_before_anything_is_written() {
    let daemon = Daemon::start();
    let body = spec_body("control characters");
    // A NUL cannot reach a node's environment (every run of the spec failed to start), and an
    // escape sequence would redraw the terminal of whoever lists specs.
    for name in ["a\u{0}b", "red \u{1b}[31m", "tab\there", "two\nlines"] {
        let (status, answer) =
            daemon.send("POST", "/api/specs", &json!({ "name": name, "body": body }));
        assert_eq!(status, 400, "{name:?}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("field `name` must be one line of 1 to 200 characters, without control characters"),
            "{answer}"
        );
    }
    // A body is text: a NUL in it is refused, naming its line.
    let nul_body = body.replacen("control characters", "control\u{0}characters", 1);
    let (status, answer) = daemon.send(
        "POST",
        "/api/specs",
        &json!({ "name": "nul body", "body": nul_body }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("field `body` holds a NUL byte (line 3)"),
        "{answer}"
    );
    let (_, specs) = daemon.get("/api/specs");
    assert_eq!(specs["specs"].as_array().map(Vec::len), Some(0), "{specs}");
    let (status, answer) = daemon.send("POST", "/api/queues", &json!({ "name": "sprint\u{0}1" }));
    assert_eq!(status, 400, "{answer}");
    // An executor config is handed to processes too.
    let workdir = tempfile::tempdir().unwrap();
    let (status, answer) = daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "nul", "workdir": workdir.path(), "nodes": [{ "name": "n", "command": "echo a\u{0}b" }] }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("nodes[0] (`n`)") && message.contains("`command` holds a NUL byte"),
        "{answer}"
    );
    // The CLI says the same.
    let file = tempfile::tempdir().unwrap();
    let spec = file.path().join("spec.md");
    std::fs::write(&spec, &body).unwrap();
    let err = daemon.fails(&[
        "spec",
        "add",
        "--name",
        "tab\there",
        "--file",
        spec.to_str().unwrap(),
    ]);
    assert!(err.contains("without control characters"), "{err}");
}
