//! Daemon hooks from canopy.toml end to end: event globs and payload matches, node and role
//! narrowing, what a hook's command is handed, the dispatch-depth limit that ends a hook loop,
//! `config validate` / `config reload`, and `on_spec_failed`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{CANOPY, Daemon, git_repo, wait_for};

/// The daemon hooks' runs (source `config`), oldest first, once `count` of them have ended.
fn config_runs(daemon: &Daemon, count: usize) -> Vec<Value> {
    daemon.ended_hook_runs("config", count)
}

/// `KEY=value` lines a hook wrote with `env`, as a map.
fn env_file(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run_graph(daemon: &Daemon, name: &str, workdir: &Path, command: &str) -> Value {
    let spec = daemon.add_spec(&format!("spec of {name}"));
    daemon.create_graph(json!({
        "name": name, "workdir": workdir, "specs": [spec],
        "nodes": [{ "name": "n", "command": command }],
    }));
    daemon.control_ok(name, json!({ "action": "run" }));
    daemon.settled(name)
}

#[test]
fn a_daemon_hook_fires_on_a_glob_with_a_payload_match_and_gets_the_event() {
    let out = tempfile::tempdir().unwrap();
    let env_log = out.path().join("env.txt");
    let config = format!(
        r#"
node = "build-1"

[[hooks]]
name = "on-web-runs"
event = "graph.run.*"
match = {{ graph_name = "web-*" }}
timeout_secs = 20
action = {{ command = "env | grep -E '^CANOPY_' >> {log}" }}
"#,
        log = env_log.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let repo = git_repo();

    run_graph(&daemon, "web-1", repo.path(), "true");
    // graph.run.started and graph.run.completed both match the glob.
    let runs = config_runs(&daemon, 2);
    let events: Vec<&str> = runs.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(
        events,
        ["graph.run.started", "graph.run.completed"],
        "{runs:#?}"
    );
    for run in &runs {
        assert_eq!(run["hook_name"], "on-web-runs");
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["dispatch_depth"], 0);
        assert!(run["feed_id"].as_i64().is_some(), "{run}");
    }

    // Another graph's runs do not match `web-*`.
    run_graph(&daemon, "api", repo.path(), "true");
    let (_, feed_runs) = daemon.get("/api/runs?graph=api&last=1");
    assert_eq!(feed_runs["runs"][0]["status"], "completed");
    let after = config_runs(&daemon, 2);
    assert_eq!(after.len(), 2, "no run for graph `api`: {after:#?}");

    // What the command saw: the event as JSON, its name, node, project, fields, and who it
    // acts as.
    let seen = env_file(&env_log);
    assert_eq!(seen["CANOPY_HOOK_EVENT"], "graph.run.completed");
    assert_eq!(seen["CANOPY_HOOK_NODE"], "build-1");
    assert_eq!(seen["CANOPY_HOOK_GRAPH_NAME"], "web-1");
    assert_eq!(
        std::fs::canonicalize(&seen["CANOPY_HOOK_PROJECT"]).unwrap(),
        std::fs::canonicalize(repo.path()).unwrap()
    );
    assert_eq!(seen["CANOPY_ACTOR"], "hook:on-web-runs");
    assert_eq!(seen["CANOPY_AUTOMATION_ID"], "hook:on-web-runs");
    assert_eq!(seen["CANOPY_DISPATCH_DEPTH"], "1");
    let data: Value = serde_json::from_str(&seen["CANOPY_HOOK_DATA"]).unwrap();
    assert_eq!(data["event"], "graph.run.completed");
    assert_eq!(data["node"], "build-1");
    assert_eq!(data["payload"]["graph_name"], "web-1");
    assert!(data["id"].as_i64().is_some(), "{data}");
}

#[test]
fn a_hook_runs_only_on_its_nodes_and_roles() {
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("fired.log");
    let hook = |name: &str, narrow: &str| {
        format!(
            "[[hooks]]\nname = \"{name}\"\nevent = \"spec.created\"\n{narrow}\naction = {{ command = \"echo {name} >> {log}\" }}\n",
            log = log.display()
        )
    };
    let config = [
        "node = \"n1\"\nroles = [\"worker\"]\n".to_string(),
        hook("other-node", "nodes = [\"n2\"]"),
        hook("controller-only", "roles_permitted = [\"controller\"]"),
        hook(
            "here",
            "nodes = [\"n1\"]\nroles_permitted = [\"worker\", \"controller\"]",
        ),
        hook("everywhere", ""),
    ]
    .concat();
    let daemon = Daemon::start_with_config(&config);
    daemon.add_spec("one");
    let runs = config_runs(&daemon, 2);
    let mut names: Vec<&str> = runs
        .iter()
        .map(|r| r["hook_name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["everywhere", "here"]);
    let mut fired: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    fired.sort();
    assert_eq!(fired, ["everywhere", "here"]);
}

#[test]
fn a_hook_loop_stops_at_the_dispatch_depth_limit_with_dropped_records() {
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Each completed run of `loop` starts it again, from inside the hook: every run is one
    // dispatch level deeper than the one before, whatever the hook's process claims (it strips
    // and forges the variables it was handed; its call token says who it is).
    let config = format!(
        r#"
[limits]
max_dispatch_depth = 2

[[hooks]]
name = "again"
event = "graph.run.completed"
match = {{ graph_name = "loop" }}
timeout_secs = 30
action = {{ command = "env -u CANOPY_DISPATCH_DEPTH CANOPY_ACTOR=user {canopy} --data-dir {data} graph run loop" }}
"#,
        canopy = CANOPY,
        data = data.display()
    );
    std::fs::write(data.join("canopy.toml"), config).unwrap();
    let daemon = Daemon::start_on(&data);
    let repo = git_repo();
    run_graph(&daemon, "loop", repo.path(), "true");

    // Depths 0, 1 and 2 fire the hook; the run it starts at depth 3 completes, and its hook
    // run is recorded dropped instead of running.
    let runs = config_runs(&daemon, 4);
    let statuses: Vec<(&str, i64)> = runs
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap(),
                r["dispatch_depth"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("completed", 0),
            ("completed", 1),
            ("completed", 2),
            ("dropped", 3)
        ],
        "{runs:#?}"
    );
    assert!(
        runs[3]["error"]
            .as_str()
            .unwrap()
            .contains("past the limit of 2"),
        "{}",
        runs[3]
    );
    let (_, all) = daemon.get("/api/runs?graph=loop&last=100");
    assert_eq!(all["runs"].as_array().unwrap().len(), 4, "{all:#}");
    // The runs the hook started are on record as the hook's, one level deeper each time.
    let (_, feed) = daemon.get("/api/feed?event=graph.run.started&last=100");
    let events = feed["events"].as_array().unwrap();
    let actors: Vec<(&str, i64)> = events
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap(),
                e["dispatch_depth"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actors,
        [
            ("user", 0),
            ("hook:again", 1),
            ("hook:again", 2),
            ("hook:again", 3)
        ]
    );
}

#[test]
fn config_reload_refuses_a_bad_file_whole_and_applies_a_good_one() {
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("fired.log");
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let hook = |name: &str, event: &str| {
        format!(
            "[[hooks]]\nname = \"{name}\"\nevent = \"{event}\"\naction = {{ command = \"echo {name} >> {log}\" }}\n",
            log = log.display()
        )
    };
    let file = data.join("canopy.toml");
    std::fs::write(&file, hook("first", "spec.created")).unwrap();
    let daemon = Daemon::start_on(&data);

    // A file with several mistakes: every one is named with its path, nothing changes.
    std::fs::write(
        &file,
        format!(
            "{}{}[[hooks]]\nname = \"bad-action\"\nevent = \"spec.*\"\naction = {{ comand = \"x\" }}\n[limits]\nmax_concurrent_calls = 0\n",
            hook("second", "spec.craeted"),
            hook("second", "graph.*"),
        ),
    )
    .unwrap();
    let err = daemon.fails(&["config", "reload"]);
    for expected in [
        "nothing changed",
        "hooks[0].event: `spec.craeted` matches no event; did you mean `spec.created`?",
        "hooks[1].name: `second` names another hook too",
        "hooks[2].action: unknown field `comand`; did you mean `command`?",
        "limits.max_concurrent_calls: must be from 1 to 1024",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    let validate = daemon.cli(&["config", "validate"]);
    assert!(!validate.status.success());
    let text = String::from_utf8_lossy(&validate.stderr);
    assert!(text.contains("hooks[0].event"), "{text}");
    // The old hook is still the one in force.
    daemon.add_spec("a");
    let runs = config_runs(&daemon, 1);
    assert_eq!(runs[0]["hook_name"], "first");

    // A good file is put in force at once; a changed listen address needs a restart.
    std::fs::write(
        &file,
        format!("listen = \"127.0.0.1:1\"\n{}", hook("second", "spec.*")),
    )
    .unwrap();
    let answer = daemon.json(&["config", "reload"]);
    assert_eq!(answer["report"]["hooks"], 1);
    assert_eq!(answer["report"]["applied"], json!(["hooks"]));
    assert_eq!(answer["report"]["needs_restart"], json!(["listen"]));
    daemon.add_spec("b");
    let runs = config_runs(&daemon, 2);
    assert_eq!(runs[1]["hook_name"], "second");
    assert_eq!(runs[1]["event"], "spec.created");

    // Webhook entries are put in force too (the listener's own settings are what needs a
    // restart: tests/webhooks.rs).
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:1\"\n[webhooks.entries.x]\ntype = \"command\"\ntoken = \"t0k3n-reload\"\ncommand = \"true\"\n{}",
            hook("second", "spec.*")
        ),
    )
    .unwrap();
    let answer = daemon.json(&["config", "reload"]);
    // (`listen` changed at the reload before; this one changes only the webhooks.)
    assert_eq!(answer["report"]["applied"], json!(["webhooks"]), "{answer}");
    assert_eq!(answer["report"]["needs_restart"], json!([]), "{answer}");
}

#[test]
fn on_spec_failed_fires_for_a_failing_spec_with_its_node_and_reason() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("failed.log");
    let spec = daemon.add_spec("doomed");
    daemon.create_graph(json!({
        "name": "g", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "build", "command": "echo broken >&2; exit 3" }],
        "hooks": { "on_spec_failed": [
            { "command": format!("echo {{{{spec_name}}}} {{{{node}}}} >> {}", log.display()) }
        ] },
    }));
    daemon.control_ok("g", json!({ "action": "run" }));
    assert_eq!(daemon.settled("g")["status"], "failed");
    let runs = wait_for(
        "the on_spec_failed hook run",
        Duration::from_secs(60),
        || {
            let (_, answer) = daemon.get("/api/hook-runs?graph=g&event=on_spec_failed");
            let runs = answer["runs"].as_array().cloned().unwrap_or_default();
            (runs.len() == 1 && runs[0]["status"] == "completed").then_some(runs)
        },
    );
    assert_eq!(runs[0]["spec_id"], spec.as_str());
    assert_eq!(runs[0]["hook_name"], "g.on_spec_failed[0]");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().trim(),
        "doomed build"
    );
}

#[test]
fn a_fifo_in_place_of_the_config_is_refused_and_the_api_keeps_answering() {
    let daemon = Daemon::start();
    let file = daemon.data_dir.join("canopy.toml");
    let _ = std::fs::remove_file(&file);
    let path = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path of our own.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    // A reader of a FIFO waits for a writer: none ever comes.
    let err = daemon.fails(&["config", "reload"]);
    assert!(err.contains("is not a regular file"), "{err}");
    let err = daemon.fails(&["config", "validate"]);
    assert!(err.contains("is not a regular file"), "{err}");
    let (status, _) = daemon.get("/api/health");
    assert_eq!(status, 200);
    // A file too large to be a configuration.
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, vec![b'#'; 5 * 1024 * 1024]).unwrap();
    let err = daemon.fails(&["config", "reload"]);
    assert!(
        err.contains("a configuration may be at most 4 MiB"),
        "{err}"
    );
}
