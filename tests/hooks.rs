//! Event-keyed hooks end to end: every firing rule, validation, hook-run records, live edits,
//! the legacy column, dry runs, and interactive sessions with real delivery.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::{APPEND_FILE_WASM, Daemon, HOSTILE_WASM, git_repo, real, script, wait_for};

fn patch(daemon: &Daemon, graph: &str, body: Value) -> (u16, Value) {
    daemon.send("PATCH", &format!("/api/graphs/{graph}"), &body)
}

/// Waits until the graph has `count` hook runs, none of them queued or running; oldest first.
fn hook_runs(daemon: &Daemon, graph: &str, count: usize) -> Vec<Value> {
    wait_for(
        &format!("{count} finished hook runs of {graph}"),
        Duration::from_secs(60),
        || {
            let (_, answer) = daemon.get(&format!("/api/hook-runs?graph={graph}&last=1000"));
            let mut runs = answer["runs"].as_array().cloned().unwrap_or_default();
            let done = runs.len() == count
                && runs
                    .iter()
                    .all(|r| !matches!(r["status"].as_str(), Some("queued" | "running")));
            runs.reverse();
            done.then_some(runs)
        },
    )
}

/// A command that appends its arguments, one line, to `log`.
fn append(log: &Path, what: &str) -> String {
    format!("echo {what} >> {}", log.display())
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

struct Setup {
    daemon: Daemon,
    repo: tempfile::TempDir,
    out: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        Self::with_config("")
    }

    fn with_config(config: &str) -> Self {
        Self {
            daemon: Daemon::start_with_config(config),
            repo: git_repo(),
            out: tempfile::tempdir().unwrap(),
        }
    }

    fn log(&self, name: &str) -> PathBuf {
        self.out.path().join(name)
    }
}

#[test]
fn hooks_of_one_event_run_in_order_and_a_failing_one_changes_nothing_else() {
    let s = Setup::new();
    let log = s.log("order.log");
    let a = s.daemon.add_spec("A");
    s.daemon.create_graph(json!({
        "name": "g", "workdir": s.repo.path(), "specs": [a],
        "nodes": [{ "name": "n", "command": "true" }],
        "hooks": { "on_completed": [
            { "command": format!("sleep 0.3; {}", append(&log, "first")) },
            { "command": "echo broken >&2; exit 3" },
            { "command": append(&log, "third") }
        ] }
    }));
    let view = {
        s.daemon.control_ok("g", json!({ "action": "run" }));
        s.daemon.settled("g")
    };
    assert_eq!(view["status"], "completed");
    let runs = hook_runs(&s.daemon, "g", 3);
    let summary: Vec<(i64, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["hook_index"].as_i64().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![(0, "completed"), (1, "failed"), (2, "completed")]
    );
    assert_eq!(runs[1]["error"], "exited with exit code 3: broken");
    assert_eq!(
        lines(&log),
        ["first", "third"],
        "declaration order, and the hook after a failing one still ran"
    );
    let (_, view) = s.daemon.get("/api/graphs/g");
    assert_eq!(
        view["status"], "completed",
        "a failing hook never changes the graph"
    );
    assert_eq!(view["completion_hook_runs"].as_array().unwrap().len(), 3);
}

#[test]
fn on_completed_fires_once_per_completing_run_and_only_when_a_spec_completed() {
    let s = Setup::new();
    let log = s.log("completed.log");
    let a = s.daemon.add_spec("A");
    let b = s.daemon.add_spec("B");
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a, b], "nodes": [{ "name": "n", "command": "echo did {{spec_name}}" }],
                "hooks": { "on_completed": [{ "command": format!("echo {{{{completed_specs}}}} | tr '\\n' '|' >> {}; echo >> {}", log.display(), log.display()) }] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    s.daemon.settled("g");
    hook_runs(&s.daemon, "g", 1);
    assert_eq!(lines(&log), ["A — did A|B — did B|"]);
    // completed → reset → completed fires again.
    s.daemon.control_ok("g", json!({ "action": "reset" }));
    s.daemon.control_ok("g", json!({ "action": "run" }));
    s.daemon.settled("g");
    hook_runs(&s.daemon, "g", 2);
    assert_eq!(lines(&log).len(), 2);
    // A run that completes no spec (it skips its only one) does not fire it. (A queue with
    // nothing pending is refused before any run starts.)
    let queue = s.daemon.json(&["queue", "create", "q"]);
    let (status, _) = s
        .daemon
        .control("g", json!({ "action": "run", "queue_id": queue["id"] }));
    assert_eq!(status, 409);
    let c = s.daemon.add_spec("C");
    s.daemon.ok(&["queue", "add", "q", &c]);
    std::fs::write(s.repo.path().join("wip.txt"), "wip").unwrap();
    s.daemon
        .control_ok("g", json!({ "action": "run", "queue_id": queue["id"] }));
    assert_eq!(s.daemon.settled("g")["status"], "paused");
    s.daemon.control_ok(
        "g",
        json!({ "action": "continue", "mode": "skip_next_spec" }),
    );
    let view = s.daemon.settled("g");
    assert_eq!(view["status"], "completed");
    assert_eq!(view["progress"][0]["result"], "skipped");
    let (_, answer) = s.daemon.get("/api/hook-runs?graph=g");
    assert_eq!(answer["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn on_failed_carries_the_failing_spec_and_spec_ids_filter_it() {
    let s = Setup::new();
    let log = s.log("failed.log");
    let ok = s.daemon.add_spec("fine");
    let bad = s.daemon.add_spec("broken");
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [ok, bad],
                "nodes": [{ "name": "build", "command": "case {{spec_name}} in broken) exit 1;; esac" }],
                "hooks": { "on_failed": [
                    { "command": append(&log, "any {{spec_id}} {{node}} {{spec_name}}") },
                    { "command": append(&log, "only-fine"), "spec_ids": [&ok[..10]] },
                    { "command": append(&log, "only-broken"), "spec_ids": [&bad[..10]] }
                ] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    assert_eq!(s.daemon.settled("g")["status"], "failed");
    let runs = hook_runs(&s.daemon, "g", 2);
    assert_eq!(
        lines(&log),
        [format!("any {bad} build (none)"), "only-broken".to_string()]
    );
    assert_eq!(
        runs[1]["hook_config"]["spec_ids"],
        json!([bad]),
        "spec_ids are stored resolved"
    );
    assert!(
        runs[0]["rendered"]["markers"]["blocker"]
            .as_str()
            .unwrap()
            .starts_with("1 spec(s) did not complete: broken")
    );
}

#[test]
fn on_failed_fires_a_filtered_hook_once_for_each_of_its_failed_specs() {
    let s = Setup::new();
    let log = s.log("failed.log");
    let first = s.daemon.add_spec("first-broken");
    let fine = s.daemon.add_spec("fine");
    let second = s.daemon.add_spec("second-broken");
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [first, fine, second],
                "nodes": [{ "name": "build", "command": "case {{spec_name}} in *broken) exit 1;; esac" }],
                "hooks": { "on_failed": [
                    { "command": append(&log, "first {{spec_id}}"), "spec_ids": [&first[..10]] },
                    { "command": append(&log, "both {{spec_id}}"), "spec_ids": [&first[..10], &second[..10], &fine[..10]] },
                    { "command": append(&log, "fine {{spec_id}}"), "spec_ids": [&fine[..10]] }
                ] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    assert_eq!(s.daemon.settled("g")["status"], "failed");
    let runs = hook_runs(&s.daemon, "g", 3);
    let mut fired = lines(&log);
    fired.sort();
    let mut expected = vec![
        format!("first {first}"),
        format!("both {first}"),
        format!("both {second}"),
    ];
    expected.sort();
    assert_eq!(fired, expected, "the earlier failed spec is matched too");
    let spec_of_runs: Vec<&str> = runs
        .iter()
        .map(|r| r["spec_id"].as_str().unwrap())
        .collect();
    assert!(spec_of_runs.contains(&first.as_str()) && spec_of_runs.contains(&second.as_str()));
}

#[test]
fn on_blocked_fires_once_per_pause_including_a_dirty_tree() {
    let s = Setup::new();
    let log = s.log("blocked.log");
    let flag = s.log("flag");
    let a = s.daemon.add_spec("A");
    let gate = format!(
        r#"if [ -e {} ]; then echo ok; else printf '{{"status":"blocked","blocker":"waiting for review"}}' > "$CANOPY_RESULT_FILE"; fi"#,
        flag.display()
    );
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a], "nodes": [{ "name": "gate", "command": gate }],
                "hooks": { "on_blocked": [{ "command": format!("printf '%s|%s\\n' {{{{node}}}} {{{{blocker}}}} >> {}", log.display()) }] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    assert_eq!(s.daemon.settled("g")["status"], "paused");
    hook_runs(&s.daemon, "g", 1);
    // A blocker runs over several lines (its ways out follow); each firing's first has a `|`.
    let firings = || -> Vec<String> {
        lines(&log)
            .into_iter()
            .filter(|l| l.contains('|'))
            .collect()
    };
    assert_eq!(
        firings(),
        [format!(
            "gate|node `gate` is blocked on spec A ({}): waiting for review",
            &a[..12]
        )]
    );
    assert!(
        lines(&log)
            .iter()
            .any(|l| l == "  - answer it, then run `gate` again: canopy graph continue g")
    );

    // The pause is over; a dirty tree makes a new pause at the next run, which fires again.
    std::fs::write(&flag, "").unwrap();
    s.daemon.control_ok("g", json!({ "action": "continue" }));
    assert_eq!(s.daemon.settled("g")["status"], "completed");
    std::fs::write(s.repo.path().join("wip.txt"), "x").unwrap();
    s.daemon.control_ok("g", json!({ "action": "run" }));
    assert_eq!(s.daemon.settled("g")["status"], "paused");
    hook_runs(&s.daemon, "g", 2);
    let second = &firings()[1];
    assert!(second.starts_with("(none)|dirty tree:"), "{second}");
}

#[test]
fn on_spec_completed_fires_per_spec_for_bound_and_queued_specs_with_every_marker() {
    let s = Setup::new();
    let bound = s.daemon.add_spec("bound one");
    let queued = s.daemon.add_spec("queued one");
    let hostile = s.daemon.add_spec("x; touch pwned; $(touch pwned2)");
    let markers = "{{graph_name}} {{workdir}} {{completed_specs}} {{spec_name}} {{spec_id}} {{blocker}} {{node}}";
    // Each firing writes its own file (events' hooks may run side by side).
    let out = s.out.path().display().to_string();
    s.daemon.create_graph(json!({
        "name": "g", "workdir": s.repo.path(), "specs": [bound], "nodes": [{ "name": "n", "command": "true" }],
        "hooks": { "on_spec_completed": [{ "command": format!("printf '%s\\n' \"$CANOPY_HOOK_WORKDIR\" {markers} > {out}/fired-{{{{spec_id}}}}.txt") }] }
    }));
    let fired = |id: &str| lines(&s.out.path().join(format!("fired-{id}.txt")));
    let expect = |name: &str, id: &str, dir: &str| {
        let mut values = vec![
            dir.to_string(),
            "g".into(),
            dir.to_string(),
            "(none)".into(),
            name.into(),
            id.into(),
        ];
        values.extend(["(none)".to_string(), "(none)".to_string()]);
        values
    };
    s.daemon.control_ok("g", json!({ "action": "run" }));
    s.daemon.settled("g");
    hook_runs(&s.daemon, "g", 1);
    assert_eq!(
        fired(&bound),
        expect("bound one", &bound, &real(s.repo.path()))
    );

    // From a queue, in a run with a workdir override: {{workdir}} and CANOPY_HOOK_WORKDIR follow it.
    let other = git_repo();
    let queue = s.daemon.json(&["queue", "create", "q", &queued, &hostile]);
    s.daemon.control_ok(
        "g",
        json!({ "action": "run", "queue_id": queue["id"], "workdir": other.path() }),
    );
    s.daemon.settled("g");
    let runs = hook_runs(&s.daemon, "g", 3);
    let specs: Vec<&str> = runs
        .iter()
        .map(|r| r["spec_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        specs,
        [bound.as_str(), queued.as_str(), hostile.as_str()],
        "once per spec, in the order they completed"
    );
    let other_dir = real(other.path());
    assert_eq!(fired(&queued), expect("queued one", &queued, &other_dir));
    assert_eq!(
        fired(&hostile),
        expect("x; touch pwned; $(touch pwned2)", &hostile, &other_dir)
    );
    for planted in ["pwned", "pwned2"] {
        assert!(
            !other.path().join(planted).exists() && !s.repo.path().join(planted).exists(),
            "a hostile spec name ran as shell"
        );
    }
}

#[test]
fn none_renders_in_agent_and_interactive_hooks_too() {
    let tools = tempfile::tempdir().unwrap();
    let prompts = tools.path().join("prompts.txt");
    let agent = script(
        tools.path(),
        "agent.sh",
        &format!(
            "printf '%s\\n' \"$1\" >> '{}'; echo '{{\"result\":\"ok\"}}'",
            prompts.display()
        ),
    );
    let s = Setup::with_config(&format!(
        "[platforms.standin]\ncommand = [\"{}\", \"{{prompt}}\"]\n",
        agent.display()
    ));
    s.daemon.ok(&["session", "new", "--name", "watcher"]);
    let a = s.daemon.add_spec("A");
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a], "nodes": [{ "name": "n", "command": "true" }],
                "hooks": { "on_completed": [
                    { "platform": "standin", "prompt": "done {{graph_name}}; blocker {{blocker}}; spec {{spec_name}}" },
                    { "prompt": "graph {{graph_name}} done; blocker {{blocker}}; node {{node}}", "target_session_name": "watcher" }
                ] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    s.daemon.settled("g");
    let runs = hook_runs(&s.daemon, "g", 2);
    assert!(runs.iter().all(|r| r["status"] == "completed"), "{runs:#?}");
    assert_eq!(
        std::fs::read_to_string(&prompts).unwrap(),
        "done g; blocker (none); spec (none)\n"
    );
    let sessions = s.daemon.json(&["session", "list"]);
    let id = sessions["sessions"][0]["id"].as_str().unwrap().to_string();
    let message = wait_for(
        "the message to be delivered",
        Duration::from_secs(10),
        || {
            let inbox = s.daemon.json(&["session", "inbox", &id]);
            inbox["messages"]
                .as_array()
                .unwrap()
                .first()
                .filter(|m| m["status"] == "delivered")
                .cloned()
        },
    );
    assert_eq!(message["text"], "graph g done; blocker (none); node (none)");
}

#[test]
fn hook_configs_are_validated_at_edit_time_naming_event_index_and_field() {
    let s = Setup::new();
    let a = s.daemon.add_spec("A");
    // An id that names no spec (its spec is gone); any spec in the backlog may be named.
    let outsider = s.daemon.add_spec("deleted");
    s.daemon.ok(&["spec", "rm", &outsider]);
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a], "nodes": [{ "name": "n", "command": "true" }] }),
    );
    let cases = [
        (
            json!({ "on_completed": [{ "command": "echo {{spec_nme}}" }] }),
            "hooks.on_completed[0] (command mode): field `command`: unknown marker `{{spec_nme}}`; supported markers: {{graph_name}}, {{workdir}}, {{completed_specs}}, {{spec_name}}, {{spec_id}}, {{blocker}}, {{node}}",
        ),
        (
            json!({ "on_failed": [{ "command": "true" }, { "command": "true", "platform": "claude", "prompt": "x" }] }),
            "hooks.on_failed[1]: sets 2 modes at once (command and agent); a config has exactly one mode",
        ),
        (
            json!({ "on_blocked": [{ "prompt": "hi" }] }),
            "hooks.on_blocked[0]: sets no mode",
        ),
        (
            json!({ "on_completed": [{ "platform": "claude" }] }),
            "hooks.on_completed[0] (agent mode): field `prompt` is required by the agent mode",
        ),
        (
            json!({ "on_completed": [{ "prompt": "x", "target_session_id": "a", "target_session_name": "b" }] }),
            "hooks.on_completed[0] (interactive mode): set exactly one of `target_session_id` and `target_session_name`, not both",
        ),
        (
            json!({ "on_completed": [{ "prompt": "x", "target_session_id": "8efd5e53cc93" }] }),
            "hooks.on_completed[0] (interactive mode): field `target_session_id` must be a whole session id, 32 hex digits (`canopy session show NAME --json` prints it; lists show its first 12), got `8efd5e53cc93`; or aim at the session by its name with `target_session_name`",
        ),
        (
            json!({ "on_completed": [{ "mode": "telepathy" }] }),
            "hooks.on_completed[0] (telepathy mode): unknown mode `telepathy`; installed modes: agent, command, docs-maintenance, guard, interactive",
        ),
        (
            json!({ "on_completed": [{ "command": "true", "spec_ids": [&a] }] }),
            "hooks.on_completed[0]: field `spec_ids` is not allowed on on_completed, which is not per-spec",
        ),
        (
            json!({ "on_blocked": [{ "command": "true", "spec_ids": [&a] }] }),
            "hooks.on_blocked[0]: field `spec_ids` is not allowed on on_blocked",
        ),
        (
            json!({ "on_spec_completed": [{ "command": "true", "spec_ids": [] }] }),
            "hooks.on_spec_completed[0]: field `spec_ids` must name at least one spec",
        ),
        (
            json!({ "on_spec_completed": [{ "command": "true", "spec_ids": [&outsider] }] }),
            "hooks.on_spec_completed[0]: field `spec_ids[0]`: ",
        ),
        (
            json!({ "on_spec_completed": [{ "command": "true", "spec_ids": [&outsider[..10]] }] }),
            "hooks.on_spec_completed[0]: field `spec_ids[0]`: `",
        ),
        (
            json!({ "on_finish": [] }),
            "field `hooks`: unknown event `on_finish`; the events are on_completed, on_failed, on_blocked, on_spec_completed",
        ),
        (
            json!({ "on_completed": [{ "command": "true" }], "on_spec_completed": [{ "prompt": "x", "target_session_name": "{{graph_name}}" }] }),
            "hooks.on_spec_completed[0] (interactive mode): field `target_session_name` does not take markers",
        ),
    ];
    for (hooks, expected) in cases {
        let (status, answer) = patch(&s.daemon, "g", json!({ "name": "renamed", "hooks": hooks }));
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(expected),
            "expected `{expected}`, got `{message}`"
        );
    }
    let (_, view) = s.daemon.get("/api/graphs/g");
    assert_eq!(view["hooks"], json!({}), "a refused update wrote nothing");
    assert_eq!(view["name"], "g");
}

#[test]
fn spec_ids_resolve_prefixes_against_the_backlog_the_graphs_own_specs_first() {
    let s = Setup::new();
    let log = s.log("ids.log");
    let flag = s.log("go");
    let first = s.daemon.add_spec("first");
    let second = s.daemon.add_spec("second");
    let queue = s.daemon.json(&["queue", "create", "q", &first, &second]);
    // A backlog spec sharing a prefix with `second` that `first` does not share.
    let common = first
        .chars()
        .zip(second.chars())
        .take_while(|(a, b)| a == b)
        .count();
    let prefix = &second[..=common];
    let twin = (0..4000)
        .map(|i| s.daemon.add_spec(&format!("twin {i}")))
        .find(|id| id.starts_with(prefix))
        .unwrap();
    let gate = format!(
        r#"if [ -e {} ]; then true; else printf '{{"status":"blocked","blocker":"wait"}}' > "$CANOPY_RESULT_FILE"; fi"#,
        flag.display()
    );
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [], "nodes": [{ "name": "gate", "command": gate }] }),
    );
    // No active run: any spec in the backlog may be named, so a queue-driven graph can name the
    // specs its queue will bring.
    let (status, answer) = patch(
        &s.daemon,
        "g",
        json!({ "hooks": { "on_spec_completed": [{ "command": "true", "spec_ids": [&second[..10]] }] } }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["hooks"]["on_spec_completed"][0]["spec_ids"],
        json!([second])
    );
    // A prefix two backlog specs share, neither of them the graph's, is ambiguous.
    let (status, answer) = patch(
        &s.daemon,
        "g",
        json!({ "hooks": { "on_spec_completed": [{ "command": "true", "spec_ids": [prefix] }] } }),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("is ambiguous") && message.contains(&second) && message.contains(&twin),
        "{message}"
    );
    s.daemon
        .control_ok("g", json!({ "action": "run", "queue_id": queue["id"] }));
    assert_eq!(s.daemon.settled("g")["status"], "paused");
    // With the queue's run active, its member is the graph's own: the shared prefix means it.
    let (status, answer) = patch(
        &s.daemon,
        "g",
        json!({ "hooks": { "on_spec_completed": [{ "command": append(&log, "{{spec_name}}"), "spec_ids": [prefix] }] } }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["hooks"]["on_spec_completed"][0]["spec_ids"],
        json!([second])
    );
    std::fs::write(&flag, "").unwrap();
    s.daemon.control_ok("g", json!({ "action": "continue" }));
    assert_eq!(s.daemon.settled("g")["status"], "completed");
    hook_runs(&s.daemon, "g", 1);
    assert_eq!(lines(&log), ["second"]);
}

#[test]
fn a_hook_added_mid_run_fires_for_the_remaining_events_only() {
    let s = Setup::new();
    let log = s.log("live.log");
    let flag = s.log("go");
    let a = s.daemon.add_spec("early");
    let b = s.daemon.add_spec("late");
    let gate = format!(
        r#"if [ {{{{spec_name}}}} = late ] && [ ! -e {} ]; then printf '{{"status":"blocked","blocker":"wait"}}' > "$CANOPY_RESULT_FILE"; fi"#,
        flag.display()
    );
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a, b], "nodes": [{ "name": "gate", "command": gate }] }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    assert_eq!(s.daemon.settled("g")["status"], "paused");
    // `early` completed before the edit: not retroactive.
    let (status, answer) = patch(
        &s.daemon,
        "g",
        json!({ "hooks": { "on_spec_completed": [{ "command": append(&log, "spec {{spec_name}}") }], "on_completed": [{ "command": append(&log, "run done") }] } }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["remaining_events"],
        json!([
            "on_spec_completed",
            "on_blocked",
            "on_completed",
            "on_failed"
        ])
    );
    std::fs::write(&flag, "").unwrap();
    s.daemon.control_ok("g", json!({ "action": "continue" }));
    s.daemon.settled("g");
    let runs = hook_runs(&s.daemon, "g", 2);
    // Each event's hooks run in order; hooks of different events may run side by side.
    let mut fired = lines(&log);
    fired.sort();
    assert_eq!(fired, ["run done", "spec late"]);
    // An edit after the events fired does not re-fire them, and the records keep what fired.
    let (status, _) = patch(
        &s.daemon,
        "g",
        json!({ "hooks": { "on_completed": [{ "command": append(&log, "edited") }] } }),
    );
    assert_eq!(status, 200);
    let after = hook_runs(&s.daemon, "g", 2);
    assert_eq!(after, runs);
    assert_eq!(
        after[1]["hook_config"],
        json!({ "command": append(&log, "run done") })
    );
    assert_eq!(lines(&log).len(), 2);
}

#[test]
fn hook_runs_record_what_fired_and_can_be_queried() {
    let s = Setup::new();
    let a = s.daemon.add_spec("A");
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a], "nodes": [{ "name": "n", "command": "true" }],
                "hooks": { "on_spec_completed": [{ "command": "echo spec {{spec_name}} done; echo warn >&2" }],
                           "on_completed": [{ "command": "sleep 5", "timeout_seconds": 1 }] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    s.daemon.settled("g");
    let runs = hook_runs(&s.daemon, "g", 2);
    let spec_run = &runs[0];
    assert_eq!(spec_run["event"], "on_spec_completed");
    assert_eq!(spec_run["hook_index"], 0);
    assert_eq!(spec_run["status"], "completed");
    assert_eq!(spec_run["plugin"], "command");
    assert_eq!(spec_run["plugin_version"], "0.1.0");
    assert_eq!(spec_run["plugin_sha256"].as_str().unwrap().len(), 64);
    // The command as it ran: a shell line references the value, which only its variable holds.
    assert_eq!(
        spec_run["rendered"]["config"]["command"],
        "echo spec \"${CANOPY_MARKER_SPEC_NAME}\" done; echo warn >&2"
    );
    assert_eq!(spec_run["rendered"]["markers"]["spec_name"], "A");
    assert_eq!(spec_run["output"], "spec A done\nwarn\n");
    assert_eq!(spec_run["summary"], "spec A done");
    assert_eq!(spec_run["spec_id"], a.as_str());
    assert!(
        spec_run["duration_ms"].as_i64().is_some()
            && spec_run["started_at"].is_string()
            && spec_run["finished_at"].is_string()
    );
    assert_eq!(runs[1]["status"], "timed_out", "{:#}", runs[1]);

    let (_, only) = s.daemon.get("/api/hook-runs?graph=g&status=timed_out");
    assert_eq!(only["runs"].as_array().unwrap().len(), 1);
    let (_, only) = s
        .daemon
        .get("/api/hook-runs?event=on_spec_completed&last=1");
    assert_eq!(only["runs"][0]["id"], spec_run["id"]);
    let (_, none) = s
        .daemon
        .get("/api/hook-runs?graph=g&since=2999-01-01T00:00:00Z");
    assert_eq!(none["runs"].as_array().unwrap().len(), 0);
    let (status, bad) = s.daemon.get("/api/hook-runs?status=exploded");
    assert_eq!(status, 400, "{bad}");
    let table = s
        .daemon
        .ok(&["hooks", "runs", "--graph", "g", "--event", "on_completed"]);
    assert!(
        table.contains("on_completed[0]") && table.contains("timed_out"),
        "{table}"
    );
    let info = s.daemon.ok(&["graph", "info", "g"]);
    assert!(
        info.contains("hook runs of the current run") && info.contains("on_spec_completed[0]"),
        "{info}"
    );
}

#[test]
fn a_slow_hook_does_not_hold_up_the_next_spec() {
    let s = Setup::new();
    let specs: Vec<String> = ["one", "two", "three"]
        .iter()
        .map(|n| s.daemon.add_spec(n))
        .collect();
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": specs, "nodes": [{ "name": "n", "command": "true" }],
                "hooks": { "on_spec_completed": [{ "command": "sleep 3" }] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    let view = s.daemon.settled("g");
    assert_eq!(view["status"], "completed");
    let (_, answer) = s.daemon.get("/api/hook-runs?graph=g");
    let unfinished = answer["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| matches!(r["status"].as_str(), Some("queued" | "running")))
        .count();
    assert!(
        unfinished > 0,
        "the run finished while its hooks were still running: {answer:#}"
    );
    let runs = hook_runs(&s.daemon, "g", 3);
    let run_finished = view["current_run"]["finished_at"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        runs.iter()
            .all(|r| r["finished_at"].as_str().unwrap() > run_finished.as_str())
    );
}

#[test]
fn the_legacy_on_completed_column_becomes_a_hook_by_migration() {
    if support::on_postgres() {
        // A SQLite database of schema 2: PostgreSQL's schema starts after that column went.
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let repo = git_repo();
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/schema-v2.sql"
    ))
    .unwrap();
    let conn = rusqlite::Connection::open(data.path().join("canopy.db")).unwrap();
    conn.execute_batch(&fixture).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        version, 2,
        "the fixture is a database of the previous schema"
    );
    conn.execute("UPDATE graphs SET workdir = ?1", [real(repo.path())])
        .unwrap();
    drop(conn);

    let daemon = Daemon::start_on(data.path());
    let view = daemon.json(&["graph", "get", "legacy"]);
    assert_eq!(
        view["hooks"],
        json!({ "on_completed": [{ "command": "echo {{graph_name}} done: {{completed_specs}} > legacy-hook.txt" }] })
    );
    daemon.control_ok("legacy", json!({ "action": "run" }));
    daemon.settled("legacy");
    hook_runs(&daemon, "legacy", 1);
    assert_eq!(
        std::fs::read_to_string(repo.path().join("legacy-hook.txt")).unwrap(),
        "legacy done: Legacy spec — worked\n"
    );

    // An update passing the old single-object shape still registers the hook.
    let (status, answer) = patch(
        &daemon,
        "legacy",
        json!({ "on_completed": { "command": "echo again > legacy-2.txt" } }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["hooks"]["on_completed"],
        json!([{ "command": "echo again > legacy-2.txt" }])
    );
}

#[test]
fn hooks_test_renders_an_events_hooks_and_execute_records_test_runs() {
    let s = Setup::new();
    let log = s.log("test.log");
    let a = s.daemon.add_spec("alpha");
    let b = s.daemon.add_spec("beta");
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a, b], "nodes": [{ "name": "n", "command": "echo did {{spec_name}}" }],
                "hooks": { "on_spec_completed": [
                    { "command": append(&log, "{{spec_name}}") },
                    { "command": append(&log, "only-alpha"), "spec_ids": [&a] }
                ] } }),
    );
    s.daemon.control_ok("g", json!({ "action": "run" }));
    s.daemon.settled("g");
    hook_runs(&s.daemon, "g", 3);
    std::fs::remove_file(&log).unwrap();

    let dry = s.daemon.json(&["hooks", "test", "g", "on_spec_completed"]);
    assert_eq!(
        dry["markers"]["spec_name"], "beta",
        "the latest completed spec by default"
    );
    assert_eq!(dry["hooks"][0]["would_fire"], true);
    assert_eq!(
        dry["hooks"][0]["rendered"]["command"],
        append(&log, "\"${CANOPY_MARKER_SPEC_NAME}\"")
    );
    assert_eq!(dry["hooks"][1]["would_fire"], false);
    assert!(
        dry["hooks"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("spec_ids")
    );
    assert!(!log.exists(), "a dry run runs nothing");

    let executed = s.daemon.json(&[
        "hooks",
        "test",
        "g",
        "on_spec_completed",
        "--spec",
        &a[..8],
        "--index",
        "1",
        "--execute",
    ]);
    assert_eq!(executed["runs"].as_array().unwrap().len(), 1);
    assert_eq!(executed["runs"][0]["status"], "completed");
    assert_eq!(executed["runs"][0]["test"], true);
    assert_eq!(lines(&log), ["only-alpha"]);
    let text = s.daemon.ok(&["hooks", "test", "g", "on_completed"]);
    assert!(text.contains("no hooks on on_completed"), "{text}");
}

#[test]
fn interactive_hooks_resolve_names_at_every_fire_and_ids_fail_loudly() {
    let s = Setup::new();
    let a = s.daemon.add_spec("A");
    s.daemon.create_graph(json!({ "name": "g", "workdir": s.repo.path(), "specs": [a], "nodes": [{ "name": "n", "command": "true" }],
                "hooks": { "on_completed": [
                    { "prompt": "to the name", "target_session_name": "reviewer" },
                    { "prompt": "to the id", "target_session_id": "0000feedface0000feedface0000feed" }
                ] } }),
    );
    let run = |expected: usize| {
        s.daemon.send(
            "POST",
            "/api/graphs/g/control",
            &json!({ "action": "reset" }),
        );
        s.daemon.control_ok("g", json!({ "action": "run" }));
        s.daemon.settled("g");
        hook_runs(&s.daemon, "g", expected)
    };
    // Zero live sessions with the name.
    let runs = run(2);
    assert_eq!(runs[0]["status"], "failed");
    assert!(
        runs[0]["error"]
            .as_str()
            .unwrap()
            .contains("no live session is named `reviewer`"),
        "{:#}",
        runs[0]
    );
    assert!(
        runs[1]["error"]
            .as_str()
            .unwrap()
            .contains("no session has id `0000feedface0000feedface0000feed`"),
        "{:#}",
        runs[1]
    );

    // Exactly one: delivered, with provenance beside the prompt.
    let one = s.daemon.json(&["session", "new", "--name", "reviewer"]);
    let runs = run(4);
    assert_eq!(runs[2]["status"], "completed", "{:#}", runs[2]);
    let id = one["id"].as_str().unwrap();
    let message = wait_for("delivery", Duration::from_secs(10), || {
        let inbox = s.daemon.json(&["session", "inbox", id]);
        inbox["messages"]
            .as_array()
            .unwrap()
            .first()
            .filter(|m| m["status"] == "delivered")
            .cloned()
    });
    assert_eq!(message["text"], "to the name");
    assert_eq!(message["origin"], "hook");
    assert_eq!(message["aimed_at"], "reviewer");
    assert_eq!(message["session_id"], id);
    assert_eq!(message["provenance"]["event"], "on_completed");
    assert_eq!(message["provenance"]["graph_name"], "g");
    assert_eq!(message["provenance"]["hook_index"], 0);

    // Two: refused, listing both ids (never cached: resolved again at this fire).
    let two = s.daemon.json(&["session", "new", "--name", "reviewer"]);
    let runs = run(6);
    let error = runs[4]["error"].as_str().unwrap();
    assert!(
        error.contains("2 live sessions are named `reviewer`"),
        "{error}"
    );
    assert!(
        error.contains(id) && error.contains(two["id"].as_str().unwrap()),
        "{error}"
    );
}

#[test]
fn sessions_resume_keeping_id_and_name_and_imports_get_fresh_ones() {
    let s = Setup::new();
    let first = s.daemon.json(&[
        "session",
        "new",
        "--name",
        "pair",
        "--conversation",
        "conv-1",
    ]);
    let id = first["id"].as_str().unwrap().to_string();
    s.daemon.ok(&["session", "finish", &id[..8]]);
    let resumed = s.daemon.json(&["session", "resume", &id[..8]]);
    assert_eq!(
        (
            resumed["id"].as_str(),
            resumed["name"].as_str(),
            resumed["status"].as_str()
        ),
        (Some(id.as_str()), Some("pair"), Some("live"))
    );

    // Finished again while someone else took the name: the resumed session gets a fresh name.
    s.daemon.ok(&["session", "finish", &id]);
    s.daemon.ok(&["session", "new", "--name", "pair"]);
    let renamed = s.daemon.json(&["session", "resume", &id]);
    assert_eq!(renamed["id"], id.as_str());
    assert!(
        renamed["name"].as_str().unwrap().starts_with("pair-"),
        "{renamed}"
    );

    // A session without a conversation id resumes the same way.
    let bare = s.daemon.json(&["session", "new", "--name", "solo"]);
    let bare_id = bare["id"].as_str().unwrap();
    s.daemon.ok(&["session", "finish", bare_id]);
    assert_eq!(
        s.daemon.json(&["session", "resume", bare_id])["name"],
        "solo"
    );

    // A conversation Canopy has never seen: new id, generated name.
    let imported = s.daemon.json(&["session", "import", "conv-unknown"]);
    assert_ne!(imported["id"], id.as_str());
    assert!(imported["name"].as_str().unwrap().starts_with("session-"));
    assert_eq!(imported["conversation_id"], "conv-unknown");
    // One it has seen comes back as its session.
    s.daemon.ok(&["session", "finish", &id]);
    assert_eq!(
        s.daemon.json(&["session", "import", "conv-1"])["id"],
        id.as_str()
    );
}

#[test]
fn undeliverable_messages_are_kept_for_recall_with_a_notification() {
    let s = Setup::new();
    // A finished session still exists, so an id-targeted hook is accepted at fire time; the
    // scheduler then finds it not live and keeps the message.
    let session = s.daemon.json(&["session", "new", "--name", "gone"]);
    let id = session["id"].as_str().unwrap().to_string();
    s.daemon.ok(&["session", "finish", &id]);
    let (status, report) = s.daemon.send(
        "POST",
        "/api/plugins/interactive/run",
        &json!({ "config": { "prompt": "kept for later", "target_session_id": id }, "workdir": s.repo.path() }),
    );
    assert_eq!(status, 200, "{report}");
    let recalled = wait_for(
        "the message to be kept for recall",
        Duration::from_secs(10),
        || {
            let recall = s.daemon.json(&["session", "recall"]);
            recall["messages"].as_array().unwrap().first().cloned()
        },
    );
    assert_eq!(recalled["status"], "undeliverable");
    assert_eq!(recalled["text"], "kept for later");
    let notes = s.daemon.json(&["session", "notifications"]);
    let note = notes["notifications"][0]["message"].as_str().unwrap();
    assert!(
        note.contains("was not delivered")
            && note.contains("not found live")
            && note.contains("canopy session recall"),
        "{note}"
    );
}

#[test]
fn inbox_follow_streams_messages_as_they_are_delivered() {
    let s = Setup::new();
    let session = s.daemon.json(&["session", "new", "--name", "listener"]);
    let id = session["id"].as_str().unwrap().to_string();
    let mut follower = std::process::Command::new(support::CANOPY)
        .args(["session", "inbox", &id, "--follow", "--json", "--data-dir"])
        .arg(&s.daemon.data_dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    for text in ["one", "two"] {
        let (status, _) = s.daemon.send(
            "POST",
            "/api/plugins/interactive/run",
            &json!({ "config": { "prompt": text, "target_session_name": "listener" }, "workdir": s.repo.path() }),
        );
        assert_eq!(status, 200);
    }
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the follower printed nothing");
        let message: Value = serde_json::from_str(&line).unwrap();
        seen.push(message["text"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["one", "two"]);
    let _ = follower.kill();
    let _ = follower.wait();
}

#[test]
fn the_tmux_backend_types_messages_into_a_real_pane() {
    let s = Setup::new();
    let socket = s.out.path().join("tmux.sock");
    let received = s.out.path().join("typed.txt");
    let tmux = |args: &[&str]| {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // A pane running a reader that writes each line it is typed to a file.
    tmux(&[
        "new-session",
        "-d",
        "-s",
        "canopy-test",
        &format!(
            "while IFS= read -r line; do printf '%s\\n' \"$line\" >> {}; done",
            received.display()
        ),
    ]);
    let session = s.daemon.json(&[
        "session",
        "new",
        "--name",
        "pane",
        "--tmux-target",
        "canopy-test:0.0",
        "--tmux-socket",
        socket.to_str().unwrap(),
    ]);
    let (status, _) = s.daemon.send(
        "POST",
        "/api/plugins/interactive/run",
        &json!({ "config": { "prompt": "hello from a hook; $(not run)", "target_session_name": "pane" }, "workdir": s.repo.path() }),
    );
    assert_eq!(status, 200);
    let typed = wait_for(
        "the pane to receive the message",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&received)
                .ok()
                .filter(|t| t.ends_with('\n'))
        },
    );
    assert_eq!(typed, "hello from a hook; $(not run)\n");
    let inbox = s
        .daemon
        .json(&["session", "inbox", session["id"].as_str().unwrap()]);
    assert_eq!(inbox["messages"][0]["status"], "delivered");
    tmux(&["kill-server"]);
}

#[test]
fn docs_maintenance_on_completed_keeps_the_changelog_and_refuses_stray_edits() {
    let tools = tempfile::tempdir().unwrap();
    let sneaky = script(
        tools.path(),
        "sneaky.sh",
        "echo '// oops' >> src/lib.rs; echo '{\"result\":\"docs updated\"}'",
    );
    let s = Setup::with_config(&format!(
        "[platforms.sneaky]\ncommand = [\"{}\", \"{{prompt}}\"]\n",
        sneaky.display()
    ));
    let log_dir = tempfile::tempdir().unwrap();
    let a = s.daemon.add_spec("Login form");
    let b = s.daemon.add_spec("Password reset");
    s.daemon.create_graph(json!({ "name": "web", "workdir": s.repo.path(), "specs": [a, b],
                "nodes": [{ "name": "build", "command": format!("echo built >> {}; echo shipped {{{{spec_name}}}}", log_dir.path().join("b.log").display()) }],
                "hooks": { "on_completed": [{ "mode": "docs-maintenance" }] } }),
    );
    s.daemon.control_ok("web", json!({ "action": "run" }));
    assert_eq!(s.daemon.settled("web")["status"], "completed");
    let runs = hook_runs(&s.daemon, "web", 1);
    assert_eq!(runs[0]["status"], "completed", "{:#}", runs[0]);
    let changelog = std::fs::read_to_string(s.repo.path().join("docs/CHANGELOG.md")).unwrap();
    assert!(changelog.starts_with("# Changelog\n\n## "), "{changelog}");
    assert!(changelog.contains(" — web\n\n- Login form — shipped Login form\n- Password reset — shipped Password reset\n"), "{changelog}");
    // The changelog is committed, so the next run does not pause on the dirty-tree guard.
    let git = |args: &[&str]| {
        let output = std::process::Command::new("git")
            .args(args)
            .current_dir(s.repo.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert_eq!(
        git(&["status", "--porcelain"]),
        "",
        "the workdir is left dirty"
    );
    assert!(
        git(&["log", "-1", "--format=%s"]).starts_with("docs: changelog of graph web"),
        "{}",
        git(&["log", "-3", "--oneline"])
    );
    assert!(
        runs[0]["summary"]
            .as_str()
            .unwrap()
            .contains("committed as"),
        "{:#}",
        runs[0]
    );
    s.daemon.control_ok("web", json!({ "action": "reset" }));
    s.daemon.control_ok("web", json!({ "action": "run" }));
    assert_eq!(
        s.daemon.settled("web")["status"],
        "completed",
        "the second run paused on its own changelog"
    );

    // With an agent that touches a non-doc file, the hook fails naming it.
    let (status, _) = patch(
        &s.daemon,
        "web",
        json!({ "hooks": { "on_completed": [{ "mode": "docs-maintenance", "platform": "sneaky" }] } }),
    );
    assert_eq!(status, 200);
    let (status, _) = patch(&s.daemon, "web", json!({ "allow_dirty_start": true }));
    assert_eq!(status, 200);
    s.daemon.control_ok("web", json!({ "action": "run" }));
    assert_eq!(s.daemon.settled("web")["status"], "completed");
    let runs = hook_runs(&s.daemon, "web", 3);
    assert_eq!(runs[2]["status"], "failed");
    assert_eq!(
        runs[2]["error"],
        "docs maintenance changed files outside docs_paths (docs, README.md): src/lib.rs"
    );
}

#[test]
fn the_hook_catalog_and_event_taxonomy_describe_what_is_configured() {
    let s = Setup::new();
    let a = s.daemon.add_spec("A");
    s.daemon.create_graph(json!({
        "name": "g", "workdir": s.repo.path(), "specs": [a], "nodes": [{ "name": "n", "command": "true" }],
        "hooks": {
            "on_completed": [{ "command": "true" }, { "mode": "docs-maintenance" }],
            "on_spec_completed": [{ "command": "echo {{spec_name}}", "spec_ids": [&a] }]
        }
    }));
    let (_, all) = s.daemon.get("/api/hooks/catalog");
    let hooks = all["hooks"].as_array().unwrap();
    let listed: Vec<(String, i64, String, String)> = hooks
        .iter()
        .map(|h| {
            (
                h["key"].as_str().unwrap().to_string(),
                h["index"].as_i64().unwrap(),
                h["executor_kind"].as_str().unwrap().to_string(),
                h["executor"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                "on_completed".to_string(),
                0,
                "command".to_string(),
                "command".to_string()
            ),
            (
                "on_completed".to_string(),
                1,
                "docs-maintenance".to_string(),
                "docs-maintenance".to_string()
            ),
            (
                "on_spec_completed".to_string(),
                0,
                "command".to_string(),
                "command".to_string()
            ),
        ]
    );
    assert_eq!(hooks[2]["spec_ids"], json!([a]));
    let (_, only) = s
        .daemon
        .get("/api/hooks/catalog?event=on_completed&mode=docs-maintenance");
    assert_eq!(only["hooks"].as_array().unwrap().len(), 1);
    let table = s.daemon.ok(&["hooks", "list", "--graph", "g"]);
    assert!(
        table.contains("on_spec_completed[0]") && table.contains("command 0.1.0"),
        "{table}"
    );

    // The graph-hook keys, beside the event taxonomy (`tests/catalog.rs` covers the latter).
    let events = s.daemon.json(&["hooks", "events"]);
    let names: Vec<&str> = events["graph_hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "on_completed",
            "on_failed",
            "on_blocked",
            "on_spec_completed",
            "on_spec_failed"
        ]
    );
    assert_eq!(
        events["graph_hooks"][1]["markers"],
        json!(["graph_name", "workdir", "blocker", "node", "spec_id"])
    );
    assert_eq!(events["graph_hooks"][3]["spec_ids"], true);
    assert_eq!(events["graph_hooks"][0]["spec_ids"], false);
}

/// The keys a `hostile-config` call says it received: from the JSON config it hands back, or
/// from the "validate received keys: ..." error its `validate` refuses with.
fn keys_of(config_json: &str) -> Vec<String> {
    let config: Value = serde_json::from_str(config_json).unwrap();
    let mut keys: Vec<String> = config.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

fn keys_refused(err: &str) -> Vec<String> {
    let (_, list) = err
        .split_once("validate received keys: ")
        .unwrap_or_else(|| panic!("not refused by hostile-config's validate: {err}"));
    let list = list.lines().next().unwrap_or_default();
    let mut keys: Vec<String> = list.split(", ").map(str::to_string).collect();
    keys.sort();
    keys
}

#[test]
fn the_hosts_keys_are_read_by_the_host_and_never_reach_an_executor() {
    let s = Setup::new();
    s.daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);
    s.daemon
        .ok(&["plugin", "install", HOSTILE_WASM, "--grant", "fs-read"]);
    // Not a git tree: the files append-file writes do not trip the dirty-tree guard.
    let workdir = tempfile::tempdir().unwrap();
    let a = s.daemon.add_spec("A");

    // `validate` never sees them: hostile-config refuses naming every key it received.
    let every_reserved = json!({
        "mode": "hostile-config", "refuse": true, "text": "kept",
        "spec_ids": [a], "timeout_seconds": 5, "timeout_minutes": 1, "detach": true
    });
    let (status, body) = s.daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "v", "workdir": workdir.path(), "specs": [a],
                 "nodes": [{ "name": "n", "command": "true" }],
                 "hooks": { "on_spec_completed": [every_reserved] } }),
    );
    assert_eq!(status, 400, "{body}");
    let err = body["error"]["message"].as_str().unwrap();
    assert!(
        err.starts_with("hooks.on_spec_completed[0] (hostile-config mode): "),
        "{err}"
    );
    assert_eq!(keys_refused(err), ["refuse", "text"]);
    let (status, body) = s.daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "v", "workdir": workdir.path(), "specs": [a],
                 "nodes": [{ "name": "n", "mode": "hostile-config", "refuse": true,
                             "timeout_minutes": 1, "detach": false }] }),
    );
    assert_eq!(status, 400, "{body}");
    let err = body["error"]["message"].as_str().unwrap();
    assert_eq!(keys_refused(err), ["refuse"], "{err}");

    // The host still checks them, naming the field; append-file's own schema does not list
    // them, yet a misspelt one is suggested; a node has no `spec_ids`.
    for (hook, wanted) in [
        (
            json!({ "mode": "append-file", "timeout_seconds": 0 }),
            "hooks.on_completed[0] (append-file mode): field `timeout_seconds`: must be a whole number of seconds from 1 to 604800",
        ),
        (
            json!({ "mode": "append-file", "detach": "yes" }),
            "hooks.on_completed[0] (append-file mode): field `detach` must be true or false, not \"yes\"",
        ),
        (
            json!({ "mode": "append-file", "timout_seconds": 5 }),
            "hooks.on_completed[0] (append-file mode): unknown field `timout_seconds`; did you mean `timeout_seconds`?",
        ),
        (
            json!({ "mode": "append-file", "spec_ids": [a] }),
            "hooks.on_completed[0]: field `spec_ids` is not allowed on on_completed",
        ),
    ] {
        let (status, body) = s.daemon.send(
            "POST",
            "/api/graphs",
            &json!({ "name": "v", "workdir": workdir.path(), "specs": [a],
                     "nodes": [{ "name": "n", "command": "true" }],
                     "hooks": { "on_completed": [hook] } }),
        );
        assert_eq!(status, 400, "{body}");
        let err = body["error"]["message"].as_str().unwrap();
        assert!(err.starts_with(wanted), "{err}");
    }
    let (status, body) = s.daemon.send(
        "POST",
        "/api/graphs",
        &json!({ "name": "v", "workdir": workdir.path(), "specs": [a],
                 "nodes": [{ "name": "n", "command": "true", "spec_ids": [a] }] }),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["message"],
        "nodes[0] (`n`): field `spec_ids` belongs to hooks of on_spec_completed and on_failed only"
    );

    // Accepted and run, hooks and nodes alike: each call's deadline is the one its config asks
    // for, and the config it received has none of the host's keys.
    let hooks = json!({
        "on_spec_completed": [
            { "mode": "append-file", "file": "hooks.log", "line": "{{spec_name}} done",
              "spec_ids": [a], "timeout_seconds": 9 },
            { "mode": "hostile-config", "text": "kept", "spec_ids": [a],
              "timeout_minutes": 2, "detach": false }
        ],
        "on_completed": [
            { "mode": "append-file", "file": "hooks.log", "line": "run done", "timeout_minutes": 1 },
            { "mode": "hostile-sleep", "secs": 30, "timeout_seconds": 1 }
        ]
    });
    s.daemon.create_graph(json!({
        "name": "g", "workdir": workdir.path(), "specs": [a],
        "nodes": [
            { "name": "append", "mode": "append-file", "file": "nodes.log",
              "line": "node {{node}} for {{spec_name}}", "timeout_seconds": 5 },
            { "name": "config", "mode": "hostile-config", "text": "kept",
              "timeout_seconds": 6, "detach": true }
        ],
        "hooks": hooks,
    }));
    s.daemon.control_ok("g", json!({ "action": "run" }));
    let view = s.daemon.settled("g");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("nodes.log")).unwrap(),
        "node append for A\n"
    );
    let run_id = view["current_run"]["id"].as_str().unwrap();
    let (_, run) = s.daemon.get(&format!("/api/runs/{run_id}"));
    let config_node = run["node_runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "config")
        .unwrap();
    assert_eq!(config_node["status"], "completed", "{config_node:#}");
    assert_eq!(config_node["summary"], "6000");
    assert_eq!(keys_of(config_node["detail"].as_str().unwrap()), ["text"]);

    let runs = hook_runs(&s.daemon, "g", 4);
    let by = |event: &str, index: u64| {
        runs.iter()
            .find(|r| r["event"] == event && r["hook_index"] == index)
            .unwrap_or_else(|| panic!("no hook run {event}[{index}] in {runs:#?}"))
    };
    let append = by("on_spec_completed", 0);
    assert_eq!(append["status"], "completed", "{append:#}");
    assert_eq!(append["rendered"]["deadline_ms"], 9000);
    assert_eq!(
        append["rendered"]["config"],
        json!({ "file": "hooks.log", "line": "A done" })
    );
    // The hook-run record keeps the config as written, the host's keys included.
    assert_eq!(append["hook_config"], hooks["on_spec_completed"][0]);
    let config = by("on_spec_completed", 1);
    assert_eq!(config["status"], "completed", "{config:#}");
    assert_eq!(config["summary"], "120000");
    assert_eq!(keys_of(config["output"].as_str().unwrap()), ["text"]);
    assert_eq!(config["hook_config"], hooks["on_spec_completed"][1]);
    let done = by("on_completed", 0);
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["rendered"]["deadline_ms"], 60_000);
    // The deadline is enforced, not only passed on: a 30 s sleep stops at 1 s.
    let sleep = by("on_completed", 1);
    assert_eq!(sleep["status"], "timed_out", "{sleep:#}");
    assert!(sleep["duration_ms"].as_i64().unwrap() < 10_000, "{sleep:#}");
    // Hooks of different events may run side by side: either order.
    let mut appended = lines(&workdir.path().join("hooks.log"));
    appended.sort();
    assert_eq!(appended, ["A done", "run done"]);
}
