//! What the storage layer promises a user: edits made at the same time never erase each other
//! (conditional edits are refused with the current version, unconditional ones are applied on
//! top), and continues arriving together never leave a run running without a driver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, git_repo, wait_for};

const EVENTS: [&str; 4] = [
    "on_completed",
    "on_failed",
    "on_blocked",
    "on_spec_completed",
];

fn graph_with_no_hooks(daemon: &Daemon) -> Value {
    let repo = git_repo();
    let spec = daemon.add_spec("one");
    let view = daemon.create_graph(json!({
        "name": "edited",
        "workdir": repo.path(),
        "nodes": [{ "name": "work", "command": "true" }],
        "specs": [spec],
    }));
    std::mem::forget(repo);
    view
}

fn patch(daemon: &Daemon, body: &Value, if_match: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::blocking::Client::new()
        .patch(format!("http://{}/api/graphs/edited", daemon.host()))
        .bearer_auth(daemon.token())
        .json(body);
    if let Some(tag) = if_match {
        request = request.header("If-Match", tag);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn hook_for(event: &str) -> Value {
    json!({ event: [{ "command": format!("echo {event}") }] })
}

#[test]
fn concurrent_conditional_edits_are_refused_not_lost() {
    let daemon = Daemon::start();
    let created = graph_with_no_hooks(&daemon);
    assert_eq!(created["version"], 1);
    let first = daemon.raw(
        "GET",
        "/api/graphs/edited",
        &[
            ("Host", daemon.host()),
            ("Authorization", &format!("Bearer {}", daemon.token())),
        ],
        b"",
    );
    assert_eq!(first.header("etag"), Some("\"1\""), "{}", first.head);

    // Four editors read version 1 and each set one event's hooks, all at once.
    let outcomes: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = EVENTS
            .iter()
            .map(|event| {
                let daemon = &daemon;
                scope.spawn(move || {
                    patch(daemon, &json!({ "hooks": hook_for(event) }), Some("\"1\""))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<&(u16, Value)> = outcomes.iter().filter(|(s, _)| *s == 200).collect();
    assert_eq!(
        won.len(),
        1,
        "exactly one edit on version 1 wins: {outcomes:?}"
    );
    for (status, body) in outcomes.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 412, "{body}");
        assert_eq!(body["error"]["code"], "stale_version", "{body}");
        assert_eq!(body["error"]["current_version"], 2, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("version 1") && message.contains("version 2"),
            "{message}"
        );
    }
    // Each refused editor reads again and redoes its edit on the version it finds.
    for event in EVENTS {
        loop {
            let current = daemon.json(&["graph", "get", "edited"]);
            if current["hooks"].get(event).is_some() {
                break;
            }
            let version = current["version"].as_i64().unwrap();
            let (status, body) = patch(
                &daemon,
                &json!({ "hooks": hook_for(event), "version": version }),
                None,
            );
            assert!(status == 200 || status == 412, "{body}");
        }
    }
    let end = daemon.json(&["graph", "get", "edited"]);
    for event in EVENTS {
        assert_eq!(
            end["hooks"][event][0]["command"],
            format!("echo {event}"),
            "{end:#}"
        );
    }
    assert_eq!(end["version"], 5, "four edits, each on its own version");
}

#[test]
fn concurrent_unconditional_edits_all_land() {
    let daemon = Daemon::start();
    graph_with_no_hooks(&daemon);
    std::thread::scope(|scope| {
        for event in EVENTS {
            let daemon = &daemon;
            scope.spawn(move || {
                let (status, body) = patch(daemon, &json!({ "hooks": hook_for(event) }), None);
                assert_eq!(status, 200, "{body}");
            });
        }
    });
    let end = daemon.json(&["graph", "get", "edited"]);
    for event in EVENTS {
        assert_eq!(
            end["hooks"][event][0]["command"],
            format!("echo {event}"),
            "an edit made at the same time as others was lost: {end:#}"
        );
    }
    assert_eq!(end["version"], 5);
}

#[test]
fn graph_edit_if_version_refuses_a_stale_edit_and_says_the_current_version() {
    let daemon = Daemon::start();
    graph_with_no_hooks(&daemon);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("changes.json");
    std::fs::write(&file, r#"{"allow_dirty_start": true}"#).unwrap();
    let file = file.to_str().unwrap();
    let out = daemon.ok(&["graph", "edit", "edited", file, "--if-version", "1"]);
    assert!(out.contains("now version 2"), "{out}");
    let err = daemon.fails(&["graph", "edit", "edited", file, "--if-version", "1"]);
    assert!(
        err.contains("edited since version 1") && err.contains("at version 2"),
        "{err}"
    );
    let bad = patch(
        &daemon,
        &json!({ "allow_dirty_start": false }),
        Some("yesterday"),
    );
    assert_eq!(bad.0, 400, "{}", bad.1);
    assert!(
        bad.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("If-Match"),
        "{}",
        bad.1
    );
    assert_eq!(daemon.json(&["graph", "get", "edited"])["version"], 2);

    // An edit that sets what the graph has writes nothing: the version stays, and it says so.
    let out = daemon.ok(&["graph", "edit", "edited", file]);
    assert!(
        out.contains("graph edited unchanged") && out.contains("still version 2"),
        "{out}"
    );
    std::fs::write(dir.path().join("none.json"), r#"{"hooks": {}}"#).unwrap();
    let none = dir.path().join("none.json");
    daemon.ok(&["graph", "edit", "edited", none.to_str().unwrap()]);
    assert_eq!(daemon.json(&["graph", "get", "edited"])["version"], 2);
}

#[test]
fn continues_from_many_clients_never_leave_a_run_without_a_driver() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let specs: Vec<String> = (0..3).map(|i| daemon.add_spec(&format!("s{i}"))).collect();
    // The node blocks every time: each continue that is accepted runs it exactly once more.
    daemon.create_graph(json!({
        "name": "gate",
        "workdir": repo.path(),
        "allow_dirty_start": true,
        "nodes": [{ "name": "gate", "command": r#"printf '{"status":"blocked","blocker":"needs a human"}' > "$CANOPY_RESULT_FILE""# }],
        "specs": specs,
    }));
    daemon.control_ok("gate", json!({ "action": "run" }));
    let first = daemon.settled("gate");
    assert_eq!(first["status"], "paused", "{first:#}");

    let accepted: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let daemon = &daemon;
                scope.spawn(move || {
                    let mut accepted = 0;
                    for _ in 0..10 {
                        let (status, body) =
                            daemon.control("gate", json!({ "action": "continue" }));
                        match status {
                            200 => accepted += 1,
                            409 => {}
                            other => panic!("continue answered {other}: {body}"),
                        }
                    }
                    accepted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(accepted >= 1, "no continue was accepted");
    let end = wait_for("the graph to stop running", Duration::from_secs(60), || {
        let (_, view) = daemon.get("/api/graphs/gate");
        (view["status"] != "running").then_some(view)
    });
    assert_eq!(end["status"], "paused", "{end:#}");
    assert!(
        end["blocker"].as_str().unwrap().contains("needs a human"),
        "{end:#}"
    );
    assert!(end["consistency_warning"].is_null(), "{end:#}");
    // Never two drivers on one run: node runs of the gate never overlap, none is left running,
    // and there is at most one per accepted continue (a continue that superseded another before
    // its driver got going runs the node once for both).
    let (_, node_runs) = daemon.get("/api/graphs/gate/node-runs?last=1000");
    let mut node_runs = node_runs["node_runs"].as_array().unwrap().clone();
    node_runs.sort_by(|a, b| a["started_at"].as_str().cmp(&b["started_at"].as_str()));
    assert!(
        node_runs.len() >= 2 && node_runs.len() <= accepted + 1,
        "{} node runs for {accepted} accepted continues",
        node_runs.len()
    );
    assert!(
        node_runs.iter().all(|n| n["status"] == "blocked"),
        "{node_runs:#?}"
    );
    for pair in node_runs.windows(2) {
        assert!(
            pair[1]["started_at"].as_str() >= pair[0]["finished_at"].as_str(),
            "two node runs of one run overlapped: {pair:#?}"
        );
    }
}

#[test]
fn retention_caps_every_growing_table_keeps_a_graphs_current_run_and_status_shows_the_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("canopy.toml"),
        "[retention]\nhook_runs_rows = 5\nfeed_rows = 20\nruns_rows = 2\n\n[[hooks]]\nname = \"each\"\nevent = \"spec.created\"\naction = { command = \"true\" }\n",
    )
    .unwrap();
    let mut daemon = Daemon::start_on(&data);
    for i in 0..12 {
        daemon.add_spec(&format!("s{i}"));
    }
    let repo = git_repo();
    let spec = daemon.add_spec("run me");
    daemon.create_graph(json!({
        "name": "g", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "true" }],
    }));
    for _ in 0..4 {
        daemon.control_ok("g", json!({ "action": "run" }));
        daemon.settled("g");
        daemon.control_ok("g", json!({ "action": "reset" }));
    }
    daemon.control_ok("g", json!({ "action": "run" }));
    let view = daemon.settled("g");
    let current = view["current_run"]["id"]
        .as_str()
        .expect("the graph has a current run")
        .to_string();
    daemon.ended_hook_runs("config", 13);
    // A pass runs when the daemon starts.
    daemon.stop();
    let daemon = Daemon::start_on(&data);
    let status = wait_for("the retention pass", Duration::from_secs(60), || {
        let status = daemon.json(&["status"]);
        (status["storage"]["hook_runs"] == 5).then_some(status)
    });
    let storage = &status["storage"];
    assert!(storage["feed_rows"].as_u64().unwrap() <= 25, "{storage}");
    assert_eq!(storage["runs"], 2, "{storage}");
    assert!(storage["file_bytes"].as_u64().unwrap() > 0, "{storage}");
    // The graph's current run is one of those kept, and it reads back whole.
    let (code, run) = daemon.get(&format!("/api/runs/{current}"));
    assert_eq!(code, 200, "{run}");
    let text = daemon.ok(&["status"]);
    assert!(
        text.contains("database:") && text.contains("hook runs 5"),
        "{text}"
    );
}
