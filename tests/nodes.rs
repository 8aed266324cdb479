//! Several daemons on one PostgreSQL database: each under its own node name, each seeing the
//! others (`canopy nodes`), a run driven by exactly one of them (its lease), taken over by
//! another when its daemon is killed, crons and webhooks acting on the nodes they name. Real
//! daemons on a real (throwaway) PostgreSQL server, real processes, real git repos.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Daemon, git_repo, wait_for};

/// How long a lease lasts in these tests: short, so a takeover is seen in seconds.
const LEASE_SECS: u64 = 2;

/// A daemon named `node` on the database `url`, with `extra` in its `canopy.toml`.
fn node(name: &str, url: &str, extra: &str) -> Daemon {
    let config = format!(
        "node = \"{name}\"\nroles = [\"worker\"]\n{extra}\n[database]\nlease_secs = {LEASE_SECS}\n"
    );
    Daemon::start_with_env(&config, &[("CANOPY_DATABASE_URL", url)])
}

fn nodes(daemon: &Daemon) -> Value {
    daemon.json(&["nodes"])
}

/// The JSON lines a `feed --follow --json` prints, as they come.
fn follow_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<Value> {
    use std::io::BufRead as _;
    let stdout = child.stdout.take().unwrap();
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(event) = serde_json::from_str(&line)
                && sender.send(event).is_err()
            {
                return;
            }
        }
    });
    lines
}

fn node_state(daemon: &Daemon, name: &str) -> Option<String> {
    nodes(daemon)["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == name)
        .and_then(|n| n["state"].as_str().map(str::to_string))
}

/// Waits until `daemon` has beaten `count` more times (each a third of its lease): the
/// daemon's own clock, for what must not happen however long it runs.
fn wait_heartbeats(daemon: &Daemon, count: usize) {
    let beat = || -> String {
        let listed = nodes(daemon);
        let this = listed["this"].clone();
        listed["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == this)
            .map(|n| n["heartbeat_at"].as_str().unwrap().to_string())
            .unwrap()
    };
    let mut last = beat();
    for _ in 0..count {
        last = wait_for("a heartbeat", Duration::from_secs(30), || {
            let now = beat();
            (now != last).then_some(now)
        });
    }
}

#[test]
fn two_daemons_on_one_database_see_each_other_and_a_second_of_one_name_is_refused() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let a = node("a", &url, "");
    let b = node("b", &url, "");
    // B joins a database whose built-in plugins a recorded: it loads them from its own
    // binary, with nothing to warn about.
    let status = b.json(&["status"]);
    assert_eq!(status["recent_problems"], json!([]), "{status}");
    let listed = nodes(&a);
    assert_eq!(listed["this"], "a");
    let names: Vec<&str> = listed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(
        listed["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["state"] == "alive" && n["roles"] == json!(["worker"])),
        "{listed}"
    );
    // What one records, the other reads: one database; and b's followers see a's events as
    // they happen, each with its node.
    let mut follow = b.spawn_cli(&["feed", "--follow", "--json"]);
    let lines = follow_lines(&mut follow);
    // B's own event coming through says the stream is open; a's comes after it, with no
    // event of b's behind it to make b read the feed again.
    let marker = b.add_spec("marker");
    wait_for("b's own event in its feed", Duration::from_secs(30), || {
        lines
            .try_iter()
            .find(|event: &Value| event["payload"]["spec_id"] == marker.as_str())
    });
    let spec = a.add_spec("shared");
    let (status, _) = b.get(&format!("/api/specs/{spec}"));
    assert_eq!(status, 200);
    let seen = wait_for("a's event in b's feed", Duration::from_secs(30), || {
        lines
            .try_iter()
            .find(|event: &Value| event["node"] == "a" && event["event"] == "spec.created")
    });
    assert_eq!(seen["payload"]["spec_id"], spec.as_str(), "{seen}");
    let _ = follow.kill();
    let _ = follow.wait();
    // Without --json too: each line names the node that recorded it.
    let text = b.ok(&["feed", "--last", "10"]);
    let header = text.lines().next().unwrap_or_default();
    assert!(header.contains("NODE"), "{text}");
    assert!(
        text.lines().any(
            |line| line.contains("spec.created") && line.split_whitespace().nth(2) == Some("a")
        ),
        "{text}"
    );
    let text = b.ok(&["nodes"]);
    assert!(
        text.contains("b (this daemon)") && text.contains("alive"),
        "{text}"
    );

    // A third daemon calling itself `a` would claim a's work: refused, naming the node.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("canopy.toml"), "node = \"a\"\n").unwrap();
    let refused = std::process::Command::new(support::CANOPY)
        .args(["daemon", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(other.path())
        .args(["--database", &format!("{url} password=hunter2")])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("another canopy daemon named `a` uses the database"),
        "{said}"
    );
    assert!(!said.contains("hunter2"), "shows the password: {said}");
}

/// Both daemons are asked to run the same graph at the same instant, five times over: each
/// time exactly one starts it, and its node runs once.
#[test]
fn two_daemons_asked_at_once_never_both_run_a_graph() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let a = node("a", &url, "");
    let b = node("b", &url, "");
    let marks = tempfile::tempdir().unwrap();
    let repo = git_repo();
    for round in 0..5 {
        let name = format!("race-{round}");
        let spec = a.add_spec(&format!("spec-{round}"));
        let mark = marks.path().join(&name);
        a.create_graph(json!({
            "name": name,
            "workdir": repo.path(),
            "specs": [spec],
            "allow_dirty_start": true,
            "nodes": [{ "name": "work", "command": format!("echo ran >> {}", mark.display()) }]
        }));
        let barrier = std::sync::Barrier::new(2);
        let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
            let asks: Vec<_> = [&a, &b]
                .into_iter()
                .map(|daemon| {
                    let (barrier, name) = (&barrier, &name);
                    scope.spawn(move || {
                        barrier.wait();
                        daemon.control(name, json!({ "action": "run" }))
                    })
                })
                .collect();
            asks.into_iter().map(|ask| ask.join().unwrap()).collect()
        });
        let mut statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}: {answers:?}");
        let view = a.settled(&name);
        assert_eq!(view["status"], "completed", "{view}");
        let ran = std::fs::read_to_string(&mark).unwrap();
        assert_eq!(ran, "ran\n", "round {round}: the node ran more than once");
        let (_, runs) = b.get(&format!("/api/runs?graph={name}"));
        assert_eq!(
            runs["runs"].as_array().map(Vec::len),
            Some(1),
            "round {round}: {runs}"
        );
    }
}

/// The daemon driving a run is killed (SIGKILL): the other takes its lease over once it runs
/// out, marks the run interrupted as after a crash, and fires `on_blocked` once, itself.
#[test]
fn a_run_whose_daemon_is_killed_is_taken_over_by_the_other_and_on_blocked_fires_once() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let cron_started = marks.path().join("cron-started");
    // A cron only a runs, fired by hand below; its firing is running when a is killed.
    let a_config = format!(
        r#"
[[crons]]
name = "slow"
schedule = "0 0 1 1 *"
nodes = ["a"]
action = {{ command = "touch {}; sleep 30" }}
"#,
        cron_started.display()
    );
    let mut a = node("a", &url, &a_config);
    let b = node("b", &url, "");
    let repo = git_repo();
    let started = marks.path().join("started");
    let spec = a.add_spec("long");
    a.create_graph(json!({
        "name": "long",
        "workdir": repo.path(),
        "specs": [spec],
        "allow_dirty_start": true,
        "nodes": [{ "name": "work", "command": format!("touch {}; sleep 30", started.display()) }],
        "hooks": { "on_blocked": [ { "command": "echo blocked: {{blocker}}" } ] }
    }));
    a.control_ok("long", json!({ "action": "run" }));
    a.ok(&["cron", "run", "slow"]);
    wait_for(
        "the node and the cron to start",
        Duration::from_secs(30),
        || (started.exists() && cron_started.exists()).then_some(()),
    );
    let held = nodes(&b);
    let a_row = held["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "a")
        .cloned()
        .unwrap();
    assert_eq!(a_row["leases"][0]["graph"], "long", "{held}");

    let killed = Instant::now();
    a.kill();
    let view = wait_for("b to take the run over", Duration::from_secs(30), || {
        let (_, view) = b.get("/api/graphs/long");
        (view["status"] == "paused").then_some(view)
    });
    let took = killed.elapsed();
    eprintln!("lease takeover after kill -9: {took:?} (lease {LEASE_SECS} s)");
    // The lease is renewed every third of it and looked at as often: a takeover comes within
    // two leases of the kill, whatever the load (the margin is for a slow machine).
    assert!(
        took < Duration::from_secs(3 * LEASE_SECS),
        "took {took:?} to take over"
    );
    let blocker = view["blocker"].as_str().unwrap();
    assert!(
        blocker
            .starts_with("interrupted: node `a`, which drove this run, stopped renewing its lease"),
        "{blocker}"
    );
    let blocked = b.ended_hook_runs_where("event=on_blocked&graph=long", 1);
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0]["node"], "b");
    assert_eq!(blocked[0]["status"], "completed", "{:?}", blocked[0]);
    wait_for("a to be listed lost", Duration::from_secs(30), || {
        (node_state(&b, "a").as_deref() == Some("lost")).then_some(())
    });
    // Several heartbeats later, still once: the takeover is not repeated.
    wait_heartbeats(&b, 2);
    let (_, again) = b.get("/api/hook-runs?event=on_blocked&graph=long&last=10");
    assert_eq!(again["runs"].as_array().map(Vec::len), Some(1), "{again}");
    // The cron firing a left running is recorded by b, without waiting for a to come back.
    let receipts = b.json(&["cron", "logs", "slow"]);
    let runs = receipts["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{receipts}");
    assert_eq!(runs[0]["node"], "a", "{receipts}");
    assert_eq!(runs[0]["status"], "interrupted_unknown", "{receipts}");
    let why = runs[0]["error"].as_str().unwrap().to_string();
    assert!(
        why.starts_with("node `a`, which ran this firing, stopped"),
        "{why}"
    );

    // A comes back under its name: alive again, and it leaves the run as b recorded it.
    let a = Daemon::start_on_with_env(&a.data_dir.clone(), &[("CANOPY_DATABASE_URL", &url)]);
    assert_eq!(node_state(&a, "a").as_deref(), Some("alive"));
    let (_, view) = a.get("/api/graphs/long");
    assert_eq!(view["status"], "paused");
    assert_eq!(view["blocker"].as_str(), Some(blocker));
    let receipts = a.json(&["cron", "logs", "slow"]);
    assert_eq!(receipts["runs"][0]["error"].as_str(), Some(why.as_str()));
}

#[test]
fn a_cron_without_nodes_fires_on_each_node_and_a_webhook_is_served_by_its_node_only() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let out = tempfile::tempdir().unwrap();
    let hits = out.path().join("hits");
    let extra = format!(
        r#"
[[crons]]
name = "everywhere"
schedule = "@every 1s"
action = {{ command = "true" }}

[[crons]]
name = "only-a"
schedule = "@every 1s"
nodes = ["a"]
action = {{ command = "true" }}

[webhooks]
bind_port = 0
token = "shared-token-1234567890"

[webhooks.entries.deploy]
type = "command"
command = "echo hit >> {hits}"
nodes = ["a"]
"#,
        hits = hits.display()
    );
    let a = node("a", &url, &extra);
    let b = node("b", &url, &extra);
    let by_node = |cron: &str| -> Vec<String> {
        let receipts = a.json(&["cron", "logs", cron, "--last", "1000"]);
        receipts["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["node"].as_str().unwrap().to_string())
            .collect()
    };
    // Each node fires `everywhere` on its own, with receipts of its own.
    wait_for(
        "firings of `everywhere` on both nodes",
        Duration::from_secs(30),
        || {
            let nodes = by_node("everywhere");
            (nodes.iter().any(|n| n == "a") && nodes.iter().any(|n| n == "b")).then_some(())
        },
    );
    let only_a = by_node("only-a");
    assert!(!only_a.is_empty());
    assert!(only_a.iter().all(|n| n == "a"), "{only_a:?}");

    // The webhook is served by a; b answers 404 and runs nothing.
    let send = |daemon: &Daemon| -> u16 {
        reqwest::blocking::Client::new()
            .post(format!("{}/hooks/global/deploy", daemon.webhooks_url()))
            .header("X-Canopy-Hook-Token", "shared-token-1234567890")
            .body("{}")
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(send(&b), 404);
    assert_eq!(send(&a), 202);
    wait_for("the delivery to run on a", Duration::from_secs(30), || {
        std::fs::read_to_string(&hits).ok().filter(|h| h == "hit\n")
    });
}

/// A plugin one daemon installs is run by the others too: its component is kept in the
/// database, each daemon writes it to its own data dir and loads it at its next heartbeat; a
/// removal reaches them the same way.
#[test]
fn a_plugin_installed_on_one_daemon_is_in_force_on_the_other() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let a = node("a", &url, "");
    let b = node("b", &url, "");
    let names = |daemon: &Daemon| -> Vec<String> {
        daemon.json(&["plugin", "list"])["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(!names(&b).contains(&"noop".to_string()));
    a.ok(&["plugin", "install", support::NOOP_WASM]);
    wait_for("b to load noop", Duration::from_secs(30), || {
        names(&b).contains(&"noop".to_string()).then_some(())
    });
    let inspected = b.json(&["plugin", "inspect", "noop"]);
    let sha = inspected["sha256"].as_str().unwrap();
    assert!(
        b.data_dir
            .join("plugins")
            .join(format!("{sha}.wasm"))
            .is_file(),
        "b keeps its own copy of the component"
    );
    a.ok(&["plugin", "remove", "noop"]);
    wait_for("b to drop noop", Duration::from_secs(30), || {
        (!names(&b).contains(&"noop".to_string())).then_some(())
    });
}

/// A graph that names its node is run by that daemon only: asked of the other, the start is
/// refused naming the node and where its API listens. Its workdir, there, is not looked for
/// here.
#[test]
fn a_graph_pinned_to_a_node_runs_there_and_is_refused_elsewhere() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let a = node("a", &url, "");
    let b = node("b", &url, "");
    let repo = git_repo();
    let spec = b.add_spec("pinned");
    // Created through b, for a: b does not look for the workdir, which lives on a.
    b.create_graph(json!({
        "name": "pinned",
        "workdir": "/only/on/node/a",
        "node": "a",
        "specs": [spec],
        "allow_dirty_start": true,
        "nodes": [{ "name": "work", "command": "true" }]
    }));
    let (status, refused) = b.control("pinned", json!({ "action": "run" }));
    assert_eq!(status, 409, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("runs on node `a`") && message.contains(&a.url),
        "{message}"
    );
    // A's workdir is real; run there.
    let (status, edited) = a.send(
        "PATCH",
        "/api/graphs/pinned",
        &json!({ "workdir": repo.path() }),
    );
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["node"], "a");
    a.control_ok("pinned", json!({ "action": "run" }));
    assert_eq!(a.settled("pinned")["status"], "completed");
    // Not a node name: refused naming the field.
    let (status, bad) = b.send("PATCH", "/api/graphs/pinned", &json!({ "node": "a b" }));
    assert_eq!(status, 400, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("field `node` must be a node name"),
        "{bad}"
    );
    // Cleared: any daemon may run it.
    let (status, cleared) = b.send("PATCH", "/api/graphs/pinned", &json!({ "node": "" }));
    assert_eq!(status, 200, "{cleared}");
    assert!(cleared.get("node").is_none(), "{cleared}");
}

/// A component tampered with in the database (its bytes no longer match the digest the plugin
/// was installed with) is never written to another daemon's data dir nor run there: that
/// daemon skips the plugin, says why in its log, and goes on answering.
#[test]
fn a_component_tampered_with_in_the_database_is_not_run_by_another_daemon() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let a = node("a", &url, "");
    a.ok(&["plugin", "install", support::NOOP_WASM]);
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let tampered = db
        .execute(
            "UPDATE plugin_components SET component = '\\x0061736d01000000'::bytea",
            &[],
        )
        .unwrap();
    assert_eq!(tampered, 1);
    let b = node("b", &url, "");
    let listed = b.json(&["plugin", "list"]);
    let names: Vec<&str> = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"noop"), "{listed}");
    assert!(b.log().contains("does not match its digest"), "{}", b.log());
    let planted = std::fs::read_dir(b.data_dir.join("plugins"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|f| std::fs::read(f.path()).is_ok_and(|bytes| bytes.len() == 8))
        .count();
    assert_eq!(
        planted, 0,
        "the tampered bytes were written to b's data dir"
    );
    let (status, _) = b.get("/api/status");
    assert_eq!(status, 200);
}

/// A project whose `nodes` name one daemon is watched there only: its checkout lives on that
/// machine, and its lifecycle hooks run there, not once per daemon.
#[test]
fn a_project_is_watched_and_its_hooks_run_on_the_nodes_it_names() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let repo = git_repo();
    let extra = format!(
        r#"
[projects.web]
checkout = "{}"
poll_secs = 1
nodes = ["a"]

[[projects.web.hooks.checkout_updated]]
command = "echo updated"
"#,
        repo.path().display()
    );
    let a = node("a", &url, &extra);
    let b = node("b", &url, &extra);
    // B says it leaves the project to the others (its watchers start once it listens).
    wait_for("b to leave the project", Duration::from_secs(30), || {
        b.log()
            .contains("project not watched on this node")
            .then_some(())
    });
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(repo.path())
            .env("GIT_AUTHOR_NAME", "Canopy Test")
            .env("GIT_AUTHOR_EMAIL", "test@canopy.invalid")
            .env("GIT_COMMITTER_NAME", "Canopy Test")
            .env("GIT_COMMITTER_EMAIL", "test@canopy.invalid")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["commit", "-q", "--allow-empty", "-m", "second"]);
    let runs = a.ended_hook_runs_where("event=project.checkout_updated", 1);
    assert_eq!(runs[0]["node"], "a", "{:?}", runs[0]);
    // B, which polls nothing, records no checkout event of its own however long it runs: two
    // more heartbeats of it (each a third of a 2 s lease, beyond its 1 s poll) show none.
    wait_heartbeats(&b, 2);
    let (_, feed) = a.get("/api/feed?event=project.checkout_updated&last=100");
    let by: Vec<&str> = feed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].as_str().unwrap())
        .collect();
    assert!(!by.is_empty() && by.iter().all(|n| *n == "a"), "{feed}");
}
