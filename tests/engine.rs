//! The engine end to end: specs, graphs, queues and runs through the real daemon, with real git
//! repos as workdirs and command / stand-in agent nodes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, git_repo, real, script, spec_body, wait_for};

fn results(view: &Value) -> Vec<(String, String)> {
    view["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["spec_name"].as_str().unwrap().to_string(),
                p["result"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_graph_of_command_nodes_runs_its_bound_specs_in_order() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("log.txt");
    let a = daemon.add_spec("Login form");
    let b = daemon.add_spec("Password reset");
    daemon.create_graph(json!({
            "name": "web",
            "workdir": repo.path(),
            "nodes": [
                { "name": "implement", "command": format!("echo implement {{{{spec_name}}}} in \"$PWD\" >> {}", log.display()) },
                { "name": "review", "command": format!("echo review {{{{spec_id}}}} at {{{{node}}}} >> {}; echo reviewed {{{{spec_name}}}}", log.display()) }
            ],
            "specs": [a, b]
        }),
    );
    let output = daemon.ok(&["graph", "run", "web", "--wait"]);
    assert!(output.contains("status:   completed"), "{output}");
    let workdir = real(repo.path());
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!(
            "implement Login form in {workdir}\nreview {a} at review\nimplement Password reset in {workdir}\nreview {b} at review\n"
        )
    );
    let view = daemon.json(&["graph", "get", "web"]);
    assert_eq!(view["status"], "completed");
    assert_eq!(
        results(&view),
        pairs(&[("Login form", "completed"), ("Password reset", "completed")])
    );
    assert_eq!(view["progress"][1]["summary"], "reviewed Password reset");
    let spec = daemon.json(&["spec", "show", &a[..8]]);
    assert_eq!(spec["summary"], "reviewed Login form");

    let run_id = view["current_run"]["id"].as_str().unwrap();
    let (_, run) = daemon.get(&format!("/api/runs/{run_id}"));
    let node_runs = run["node_runs"].as_array().unwrap();
    assert_eq!(node_runs.len(), 4);
    for node_run in node_runs {
        assert_eq!(node_run["status"], "completed");
        assert_eq!(node_run["plugin"], "command");
        assert!(node_run["duration_ms"].as_i64().is_some());
        assert_eq!(node_run["plugin_sha256"].as_str().unwrap().len(), 64);
    }
    let info = daemon.ok(&["graph", "info", "web"]);
    assert!(
        info.contains("node runs (newest first):") && info.contains("command 0.1.0"),
        "{info}"
    );
}

#[test]
fn specs_are_validated_on_write_naming_the_offending_tag() {
    let daemon = Daemon::start();
    let full = spec_body("x");
    let cases = [
        (
            full.replace("<guidelines>\n- guidelines\n</guidelines>\n", ""),
            "spec body: missing tag <guidelines>",
        ),
        (
            full.replace("</spec>", "<objective>again</objective>\n</spec>"),
            "spec body: duplicated tag <objective>",
        ),
        (
            full.replace("</constraints>", ""),
            "spec body: unclosed tag <constraints> (no </constraints>)",
        ),
        (
            full.replace("<in_scope>", "<notes>n</notes>\n<in_scope>"),
            "spec body: unknown tag <notes>",
        ),
        (
            full.replace("- in_scope", "<objective>nested</objective>"),
            "spec body: tag <objective> is out of place: inside <in_scope>",
        ),
        (
            "just some text".to_string(),
            "spec body: missing tag <spec>",
        ),
    ];
    for (bad, expected) in cases {
        let (status, answer) =
            daemon.send("POST", "/api/specs", &json!({ "name": "bad", "body": bad }));
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("field `body`: {expected}")),
            "expected `{expected}`, got `{message}`"
        );
    }
    let (_, list) = daemon.get("/api/specs");
    assert_eq!(
        list["specs"].as_array().unwrap().len(),
        0,
        "a refused spec was written"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spec.md");
    std::fs::write(&file, full.replace("</out_of_scope>", "")).unwrap();
    let err = daemon.fails(&[
        "spec",
        "add",
        "--name",
        "x",
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(err.contains("unclosed tag <out_of_scope>"), "{err}");
}

#[test]
fn heading_format_specs_stay_readable_and_are_flagged() {
    let mut daemon = Daemon::start();
    let tagged = daemon.add_spec("Tagged");
    daemon.stop();
    // A spec written before the tagged format existed (the API refuses that body now, so it
    // goes in through the store).
    let store = support::store_of(&daemon.data_dir);
    let old_id = store
        .write_blocking(|tx| {
            tx.insert_spec(
                "Old style",
                "## Objective\nShip it\n\n## Constraints\nNone\n",
                None,
            )
        })
        .unwrap();
    drop(store);
    let daemon = Daemon::start_on(&daemon.data_dir);
    let old = daemon.json(&["spec", "show", &old_id]);
    assert_eq!(old["needs_conversion"], true);
    assert_eq!(
        old["body"],
        "## Objective\nShip it\n\n## Constraints\nNone\n"
    );
    assert_eq!(
        daemon.json(&["spec", "show", &tagged])["needs_conversion"],
        false
    );
    let listing = daemon.ok(&["spec", "list"]);
    assert!(
        listing.contains("Old style  [needs conversion]"),
        "{listing}"
    );
    // Rewriting it by hand in the tagged format clears the flag; a heading body is refused.
    let err = daemon.fails(&["spec", "update", &old_id, "--body", "## Objective\nnew\n"]);
    assert!(err.contains("older heading format"), "{err}");
    daemon.ok(&["spec", "update", &old_id, "--body", &spec_body("Ship it")]);
    assert_eq!(
        daemon.json(&["spec", "show", &old_id])["needs_conversion"],
        false
    );
}

#[test]
fn ids_take_unambiguous_prefixes_and_refuse_ambiguous_ones() {
    let daemon = Daemon::start();
    let ids: Vec<String> = (0..24)
        .map(|i| daemon.add_spec(&format!("spec {i}")))
        .collect();
    // 24 random ids over 16 first digits: some first digit is shared.
    let shared = ids
        .iter()
        .find(|id| ids.iter().filter(|o| o[..1] == id[..1]).count() > 1)
        .unwrap();
    let prefix = &shared[..1];
    let (status, answer) = daemon.get(&format!("/api/specs/{prefix}"));
    assert_eq!(status, 400);
    assert_eq!(answer["error"]["code"], "ambiguous_id");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "spec id prefix `{prefix}` is ambiguous; it matches "
        )),
        "{message}"
    );
    for id in ids.iter().filter(|id| id.starts_with(prefix)) {
        assert!(message.contains(id.as_str()), "{message} should list {id}");
    }
    let unique = &ids[0][..10];
    assert_eq!(daemon.json(&["spec", "show", unique])["id"], ids[0]);
    let (status, _) = daemon.get("/api/specs/ffffffffffffffffffff");
    assert_eq!(status, 404);
}

#[test]
fn graph_updates_are_validated_whole_and_running_a_running_graph_conflicts() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let a = daemon.add_spec("A");
    daemon.create_graph(json!({ "name": "g", "workdir": repo.path(), "nodes": [{ "name": "n", "command": "sleep 5" }], "specs": [a] }),
    );

    let (status, answer) = daemon.send(
        "PATCH",
        "/api/graphs/g",
        &json!({ "name": "renamed", "nodes": [{ "name": "ok", "command": "true" }, { "name": "bad", "command": "echo {{nope}}" }] }),
    );
    assert_eq!(status, 400);
    assert_eq!(
        answer["error"]["message"],
        "nodes[1] (`bad`): field `command`: unknown marker `{{nope}}`; supported markers: {{graph_name}}, {{workdir}}, {{completed_specs}}, {{spec_name}}, {{spec_id}}, {{blocker}}, {{node}}, {{spec_body}}"
    );
    let (status, answer) = daemon.send(
        "PATCH",
        "/api/graphs/g",
        &json!({ "nodes": [{ "name": "x", "command": "true", "platform": "claude" }] }),
    );
    assert_eq!(status, 400);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sets 2 modes at once (command and agent)"),
        "{answer}"
    );
    let (status, answer) = daemon.send(
        "PATCH",
        "/api/graphs/g",
        &json!({ "nodes": [{ "name": "x", "mode": "telepathy" }] }),
    );
    assert_eq!(status, 400);
    assert!(answer["error"]["message"].as_str().unwrap().contains("unknown mode `telepathy`; installed modes: agent, command, docs-maintenance, guard, interactive"), "{answer}");
    let (_, unchanged) = daemon.get("/api/graphs/g");
    assert_eq!(
        unchanged["nodes"],
        json!([{ "name": "n", "command": "sleep 5" }]),
        "a refused update changed the graph"
    );

    let (status, _) = daemon.control("g", json!({ "action": "run" }));
    assert_eq!(status, 200);
    let (status, answer) = daemon.control("g", json!({ "action": "run" }));
    assert_eq!(status, 409);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already running"),
        "{answer}"
    );
    let (status, view) = daemon.control("g", json!({ "action": "reset" }));
    assert_eq!(status, 200);
    assert_eq!(view["status"], "idle");
    let (_, runs) = daemon.get("/api/runs?graph=g");
    assert_eq!(
        runs["runs"][0]["status"], "reset",
        "reset keeps the history"
    );
}

#[test]
fn a_blocked_node_pauses_the_graph_and_continue_resumes_it() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let flag_dir = tempfile::tempdir().unwrap();
    let flag = flag_dir.path().join("unblocked");
    let a = daemon.add_spec("A");
    let b = daemon.add_spec("B");
    let gate = format!(
        r#"if [ -e {flag} ]; then echo passed; else printf '{{"status":"blocked","blocker":"needs a human"}}' > "$CANOPY_RESULT_FILE"; fi"#,
        flag = flag.display()
    );
    daemon.create_graph(json!({ "name": "gated", "workdir": repo.path(), "nodes": [{ "name": "gate", "command": gate }, { "name": "after", "command": "echo after" }], "specs": [a, b] }),
    );
    daemon.control("gated", json!({ "action": "run" }));
    let view = daemon.settled("gated");
    assert_eq!(view["status"], "paused");
    let blocker = view["blocker"].as_str().unwrap_or_default();
    assert_eq!(
        blocker.lines().next(),
        Some(
            format!(
                "node `gate` is blocked on spec A ({}): needs a human",
                &a[..12]
            )
            .as_str()
        )
    );
    // It names the ways out, as `graph continue` takes them.
    assert!(
        blocker.contains(
            "ways out:\n  - answer it, then run `gate` again: canopy graph continue gated\n"
        ) && blocker.contains("canopy graph continue gated --mode run_from_node --node NODE")
            && blocker.contains("canopy graph continue gated --mode skip_next_spec"),
        "{blocker}"
    );
    assert_eq!(
        results(&view),
        pairs(&[("A", "blocked"), ("B", "not_reached")])
    );

    std::fs::write(&flag, "").unwrap();
    daemon.control("gated", json!({ "action": "continue" }));
    let view = daemon.settled("gated");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert_eq!(view["blocker"], Value::Null);
    assert_eq!(
        results(&view),
        pairs(&[("A", "completed"), ("B", "completed")])
    );
}

#[test]
fn a_run_settles_failed_naming_the_failed_specs() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let ok = daemon.add_spec("Works");
    let bad = daemon.add_spec("Breaks");
    let also_ok = daemon.add_spec("Works too");
    daemon.create_graph(json!({ "name": "mixed", "workdir": repo.path(), "nodes": [{ "name": "build", "command": "case {{spec_name}} in Breaks) echo compile error >&2; exit 2;; esac" }], "specs": [ok, bad, also_ok] }),
    );
    let output = daemon.cli(&["graph", "run", "mixed", "--wait"]);
    assert!(!output.status.success(), "a failed run exits non-zero");
    let view = daemon.json(&["graph", "get", "mixed"]);
    assert_eq!(view["status"], "failed");
    assert_eq!(
        view["blocker"],
        format!(
            "1 spec(s) did not complete: Breaks ({}, failed)",
            &bad[..12]
        )
    );
    assert_eq!(
        results(&view),
        pairs(&[
            ("Works", "completed"),
            ("Breaks", "failed"),
            ("Works too", "completed")
        ])
    );
    let failed_node = view["current_run"]["node_runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["status"] == "failed")
        .unwrap()
        .clone();
    assert_eq!(
        failed_node["reason"],
        "exited with exit code 2: compile error"
    );
}

fn standin_platform(dir: &Path) -> String {
    let calls = dir.join("calls.txt");
    let agent = script(
        dir,
        "standin-agent.sh",
        &format!(
            r#"prompt="$1"; resume=none; if [ "$2" = "--resume" ]; then resume="$3"; fi
echo "$prompt resume=$resume" >> '{}'
printf '{{"type":"result","session_id":"sess-%s","result":"did %s"}}\n' "$prompt" "$prompt""#,
            calls.display()
        ),
    );
    format!(
        "[platforms.standin]\ncommand = [\"{}\", \"{{prompt}}\"]\nresume_args = [\"--resume\", \"{{session}}\"]\n",
        agent.display()
    )
}

#[test]
fn a_queue_is_drained_in_order_and_grouped_specs_resume_their_siblings_session() {
    let tools = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with_config(&standin_platform(tools.path()));
    let repo = git_repo();
    let a = daemon.add_spec("alpha");
    let b = daemon.add_spec("beta");
    let c = daemon.add_spec("gamma");
    let d = daemon.add_spec("delta");
    let bound = daemon.add_spec("bound-only");
    let queue = daemon.json(&["queue", "create", "work", &a, &c]);
    let q = queue["id"].as_str().unwrap().to_string();
    daemon.ok(&["queue", "group", &q, &a, "auth"]);
    // With a group, a new member lands right after the group's last pending member.
    daemon.ok(&["queue", "add", &q, &b, "--group", "auth"]);
    daemon.ok(&["queue", "add", &q, &d]);
    let shown = daemon.json(&["queue", "show", &q]);
    let order: Vec<&str> = shown["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["spec_name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["alpha", "beta", "gamma", "delta"]);

    // Reordering so the group's pending members are split is refused, naming the positions.
    let err = daemon.fails(&["queue", "reorder", &q, &a, &c, &b, &d]);
    assert!(
        err.contains("reorder refused, nothing changed: group `auth` (pending members at positions 1, 3) would be split at position 2"),
        "{err}"
    );
    let unchanged = daemon.json(&["queue", "show", &q]);
    assert_eq!(unchanged["members"], shown["members"]);
    // A reorder that keeps the group together is fine.
    daemon.ok(&["queue", "reorder", &q, &c, &a, &b, &d]);

    daemon.create_graph(json!({ "name": "agents", "workdir": repo.path(), "nodes": [{ "name": "work", "platform": "standin", "prompt": "{{spec_name}}" }], "specs": [bound] }),
    );
    let output = daemon.ok(&["graph", "run", "agents", "--queue", &q[..8], "--wait"]);
    assert!(output.contains("status:   completed"), "{output}");
    let calls = std::fs::read_to_string(tools.path().join("calls.txt")).unwrap();
    assert_eq!(
        calls, "gamma resume=none\nalpha resume=none\nbeta resume=sess-alpha\ndelta resume=none\n",
        "queue order, the bound spec untouched, and only the grouped sibling resumed"
    );
    let view = daemon.json(&["graph", "get", "agents"]);
    assert_eq!(
        results(&view),
        pairs(&[
            ("gamma", "completed"),
            ("alpha", "completed"),
            ("beta", "completed"),
            ("delta", "completed")
        ])
    );
    let beta_run = view["current_run"]["node_runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["spec_id"] == b.as_str())
        .unwrap()
        .clone();
    assert_eq!(beta_run["resume_session"], "sess-alpha");
    assert_eq!(beta_run["harness_session"], "sess-beta");

    // Membership is unaffected; every member is done, so a second run has nothing pending.
    let after = daemon.json(&["queue", "show", &q]);
    assert_eq!(after["members"].as_array().unwrap().len(), 4);
    assert!(
        after["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["pending"] == false)
    );
    let err = daemon.fails(&["graph", "run", "agents", "--queue", &q, "--wait"]);
    assert!(err.contains("nothing is pending in queue `work`"), "{err}");
    assert_eq!(
        std::fs::read_to_string(tools.path().join("calls.txt")).unwrap(),
        calls
    );
}

fn dirty(repo: &Path, count: usize) {
    for i in 0..count {
        std::fs::write(repo.join(format!("scratch-{i:02}.txt")), "wip").unwrap();
    }
}

#[test]
fn a_dirty_tree_pauses_the_run_with_the_first_20_paths_and_each_way_out_works() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("log.txt");
    let specs: Vec<String> = ["one", "two", "three", "four"]
        .iter()
        .map(|n| daemon.add_spec(n))
        .collect();
    let queue = daemon.json(&[
        "queue", "create", "q", &specs[0], &specs[1], &specs[2], &specs[3],
    ]);
    let q = queue["id"].as_str().unwrap().to_string();
    daemon.create_graph(json!({ "name": "guarded", "workdir": repo.path(), "nodes": [
            { "name": "prepare", "command": format!("echo prepare {{{{spec_name}}}} >> {}", log.display()) },
            { "name": "build", "command": format!("echo build {{{{spec_name}}}} >> {}", log.display()) }
        ], "specs": [] }),
    );

    // Dirty at launch: the run pauses before the first spec.
    dirty(repo.path(), 23);
    daemon.control("guarded", json!({ "action": "run", "queue_id": q }));
    let view = daemon.settled("guarded");
    assert_eq!(view["status"], "paused");
    let blocker = view["blocker"].as_str().unwrap();
    assert!(
        blocker.starts_with(&format!(
            "dirty tree: {} has 23 uncommitted change(s) before spec one",
            real(repo.path())
        )),
        "{blocker}"
    );
    let listed: Vec<&str> = blocker.lines().filter(|l| l.starts_with("  ?? ")).collect();
    assert_eq!(listed.len(), 20, "{blocker}");
    assert!(blocker.contains("… and 3 more"));
    assert!(blocker.contains("canopy graph continue guarded --mode run_from_node --node prepare"));
    assert!(blocker.contains("canopy graph continue guarded --mode skip_next_spec"));
    assert!(blocker.contains("allow_dirty_start"));
    assert!(!log.exists(), "nothing ran on a dirty tree");

    // Way out 1: a directed start on that spec, at a node; the guard does not refuse it again,
    // but the move to the next spec is guarded again.
    daemon.control(
        "guarded",
        json!({ "action": "continue", "mode": "run_from_node", "node": "build" }),
    );
    let view = daemon.settled("guarded");
    assert_eq!(view["status"], "paused");
    assert!(
        view["blocker"]
            .as_str()
            .unwrap()
            .contains("before spec two"),
        "{view:#}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "build one\n");

    // Way out 2: clean by hand, then skip the next spec.
    for i in 0..23 {
        std::fs::remove_file(repo.path().join(format!("scratch-{i:02}.txt"))).unwrap();
    }
    daemon.control(
        "guarded",
        json!({ "action": "continue", "mode": "skip_next_spec" }),
    );
    let view = daemon.settled("guarded");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "build one\nprepare three\nbuild three\nprepare four\nbuild four\n"
    );
    assert_eq!(
        results(&view),
        pairs(&[
            ("one", "completed"),
            ("two", "skipped"),
            ("three", "completed"),
            ("four", "completed")
        ])
    );

    // Way out 3: allow_dirty_start lets a run advance on a dirty tree.
    let more = daemon.add_spec("five");
    daemon.ok(&["queue", "add", &q, &more]);
    dirty(repo.path(), 1);
    let (status, _) = daemon.send(
        "PATCH",
        "/api/graphs/guarded",
        &json!({ "allow_dirty_start": true }),
    );
    assert_eq!(status, 200);
    let output = daemon.ok(&["graph", "run", "guarded", "--queue", &q, "--wait"]);
    assert!(output.contains("status:   completed"), "{output}");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .ends_with("prepare five\nbuild five\n")
    );
    git(repo.path(), &["status", "--porcelain"]);
}

#[test]
fn a_daemon_killed_mid_run_reports_the_run_interrupted_on_restart() {
    let mut daemon = Daemon::start();
    let repo = git_repo();
    let marker_dir = tempfile::tempdir().unwrap();
    let started = marker_dir.path().join("started");
    let a = daemon.add_spec("slow");
    let b = daemon.add_spec("next");
    daemon.create_graph(json!({ "name": "slow", "workdir": repo.path(), "nodes": [{ "name": "work", "command": format!("touch {}; sleep 30", started.display()) }], "specs": [a, b] }),
    );
    daemon.control("slow", json!({ "action": "run" }));
    wait_for("the node to start", Duration::from_secs(30), || {
        started.exists().then_some(())
    });
    let before = daemon.json(&["spec", "list"]);
    daemon.kill();

    let daemon = Daemon::start_on(&daemon.data_dir);
    let view = daemon.json(&["graph", "get", "slow"]);
    assert_eq!(view["status"], "paused");
    assert_eq!(view["current_run"]["status"], "interrupted");
    let blocker = view["blocker"].as_str().unwrap();
    assert!(blocker.starts_with("interrupted: the daemon stopped (crash or kill) while this run was in progress (node `work` on spec"), "{blocker}");
    assert_eq!(view["current_run"]["node_runs"][0]["status"], "interrupted");
    assert_eq!(
        results(&view),
        pairs(&[("slow", "interrupted"), ("next", "not_reached")])
    );
    assert_eq!(
        daemon.json(&["spec", "list"]),
        before,
        "nothing else changed"
    );
    // Nothing is re-run on its own.
    let (_, run) = daemon.get(&format!(
        "/api/runs/{}",
        view["current_run"]["id"].as_str().unwrap()
    ));
    assert_eq!(run["node_runs"].as_array().unwrap().len(), 1);
    assert_eq!(view["consistency_warning"], Value::Null);

    // The way out the blocker names: run the interrupted spec again from a node.
    let (status, _) = daemon.send(
        "PATCH",
        "/api/graphs/slow",
        &json!({ "nodes": [{ "name": "work", "command": "echo redone {{spec_name}}" }] }),
    );
    assert_eq!(status, 200);
    daemon.control_ok(
        "slow",
        json!({ "action": "continue", "mode": "run_from_node", "node": "work" }),
    );
    let view = daemon.settled("slow");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert_eq!(
        results(&view),
        pairs(&[("slow", "completed"), ("next", "completed")])
    );
    assert_eq!(view["progress"][0]["summary"], "redone slow");
}

#[test]
fn a_graceful_shutdown_records_in_flight_node_runs_as_interrupted() {
    let mut daemon = Daemon::start();
    let repo = git_repo();
    let marker_dir = tempfile::tempdir().unwrap();
    let started = marker_dir.path().join("started");
    let pid_file = marker_dir.path().join("pid");
    let a = daemon.add_spec("slow");
    daemon.create_graph(json!({ "name": "slow", "workdir": repo.path(), "nodes": [{ "name": "work", "command": format!("echo $$ > {}; touch {}; sleep 30", pid_file.display(), started.display()) }], "specs": [a] }),
    );
    daemon.control("slow", json!({ "action": "run" }));
    wait_for("the node to start", Duration::from_secs(30), || {
        started.exists().then_some(())
    });
    daemon.stop();
    let store = support::store_of(&daemon.data_dir);
    let (node_status, run_status) = store
        .read_blocking(|rd| {
            let run = rd.runs(None, 1)?.remove(0);
            let node = rd.node_runs(&run.id)?.remove(0);
            Ok::<_, canopy_store::StoreError>((node.status.as_str(), run.status.as_str()))
        })
        .unwrap();
    drop(store);
    assert_eq!((node_status, run_status), ("interrupted", "interrupted"));
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    wait_for(
        "the node's process to be gone",
        Duration::from_secs(10),
        || {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            });
            (!alive).then_some(())
        },
    );
}

#[test]
fn a_graph_marked_running_with_nothing_running_carries_a_consistency_warning() {
    let mut daemon = Daemon::start();
    let repo = git_repo();
    let a = daemon.add_spec("A");
    daemon.create_graph(json!({ "name": "stale", "workdir": repo.path(), "nodes": [{ "name": "n", "command": "true" }], "specs": [a] }),
    );
    let output = daemon.ok(&["graph", "run", "stale", "--wait"]);
    assert!(output.contains("completed"));
    daemon.stop();
    // A graph row that says running while its run is not (a state no driver will pick up).
    let store = support::store_of(&daemon.data_dir);
    store
        .write_blocking(|tx| {
            let id = tx.resolve_graph("stale")?;
            tx.set_graph_status(
                &id,
                canopy_model::records::graphs::GraphStatus::Running,
                None,
                None,
            )
        })
        .unwrap();
    drop(store);
    let daemon = Daemon::start_on(&daemon.data_dir);
    let view = daemon.json(&["graph", "get", "stale"]);
    let warning = view["consistency_warning"].as_str().unwrap();
    assert!(warning.starts_with("graph `stale` is marked running, but no node run is in progress and no resume is scheduled"), "{warning}");
}

#[test]
fn a_blocked_spec_can_be_skipped_or_restarted_from_a_node_and_busy_things_are_not_deleted() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("log.txt");
    let specs: Vec<String> = ["one", "two", "three"]
        .iter()
        .map(|n| daemon.add_spec(n))
        .collect();
    let queue = daemon.json(&["queue", "create", "q", &specs[0], &specs[1], &specs[2]]);
    let q = queue["id"].as_str().unwrap().to_string();
    // Every spec blocks at `check` the first time it gets there.
    let check = format!(
        r#"if grep -qx "check "{{{{spec_name}}}} {log}; then echo ok; else echo check {{{{spec_name}}}} >> {log}; printf '{{"status":"blocked","blocker":"look at it"}}' > "$CANOPY_RESULT_FILE"; fi"#,
        log = log.display()
    );
    daemon.create_graph(json!({ "name": "g", "workdir": repo.path(), "specs": [], "nodes": [
        { "name": "prepare", "command": format!("echo prepare {{{{spec_name}}}} >> {}", log.display()) },
        { "name": "check", "command": check },
        { "name": "ship", "command": format!("echo ship {{{{spec_name}}}} >> {}", log.display()) }
    ] }));
    daemon.control_ok("g", json!({ "action": "run", "queue_id": q }));
    assert_eq!(daemon.settled("g")["status"], "paused");

    // Busy things are not deleted.
    let err = daemon.fails(&["spec", "rm", &specs[0]]);
    assert!(err.contains("is still used by queue q"), "{err}");
    let err = daemon.fails(&["queue", "rm", &q]);
    assert!(err.contains("is being drained by graph `g`"), "{err}");

    // Skip the blocked spec: the run moves on to `two`, which blocks too.
    daemon.control_ok(
        "g",
        json!({ "action": "continue", "mode": "skip_next_spec" }),
    );
    assert_eq!(daemon.settled("g")["status"], "paused");
    // Restart `two` from its first node; then `three` blocks, and a plain continue re-runs the
    // blocked node.
    daemon.control_ok(
        "g",
        json!({ "action": "continue", "mode": "run_from_node", "node": "prepare" }),
    );
    assert_eq!(daemon.settled("g")["status"], "paused");
    daemon.control_ok("g", json!({ "action": "continue" }));
    let view = daemon.settled("g");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert_eq!(
        results(&view),
        pairs(&[
            ("one", "skipped"),
            ("two", "completed"),
            ("three", "completed")
        ])
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "prepare one\ncheck one\nprepare two\ncheck two\nprepare two\nship two\nprepare three\ncheck three\nship three\n"
    );
}
