//! The hooks read APIs of seed 004 end to end: the hook catalog resolved across graph hooks and
//! the daemon hooks of `canopy.toml`, the event taxonomy, and hook-run history in the seed's
//! terms (also per workspace), each filter included, and bad filters refused naming the
//! parameter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, git_repo, real, wait_for};

/// Percent-encodes a path for a URL path segment or query value.
fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The hook names an answer lists, in order.
fn names(answer: &Value, list: &str) -> Vec<String> {
    answer[list]
        .as_array()
        .unwrap_or_else(|| panic!("no `{list}` in {answer}"))
        .iter()
        .map(|h| h["name"].as_str().unwrap().to_string())
        .collect()
}

/// GETs a path that must answer 200.
fn get_ok(daemon: &Daemon, path: &str) -> Value {
    let (status, body) = daemon.get(path);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// GETs a path that must answer 400 with a message naming `parameter` and containing `detail`.
fn refused(daemon: &Daemon, path: &str, parameter: &str, detail: &str) {
    let (status, body) = daemon.get(path);
    assert_eq!(status, 400, "{path}: {body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("`{parameter}`")) && message.contains(detail),
        "{path}: {message}"
    );
}

const DAEMON_HOOKS: &str = r#"
[[hooks]]
name = "announce-blocked"
event = "graph.run.blocked"
match = { graph_name = "web" }
timeout_secs = 15
action = { command = "true" }

[[hooks]]
name = "every-spec"
event = "spec.*"
nodes = ["elsewhere"]
action = { command = "true" }

[[hooks]]
name = "pinned"
event = "graph.run.completed"
match = { project = "/nowhere" }
action = { command = "true" }
"#;

#[test]
fn the_catalog_lists_graph_and_daemon_hooks_and_every_filter_narrows_it() {
    let daemon = Daemon::start_with_config(DAEMON_HOOKS);
    let web_repo = git_repo();
    let api_repo = git_repo();
    let web_dir = real(web_repo.path());
    let spec = daemon.add_spec("A");
    daemon.create_graph(json!({
        "name": "web", "workdir": web_repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "true" }],
        "hooks": {
            "on_completed": [{ "command": "true", "timeout_seconds": 30 }, { "mode": "docs-maintenance" }],
            "on_spec_completed": [{ "command": "echo {{spec_name}}", "spec_ids": [&spec] }]
        }
    }));
    daemon.create_graph(json!({
        "name": "api", "workdir": api_repo.path(),
        "nodes": [{ "name": "n", "command": "true" }],
        "hooks": { "on_failed": [{ "command": "true" }] }
    }));

    let all = get_ok(&daemon, "/api/hooks/catalog");
    let every: BTreeSet<String> = names(&all, "hooks").into_iter().collect();
    let expected: BTreeSet<String> = [
        "web.on_completed[0]",
        "web.on_completed[1]",
        "web.on_spec_completed[0]",
        "api.on_failed[0]",
        "announce-blocked",
        "every-spec",
        "pinned",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(every, expected, "{all:#}");
    let hook = |name: &str| -> Value {
        all["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == name)
            .cloned()
            .unwrap()
    };
    // Every entry has the seed's fields.
    for entry in all["hooks"].as_array().unwrap() {
        for field in [
            "event",
            "executor_kind",
            "matcher",
            "metadata",
            "mode",
            "name",
            "order",
            "priority",
            "required",
            "source",
            "timeout_ms",
        ] {
            assert!(entry.get(field).is_some(), "no `{field}` in {entry:#}");
        }
        assert_eq!(entry["mode"], "async");
        assert_eq!(entry["priority"], 0);
        assert_eq!(entry["required"], false);
        assert!(
            entry["metadata"]
                .as_object()
                .unwrap()
                .values()
                .all(Value::is_string),
            "metadata is a string map: {entry:#}"
        );
    }

    // A graph's hook: its key mapped to its taxonomy event, and today's fields kept.
    let on_completed = hook("web.on_completed[0]");
    assert_eq!(on_completed["source"], "graph");
    assert_eq!(on_completed["event"], "graph.run.completed");
    assert_eq!(on_completed["key"], "on_completed");
    assert_eq!(on_completed["executor_kind"], "command");
    assert_eq!(on_completed["executor"]["name"], "command");
    assert_eq!(on_completed["timeout_ms"], 30_000);
    assert_eq!(on_completed["order"], 0);
    assert_eq!(on_completed["index"], 0);
    assert_eq!(on_completed["graph"], "web");
    assert_eq!(on_completed["matcher"]["graph"], "web");
    assert_eq!(on_completed["metadata"]["graph"], "web");
    assert_eq!(on_completed["metadata"]["key"], "on_completed");
    assert_eq!(on_completed["metadata"]["workdir"], web_dir.as_str());
    assert_eq!(hook("web.on_completed[1]")["order"], 1);
    // No timeout of its own: the catalog shows the default it runs with, never null.
    assert_eq!(hook("web.on_completed[1]")["timeout_ms"], 600_000);
    let per_spec = hook("web.on_spec_completed[0]");
    assert_eq!(per_spec["event"], "spec.completed");
    assert_eq!(per_spec["matcher"]["spec_ids"], json!([spec]));
    assert_eq!(per_spec["spec_ids"], json!([spec]));

    // A daemon hook: its name, match fields, node filters and timeout.
    let announce = hook("announce-blocked");
    assert_eq!(announce["source"], "config");
    assert_eq!(announce["event"], "graph.run.blocked");
    assert_eq!(announce["executor_kind"], "command");
    assert_eq!(announce["matcher"], json!({ "graph_name": "web" }));
    assert_eq!(announce["timeout_ms"], 15_000);
    assert_eq!(announce["order"], 0);
    assert_eq!(announce["metadata"]["serves_this_node"], "true");
    let every_spec = hook("every-spec");
    assert_eq!(every_spec["order"], 1);
    assert_eq!(every_spec["matcher"]["nodes"], json!(["elsewhere"]));
    assert_eq!(every_spec["metadata"]["nodes"], "elsewhere");
    assert_eq!(every_spec["metadata"]["serves_this_node"], "false");
    assert_eq!(every_spec["timeout_ms"], 600_000);

    let listed = |query: &str| -> BTreeSet<String> {
        names(
            &get_ok(&daemon, &format!("/api/hooks/catalog?{query}")),
            "hooks",
        )
        .into_iter()
        .collect()
    };
    let set =
        |items: &[&str]| -> BTreeSet<String> { items.iter().map(|s| (*s).to_string()).collect() };
    assert_eq!(
        listed("source=config"),
        set(&["announce-blocked", "every-spec", "pinned"])
    );
    assert_eq!(
        listed("source=graph"),
        set(&[
            "web.on_completed[0]",
            "web.on_completed[1]",
            "web.on_spec_completed[0]",
            "api.on_failed[0]"
        ])
    );
    // A taxonomy event names every hook firing on it; a graph key, that key's hooks.
    assert_eq!(
        listed("event=graph.run.completed"),
        set(&["web.on_completed[0]", "web.on_completed[1]", "pinned"])
    );
    assert_eq!(
        listed("event=on_completed"),
        set(&["web.on_completed[0]", "web.on_completed[1]"])
    );
    assert_eq!(
        listed("event=spec.*"),
        set(&["web.on_spec_completed[0]", "every-spec"])
    );
    // A workspace (a path, or a graph's name): its graphs' hooks and the daemon hooks that
    // do not pin another project.
    let web_hooks = set(&[
        "web.on_completed[0]",
        "web.on_completed[1]",
        "web.on_spec_completed[0]",
        "announce-blocked",
        "every-spec",
    ]);
    assert_eq!(listed(&format!("workspace={}", enc(&web_dir))), web_hooks);
    assert_eq!(listed("workspace=web"), web_hooks);
    assert_eq!(
        listed("workspace=%2Fnowhere"),
        set(&["announce-blocked", "every-spec", "pinned"])
    );
    // One graph: its hooks and the daemon hooks that may fire for it.
    assert_eq!(
        listed("graph=api"),
        set(&["api.on_failed[0]", "every-spec"])
    );
    // The seed's modes, and an executor mode as before.
    assert_eq!(listed("mode=async"), every);
    assert_eq!(listed("mode=sync"), BTreeSet::new());
    assert_eq!(
        listed("mode=docs-maintenance"),
        set(&["web.on_completed[1]"])
    );
    assert_eq!(
        listed("source=config&event=graph.run.*&workspace=web"),
        set(&["announce-blocked"])
    );
    // `agent` is accepted: every hook applies to every agent today.
    assert_eq!(listed("agent=reviewer"), every);

    refused(
        &daemon,
        "/api/hooks/catalog?source=native",
        "source",
        "graph, config",
    );
    refused(
        &daemon,
        "/api/hooks/catalog?event=graph.ran",
        "event",
        "on_completed",
    );
    refused(&daemon, "/api/hooks/catalog?mode=", "mode", "sync, async");
    refused(
        &daemon,
        "/api/hooks/catalog?workspace=no-such-graph",
        "workspace",
        "absolute path",
    );

    // The CLI lists both sources; graph hooks keep their key and executor version.
    let table = daemon.ok(&["hooks", "list"]);
    for text in [
        "NAME",
        "SOURCE",
        "MATCHER",
        "web.on_spec_completed[0]",
        "command 0.1.0",
        "announce-blocked",
        "graph_name=web",
        "nodes=elsewhere",
        "config",
    ] {
        assert!(table.contains(text), "missing {text:?} in:\n{table}");
    }
    let only = daemon.json(&["hooks", "list", "--source", "config", "--event", "spec.*"]);
    assert_eq!(names(&only, "hooks"), ["every-spec"]);
    let err = daemon.fails(&["hooks", "list", "--source", "native"]);
    assert!(err.contains("`--source`"), "{err}");
}

#[test]
fn the_taxonomy_lists_every_event_with_its_schema_and_filters_by_family_and_sync() {
    let daemon = Daemon::start();
    let all = get_ok(&daemon, "/api/hooks/events");
    let events = all["events"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    for name in [
        "graph.run.completed",
        "spec.completed",
        "hook.run.failed",
        "session.created",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let completed = events
        .iter()
        .find(|e| e["event"] == "graph.run.completed")
        .unwrap();
    assert_eq!(completed["family"], "graph");
    assert_eq!(completed["sync_eligible"], false);
    assert_eq!(completed["patch_schema"], Value::Null);
    assert!(completed["description"].as_str().unwrap().contains("run"));
    assert!(
        completed["markers"]
            .as_array()
            .unwrap()
            .contains(&json!("completed_specs"))
    );
    let schema = &completed["payload_schema"];
    assert!(schema.is_object(), "{schema}");
    assert!(schema["properties"]["run_id"].is_object(), "{schema:#}");
    // The graph-hook keys, beside the taxonomy.
    let keys: Vec<(&str, &str)> = all["graph_hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["event"].as_str().unwrap(),
                k["taxonomy_event"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("on_completed", "graph.run.completed"),
            ("on_failed", "graph.run.failed"),
            ("on_blocked", "graph.run.blocked"),
            ("on_spec_completed", "spec.completed"),
            ("on_spec_failed", "spec.failed")
        ]
    );

    let graph = get_ok(&daemon, "/api/hooks/events?family=graph");
    let graph_events = graph["events"].as_array().unwrap();
    assert!(!graph_events.is_empty());
    assert!(
        graph_events.iter().all(|e| e["family"] == "graph"),
        "{graph}"
    );
    assert_eq!(
        graph_events.len(),
        events.iter().filter(|e| e["family"] == "graph").count()
    );
    assert_eq!(graph["graph_hooks"].as_array().unwrap().len(), 3);
    let sync = get_ok(&daemon, "/api/hooks/events?sync_only=true");
    assert!(
        sync["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["sync_eligible"] == true),
        "{sync}"
    );
    assert_eq!(
        sync["events"].as_array().unwrap().len(),
        events.iter().filter(|e| e["sync_eligible"] == true).count()
    );
    assert_eq!(sync["graph_hooks"], json!([]), "graph hooks are async");
    let not_only = get_ok(&daemon, "/api/hooks/events?sync_only=false");
    assert_eq!(not_only["events"].as_array().unwrap().len(), events.len());

    refused(
        &daemon,
        "/api/hooks/events?family=graphs",
        "family",
        "graph, spec, node, hook, session, plugin",
    );
    refused(
        &daemon,
        "/api/hooks/events?sync_only=maybe",
        "sync_only",
        "maybe",
    );

    let table = daemon.ok(&["hooks", "events", "--family", "spec"]);
    assert!(
        table.starts_with("EVENT") && table.contains("FAMILY") && table.contains("SYNC"),
        "{table}"
    );
    assert!(table.contains("spec.completed") && table.contains("on_spec_completed"));
    assert!(!table.contains("graph.run.completed"), "{table}");
    let err = daemon.fails(&["hooks", "events", "--family", "graphs"]);
    assert!(err.contains("`--family`"), "{err}");
}

/// Waits until `count` hook runs are recorded and none is queued or running; newest first.
fn finished_runs(daemon: &Daemon, count: usize) -> Vec<Value> {
    wait_for(
        &format!("{count} finished hook runs"),
        Duration::from_secs(60),
        || {
            let (_, answer) = daemon.get("/api/hook-runs?last=1000");
            let runs = answer["runs"].as_array().cloned().unwrap_or_default();
            (runs.len() == count
                && runs
                    .iter()
                    .all(|r| !matches!(r["status"].as_str(), Some("queued" | "running"))))
            .then_some(runs)
        },
    )
}

#[test]
fn hook_runs_of_every_source_carry_the_seed_fields_and_filter_by_workspace_and_run() {
    let daemon = Daemon::start_with_config(
        r#"
[[hooks]]
name = "spec-done"
event = "spec.completed"
action = { command = "echo {{spec_name}} done" }

[[hooks]]
name = "fail-on-complete"
event = "graph.run.completed"
action = { command = "exit 3" }

[[hooks]]
name = "after-spec-done"
event = "hook.run.completed"
match = { hook_name = "spec-done" }
action = { command = "true" }
"#,
    );
    let repo = git_repo();
    let workdir = real(repo.path());
    let spec = daemon.add_spec("A");
    daemon.create_graph(json!({
        "name": "web", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "true" }],
        "hooks": {
            "on_spec_completed": [{ "command": "true" }],
            "on_completed": [{ "command": "true" }]
        }
    }));
    daemon.control_ok("web", json!({ "action": "run" }));
    let view = daemon.settled("web");
    let run_id = view["current_run"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id in {view:#}"))
        .to_string();
    // web.on_spec_completed[0], web.on_completed[0], spec-done, fail-on-complete and
    // after-spec-done (fired by spec-done's run ending).
    let runs = finished_runs(&daemon, 5);
    let by_name = |name: &str| -> Value {
        runs.iter()
            .find(|r| r["hook_name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no run of {name} in {runs:#?}"))
    };

    let graph_run = by_name("web.on_spec_completed[0]");
    assert_eq!(graph_run["source"], "graph");
    assert_eq!(
        graph_run["event"], "on_spec_completed",
        "today's key is kept"
    );
    assert_eq!(graph_run["outcome"], "applied");
    assert_eq!(graph_run["status"], "completed");
    assert_eq!(graph_run["dispatch_depth"], 0);
    assert_eq!(
        graph_run["mode"], "command",
        "today's executor mode is kept"
    );
    assert_eq!(graph_run["executor_kind"], "command");
    assert_eq!(graph_run["recorded_at"], graph_run["fired_at"]);
    assert_eq!(graph_run["required"], false);
    assert_eq!(graph_run["patch_applied"], Value::Null);
    assert_eq!(graph_run["run_id"], run_id.as_str());

    let daemon_run = by_name("spec-done");
    assert_eq!(daemon_run["source"], "config");
    assert_eq!(daemon_run["event"], "spec.completed");
    assert_eq!(daemon_run["outcome"], "applied");
    assert_eq!(daemon_run["dispatch_depth"], 0);
    assert_eq!(daemon_run["summary"], "A done");
    let failed = by_name("fail-on-complete");
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["outcome"], "failed");
    assert!(failed["error"].is_string(), "{failed:#}");
    // A hook-run event is one dispatch level deeper than the run it reports.
    assert_eq!(by_name("after-spec-done")["dispatch_depth"], 1);

    let listed = |query: &str| -> BTreeSet<String> {
        let answer = get_ok(&daemon, &format!("/api/hook-runs?last=100&{query}"));
        answer["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["hook_name"].as_str().unwrap().to_string())
            .collect()
    };
    let set =
        |items: &[&str]| -> BTreeSet<String> { items.iter().map(|s| (*s).to_string()).collect() };
    assert_eq!(
        listed("source=config"),
        set(&["spec-done", "fail-on-complete", "after-spec-done"])
    );
    assert_eq!(
        listed("source=graph"),
        set(&["web.on_spec_completed[0]", "web.on_completed[0]"])
    );
    assert_eq!(listed("hook=spec-done"), set(&["spec-done"]));
    assert_eq!(listed("outcome=failed"), set(&["fail-on-complete"]));
    assert_eq!(listed("outcome=denied"), set(&[]));
    assert_eq!(
        listed("event=spec.completed"),
        set(&["web.on_spec_completed[0]", "spec-done"])
    );
    assert_eq!(
        listed("event=on_spec_completed"),
        set(&["web.on_spec_completed[0]"])
    );
    assert_eq!(
        listed("event=graph.run.*&source=config"),
        set(&["fail-on-complete"])
    );
    refused(
        &daemon,
        "/api/hook-runs?outcome=exploded",
        "outcome",
        "applied, denied",
    );
    refused(
        &daemon,
        "/api/hook-runs?source=skill",
        "source",
        "graph, config",
    );
    refused(&daemon, "/api/hook-runs?event=spec.done", "event", "spec.");

    // One workspace's runs in exactly the seed's fields, newest first.
    let seed_fields: BTreeSet<String> = [
        "dispatch_depth",
        "duration_ms",
        "error",
        "event",
        "hook_name",
        "mode",
        "outcome",
        "patch_applied",
        "recorded_at",
        "required",
        "source",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    let workspace = |query: &str| -> Vec<Value> {
        let answer = get_ok(
            &daemon,
            &format!("/api/workspaces/{}/hooks/runs?{query}", enc(&workdir)),
        );
        answer["runs"].as_array().unwrap().clone()
    };
    let by_run = workspace(&format!("session={run_id}"));
    let hooks: BTreeSet<String> = by_run
        .iter()
        .map(|r| r["hook_name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        hooks,
        set(&[
            "web.on_spec_completed[0]",
            "web.on_completed[0]",
            "spec-done",
            "fail-on-complete"
        ]),
        "{by_run:#?}"
    );
    for run in &by_run {
        let fields: BTreeSet<String> = run.as_object().unwrap().keys().cloned().collect();
        assert_eq!(fields, seed_fields, "{run:#}");
        assert_eq!(run["mode"], "async");
    }
    let recorded: Vec<&str> = by_run
        .iter()
        .map(|r| r["recorded_at"].as_str().unwrap())
        .collect();
    let mut newest_first = recorded.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(recorded, newest_first);
    let graph_seed = by_run
        .iter()
        .find(|r| r["hook_name"] == "web.on_spec_completed[0]")
        .unwrap();
    assert_eq!(
        graph_seed["event"], "spec.completed",
        "the key's taxonomy event"
    );
    assert_eq!(graph_seed["source"], "graph");
    assert_eq!(graph_seed["outcome"], "applied");

    let failed_only = workspace(&format!("session={run_id}&outcome=failed"));
    assert_eq!(failed_only.len(), 1, "{failed_only:#?}");
    assert_eq!(failed_only[0]["hook_name"], "fail-on-complete");
    assert_eq!(failed_only[0]["error"], failed["error"]);
    assert_eq!(workspace("session=no-such-run").len(), 0);
    let by_event = workspace("event=graph.run.completed");
    let hooks: BTreeSet<String> = by_event
        .iter()
        .map(|r| r["hook_name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(hooks, set(&["web.on_completed[0]", "fail-on-complete"]));
    assert_eq!(workspace("last=1").len(), 1);
    // A graph's name names its workspace too.
    let (_, by_graph) = daemon.get(&format!("/api/workspaces/web/hooks/runs?session={run_id}"));
    assert_eq!(by_graph["runs"].as_array().unwrap().len(), 4, "{by_graph}");
    let (status, body) = daemon.get("/api/workspaces/nowhere/hooks/runs");
    assert_eq!(status, 404, "{body}");
    refused(
        &daemon,
        &format!("/api/workspaces/{}/hooks/runs?outcome=fine", enc(&workdir)),
        "outcome",
        "applied",
    );
    refused(
        &daemon,
        &format!("/api/workspaces/{}/hooks/runs?last=many", enc(&workdir)),
        "last",
        "many",
    );

    // The CLI shows the source and the hook's name, and filters by them.
    let table = daemon.ok(&["hooks", "runs", "--source", "config", "--hook", "spec-done"]);
    assert!(
        table.contains("SOURCE") && table.contains("config") && table.contains("spec-done"),
        "{table}"
    );
    assert!(!table.contains("fail-on-complete"), "{table}");
    let table = daemon.ok(&["hooks", "runs", "--outcome", "failed"]);
    assert!(table.contains("fail-on-complete"), "{table}");
    let err = daemon.fails(&["hooks", "runs", "--outcome", "exploded"]);
    assert!(err.contains("`--outcome`"), "{err}");
}

#[test]
fn a_session_id_names_the_hook_runs_its_events_fired_in_a_workspace() {
    let daemon = Daemon::start_with_config(
        r#"
[[hooks]]
name = "on-message"
event = "session.message.queued"
action = { command = "true" }
"#,
    );
    let repo = git_repo();
    let (status, session) = daemon.send("POST", "/api/sessions", &json!({ "name": "reviewer" }));
    assert_eq!(status, 201, "{session}");
    let session_id = session["id"].as_str().unwrap().to_string();
    let spec = daemon.add_spec("A");
    // The graph's hook queues a message for the session, from a run in the workspace.
    daemon.create_graph(json!({
        "name": "web", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "true" }],
        "hooks": { "on_completed": [{ "prompt": "web is done", "target_session_name": "reviewer" }] }
    }));
    daemon.control_ok("web", json!({ "action": "run" }));
    let view = daemon.settled("web");
    let run_id = view["current_run"]["id"].as_str().unwrap().to_string();
    finished_runs(&daemon, 2);
    let path = |session: &str| {
        format!(
            "/api/workspaces/{}/hooks/runs?session={session}",
            enc(&real(repo.path()))
        )
    };
    let by_session = get_ok(&daemon, &path(&session_id));
    let runs = by_session["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{by_session:#}");
    assert_eq!(runs[0]["hook_name"], "on-message");
    assert_eq!(runs[0]["event"], "session.message.queued");
    assert_eq!(runs[0]["source"], "config");
    assert_eq!(runs[0]["outcome"], "applied");
    // The run id names the graph's own hook run, not the session's.
    let by_run = get_ok(&daemon, &path(&run_id));
    let names: Vec<&str> = by_run["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hook_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web.on_completed[0]"]);
}
