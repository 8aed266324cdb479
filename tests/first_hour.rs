//! The first hour of a new user (issue 13), end to end: queues and sessions named by name, the
//! README's `spec_ids` on a queue-driven graph, a drained queue refused, why a spec failed shown
//! where the user looks, and a platform error that names the canopy.toml the daemon read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, git_repo, real, wait_for};

/// The table row of `output` (a line starting with a position) that mentions `what`.
fn line_with<'a>(output: &'a str, what: &str) -> &'a str {
    output
        .lines()
        .find(|line| line.starts_with(|c: char| c.is_ascii_digit()) && line.contains(what))
        .unwrap_or_else(|| panic!("no row mentions `{what}` in:\n{output}"))
}

/// Writes `value` as a JSON file in `dir`; returns its path as a string.
fn json_file(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

fn id_of(value: &Value) -> String {
    value["id"].as_str().unwrap().to_string()
}

#[test]
fn a_queue_is_named_by_its_name_or_a_unique_id_prefix_everywhere() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let login = daemon.add_spec("Login form");
    let reset = daemon.add_spec("Password reset");
    let signup = daemon.add_spec("Sign-up");
    let created = daemon.ok(&["queue", "create", "sprint-1", &login[..8]]);
    assert!(created.contains("sprint-1"), "{created}");

    // Every queue command takes the name.
    daemon.ok(&["queue", "add", "sprint-1", &reset[..8]]);
    daemon.ok(&["queue", "add", "sprint-1", &signup[..8], "--group", "auth"]);
    daemon.ok(&["queue", "group", "sprint-1", &login[..8], "auth"]);
    daemon.ok(&["queue", "rm-spec", "sprint-1", &reset[..8]]);
    daemon.ok(&["queue", "add", "sprint-1", &reset[..8]]);
    daemon.ok(&[
        "queue",
        "reorder",
        "sprint-1",
        &signup[..8],
        &login[..8],
        &reset[..8],
    ]);
    let shown = daemon.ok(&["queue", "show", "sprint-1"]);
    assert!(shown.contains("sprint-1"), "{shown}");
    assert!(
        line_with(&shown, "Login form").contains("pending"),
        "{shown}"
    );
    let queue = daemon.json(&["queue", "show", "sprint-1"]);
    let id = id_of(&queue);
    let names: Vec<&str> = queue["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["spec_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Sign-up", "Login form", "Password reset"]);
    // A unique id prefix works as before, and so does the name over the API.
    assert!(daemon.ok(&["queue", "show", &id[..6]]).contains("sprint-1"));
    let (status, body) = daemon.get("/api/queues/sprint-1");
    assert_eq!((status, body["id"].as_str()), (200, Some(id.as_str())));

    // `graph run --queue` takes the name.
    daemon.create_graph(json!({ "name": "web", "workdir": repo.path(), "specs": [], "nodes": [{ "name": "n", "command": "true" }] }));
    let output = daemon.ok(&["graph", "run", "web", "--queue", "sprint-1", "--wait"]);
    assert!(output.contains("status:   completed"), "{output}");
    let view = daemon.json(&["graph", "get", "web"]);
    assert_eq!(view["current_run"]["queue_id"], id.as_str());

    // A second queue of the same name is refused, naming the first: names stay unambiguous.
    let first = id_of(&daemon.json(&["queue", "create", "dup"]));
    let err = daemon.fails(&["queue", "create", "dup"]);
    assert!(
        err.contains("a queue named `dup` already exists") && err.contains(&first[..12]),
        "{err}"
    );
    // The queue is there by its name and by an id prefix.
    assert!(daemon.ok(&["queue", "show", "dup"]).contains("dup"));
    assert!(daemon.ok(&["queue", "show", &first[..8]]).contains("dup"));
    let err = daemon.fails(&["queue", "show", "sprint-2"]);
    assert!(err.contains("no queue matches `sprint-2`"), "{err}");
}

#[test]
fn a_session_is_named_by_its_name_wherever_a_session_id_is_taken() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let lead = id_of(&daemon.json(&["session", "new", "--name", "lead"]));
    let spec = daemon.add_spec("Login form");
    daemon.create_graph(json!({
        "name": "web", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "true" }],
        "hooks": { "on_completed": [{ "prompt": "{{graph_name}} is done", "target_session_name": "lead" }] }
    }));
    daemon.ok(&["graph", "run", "web", "--wait"]);
    wait_for(
        "the message to reach lead's inbox",
        Duration::from_secs(60),
        || {
            let (_, inbox) = daemon.get("/api/sessions/lead/inbox");
            (inbox["messages"][0]["status"] == "delivered").then_some(())
        },
    );
    let inbox = daemon.ok(&["session", "inbox", "lead"]);
    assert!(inbox.contains("web is done"), "{inbox}");
    let shown = daemon.ok(&["session", "show", "lead"]);
    assert!(shown.contains(&lead), "{shown}");
    let finished = daemon.ok(&["session", "finish", "lead"]);
    assert!(finished.contains("(finished)"), "{finished}");
    let resumed = daemon.ok(&["session", "resume", "lead"]);
    assert!(
        resumed.contains(&lead[..12]) && resumed.contains("(live)"),
        "{resumed}"
    );

    // Two live sessions named lead: the name is refused, listing both.
    let other = id_of(&daemon.json(&["session", "new", "--name", "lead"]));
    let err = daemon.fails(&["session", "inbox", "lead"]);
    assert!(
        err.contains("session name `lead` is ambiguous; it matches ")
            && err.contains(&lead)
            && err.contains(&other)
            && err.contains("give one of these ids (or a unique prefix of it) instead"),
        "{err}"
    );
    // Once one of them is finished, the name means the live one, as for a hook.
    daemon.ok(&["session", "finish", &other[..8]]);
    assert_eq!(
        daemon.json(&["session", "show", "lead"])["id"],
        lead.as_str()
    );
    // Two finished ones and no live one: refused again.
    daemon.ok(&["session", "finish", "lead"]);
    let err = daemon.fails(&["session", "resume", "lead"]);
    assert!(err.contains("session name `lead` is ambiguous"), "{err}");
}

#[test]
fn spec_ids_on_a_queue_driven_graph_are_checked_against_the_backlog() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let files = tempfile::tempdir().unwrap();
    let log = files.path().join("tags.log");
    let first = daemon.add_spec("first");
    let second = daemon.add_spec("second");
    daemon.ok(&["queue", "create", "sprint-1", &first, &second]);
    // The README's shape: a queue-driven graph (no bound specs) whose hook names one spec by a
    // prefix, created while idle.
    let graph = json_file(
        files.path(),
        "web.json",
        &json!({
            "name": "web", "workdir": repo.path(), "specs": [],
            "nodes": [{ "name": "n", "command": "true" }],
            "hooks": { "on_spec_completed": [
                { "command": format!("echo tagged {{{{spec_name}}}} >> {}", log.display()), "spec_ids": [&second[..6]] }
            ] }
        }),
    );
    daemon.ok(&["graph", "create", &graph]);
    let view = daemon.json(&["graph", "get", "web"]);
    assert_eq!(
        view["hooks"]["on_spec_completed"][0]["spec_ids"],
        json!([second]),
        "stored resolved"
    );
    let output = daemon.ok(&["graph", "run", "web", "--queue", "sprint-1", "--wait"]);
    assert!(output.contains("status:   completed"), "{output}");
    wait_for("the hook to run", Duration::from_secs(60), || {
        let (_, runs) = daemon.get("/api/hook-runs?graph=web");
        (runs["runs"][0]["status"] == "completed").then_some(())
    });
    let (_, runs) = daemon.get("/api/hook-runs?graph=web");
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "tagged second\n");

    // An id that names no spec is still refused, at edit time, naming the field.
    let gone = daemon.add_spec("gone");
    daemon.ok(&["spec", "rm", &gone]);
    let edit = json_file(
        files.path(),
        "edit.json",
        &json!({ "hooks": { "on_failed": [{ "command": "true", "spec_ids": [&gone[..10]] }] } }),
    );
    let err = daemon.fails(&["graph", "edit", "web", &edit]);
    assert!(
        err.contains("hooks.on_failed[0]: field `spec_ids[0]`: ")
            && err.contains("matches no spec in the backlog"),
        "{err}"
    );
    let view = daemon.json(&["graph", "get", "web"]);
    assert!(view["hooks"].get("on_failed").is_none(), "nothing written");
}

#[test]
fn running_a_drained_queue_is_refused_and_members_name_the_run_that_completed_them() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let one = daemon.add_spec("one");
    let two = daemon.add_spec("two");
    daemon.ok(&["queue", "create", "q", &one, &two]);
    daemon.create_graph(json!({ "name": "g", "workdir": repo.path(), "specs": [], "nodes": [{ "name": "n", "command": "true" }] }));
    daemon.ok(&["graph", "run", "g", "--queue", "q", "--wait"]);
    let first_run = daemon.json(&["graph", "get", "g"])["current_run"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = format!("completed (run {})", &first_run[..12]);
    let shown = daemon.ok(&["queue", "show", "q"]);
    for name in ["one", "two"] {
        assert!(line_with(&shown, name).contains(&done), "{shown}");
    }
    let queue = daemon.json(&["queue", "show", "q"]);
    assert_eq!(queue["members"][0]["done_in_run"], first_run.as_str());

    // Nothing pending: refused, saying so and how to add specs; no run is created.
    let err = daemon.fails(&["graph", "run", "g", "--queue", "q", "--wait"]);
    assert!(
        err.contains("nothing is pending in queue `q`")
            && err.contains("each of its 2 member(s) was completed or skipped by an earlier run")
            && err.contains("canopy queue add q SPEC"),
        "{err}"
    );
    let (status, body) = daemon.control("g", json!({ "action": "run", "queue_id": "q" }));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    let (_, runs) = daemon.get("/api/runs?graph=g");
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    let view = daemon.json(&["graph", "get", "g"]);
    assert_eq!(
        (view["status"].as_str(), view["current_run"]["id"].as_str()),
        (Some("completed"), Some(first_run.as_str()))
    );
    // An empty queue likewise.
    daemon.ok(&["queue", "create", "empty"]);
    let err = daemon.fails(&["graph", "run", "g", "--queue", "empty"]);
    assert!(
        err.contains("nothing is pending in queue `empty`") && err.contains("it has no members"),
        "{err}"
    );

    // A new member runs; the earlier ones show the run that completed them.
    let three = daemon.add_spec("three");
    daemon.ok(&["queue", "add", "q", &three]);
    let output = daemon.ok(&["graph", "run", "g", "--queue", "q", "--wait"]);
    assert!(output.contains("status:   completed"), "{output}");
    for name in ["one", "two"] {
        assert!(line_with(&output, name).contains(&done), "{output}");
    }
    let three_line = line_with(&output, "three");
    assert!(
        three_line.contains("completed") && !three_line.contains("(run "),
        "{output}"
    );
    let view = daemon.json(&["graph", "get", "g"]);
    assert_eq!(view["progress"][0]["result"], "completed");
    assert_eq!(view["progress"][0]["done_in_run"], first_run.as_str());
    assert_eq!(view["progress"][2]["done_in_run"], Value::Null);
    assert_eq!(
        daemon.ok(&["graph", "get", "g"]),
        output,
        "graph get shows what run --wait showed"
    );
}

#[test]
fn failed_and_blocked_specs_show_their_reason_in_graph_get_and_run_wait() {
    let daemon = Daemon::start_with_config(
        "[platforms.ghost]\ncommand = [\"canopy-test-no-such-agent\", \"{prompt}\"]\n",
    );
    let repo = git_repo();
    let works = daemon.add_spec("Works");
    let breaks = daemon.add_spec("Breaks");
    daemon.create_graph(json!({ "name": "mixed", "workdir": repo.path(), "specs": [works, breaks], "nodes": [
        { "name": "build", "command": "case {{spec_name}} in Breaks) echo compile error >&2; exit 2;; esac; echo built" }
    ] }));
    let run = daemon.cli(&["graph", "run", "mixed", "--wait"]);
    assert!(!run.status.success());
    let output = String::from_utf8(run.stdout).unwrap();
    let line = line_with(&output, "Breaks");
    assert!(
        line.contains("failed") && line.contains("build: exited with exit code 2: compile error"),
        "{output}"
    );
    assert!(line_with(&output, "Works").contains("built"), "{output}");
    let got = daemon.ok(&["graph", "get", "mixed"]);
    assert!(
        line_with(&got, "Breaks").contains("build: exited with exit code 2: compile error"),
        "{got}"
    );
    let view = daemon.json(&["graph", "get", "mixed"]);
    assert_eq!(
        (
            view["progress"][1]["reason_node"].as_str(),
            view["progress"][1]["reason"].as_str()
        ),
        (
            Some("build"),
            Some("exited with exit code 2: compile error")
        )
    );

    // An agent CLI that is not installed: the reason the issue found only in `graph info`.
    let ghost = daemon.add_spec("Haunted");
    daemon.create_graph(
        json!({ "name": "agent", "workdir": repo.path(), "specs": [ghost], "nodes": [
        { "name": "implement", "platform": "ghost", "prompt": "{{spec_body}}" }
    ] }),
    );
    let run = daemon.cli(&["graph", "run", "agent", "--wait"]);
    let output = String::from_utf8(run.stdout).unwrap();
    let line = line_with(&output, "Haunted");
    assert!(
        line.contains("failed")
            && line.contains("implement: ")
            && line.contains("cannot run `canopy-test-no-such-agent`: No such file or directory"),
        "{output}"
    );

    // A blocked spec shows its blocker.
    let gated = daemon.add_spec("Gated");
    daemon.create_graph(json!({ "name": "gated", "workdir": repo.path(), "specs": [gated], "nodes": [
        { "name": "gate", "command": "printf '{\"status\":\"blocked\",\"blocker\":\"needs a human\"}' > \"$CANOPY_RESULT_FILE\"" }
    ] }));
    let run = daemon.cli(&["graph", "run", "gated", "--wait"]);
    let output = String::from_utf8(run.stdout).unwrap();
    let line = line_with(&output, "Gated");
    assert!(
        line.contains("blocked") && line.contains("gate: needs a human"),
        "{output}"
    );
    let got = daemon.ok(&["graph", "get", "gated"]);
    assert!(
        line_with(&got, "Gated").contains("gate: needs a human"),
        "{got}"
    );
}

#[test]
fn an_unknown_platform_names_the_canopy_toml_the_daemon_read_and_when() {
    let files = tempfile::tempdir().unwrap();
    let repo = git_repo();
    let graph = json_file(
        files.path(),
        "g.json",
        &json!({ "name": "g", "workdir": repo.path(), "nodes": [{ "name": "n", "platform": "mine", "prompt": "hi" }] }),
    );
    let daemon = Daemon::start_with_config("[platforms.other]\ncommand = [\"other\"]\n");
    let config = format!("{}/canopy.toml", real(&daemon.data_dir));
    // Added after the daemon read the file: no effect until a reload, and the error says why.
    std::fs::write(
        daemon.data_dir.join("canopy.toml"),
        "[platforms.other]\ncommand = [\"other\"]\n[platforms.mine]\ncommand = [\"mine\"]\n",
    )
    .unwrap();
    let err = daemon.fails(&["graph", "create", &graph]);
    assert!(
        err.contains("unknown agent platform `mine`")
            && err.contains(&format!("The daemon read {config} when it started ("))
            && err.contains("had no [platforms.mine] section then")
            && err.contains("run `canopy config reload` if you added it since"),
        "{err}"
    );
    let when = err
        .split("when it started (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap();
    assert!(
        when.len() == 20 && when.ends_with('Z') && when.as_bytes()[10] == b'T',
        "an RFC 3339 time: {when}"
    );
    // The reload it names puts the platform in force.
    daemon.ok(&["config", "reload"]);
    daemon.ok(&["graph", "create", &graph]);

    // No file at all.
    let bare = Daemon::start();
    let err = bare.fails(&["graph", "create", &graph]);
    assert!(
        err.contains(&format!(
            "The daemon read {}/canopy.toml when it started (",
            real(&bare.data_dir)
        )) && err.contains("the file did not exist then"),
        "{err}"
    );
}

#[test]
fn a_run_is_watched_again_after_ctrl_c_detaches_from_it() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let gate = repo.path().join("go");
    let spec = daemon.add_spec("slow spec");
    // The node waits for a file the test makes, so the run is in flight for as long as needed.
    daemon.create_graph(json!({
        "name": "slow", "workdir": repo.path(), "specs": [spec],
        "allow_dirty_start": true,
        "nodes": [{ "name": "wait", "command": format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display()) }],
    }));
    let mut waiting = daemon.spawn_cli(&["graph", "run", "slow", "--wait"]);
    wait_for("the run to start", Duration::from_secs(30), || {
        let (_, graph) = daemon.get("/api/graphs/slow");
        (graph["status"] == "running").then_some(())
    });
    // Ctrl-C: the client detaches and says how to follow the run again; the run goes on.
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &waiting.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let detached = wait_for("the client to exit", Duration::from_secs(30), || {
        waiting.try_wait().unwrap()
    });
    let mut said = String::new();
    std::io::Read::read_to_string(&mut waiting.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(detached.code(), Some(130), "{said}");
    assert!(
        said.contains("detached; run")
            && said.contains("`canopy graph watch slow` follows it again"),
        "{said}"
    );
    let (_, graph) = daemon.get("/api/graphs/slow");
    assert_eq!(graph["status"], "running", "the run went on");

    // `graph watch` follows it to its end and exits 0 for a completed run.
    let watching = daemon.spawn_cli(&["graph", "watch", "slow"]);
    std::fs::write(&gate, "").unwrap();
    let watched = watching.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&watched.stdout);
    assert!(
        watched.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&watched.stderr)
    );
    assert!(out.contains("status:   completed"), "{out}");
    // Watching a graph with nothing in flight shows how it ended.
    let again = daemon.cli(&["graph", "watch", "slow"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("graph slow has no run in flight; it is completed"),
        "{again:?}"
    );
}

#[test]
fn graph_run_without_wait_says_what_the_run_really_does() {
    let daemon = Daemon::start();
    let repo = git_repo();
    std::fs::write(repo.path().join("stray.txt"), "not committed\n").unwrap();
    let spec = daemon.add_spec("guarded spec");
    daemon.create_graph(json!({
        "name": "guarded", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "n", "command": "true" }],
    }));
    // The run pauses on the dirty tree at once: that, and why, is what `graph run` says.
    let output = daemon.cli(&["graph", "run", "guarded"]);
    let said = String::from_utf8_lossy(&output.stdout);
    // It was started all the same: only `--wait` exits by outcome.
    assert!(output.status.success(), "{said}");
    assert!(said.starts_with("graph guarded is paused (run "), "{said}");
    assert!(said.contains("blocker: dirty tree:"), "{said}");
    assert!(said.contains("stray.txt"), "{said}");
}

#[test]
fn a_wait_whose_daemon_stops_says_so_and_how_to_go_on() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let spec = daemon.add_spec("long spec");
    daemon.create_graph(json!({
        "name": "long", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "wait", "command": "sleep 60" }],
    }));
    let waiting = daemon.spawn_cli(&["graph", "run", "long", "--wait"]);
    wait_for("the node to run", Duration::from_secs(30), || {
        let (_, graph) = daemon.get("/api/graphs/long");
        graph["current_run"]["node_runs"]
            .as_array()
            .is_some_and(|runs| !runs.is_empty())
            .then_some(())
    });
    daemon.ok(&["daemon", "stop", "--timeout", "0"]);
    let waited = waiting.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&waited.stderr);
    assert!(!waited.status.success(), "{said}");
    assert!(
        said.contains("the daemon stopped while this waited for run")
            && said.contains("`canopy graph continue long` goes on"),
        "{said}"
    );
}

#[test]
fn graph_cancel_stops_the_running_node_kills_its_processes_and_records_the_run_cancelled() {
    let logs = tempfile::tempdir().unwrap();
    let cancelled_log = logs.path().join("cancelled.log");
    let daemon = Daemon::start_with_config(&format!(
        r#"
[[hooks]]
name = "tell-on-cancel"
event = "graph.run.cancelled"
action = {{ command = "printf '%s\\n' \"$CANOPY_HOOK_DATA\" >> {log}" }}
"#,
        log = cancelled_log.display()
    ));
    let repo = git_repo();
    let child = logs.path().join("child.pid");
    let failed_log = logs.path().join("failed.log");
    let spec = daemon.add_spec("Login form");
    // The node leaves a grandchild in its process group, and says its pid.
    daemon.create_graph(json!({
        "name": "web", "workdir": repo.path(), "specs": [spec], "allow_dirty_start": true,
        "nodes": [{ "name": "test", "command": format!("sleep 300 & echo $! > {}; wait", child.display()) }],
        "hooks": { "on_failed": [{ "command": format!("echo failed >> {}", failed_log.display()) }] },
    }));
    // Nothing in flight: nothing to cancel, and it says so.
    let err = daemon.fails(&["graph", "cancel", "web"]);
    assert!(
        err.contains("graph `web` has no run in flight to cancel; it is idle"),
        "{err}"
    );

    daemon.ok(&["graph", "run", "web"]);
    let pid: i32 = wait_for("the node's child", Duration::from_secs(30), || {
        std::fs::read_to_string(&child).ok()?.trim().parse().ok()
    });
    assert!(alive(pid));
    let mut watching = daemon.spawn_cli(&["graph", "watch", "web"]);
    // Once it follows the run (its node shows as running), the run is cancelled.
    let mut watched_err = std::io::BufReader::new(watching.stderr.take().unwrap());
    let mut progress = String::new();
    while !progress.contains("Running node test") {
        let read = std::io::BufRead::read_line(&mut watched_err, &mut progress).unwrap();
        assert!(read > 0, "the watcher ended early: {progress}");
    }

    let said = daemon.ok(&["graph", "cancel", "web"]);
    assert!(
        said.contains(
            "cancelled by user: node `test` on spec `Login form` was stopped and its processes killed"
        ),
        "{said}"
    );
    wait_for(
        "the node's child to be killed and reaped",
        Duration::from_secs(10),
        || (!alive(pid)).then_some(()),
    );

    // The watcher sees the cancel and exits non-zero.
    std::io::Read::read_to_string(&mut watched_err, &mut progress).unwrap();
    let watched = watching.wait_with_output().unwrap();
    assert_eq!(watched.status.code(), Some(1), "{progress}");
    assert!(
        progress.contains("Cancelled node test (Login form)"),
        "{progress}"
    );
    assert!(
        String::from_utf8_lossy(&watched.stdout).contains("status:   cancelled"),
        "{watched:?}"
    );

    // Graph, run, spec and node run: each says cancelled.
    let (_, graph) = daemon.get("/api/graphs/web");
    assert_eq!(graph["status"], "cancelled");
    let run_id = graph["current_run"]["id"].as_str().unwrap().to_string();
    let (_, run) = daemon.get(&format!("/api/runs/{run_id}"));
    assert_eq!(run["status"], "cancelled");
    assert_eq!(run["specs"][0]["status"], "cancelled", "{run}");
    assert_eq!(run["node_runs"][0]["status"], "cancelled", "{run}");
    assert_eq!(run["node_runs"][0]["reason"], "cancelled by user", "{run}");
    let shown = daemon.ok(&["graph", "get", "web"]);
    assert!(
        line_with(&shown, "Login form").contains("cancelled"),
        "{shown}"
    );
    // `run watch` on an ended run shows how it ended, exit 1.
    let watched_run = daemon.cli(&["run", "watch", &run_id[..8]]);
    assert_eq!(watched_run.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&watched_run.stderr).contains("is not in flight; it is cancelled"),
        "{watched_run:?}"
    );

    // A daemon hook keyed on graph.run.cancelled ran; the graph's on_failed did not.
    let hooks = daemon.ended_hook_runs("config", 1);
    assert_eq!(hooks[0]["hook_name"], "tell-on-cancel", "{hooks:?}");
    let event: Value =
        serde_json::from_str(std::fs::read_to_string(&cancelled_log).unwrap().trim()).unwrap();
    assert_eq!(event["event"], "graph.run.cancelled");
    assert_eq!(event["payload"]["by"], "user", "{event}");
    assert_eq!(event["payload"]["node"], "test", "{event}");
    assert_eq!(event["payload"]["run_id"], run_id, "{event}");
    assert!(!failed_log.exists(), "on_failed fired for a cancel");
    let (_, graph_hooks) = daemon.get("/api/hook-runs?source=graph");
    assert_eq!(graph_hooks["runs"], json!([]), "{graph_hooks}");

    // A cancelled graph starts again as a completed or failed one does.
    daemon.ok(&["graph", "run", "web"]);
    let said = daemon.ok(&["graph", "cancel", "web"]);
    assert!(said.contains("cancelled by user"), "{said}");
}

/// True while process `pid` exists (a zombie counts: it is not reaped yet).
fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn run_watch_follows_a_run_by_its_id_to_its_end() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let gate = repo.path().join("go");
    let spec = daemon.add_spec("slow spec");
    daemon.create_graph(json!({
        "name": "slow", "workdir": repo.path(), "specs": [spec], "allow_dirty_start": true,
        "nodes": [{ "name": "wait", "command": format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display()) }],
    }));
    daemon.ok(&["graph", "run", "slow"]);
    let (_, graph) = daemon.get("/api/graphs/slow");
    let run_id = graph["current_run"]["id"].as_str().unwrap().to_string();
    let mut watching = daemon.spawn_cli(&["run", "watch", &run_id[..8]]);
    // Once it follows the run (its node shows as running), the node may end.
    let mut stderr = std::io::BufReader::new(watching.stderr.take().unwrap());
    let mut progress = String::new();
    while !progress.contains("Running node wait") {
        let read = std::io::BufRead::read_line(&mut stderr, &mut progress).unwrap();
        assert!(read > 0, "the watcher ended early: {progress}");
    }
    std::fs::write(&gate, "").unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut progress).unwrap();
    let watched = watching.wait_with_output().unwrap();
    assert!(watched.status.success(), "{progress}");
    assert!(progress.contains("Completed run"), "{progress}");
    assert!(
        String::from_utf8_lossy(&watched.stdout).contains("status:   completed"),
        "{watched:?}"
    );
    // An unknown run is an error naming it.
    let err = daemon.fails(&["run", "watch", "ffffffff"]);
    assert!(err.contains("ffffffff"), "{err}");
}

#[test]
fn show_works_everywhere_headings_convert_and_a_misspelt_tag_is_named() {
    let daemon = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    // A misspelt tag: named, with the one meant.
    let misspelt = dir.path().join("misspelt.md");
    std::fs::write(
        &misspelt,
        "<spec>\n<objective>x</objective>\n<functional_requirement>y</functional_requirement>\n</spec>\n",
    )
    .unwrap();
    let err = daemon.fails(&[
        "spec",
        "add",
        "--name",
        "m",
        "--file",
        misspelt.to_str().unwrap(),
    ]);
    assert!(
        err.contains(
            "unknown tag <functional_requirement> (did you mean <functional_requirements>?)"
        ),
        "{err}"
    );
    // The heading format is refused as it is, pointing at --convert, which rewrites it.
    let headings = dir.path().join("login.md");
    std::fs::write(
        &headings,
        "# Login form\n\n## Objective\nLet users log in.\n\n## Requirements\n- a form\n\n## Constraints\nNo new dependencies.\n",
    )
    .unwrap();
    let file = headings.to_str().unwrap();
    let err = daemon.fails(&["spec", "add", "--name", "login", "--file", file]);
    assert!(
        err.contains("`canopy spec add --convert` rewrites it"),
        "{err}"
    );
    daemon.ok(&[
        "spec",
        "add",
        "--name",
        "login",
        "--file",
        file,
        "--convert",
    ]);
    let spec = daemon.json(&["spec", "show", "login"]);
    let body = spec["body"].as_str().unwrap();
    assert!(
        body.contains("<objective>\n# Login form\n\nLet users log in.\n</objective>")
            && body.contains("<functional_requirements>\n- a form\n</functional_requirements>")
            && body.contains("<constraints>\nNo new dependencies.\n</constraints>"),
        "{body}"
    );
    // A tagged body given --convert is refused, saying so.
    let err = daemon.fails(&[
        "spec",
        "update",
        "login",
        "--file",
        misspelt.to_str().unwrap(),
        "--convert",
    ]);
    assert!(
        err.contains("--convert: the body has no section heading"),
        "{err}"
    );

    // `show` everywhere, `get` kept for graphs.
    let repo = git_repo();
    daemon.create_graph(json!({
        "name": "web", "workdir": repo.path(), "specs": ["login"],
        "nodes": [{ "name": "n", "command": "true" }],
    }));
    // The spec, added with no workdir, now belongs with the graph's.
    let spec = daemon.json(&["spec", "show", "login"]);
    assert_eq!(
        std::fs::canonicalize(spec["workdir"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(repo.path()).unwrap(),
        "{spec}"
    );
    let shown = daemon.ok(&["graph", "show", "web"]);
    assert!(shown.starts_with("graph:    web"), "{shown}");
    assert_eq!(daemon.ok(&["graph", "get", "web"]), shown);
    // `logs` and `graph reset` answer JSON too.
    let logs = daemon.json(&["logs", "--lines", "5"]);
    assert_eq!(logs["lines"].as_array().unwrap().len(), 5, "{logs}");
    let reset = daemon.json(&["graph", "reset", "web"]);
    assert_eq!(reset["status"], "idle", "{reset}");
}
